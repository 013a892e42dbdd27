"""Formats behind one interface (issues 22, 29): every format is one folder under
``rltscan/io/formats/`` implementing :class:`rltscan.io.formats.Format` plus one row of
``FORMATS``; no other module compares format names; Arrow IPC, moved into that shape,
round-trips through the CLI as a real process as it did before the move."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from rltscan.io import open_input
from rltscan.io.formats import FORMATS, SUFFIXES, TO, Format, named, sniff_bytes, to_word
from rltscan.io.formats.arrow.physical import ipc_form
from rltscan.io.formats.protocol import Streamed, TableFile
from rltscan.io.writeback import provenance
from tests.io_helpers import FLAT, PARQUET, ROOT, copy_sample

PACKAGE = ROOT / "rltscan"
FORMATS_DIR = PACKAGE / "io" / "formats"
# the words a format check would compare (each row's words, the storage kinds, LeRobot's)
WORDS = {w for row in FORMATS for w in row.words} | {
    "lerobot",
    "memmap",
    "replay-buffer",
    "torch-save",
}
# Format-name comparisons left in the engine files, which another change is moving into
# rltscan/engines/ (file -> number of sites). Each is wired by the lead after the engines
# merge; this list only shrinks.
ENGINE_SITES = {
    # sharded datasets' kinds (Minari, LeRobot, file lists), not registry rows: their one
    # table, the Minari backend the shard engines read, a LeRobot data file's conventions
    "rltscan/io/shards.py": 3,
}


def _words(node: ast.AST) -> list[str]:
    """Format words a comparison operand names: a string, or a tuple/list/set of them."""
    if isinstance(node, ast.Constant) and node.value in WORDS:
        return [node.value]
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return [w for e in node.elts for w in _words(e)]
    return []


def _format_checks(path: Path) -> list[tuple[int, list[str]]]:
    """``(line, words)`` of each comparison with a format word, and each dict literal
    keyed by format words (a lookup that decides by format), in one module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Compare):
            hits = [w for side in (node.left, *node.comparators) for w in _words(side)]
        elif isinstance(node, ast.Dict):
            hits = [w for key in node.keys if key is not None for w in _words(key)]
        else:
            continue
        if hits:
            found.append((node.lineno, hits))
    return found


def _modules_outside_formats() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if FORMATS_DIR not in p.parents]


def test_every_row_implements_the_protocol() -> None:
    assert [row.name for row in FORMATS] == ["hdf5", "parquet", "arrow", "minari", "torchrl"]
    owners = Counter(w for row in FORMATS for w in row.words)
    assert all(n == 1 for n in owners.values()), owners  # each word has one row
    for row in FORMATS:
        assert isinstance(row, Format), row.name
        assert (FORMATS_DIR / row.name / "__init__.py").is_file(), row.name  # one folder
        assert all(named(w) is row for w in row.words)
        assert {w for _, w in (*row.magic, *row.suffixes)} <= set(row.words), row.name
        assert row.to in (None, *row.words) and row.stdout in (None, *row.words)
    # the rows Minari composes on read and write one table per file
    assert all(isinstance(named(w), TableFile) for w in ("parquet", "arrow"))


@pytest.mark.parametrize(
    ("head", "word"),
    [
        (b"\x89HDF\r\n\x1a\n\x00", "hdf5"),
        (b"PAR1\x15\x04", "parquet"),
        (b"ARROW1\x00\x00", "arrow"),
        (b"\xff\xff\xff\xff\x10\x01", "arrow-stream"),
        (b"PK\x03\x04", None),  # a torch.save zip is a file's, never stdin's
        (b"", None),
    ],
)
def test_magic_and_words_from_the_registry(head: bytes, word: str | None) -> None:
    assert sniff_bytes(head) == word


def test_suffixes_and_to_words_are_the_rows() -> None:
    assert SUFFIXES == {
        ".h5": "hdf5",
        ".hdf5": "hdf5",
        ".hdf": "hdf5",
        ".parquet": "parquet",
        ".pq": "parquet",
        ".arrow": "arrow",
        ".feather": "arrow",
        ".ipc": "arrow",
        ".arrows": "arrow-stream",
    }
    assert TO == ("parquet", "arrow")
    assert to_word(None, stdout=True) == "parquet"
    assert to_word("arrow", stdout=True) == "arrow-stream"
    assert to_word("arrow", stdout=False) == "arrow"


def test_no_format_name_check_outside_the_formats_package() -> None:
    found = {}
    for path in _modules_outside_formats():
        sites = _format_checks(path)
        if sites:
            found[path.relative_to(ROOT).as_posix()] = sites
    counts = {name: len(sites) for name, sites in found.items()}
    assert counts == ENGINE_SITES, found


def test_arrow_is_named_only_in_its_folder() -> None:
    arrow = {*named("arrow").words, *(s for s, _ in named("arrow").suffixes)}
    named_it = []
    for path in _modules_outside_formats():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in arrow:
                named_it.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert named_it == []


# --------------------------------------------------------------------------- the CLI

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "120"}
ENDS = ("--ends-are", "terminal", "--device", "cpu", "-q")


def _rltscan(*args: str | Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rltscan", *map(str, args)],
        env=ENV,
        input=stdin,
        capture_output=True,
        timeout=300,
    )


