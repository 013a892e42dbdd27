"""The streaming engine, as its users would break it (review of issue 5).

Each test is a bug that was found: interrupts that left temp files, tracebacks
where a one-line error belongs, Parquet files that could not be written back.
The input must stay byte-identical and no ``.rltscan-`` file may be left.
"""

from __future__ import annotations

import errno
import threading
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import OutputRefusedError
from rltscan.io import sinks


def _cols(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "rewards": rng.standard_normal(n).astype(np.float32),
        "values": rng.standard_normal(n).astype(np.float32),
        "next_values": rng.standard_normal(n).astype(np.float32),
        "terminals": rng.random(n) < 0.1,
        "timeouts": rng.random(n) < 0.05,
    }


def _h5(path: Path, n: int = 100) -> Path:
    with h5py.File(path, "w") as f:
        for key, value in _cols(n).items():
            f[key] = value
    return path


def _parquet(path: Path, n: int = 100, **kw) -> Path:
    pq.write_table(pa.table(_cols(n)), path, row_group_size=20, **kw)
    return path


def _leftovers(directory: Path, keep: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p != keep)


def _engine_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("rltscan")]


def _interrupt_on_call(monkeypatch, owner: object, name: str, call: int = 1) -> None:
    """``owner.name`` raises KeyboardInterrupt (a Ctrl-C) on its ``call``-th call."""
    real = getattr(owner, name)
    count = [0]

    def interrupted(*args, **kwargs):
        count[0] += 1
        if count[0] == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, interrupted)


# ---------------------------------------------------------------- Ctrl-C and temp files


def test_ctrl_c_while_waiting_for_the_hdf5_safety_copy_leaves_no_temp(
    tmp_path: Path, monkeypatch
) -> None:
    """A big file's copy outlasts the stream; Ctrl-C while the run waits for it must
    remove the half-made copy (it was left as .in.h5.rltscan-*.tmp)."""
    src = _h5(tmp_path / "in.h5")
    before = src.read_bytes()
    _interrupt_on_call(monkeypatch, sinks.HDF5Sink, "wait_copied")
    with pytest.raises(KeyboardInterrupt) as info:  # holds the frames: no cleanup by GC
        api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    assert info.value is not None
    assert src.read_bytes() == before
    assert _leftovers(tmp_path, src) == []
    assert _engine_threads() == []


@pytest.mark.parametrize("when", ["before", "after"])
def test_ctrl_c_while_the_hdf5_sink_opens_leaves_no_temp(
    when: str, tmp_path: Path, monkeypatch
) -> None:
    """SIGINT right after the temp copy is created (test_kill's SIGINT case failed now
    and then): the sink's own setup must clean up, also when the signal lands inside
    ``Thread.start`` after the copier was launched (it made the temp again, later)."""
    import shutil
    import time

    src = _h5(tmp_path / "in.h5")
    before = src.read_bytes()
    real_start, real_copy = threading.Thread.start, sinks.shutil.copyfile

    def start(thread: threading.Thread) -> None:  # the copier starts once the temp exists
        if thread.name == "rltscan-copy" and when == "after":
            real_start(thread)
        if thread.name == "rltscan-copy":
            raise KeyboardInterrupt
        real_start(thread)

    def slow_copy(a, b):
        time.sleep(0.2)
        return real_copy(a, b)

    monkeypatch.setattr(threading.Thread, "start", start)
    monkeypatch.setattr(sinks.shutil, "copyfile", slow_copy)
    with pytest.raises(KeyboardInterrupt) as info:  # holds the frames: no cleanup by GC
        api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    assert info.value is not None
    for thread in threading.enumerate():  # a copier left running would show up later
        if thread.name == "rltscan-copy":
            thread.join()
    monkeypatch.undo()
    assert shutil.copyfile is real_copy
    assert src.read_bytes() == before
    assert _leftovers(tmp_path, src) == []
    assert _engine_threads() == []


def test_ctrl_c_inside_mkstemp_of_the_temp_copy_leaves_no_temp(tmp_path: Path, monkeypatch) -> None:
    """test_kill's SIGINT lands as the temp file appears: the signal arrived after
    ``mkstemp`` had made the file and before its name was returned, so no one could
    remove it. The signal is now held until the name is known."""
    import signal
    import tempfile

    src = _h5(tmp_path / "in.h5")
    before = src.read_bytes()
    real = tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        made = real(*args, **kwargs)
        if kwargs.get("suffix") == ".tmp":
            signal.raise_signal(signal.SIGINT)  # Ctrl-C, as the file appears
        return made

    monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
    with pytest.raises(KeyboardInterrupt) as info:
        api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    assert info.value is not None
    monkeypatch.undo()
    assert src.read_bytes() == before
    assert _leftovers(tmp_path, src) == []


# ---------------------------------------------------------------- one-line errors


