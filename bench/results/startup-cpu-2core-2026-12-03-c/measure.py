"""Startup wall time of the rltscan CLI: ``python measure.py OUT.json LABEL=TREE ...``.

Run c measures several trees in one go, interleaved command by command within each
round (``before=/tmp/a after=/tmp/b``: each TREE is put first on ``PYTHONPATH``; an
empty TREE is the installed package), so that the other sessions' load on the shared
machine hits every label alike; the bare-interpreter references run once per round
and are recorded under every label.

Each command is run ``RUNS`` times as a fresh process (the ``rltscan`` console
script itself, not pyenv's shim, stdout/stderr to /dev/null; ``PYTHONPATH`` picks
the tree measured), the commands interleaved round by round (so a change of machine
load hits all alike), after one untimed warm-up run (page cache, bytecode);
the median, min and max wall time of the ``subprocess.run`` call are recorded,
with which heavy modules were imported (a second run under
``python -X importtime``, whose log is searched for the modules).

Run c adds an inspect of the Parquet sample (which loads pandas: pyarrow imports it),
and ``import torch`` with the cyclic collector off during the import (as the CLI does
since run c), so a computing run can be set against both.

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
PARQUET = str(ROOT / "sample_data" / "cartpole.parquet")
COMMANDS = {
    "--help": ["--help"],
    "--version": ["--version"],
    "gae --help": ["gae", "--help"],
    "inspect": ["inspect", SAMPLE],
    "gae --dry-run": ["gae", SAMPLE, "--dry-run"],
    "inspect PARQUET": ["inspect", PARQUET, "--ends-are", "truncated"],
}
RUN_OUT = str(Path(tempfile.gettempdir()) / "rltscan-startup-out.h5")
# an estimator command that computes (CPU), against a bare `import torch`
RUNS_TORCH = {
    "gae -o (computes)": ["gae", SAMPLE, "-o", RUN_OUT, "--overwrite", "-q"],
}
HEAVY = ("torch", "triton", "numpy", "rich", "h5py", "pyarrow", "pydantic", "pandas")
TORCH_NO_GC = "import gc; gc.disable(); import torch; gc.freeze(); gc.enable()"


def imported(args: list[str], env: dict[str, str]) -> dict[str, bool]:
    code = "import sys; from rltscan.cli import main; sys.argv = ['rltscan', *sys.argv[1:]]; main()"
    log = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",  # (-c puts the working directory first on sys.path: PYTHONPATH must win)
    ).stderr
    names = {line.rsplit("|", 1)[-1].strip() for line in log.splitlines() if "|" in line}
    return {m: m in names for m in HEAVY}


def timed(cmd: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    return time.perf_counter() - start


def main() -> None:
    out = Path(sys.argv[1])
    trees = dict(a.split("=", 1) for a in sys.argv[2:] if "=" in a)
    bytecode = "--no-bytecode" not in sys.argv
    if bytecode:
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="rltscan-pyc-")
    else:
        os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
    envs = {}
    for label, tree in trees.items():
        envs[label] = dict(os.environ)
        envs[label].pop("PYTHONPATH", None)
        if tree:
            envs[label]["PYTHONPATH"] = tree
    load0 = os.getloadavg()
    exe = str(Path(sys.executable).with_name("rltscan"))  # the console script, no shim
    if not Path(exe).exists():
        exe = shutil.which("rltscan")
    cli = {name: [exe, *args] for name, args in {**COMMANDS, **RUNS_TORCH}.items()}
    bare = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "python -c 'import torch'": [sys.executable, "-c", "import torch"],
        "import torch, collector off": [sys.executable, "-c", TORCH_NO_GC],
    }
    for cmd in bare.values():  # warm-up, untimed (page cache, bytecode)
        subprocess.run(cmd, capture_output=True, check=False)
    for env in envs.values():
        for cmd in cli.values():
            subprocess.run(cmd, capture_output=True, env=env, check=False)
    times: dict[tuple[str, str], list[float]] = {}
    loads = []
    for _ in range(RUNS):
        loads.append(os.getloadavg()[0])
        for name, cmd in cli.items():
            for label, env in envs.items():
                times.setdefault((label, name), []).append(timed(cmd, env))
        for name, cmd in bare.items():
            times.setdefault(("", name), []).append(timed(cmd))
    loadavg_after = os.getloadavg()
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    data = json.loads(out.read_text()) if out.exists() else {}
    for label, env in envs.items():
        results = {}
        for name in [*cli, *bare]:
            ts = times[(label if name in cli else "", name)]
            args = {**COMMANDS, **RUNS_TORCH}.get(name)
            results[name] = {
                "median_s": round(statistics.median(ts), 4),
                "min_s": round(min(ts), 4),
                "max_s": round(max(ts), 4),
                "runs_s": [round(t, 4) for t in ts],
                "imports": imported(args, env) if args is not None else None,
            }
            r = results[name]
            print(f"{label:7s} {name:28s} median {r['median_s']:.3f} s  min {r['min_s']:.3f}")
        data[label] = {
            "label": label,
            "commit": commit,
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores (shared with other sessions)",
            "loadavg_before": load0,
            "loadavg_after": loadavg_after,
            "runs_per_command": RUNS,
            "tree": env.get("PYTHONPATH") or str(ROOT),
            "interleaved_with": [other for other in envs if other != label],
            "bytecode": "cached (private PYTHONPYCACHEPREFIX)"
            if bytecode
            else "none (compiled per run)",
            "loadavg_1min_per_round": loads,
            "commands": results,
        }
    out.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