def test_arrow_round_trips_through_the_cli(tmp_path: Path) -> None:
    table = pq.read_table(PARQUET)
    path = tmp_path / "rollouts.arrow"
    options = ipc.IpcWriteOptions(compression="zstd")
    with ipc.new_file(path, table.schema, options=options) as writer:
        for batch in table.to_batches(max_chunksize=100):
            writer.write_batch(batch)
    sizes = [b.num_rows for b in table.to_batches(max_chunksize=100)]
    want = tmp_path / "want.parquet"
    done = _rltscan("gae", PARQUET, "-o", want, *ENDS)
    assert done.returncode == 0, done.stderr.decode()
    expected = pq.read_table(want)

    done = _rltscan("gae", path, *ENDS)  # in place: an IPC file again, batches and codec kept
    assert done.returncode == 0, done.stderr.decode()
    with pa.memory_map(str(path)) as source:
        reader = ipc.open_file(source)
        got = reader.read_all()
        assert [reader.get_batch(i).num_rows for i in range(reader.num_record_batches)] == sizes
        assert ipc_form(source, stream=False).codec == "zstd"
    assert got.select(table.column_names).equals(table)
    for name in ("advantages", "value_targets"):
        assert np.array_equal(got.column(name).to_numpy(), expected.column(name).to_numpy())
    blob = path.read_bytes()
    assert blob.startswith(b"ARROW1") and b"rltscan" in blob

    again = _rltscan("gae", path, *ENDS)
    assert again.returncode == 5
    assert again.stderr.decode() == (
        f'error: {path} (arrow) already has "advantages"; pass --overwrite or --prefix P\n'
    )
    streamed = _rltscan("gae", path, "-o", "-", "--to", "arrow", "--prefix", "s_", *ENDS)
    assert streamed.returncode == 0, streamed.stderr.decode()
    back = ipc.open_stream(pa.py_buffer(streamed.stdout)).read_all()
    assert np.array_equal(back.column("s_advantages"), got.column("advantages"))

    piped = _rltscan("returns", "-", "-o", "-", "--to", "arrow", *ENDS, stdin=streamed.stdout)
    assert piped.returncode == 0, piped.stderr.decode()
    assert "returns" in ipc.open_stream(pa.py_buffer(piped.stdout)).read_all().column_names

    refused = _rltscan("gae", path, "--layout", "episodes", *ENDS)
    assert refused.returncode == 2
    assert refused.stderr.decode() == (
        f"error: {path} is arrow (one row per step); --layout episodes applies to HDF5 only, "
        "drop it or pass --layout flat\n"
    )


def test_the_streamed_rows_have_window_sinks() -> None:
    assert [row.name for row in FORMATS if isinstance(row, Streamed)] == [
        row.name for row in FORMATS if row.streams
    ]


@pytest.mark.parametrize(
    ("sample", "rewards"), [(FLAT, "rewards"), (PARQUET, "reward")], ids=["hdf5", "parquet"]
)
def test_a_row_sink_writes_back_window_by_window(
    sample: Path, rewards: str, tmp_path: Path
) -> None:
    path = copy_sample(sample, tmp_path)
    source = open_input(str(path))
    try:
        shape = tuple(source.columns[rewards].shape)
        values = np.arange(shape[0], dtype=np.float32)
        record = provenance(["adv"], {"rltscan_version": "0", "params": {}})
        sink = named(source.format).sink(
            source, path, shape=shape, record=record, template=rewards, overwrite=False
        )
        for start in range(0, shape[0], 400):  # three windows and a bit
            sink.write(start, min(start + 400, shape[0]), {"adv": values[start : start + 400]})
        sink.commit()
    finally:
        source.close()
    again = open_input(str(path))
    try:
        assert np.array_equal(np.asarray(again.read("adv")), values)
    finally:
        again.close()


@pytest.mark.parametrize("userblock", [512, 4096])
def test_hdf5_with_a_user_block_is_hdf5(userblock: int, tmp_path: Path) -> None:
    """HDF5 puts its signature at 0, 512, 1024, ... when the file starts with a user
    block (MATLAB's -v7.3 .mat files have a 512-byte one): such a file is read, not
    refused as corrupt, and written back with its user block as it was."""
    import h5py

    from rltscan import api

    path = tmp_path / "rollout.h5"
    with h5py.File(path, "w", userblock_size=userblock) as f:
        f["rewards"] = np.arange(4.0)
        f["terminals"] = np.array([0, 0, 0, 1], bool)
    header = b"MATLAB 7.3 MAT-file, written by a user".ljust(128, b" ")
    with open(path, "r+b") as fh:
        fh.write(header)
    report = api.run("returns", str(path), params={"gamma": 0.5}, device="cpu")
    assert report.written
    with h5py.File(path) as f:
        assert f.userblock_size == userblock
        np.testing.assert_array_equal(f["returns"][()], [1.375, 2.75, 3.5, 3.0])
    assert path.read_bytes()[: len(header)] == header


@pytest.mark.parametrize("name", ["old.feather", "old.arrow"])
def test_feather_version_1_is_named_with_its_conversion(name: str, tmp_path: Path) -> None:
    """pyarrow's ``write_feather(version=1)`` (and R's old feather) start with ``FEA1``:
    not Arrow IPC. The refusal said the file was corrupt or misnamed; it names the format
    and the conversion to Feather 2 now, and the converted file runs."""
    import pyarrow.feather as feather

    table = pa.table({"rewards": np.arange(4.0), "terminals": [False, False, False, True]})
    path = tmp_path / name
    with pytest.warns(DeprecationWarning):
        feather.write_feather(table, path, version=1)
    res = subprocess.run(
        [sys.executable, "-m", "rltscan", "returns", str(path), "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert res.returncode == 3 and "Feather version 1" in res.stderr, res.stderr
    assert "corrupt" not in res.stderr and res.stderr.count("\n") == 1
    feather.write_feather(feather.read_table(path), path)  # the conversion it names
    assert open_input(str(path)).format == "arrow"
