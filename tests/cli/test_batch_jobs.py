"""``python -m rltscan`` as a batch job or a pipeline stage sees it: a disk or a file size
limit that runs out while the outputs are written, a reader that closes the pipe early,
a log at a narrow width. Each ends with its documented exit code and one line, never a
traceback, and the input as it was."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.io_helpers import FLAT, ROOT, copy_sample, fingerprint, h5_columns

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "120"}
RLTSCAN = [sys.executable, "-m", "rltscan"]


def rltscan(
    *args: str | Path, env: dict[str, str] | None = None, **kw
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RLTSCAN, *map(str, args)], env=env or ENV, capture_output=True, timeout=300, **kw
    )


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0]


# --------------------------------------------------------------------------- room to write


@pytest.mark.parametrize("extra", [6_000, 12_000, 20_000])
def test_a_file_size_limit_hit_while_writing_hdf5_is_exit_5(tmp_path: Path, extra: int) -> None:
    """``ulimit -f`` (a batch scheduler's file size cap) stops the HDF5 copy somewhere in
    its outputs or its final flush: one line and exit 5, as a full disk, not h5py's
    RuntimeError with a traceback (exit 1) or a crash at exit (exit 139)."""
    path = copy_sample(FLAT, tmp_path)
    before = fingerprint(h5_columns(path))
    limit = path.stat().st_size + extra

    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    done = rltscan("gae", path, "--device", "cpu", "-q", preexec_fn=cap)
    line = one_line(done.stderr)
    assert done.returncode == 5, line
    assert "file size limit" in line and "ulimit -f" in line
    assert "nothing was written and the input is unchanged" in line
    assert fingerprint(h5_columns(path)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_disk_that_fills_at_the_hdf5_commit_is_exit_5(tmp_path: Path) -> None:
    """A disk with room for the safety copy but not for its last writes (the outputs'
    attributes, HDF5's final flush): h5py raises RuntimeError there, which must still be
    the full-disk line (exit 5), not a traceback."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    size = FLAT.stat().st_size
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={2 * size + 20 * 4096}", "tmpfs", str(mnt)],
        capture_output=True,
    )
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        path = copy_sample(FLAT, mnt)
        before = fingerprint(h5_columns(path))
        filler = mnt / "filler"
        # free space from just under the copy's size to a little over it: each run fails
        # at a different write of the copy, its outputs or its flush
        for free in range(size - 4096, size + 16 * 1024, 4096):
            filler.unlink(missing_ok=True)
            room = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
            filler.write_bytes(b"\0" * max(0, room - free))
            done = rltscan("gae", path, "--device", "cpu", "-q")
            if done.returncode == 0:  # there was room after all: start again
                path.unlink()
                path = copy_sample(FLAT, mnt)
                continue
            line = one_line(done.stderr)
            assert done.returncode == 5, (free, line)
            assert "no space left" in line, (free, line)
            assert fingerprint(h5_columns(path)) == before
            assert sorted(p.name for p in mnt.iterdir()) == ["cartpole_flat.h5", "filler"]
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
