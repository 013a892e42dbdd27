"""Start-up of ``inspect`` / ``--dry-run`` against the import floor of their own
dependencies (issue 12: "inspect ≤ 0.3 s"). Read-only on sample_data/.

    python bench/startup_floor.py OUT_DIR

Each command runs once to write its bytecode (PYTHONDONTWRITEBYTECODE is unset for
it), then 9 times; the median wall time is reported. Writes startup.{json,md}.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

H5, PQ = "sample_data/cartpole_flat.h5", "sample_data/cartpole.parquet"
PY = sys.executable
CASES = {
    "python -c pass": [PY, "-c", "pass"],
    "import numpy, h5py, typer, rich.console": [
        PY, "-c", "import numpy, h5py, typer, rich.console",
    ],
    "import numpy, pyarrow.parquet, typer, rich.console": [
        PY, "-c", "import numpy, pyarrow.parquet, typer, rich.console",
    ],
    "rltscan --help": ["rltscan", "--help"],
    "rltscan inspect sample.h5": ["rltscan", "inspect", H5],
    "rltscan inspect sample.parquet": ["rltscan", "inspect", PQ],
    "rltscan inspect sample.h5 --json": ["rltscan", "inspect", H5, "--json"],
    "rltscan gae sample.h5 --dry-run": ["rltscan", "gae", H5, "--dry-run"],
}  # fmt: skip


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    res: dict = {
        "date": datetime.date.today().isoformat(),
        "python": platform.python_version(),
        "machine": "2-core CPU development machine",
        "load_before": os.getloadavg(),
        "median_s": {},
        "runs_s": {},
    }
    for name, cmd in CASES.items():
        subprocess.run(cmd, env=env, capture_output=True)  # writes the .pyc files
        runs = []
        for _ in range(9):
            t0 = time.perf_counter()
            subprocess.run(cmd, env=env, capture_output=True)
            runs.append(time.perf_counter() - t0)
        res["runs_s"][name] = runs
        res["median_s"][name] = statistics.median(runs)
        print(f"{name:55s} {statistics.median(runs):.3f} s", flush=True)
    res["load_after"] = os.getloadavg()
    with open(os.path.join(out, "startup.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    lines = [
        f"# Start-up against the import floor, {res['date']}",
        "",
        f"{res['machine']}, Python {res['python']}, bytecode cached, median of 9 runs; "
        f"load average {res['load_before'][0]:.2f} before, {res['load_after'][0]:.2f} after.",
        "",
        "| command | median s |",
        "|---|---|",
        *(f"| `{k}` | {v:.3f} |" for k, v in res["median_s"].items()),
    ]
    with open(os.path.join(out, "startup.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
