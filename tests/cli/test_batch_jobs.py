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

from tests.io_helpers import FLAT, ROOT, copy_sample, fingerprint, h5_columns, small_tmpfs

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


@pytest.mark.parametrize("extra", [6_000, 12_000, 17_000])  # the run writes 18,255 more
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
    assert "nothing was changed" in line
    assert fingerprint(h5_columns(path)) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_a_disk_that_fills_at_the_hdf5_commit_is_exit_5(tmp_path: Path) -> None:
    """A disk with room for the safety copy but not for its last writes (the outputs'
    attributes, HDF5's final flush): h5py raises RuntimeError there, which must still be
    the full-disk line (exit 5), not a traceback."""
    size = FLAT.stat().st_size
    with small_tmpfs(tmp_path, 2 * size + 20 * 4096) as mnt:
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


# --------------------------------------------------------------------------- closed pipes


def closed_pipe() -> int:
    """The write end of a pipe whose reader has gone (``| head -1`` once head exits)."""
    read, write = os.pipe()
    os.close(read)
    return write


def run_into_closed_pipe(*args: str | Path, stream: str) -> subprocess.CompletedProcess:
    """Run with ``stream`` (stdout or stderr) a closed pipe; the other is captured."""
    write = closed_pipe()
    try:
        other = "stderr" if stream == "stdout" else "stdout"
        return subprocess.run(
            [*RLTSCAN, *map(str, args)],
            env=ENV,
            timeout=300,
            **{stream: write, other: subprocess.PIPE},
        )
    finally:
        os.close(write)


def test_inspect_into_a_closed_pipe_is_exit_5_with_one_line() -> None:
    """``rltscan inspect f.h5 | head -1``: the reader went away, which is not a bug
    (exit 1 says "a bug"); one line says so, exit 5 as on ``-o -``."""
    for extra in ([], ["--json"]):
        done = run_into_closed_pipe("inspect", FLAT, *extra, stream="stdout")
        line = one_line(done.stderr)
        assert done.returncode == 5, line
        assert "broken pipe" in line and "stdout" in line


def test_version_and_help_into_a_closed_pipe_are_exit_5() -> None:
    """``rltscan --version | true``: click's own exit for a broken pipe is 1, a bug's
    code; here it is 5 with one line, as for every other reader that goes away."""
    for args in (["--version"], ["--help"], ["gae", "--help"]):
        done = run_into_closed_pipe(*args, stream="stdout")
        line = one_line(done.stderr)
        assert done.returncode == 5, (args, line)
        assert "broken pipe" in line and "stdout" in line


def test_a_json_report_into_a_closed_pipe_says_the_outputs_were_written(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    done = run_into_closed_pipe("gae", path, "--device", "cpu", "--json", stream="stdout")
    line = one_line(done.stderr)
    assert done.returncode == 5, line
    assert "broken pipe" in line and "were written to" in line and path.name in line
    assert "advantages" in h5_columns(path)


def test_a_report_into_a_closed_stderr_is_exit_5(tmp_path: Path) -> None:
    """``rltscan gae f.h5 2>&1 | head -1``: the report is cut short on stderr, so no line
    can say it; the exit code does (5, not the silent 1 of a bug)."""
    path = copy_sample(FLAT, tmp_path)
    done = run_into_closed_pipe("gae", path, "--device", "cpu", stream="stderr")
    assert done.returncode == 5
    assert done.stdout == b""
    assert "advantages" in h5_columns(path)


def test_an_error_into_a_closed_stderr_keeps_its_exit_code(tmp_path: Path) -> None:
    """The error line cannot be printed, but the code is the error's (3 here), not 1."""
    done = run_into_closed_pipe("gae", tmp_path / "missing.h5", stream="stderr")
    assert done.returncode == 3
    done = run_into_closed_pipe("gae", tmp_path / "missing.h5", "--json", stream="stderr")
    assert done.returncode == 3
    assert b'"code": 3' in done.stdout


# --------------------------------------------------------------------------- narrow logs


@pytest.mark.parametrize("columns", ["40", None])  # None: a log file, rich's 80 columns
def test_a_narrow_report_wraps_names_and_paths_never_cuts_them(
    tmp_path: Path, columns: str | None
) -> None:
    """The plan of ``--dry-run`` exists to show the output names and where they go; in
    a batch log (80 columns) or a narrow terminal the tables cut them to "…", so the
    names a run would write could not be read from its report."""
    deep = tmp_path / "runs" / "2024-01-01_cartpole_ppo_seed0" / "rollouts"
    deep.mkdir(parents=True)
    path = copy_sample(FLAT, deep)
    env = {k: v for k, v in ENV.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = columns
    prefix = "sweep_gamma_0.99_lambda_0.95_"
    for extra in (["--dry-run"], []):
        done = rltscan("gae", path, "--device", "cpu", "--prefix", prefix, *extra, env=env)
        err = done.stderr.decode()
        assert done.returncode == 0, err
        assert "…" not in err, err
    done = rltscan("inspect", path, env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert "…" not in done.stdout.decode(), done.stdout.decode()


# --------------------------------------------------------------------------- odd paths


def test_a_file_named_like_an_option_is_named_in_the_error(tmp_path: Path) -> None:
    """``rltscan gae -run.h5`` (a glob like ``*.h5`` can expand to such a name): click
    reads it as the options ``-r -u ...``; the line says it is a file and how to pass it,
    not just 'no option "-r"'."""
    import shutil

    shutil.copy(FLAT, tmp_path / "-run.h5")
    done = rltscan("gae", "-run.h5", "-q", cwd=tmp_path)
    line = one_line(done.stderr)
    assert done.returncode == 2, line
    assert '"-run.h5" is a file' in line and '"./-run.h5"' in line and '"--"' in line
    done = rltscan("gae", "--device", "cpu", "-q", "--", "-run.h5", cwd=tmp_path)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
    assert "advantages" in h5_columns(tmp_path / "-run.h5")
