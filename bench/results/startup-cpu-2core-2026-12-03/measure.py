"""Startup wall time of the rltscan CLI: ``python measure.py LABEL OUT.json``.

Each command is run ``RUNS`` times as a fresh process (the ``rltscan`` console
script itself, not pyenv's shim, stdout/stderr to /dev/null; ``PYTHONPATH`` picks
the tree measured) after one untimed warm-up run (page cache);
the median, min and max wall time of the ``subprocess.run`` call are recorded,
with whether torch / triton were imported (a second run under
``python -X importtime``, whose log is searched for the modules).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

RUNS = 5
ROOT = Path(__file__).resolve().parents[3]
SAMPLE = str(ROOT / "sample_data" / "cartpole_flat.h5")
COMMANDS = {
    "--help": ["--help"],
    "--version": ["--version"],
    "gae --help": ["gae", "--help"],
    "inspect": ["inspect", SAMPLE],
    "gae --dry-run": ["gae", SAMPLE, "--dry-run"],
}


def imported(args: list[str]) -> dict[str, bool]:
    code = "import sys; from rltscan.cli import main; sys.argv = ['rltscan', *sys.argv[1:]]; main()"
    log = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *args],
        capture_output=True,
        text=True,
        cwd="/",  # (-c puts the working directory first on sys.path: PYTHONPATH must win)
    ).stderr
    names = {line.rsplit("|", 1)[-1].strip() for line in log.splitlines() if "|" in line}
    return {m: m in names for m in ("torch", "triton")}


def main() -> None:
    label, out = sys.argv[1], Path(sys.argv[2])
    load0 = os.getloadavg()
    exe = str(Path(sys.executable).with_name("rltscan"))  # the console script, no shim
    if not Path(exe).exists():
        exe = shutil.which("rltscan")
    bare = []
    for _ in range(RUNS):  # the interpreter alone, for scale
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"])
        bare.append(time.perf_counter() - start)
    results = {}
    for name, args in COMMANDS.items():
        subprocess.run([exe, *args], capture_output=True)  # warm-up, untimed
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            subprocess.run([exe, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - start)
        results[name] = {
            "median_s": round(statistics.median(times), 4),
            "min_s": round(min(times), 4),
            "max_s": round(max(times), 4),
            "runs_s": [round(t, 4) for t in times],
            "imports": imported(args),
        }
        r = results[name]
        print(f"{label:7s} {name:14s} median {r['median_s']:.3f} s  {r['imports']}")
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
        "bare_python_median_s": round(statistics.median(bare), 4),
        "commands": results,
    }
    data = json.loads(out.read_text()) if out.exists() else {}
    data[label] = record
    out.write_text(json.dumps(data, indent=2) + "\n")


if __name__ == "__main__":
    main()
