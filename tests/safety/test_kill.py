"""Crash safety: kill a real ``python -m rltscan`` while it writes, then check the input.

The write stage starts when the temp file ``.<name>.rltscan-*.tmp`` appears next
to the input; each trial SIGKILLs (or SIGINTs) the process a random time after
that. Afterwards the input must open, every original column must be unchanged,
and an output under its final name must be complete (equal to a clean run's).

The runs stream in six windows. The temp file appears when an HDF5 stream opens
its sink (the stream and the commit follow) and when a Parquet stream commits
(the rewrite follows), so the kill times span what comes after it in each format,
up to and past the atomic replace.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.io_helpers import (
    ROOT,
    big_flat_h5,
    big_flat_parquet,
    fingerprint,
    h5_columns,
    parquet_columns,
)

N = 1_500_000  # rows: big enough that the write takes a while, small enough for CI
TRIALS = 6
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}


FORMATS = {
    "hdf5": ("data.h5", lambda path: big_flat_h5(path, N), h5_columns),
    "parquet": (
        "data.parquet",
        lambda path: big_flat_parquet(path, N, 6, {"origin": "kill test"}),
        parquet_columns,
    ),
}


WINDOW = ["--chunk-steps", str(N // 6 + 1), "--block-steps", str(N // 6 + 1)]


def command(path: Path) -> list[str]:
    return [sys.executable, "-m", "rltscan", "gae", str(path), "--device", "cpu", "-q", *WINDOW]


def temp_files(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if ".rltscan-" in p.name]


def write_started(directory: Path) -> bool:
    """The temp copy exists (not a spill file, which is unlinked as soon as it is made)."""
    return any(p.name.endswith(".tmp") for p in temp_files(directory))


def start_and_signal(path: Path, delay: float, sig: int) -> tuple[int, str]:
    """Run rltscan on ``path``; ``delay`` s after its temp file appears, send ``sig``."""
    proc = subprocess.Popen(
        command(path), env=ENV, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 120
    while not write_started(path.parent) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(delay)
    if proc.poll() is None:
        proc.send_signal(sig)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err.decode()


@pytest.fixture(scope="module", params=sorted(FORMATS))
def prepared(request, tmp_path_factory):
    """(format, master copy, its column fingerprints, the clean run's outputs, and the
    seconds from the temp file's creation to the end of the clean run)."""
    name, make, read = FORMATS[request.param]
    base = tmp_path_factory.mktemp(f"kill-{request.param}")
    master = base / name
    make(master)
    before = fingerprint(read(master))
    clean = base / "clean" / name
    clean.parent.mkdir()
    shutil.copy(master, clean)
    done = subprocess.run([*command(clean), "--json"], env=ENV, capture_output=True, timeout=300)
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["streaming"]["windows"] == 6
    stages = {s["name"]: s["seconds"] or 0.0 for s in report["stages"]}
    write_seconds = stages["commit"]  # Parquet: the temp file is the rewrite
    if request.param == "hdf5":  # the temp copy is made when the stream starts
        write_seconds += stages["stream (wall)"]
    outputs = {k: v for k, v in fingerprint(read(clean)).items() if k not in before}
    assert set(outputs) == {"advantages", "value_targets"}
    return request.param, master, before, outputs, write_seconds


def check_after(path: Path, fmt: str, before: dict, outputs: dict) -> bool:
    """The input opens, originals are unchanged, outputs are absent or complete."""
    read = FORMATS[fmt][2]
    now = fingerprint(read(path))
    assert {k: now[k] for k in before} == before, "an original column changed"
    extra = {k: v for k, v in now.items() if k not in before}
    assert extra in ({}, outputs), f"half-written outputs: {sorted(extra)}"
    finals = [p.name for p in path.parent.iterdir() if ".rltscan-" not in p.name]
    assert finals == [path.name]
    return bool(extra)


@pytest.mark.slow
def test_sigkill_during_write_never_damages_the_input(prepared, tmp_path: Path) -> None:
    fmt, master, before, outputs, write_seconds = prepared
    rng = random.Random(1234)
    killed = 0
    for trial in range(TRIALS):
        work = tmp_path / str(trial)
        work.mkdir()
        path = work / master.name
        shutil.copy(master, path)
        # from "temp file just created" to a little past the clean run's write time:
        # covers the copy, the new datasets, the fsync and the replace
        delay = rng.uniform(0.0, 1.2 * write_seconds)
        code, _ = start_and_signal(path, delay, signal.SIGKILL)
        assert code in (0, -signal.SIGKILL)
        killed += code == -signal.SIGKILL
        complete = check_after(path, fmt, before, outputs)
        print(f"{fmt} trial {trial}: kill {delay:.3f}s into the write, rc {code}, {complete=}")
    assert killed, "no trial was killed mid-run; the timing window is off"


@pytest.mark.slow
def test_sigint_during_write_cleans_up_and_exits_130(prepared, tmp_path: Path) -> None:
    fmt, master, before, outputs, _ = prepared
    path = tmp_path / master.name
    shutil.copy(master, path)
    code, err = start_and_signal(path, 0.0, signal.SIGINT)
    last = err.splitlines()[-1] if err else ""
    if code == 130 and "nothing was written" in last:
        assert last == "error: interrupted; nothing was written and the input is unchanged"
        assert not temp_files(tmp_path)
        assert not check_after(path, fmt, before, outputs)
    elif code == 130:  # the signal landed after the atomic replace: outputs are complete
        assert last.startswith(f"error: interrupted after {path} was written in full")
        assert check_after(path, fmt, before, outputs)
    else:  # the write finished before the signal arrived
        assert code == 0
        check_after(path, fmt, before, outputs)
