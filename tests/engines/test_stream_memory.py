"""A streamed run's peak memory does not grow with the file (issue 25).

The same CLI run (GAE in place or to a new file, small windows so that both files span
many of them) on a file and on one four times as long: the child's own peak RSS
(``ru_maxrss`` of a process forked from a small launcher, so that it does not inherit
this process's high-water mark) may differ by at most 10% — the bound the issue sets for 1e7
against 5e7 steps at the default window size (bench/cpu_fused.py measures that).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
WINDOW = 1 << 17  # steps per window and per estimator call
LENGTHS = (1_000_000, 4_000_000)  # 8 and 31 windows
TOLERANCE = 0.10

# Forks and execs the command, reaps it with wait4: its wall time and its own peak RSS.
LAUNCHER = r"""
import json, os, sys
cmd = json.loads(sys.argv[1])
pid = os.fork()
if pid == 0:
    fd = os.open(os.devnull, os.O_WRONLY)
    os.dup2(fd, 1)
    os.execvp(cmd[0], cmd)
_, status, ru = os.wait4(pid, 0)
print(json.dumps({"rc": os.waitstatus_to_exitcode(status), "maxrss_kib": ru.ru_maxrss}))
"""


def _write(fmt: str, path: Path, steps: int) -> None:
    rng = np.random.default_rng(steps)
    cols = {
        "rewards": rng.standard_normal(steps, dtype=np.float32),
        "values": rng.standard_normal(steps, dtype=np.float32),
        "terminals": rng.random(steps) < 0.002,
        "timeouts": rng.random(steps) < 0.002,
    }
    cols["timeouts"][-1] = False
    cols["terminals"][-1] = True  # no bootstrap needed at the window end
    if fmt == "hdf5":
        import h5py

        with h5py.File(path, "w") as f:
            for name, x in cols.items():
                f.create_dataset(name, data=x, chunks=(WINDOW,))
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(cols), path, row_group_size=WINDOW)


def _peak_rss(path: Path, backend: str, output: Path | None) -> int:
    cmd = [sys.executable, "-m", "rltscan", "gae", str(path), "--missing-bootstrap", "zero"]
    cmd += ["--device", "cpu", "--backend", backend]
    cmd += [] if output is None else ["-o", str(output)]
    cmd += ["--chunk-steps", str(WINDOW), "--block-steps", str(WINDOW), "-q"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-S", "-c", LAUNCHER, json.dumps(cmd)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout.strip().splitlines()[-1])
    assert info["rc"] == 0, done.stderr
    return int(info["maxrss_kib"]) * 1024


@pytest.mark.parametrize(
    ("backend", "to_new_file"),
    [("cpu", False), ("cpu", True), ("torch", False)],  # cpu: the torch-free lane
)
@pytest.mark.parametrize("fmt", ["hdf5", "parquet"])
def test_peak_rss_does_not_grow_with_file_length(
    fmt: str, backend: str, to_new_file: bool, tmp_path: Path
) -> None:
    """In place, and with ``-o`` to a new file (Parquet's outputs spilled, then the file
    rewritten at the commit)."""
    suffix = "h5" if fmt == "hdf5" else "parquet"
    peaks = []
    for steps in LENGTHS:
        path = tmp_path / f"n{steps}.{suffix}"
        _write(fmt, path, steps)
        output = tmp_path / f"out{steps}.{suffix}" if to_new_file else None
        peaks.append(_peak_rss(path, backend, output))
    short, long = peaks
    assert long <= short * (1 + TOLERANCE), (
        f"peak RSS grew from {short / 2**20:.0f} MiB ({LENGTHS[0]:,} steps) to "
        f"{long / 2**20:.0f} MiB ({LENGTHS[1]:,} steps)"
    )