def _cli(*args: str | Path):
    from typer.testing import CliRunner

    from rltscan import cli

    return CliRunner().invoke(cli.app, [str(a) for a in args])


def _last_line(result) -> str:
    return (result.stderr or result.output).strip().splitlines()[-1]


@pytest.mark.parametrize("fmt", ["h5", "parquet"])
def test_output_path_that_is_a_directory_is_refused_in_one_line(fmt: str, tmp_path: Path) -> None:
    """``-o DIR --overwrite`` ended in an IsADirectoryError traceback (exit 1)."""
    src = _h5(tmp_path / "in.h5") if fmt == "h5" else _parquet(tmp_path / "in.parquet")
    before = src.read_bytes()
    out = tmp_path / "out"
    out.mkdir()
    result = _cli("gae", src, "-o", out, "--overwrite", "--device", "cpu", "-q")
    assert result.exit_code == 5, result.output
    assert _last_line(result) == f"error: {out} is a directory; pass a file path to -o"
    assert src.read_bytes() == before and list(out.iterdir()) == []
    assert _leftovers(tmp_path, src) == ["out"]


def test_a_full_disk_while_spilling_parquet_outputs_is_one_line(
    tmp_path: Path, monkeypatch
) -> None:
    """ENOSPC writing a window of outputs: exit 5 like HDF5, not an OSError traceback."""
    src = _parquet(tmp_path / "in.parquet")
    before = src.read_bytes()
    real = sinks.SpillColumn.write
    count = [0]

    def full(self, start: int, values: np.ndarray) -> None:
        count[0] += 1
        if count[0] == 3:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, start, values)

    monkeypatch.setattr(sinks.SpillColumn, "write", full)
    with pytest.raises(OutputRefusedError, match="no space left on device writing"):
        api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    assert src.read_bytes() == before and _leftovers(tmp_path, src) == []
    assert _engine_threads() == []


def _smashed(path: Path, column: int, group: int = 2) -> Path:
    """``path`` with the page header of one column chunk of one row group overwritten."""
    meta = pq.ParquetFile(path).metadata
    offset = meta.row_group(group).column(column).data_page_offset
    data = bytearray(path.read_bytes())
    data[offset : offset + 40] = bytes(b ^ 0xFF for b in data[offset : offset + 40])
    path.write_bytes(bytes(data))
    return path


@pytest.mark.parametrize("column", ["rewards", "observations"])
def test_a_corrupt_row_group_is_a_one_line_input_error(column: str, tmp_path: Path) -> None:
    """A damaged row group, in a column that is read (the message had the reader's
    newlines in it) or in one that is only copied (an OSError traceback at commit)."""
    cols = {**_cols(200), "observations": np.arange(200, dtype=np.float32)}
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table(cols), src, row_group_size=40)
    _smashed(src, list(cols).index(column))
    before = src.read_bytes()
    result = _cli("gae", src, "--device", "cpu", "-q", "--chunk-steps", "40", "--block-steps", "20")
    assert result.exit_code == 3, result.output
    line = _last_line(result)
    assert line.startswith(f"error: {src}: ") and line.endswith("the file is corrupt")
    assert len((result.stderr or result.output).strip().splitlines()) == 1
    assert src.read_bytes() == before and _leftovers(tmp_path, src) == []


# ---------------------------------------------------------------- Parquet write-back


def test_an_uncompressed_parquet_file_is_written_back(tmp_path: Path) -> None:
    """``compression=None`` (pandas, Spark) files: the codec read back as "uncompressed",
    which the writer refused with an ArrowException traceback."""
    src = _parquet(tmp_path / "in.parquet", compression="none")
    cols = pq.read_table(src)
    report = api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    assert report.streaming is not None
    pf = pq.ParquetFile(src)
    assert pf.metadata.row_group(0).column(0).compression == "UNCOMPRESSED"
    table = pf.read()
    assert table.column_names == [*cols.column_names, "advantages", "value_targets"]
    assert table.select(cols.column_names).equals(cols)


@pytest.mark.parametrize("fmt", ["h5", "parquet"])
def test_writing_back_keeps_the_file_mode_and_new_files_follow_the_umask(
    fmt: str, tmp_path: Path
) -> None:
    """A shared dataset (0o644) came back 0o600 after a Parquet write-back (the temp
    file's mkstemp mode), unreadable by the rest of the group; ``-o`` files too."""
    import os

    src = _h5(tmp_path / "in.h5") if fmt == "h5" else _parquet(tmp_path / "in.parquet")
    os.chmod(src, 0o644)
    api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    assert os.stat(src).st_mode & 0o777 == 0o644
    if fmt == "h5":
        return  # -o copies an HDF5 file, mode included
    mask = os.umask(0o027)
    try:
        out = tmp_path / "out.parquet"
        api.run("gae", str(src), output=str(out), device="cpu", overwrite=True)
    finally:
        os.umask(mask)
    assert os.stat(out).st_mode & 0o777 == 0o640
