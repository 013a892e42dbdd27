"""Startup wall time of the rltscan CLI: ``python measure.py LABEL OUT.json``.

Each command is run ``RUNS`` times as a fresh process (the ``rltscan`` console
script itself, not pyenv's shim, stdout/stderr to /dev/null; ``PYTHONPATH`` picks
the tree measured), the commands interleaved round by round (so a change of machine
load hits all alike), after one untimed warm-up run (page cache, bytecode);
the median, min and max wall time of the ``subprocess.run`` call are recorded,
with which heavy modules were imported (a second run under
``python -X importtime``, whose log is searched for the modules).

Bytecode: this sandbox sets PYTHONDONTWRITEBYTECODE=1, so every run would compile
rltscan from source (~0.2 s for an estimator run); an installed package has its
bytecode. Runs here use a private PYTHONPYCACHEPREFIX (cached bytecode, nothing
written into the tree) unless ``--no-bytecode`` is passed.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 7
ROOT = Path(__file__).resolve().parents[3]
SAMPLE = str(ROOT / "sample_data" / "cartpole_flat.h5")
COMMANDS = {
    "--help": ["--help"],
    "--version": ["--version"],
    "gae --help": ["gae", "--help"],
    "inspect": ["inspect", SAMPLE],
    "gae --dry-run": ["gae", SAMPLE, "--dry-run"],
}
RUN_OUT = str(Path(tempfile.gettempdir()) / "rltscan-startup-out.h5")
# an estimator command that computes (CPU), against a bare `import torch`
RUNS_TORCH = {
    "gae -o (computes)": ["gae", SAMPLE, "-o", RUN_OUT, "--overwrite", "-q"],
}
HEAVY = ("torch", "triton", "numpy", "rich", "h5py", "pyarrow", "pydantic")


def imported(args: list[str]) -> dict[str, bool]:
    code = "import sys; from rltscan.cli import main; sys.argv = ['rltscan', *sys.argv[1:]]; main()"
    log = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        capture_output=True,
        text=True,
        cwd="/",  # (-c puts the working directory first on sys.path: PYTHONPATH must win)
    ).stderr
    names = {line.rsplit("|", 1)[-1].strip() for line in log.splitlines() if "|" in line}
    return {m: m in names for m in HEAVY}


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    return time.perf_counter() - start


def main() -> None:
    label, out = sys.argv[1], Path(sys.argv[2])
    bytecode = "--no-bytecode" not in sys.argv
    if bytecode:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="rltscan-pyc-")
    else:
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    load0 = os.getloadavg()
    exe = str(Path(sys.executable).with_name("rltscan"))  # the console script, no shim
    if not Path(exe).exists():
        exe = shutil.which("rltscan")
    commands = {name: [exe, *args] for name, args in {**COMMANDS, **RUNS_TORCH}.items()}
    commands["python -c pass"] = [sys.executable, "-c", "pass"]
    commands["python -c 'import torch'"] = [sys.executable, "-c", "import torch"]
    for cmd in commands.values():  # warm-up, untimed (page cache, bytecode)
        subprocess.run(cmd, capture_output=True, check=False)
    times: dict[str, list[float]] = {name: [] for name in commands}
    loads = []
    for _ in range(RUNS):
        loads.append(os.getloadavg()[0])
        for name, cmd in commands.items():
            times[name].append(timed(cmd))
    results = {}
    for name, ts in times.items():
        args = {**COMMANDS, **RUNS_TORCH}.get(name)
        results[name] = {
            "median_s": round(statistics.median(ts), 4),
            "min_s": round(min(ts), 4),
            "max_s": round(max(ts), 4),
            "runs_s": [round(t, 4) for t in ts],
            "imports": imported(args) if args is not None else None,
        }
        r = results[name]
        print(f"{label:7s} {name:26s} median {r['median_s']:.3f} s  min {r['min_s']:.3f}")
    loadavg_after = os.getloadavg()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    record = {
        "label": label,
        "commit": commit,
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other sessions)",
        "loadavg_before": load0,
        "loadavg_after": loadavg_after,
        "runs_per_command": RUNS,
        "tree": os.environ.get("PYTHONPATH") or str(ROOT),
        "bytecode": "cached (private PYTHONPYCACHEPREFIX)"
        if bytecode
        else "none (compiled per run)",
        "loadavg_1min_per_round": loads,
        "commands": results,
    }
    data = json.loads(out.read_text()) if out.exists() else {}
    data[label] = record
    out.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
