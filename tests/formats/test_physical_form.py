"""A rewrite gives back the file it was given (issue 21 item 6; README "Where results go
and what is kept").

Each test writes a file with a producer's own library (pyarrow with and without
custom options, pandas, polars, HF ``datasets``, Feather/Arrow IPC), runs ``gae``
into it, and compares what the footer says about every input column before and
after: codec, encodings, dictionary page, statistics, Bloom filter, page index, the
first data page's version and checksum, row groups and sort order, the Parquet and
Arrow schemas (types, nullability, field metadata), the key-value metadata; and the
values themselves. A second run with ``--overwrite`` must give the same bytes.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import RltscanError
from tests.io_helpers import ROOT, digest

N = 3000
OUTPUTS = ("advantages", "value_targets")


def columns(n: int = N, seed: int = 0) -> dict[str, np.ndarray]:
    """One rollout table: rewards, values with their bootstrap, both end flags."""
    rng = np.random.default_rng(seed)
    terminated = rng.random(n) < 0.02
    truncated = (rng.random(n) < 0.01) & ~terminated
    values = rng.standard_normal(n).astype(np.float32)
    return {
        "rewards": rng.standard_normal(n).astype(np.float32),
        "values": values,
        "next_values": np.roll(values, -1),
        "terminated": terminated,
        "truncated": truncated,
        "step": np.arange(n, dtype=np.int64),
        "action": rng.integers(0, 4, n).astype(np.int64),
    }


def observations(n: int = N, seed: int = 1) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 4)).astype(np.float32).tolist()


# --------------------------------------------------------------------------- the comparison


def _zigzag_varint(data: bytes, at: int) -> tuple[int, int]:
    """The zigzag varint at ``data[at]`` (Thrift compact's i16/i32): (value, next offset)."""
    raw, shift = 0, 0
    while True:
        raw |= (data[at] & 0x7F) << shift
        shift += 7
        at += 1
        if not data[at - 1] & 0x80:
            break
    return (raw >> 1) ^ -(raw & 1), at


def page_header(path: Path, offset: int) -> tuple[int, bool]:
    """(page type, has a crc) of the Thrift compact PageHeader at ``offset``: field 1 is
    the type (0 data page v1, 3 data page v2), field 4 the optional crc."""
    data = path.read_bytes()[offset : offset + 64]
    at, fid, found = 0, 0, {}
    while data[at]:
        head = data[at]
        at += 1
        if head >> 4:
            fid += head >> 4
        else:  # a long-form field id: zigzag varint
            fid, at = _zigzag_varint(data, at)
        if head & 0x0F != 5:  # the first non-i32 field: the page's own header
            break
        found[fid], at = _zigzag_varint(data, at)
    return found[1], 4 in found


def chunks(path: Path) -> list[tuple[int, dict[str, dict[str, Any]], Any]]:
    """Per row group: its rows, each leaf column's physical description, its sort order."""
    meta = pq.ParquetFile(path).metadata
    out = []
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        cols = {}
        for i in range(rg.num_columns):
            c = rg.column(i)
            cols[c.path_in_schema] = {
                "codec": c.compression,
                "encodings": sorted(c.encodings),
                "dictionary": c.has_dictionary_page,
                "statistics": c.is_stats_set,
                "bloom": c.bloom_filter_offset is not None,
                "column_index": c.has_column_index,
                "offset_index": c.has_offset_index,
                "page": page_header(path, c.data_page_offset),
                "start": c.dictionary_page_offset or c.data_page_offset,
                "size": c.total_compressed_size,
            }
        out.append((rg.num_rows, cols, rg.sorting_columns))
    return out


def chunk_bytes(path: Path, col: dict[str, Any]) -> bytes:
    with open(path, "rb") as fh:
        fh.seek(col["start"])
        return fh.read(col["size"])


def parquet_schema(path: Path) -> list[tuple]:
    schema = pq.ParquetFile(path).schema
    return [
        (c.path, c.physical_type, str(c.logical_type), c.converted_type, c.max_definition_level)
        for c in schema
    ]


def key_values(path: Path) -> dict[bytes, bytes]:
    meta = pq.ParquetFile(path).metadata.metadata or {}
    return {k: v for k, v in meta.items() if k not in (b"rltscan", b"ARROW:schema")}


def without_features(kv: dict[bytes, bytes]) -> dict[bytes, object]:
    """The key-value metadata with HF datasets' feature list cut back to the input
    columns: the write-back declares its new columns there (tests/formats/test_hf_features.py),
    every other entry must stay byte for byte."""
    out: dict[bytes, object] = dict(kv)
    if b"huggingface" in kv:
        info = json.loads(kv[b"huggingface"])
        features = info.get("info", {}).get("features", {})
        info["info"]["features"] = {k: v for k, v in features.items() if k not in OUTPUTS}
        out[b"huggingface"] = info
    return out


def assert_parquet_kept(
    before: Path, after: Path, *, same_bytes: bool, same_version: bool = True
) -> None:
    """Every input column of ``before`` is in ``after`` exactly as it was written; the
    outputs are compressed like the rewards column, plain, without a dictionary."""
    old, new = pq.ParquetFile(before), pq.ParquetFile(after)
    names = old.schema_arrow.names
    assert new.schema_arrow.names[: len(names)] == names
    for name in names:  # types, nullability, field metadata
        assert new.schema_arrow.field(name).equals(old.schema_arrow.field(name), True), name
    n_leaves = len(old.schema)
    assert parquet_schema(after)[:n_leaves] == parquet_schema(before)
    assert without_features(key_values(after)) == without_features(key_values(before))
    assert (b"ARROW:schema" in (new.metadata.metadata or {})) == (
        b"ARROW:schema" in (old.metadata.metadata or {})
    )
    if same_version:
        assert new.metadata.format_version == old.metadata.format_version
    was, now = chunks(before), chunks(after)
    assert [g[0] for g in now] == [g[0] for g in was]  # row-group sizes
    assert [g[2] for g in now] == [g[2] for g in was]  # sort order
    keys = ("codec", "encodings", "dictionary", "statistics", "bloom")
    keys += ("column_index", "offset_index", "page")
    for (_, old_cols, _), (_, new_cols, _) in zip(was, now, strict=True):
        for path, col in old_cols.items():
            assert {k: new_cols[path][k] for k in keys} == {k: col[k] for k in keys}, path
            if same_bytes:  # one writer, one form: the very same column chunk
                assert chunk_bytes(after, new_cols[path]) == chunk_bytes(before, col), path
        rewards = old_cols["rewards"]
        for name in OUTPUTS:
            out = new_cols[name]
            assert out["codec"] == rewards["codec"], name
            assert out["statistics"] == rewards["statistics"] and not out["dictionary"], name
    assert pq.read_table(after, columns=names).equals(pq.read_table(before))


def gae(path: Path, **kw: Any) -> Any:
    return api.run("gae", str(path), device="cpu", backend="torch", **kw)


def rewrite_twice(path: Path, tmp_path: Path, **kw: Any) -> Path:
    """``path`` after one run (kept as a copy of the input beside it), then a second
    ``--overwrite`` run that must not change one byte."""
    before = tmp_path / f"before{path.suffix}"
    shutil.copy(path, before)
    gae(path, **kw)
    first = path.read_bytes()
    gae(path, overwrite=True, **kw)
    assert path.read_bytes() == first, "a re-run with --overwrite changed the file"
    return before


# --------------------------------------------------------------------------- Parquet writers


def test_pyarrow_defaults_with_nested_columns(tmp_path: Path) -> None:
    cols = columns()
    table = pa.table(
        {
            **cols,
            "obs": pa.array(observations(), pa.list_(pa.float32())),
            "info": pa.array([{"success": bool(i % 7 == 0), "x": float(i)} for i in range(N)]),
        }
    )
    schema = table.schema.set(
        0, pa.field("rewards", pa.float32(), nullable=False, metadata={b"unit": b"points"})
    )
    table = table.cast(schema).replace_schema_metadata({b"producer": b"my-collector"})
    path = tmp_path / "pyarrow.parquet"
    pq.write_table(table, path, row_group_size=700)
    before = rewrite_twice(path, tmp_path)
    assert_parquet_kept(before, path, same_bytes=True)


def test_pyarrow_with_every_option_set(tmp_path: Path) -> None:
    """Per-column codecs, dictionaries, statistics and encodings, v2 data pages, page
    index, checksums, a Bloom filter, sort order, no stored Arrow schema, format 2.4 and
    the legacy list naming: all of it read from the file and written again."""
    cols = columns()
    table = pa.table({**cols, "obs": pa.array(observations(), pa.list_(pa.float32()))})
    path = tmp_path / "custom.parquet"
    pq.write_table(
        table,
        path,
        row_group_size=1000,
        version="2.4",
        compression={
            "rewards": "zstd",
            "values": "gzip",
            "next_values": "brotli",
            "terminated": "lz4",
            "truncated": "none",
            "step": "snappy",
            "action": "zstd",
            "obs.list.item": "gzip",
        },
        use_dictionary=["action", "terminated"],
        write_statistics=["rewards", "step"],
        column_encoding={"values": "BYTE_STREAM_SPLIT", "step": "DELTA_BINARY_PACKED"},
        data_page_version="2.0",
        write_page_index=True,
        write_page_checksum=True,
        bloom_filter_options={"action": {"ndv": 4}},
        sorting_columns=[pq.SortingColumn(5)],
        store_schema=False,
        use_compliant_nested_type=False,
    )
    before = rewrite_twice(path, tmp_path)
    assert_parquet_kept(before, path, same_bytes=False)
    codecs = {p: c["codec"] for p, c in chunks(path)[0][1].items()}
    assert codecs["obs.list.item"] == "GZIP" and codecs["truncated"] == "UNCOMPRESSED"


def dictionary_page_size(path: Path, name: str) -> int:
    """The uncompressed size of ``name``'s dictionary page in the first row group."""
    col = chunks(path)[0][1][name]
    data = path.read_bytes()[col["start"] : col["start"] + 64]
    from rltscan.io.physical import _page_header

    return _page_header(data).fields[2]


def test_a_dictionary_that_filled_the_limit_falls_back_early(tmp_path: Path) -> None:
    """pyarrow's defaults give a float column of distinct values a 1 MiB dictionary page,
    then plain pages: the rewrite keeps a dictionary page and the plain pages but falls
    back early, and keeps the dictionaries that did not fill the limit whole."""
    n = 300_000  # > 2^18 distinct float32 values: the dictionary fills 1 MiB
    cols = columns(n)
    cols["action"] = cols["action"] % 3  # a dictionary of 3 values, whole
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=n)
    assert dictionary_page_size(path, "rewards") >= 1 << 20
    before = rewrite_twice(path, tmp_path)
    assert_parquet_kept(before, path, same_bytes=False)
    # the first batch of 1024 values past the 4 KiB limit, then plain
    assert dictionary_page_size(path, "rewards") <= 4 * 1024
    assert dictionary_page_size(path, "step") <= 8 * 1024  # int64 0..n-1: filled it too
    new, old = chunks(path)[0][1]["action"], chunks(before)[0][1]["action"]
    assert chunk_bytes(path, new) == chunk_bytes(before, old)  # the whole one, same bytes


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_a_dictionary_whole_past_1_mib_is_not_taken_for_a_fallback(
    tmp_path: Path, version: str
) -> None:
    """Written with a 4 MiB dictionary limit, the float column's 1.2 MiB dictionary
    stayed whole (every data page dictionary-encoded): the rewrite keeps pyarrow's own
    limit and records none; with the default limit (data page v1 and v2) it fell back,
    and the rewrite falls back early and records the limit it used."""
    cols = columns(300_000)
    for limit, early in ((4 << 20, False), (None, True)):
        path = tmp_path / f"limit-{limit}.parquet"
        options = {} if limit is None else {"dictionary_pagesize_limit": limit}
        pq.write_table(pa.table(cols), path, data_page_version=version, **options)
        gae(path)
        entry = json.loads(pq.ParquetFile(path).metadata.metadata[b"rltscan"])
        assert ("dictionary_limit" in entry) == early, limit


def test_pandas_to_parquet_pyarrow_engine(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(columns())
    frame["task"] = pd.Categorical(np.repeat(np.arange(N // 100), 100).astype(str))
    path = tmp_path / "pandas.parquet"
    frame.to_parquet(path, engine="pyarrow", compression="gzip")
    before = rewrite_twice(path, tmp_path)
    assert_parquet_kept(before, path, same_bytes=True)
    assert b"pandas" in key_values(path)


def test_pandas_to_parquet_fastparquet_engine(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("fastparquet")
    path = tmp_path / "fastparquet.parquet"
    pd.DataFrame(columns()).to_parquet(path, engine="fastparquet", compression="zstd")
    before = rewrite_twice(path, tmp_path)
    assert_parquet_kept(before, path, same_bytes=False, same_version=False)


def polars_frame(n: int = N) -> Any:
    pl = pytest.importorskip("polars")
    cols = columns(n)
    stamps = np.datetime64("2024-01-01T00:00:00", "ns") + np.arange(n).astype("m8[ns]") * 7
    return pl.DataFrame(
        {
            **cols,
            "obs": observations(n),
            "env": np.arange(n, dtype=np.uint32) % 8,
            "time": stamps,
        }
    )


def test_polars_defaults(tmp_path: Path) -> None:
    """polars writes zstd (level 3), list columns, unsigned and nanosecond types under a
    footer that says format 1.0: a 1.0 rewrite would turn uint32 into int64 and cut the
    nanoseconds; the rewrite keeps the types, the codec and the level's size."""
    path = tmp_path / "polars.parquet"
    polars_frame().write_parquet(path)
    before = rewrite_twice(path, tmp_path)
    assert_parquet_kept(before, path, same_bytes=False, same_version=False)
    back = pq.read_table(path)
    assert back.schema.field("env").type == pa.uint32()
    assert back.schema.field("time").type == pa.timestamp("ns")
    assert back.column("time").equals(pq.read_table(before).column("time"))
    for (_, old, _), (_, new, _) in zip(chunks(before), chunks(path), strict=True):
        for name, col in old.items():  # polars' zstd level, not pyarrow's (10% larger)
            assert abs(new[name]["size"] - col["size"]) <= 0.02 * col["size"] + 64, name


def test_polars_row_groups(tmp_path: Path) -> None:
    path = tmp_path / "polars_groups.parquet"
    polars_frame().write_parquet(path, row_group_size=1000, compression="snappy")
    before = rewrite_twice(path, tmp_path)
    assert_parquet_kept(before, path, same_bytes=False, same_version=False)
    assert len(chunks(path)) == 3


def test_hf_datasets_to_parquet(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    cols = columns()
    data = {k: v.tolist() for k, v in cols.items()}
    ds = datasets.Dataset.from_dict({**data, "observation": observations()})
    path = tmp_path / "hf.parquet"
    ds.to_parquet(str(path))
    before = rewrite_twice(path, tmp_path)
    assert_parquet_kept(before, path, same_bytes=True)  # content-defined pages included
    assert chunks(path)[0][1]["observation.list.element"]["codec"] == "SNAPPY"
    assert b"huggingface" in key_values(path)


def test_the_cli_keeps_a_polars_list_column_compressed(tmp_path: Path) -> None:
    """The case of the issue, end to end: a polars file (zstd) with a list column."""
    path = tmp_path / "rollouts.parquet"
    polars_frame(20_000).write_parquet(path)
    size = path.stat().st_size
    done = subprocess.run(
        [sys.executable, "-m", "rltscan", "gae", str(path), "--device", "cpu", "-q"],
        capture_output=True,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "NO_COLOR": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    codecs = {c["codec"] for _, cols, _ in chunks(path) for c in cols.values()}
    assert codecs == {"ZSTD"}
    # two float32 outputs of 20,000 rows at most add their raw size
    assert path.stat().st_size < size + 2 * 4 * 20_000


def test_a_streamed_rewrite_in_small_windows_keeps_the_form(tmp_path: Path) -> None:
    path = tmp_path / "windows.parquet"
    polars_frame().write_parquet(path, row_group_size=500)
    before = rewrite_twice(path, tmp_path, chunk_steps=256, block_steps=128)
    assert_parquet_kept(before, path, same_bytes=False, same_version=False)


def test_stdin_to_stdout_keeps_the_codec(tmp_path: Path) -> None:
    buf = io.BytesIO()
    pq.write_table(pa.table(columns()), buf, compression="zstd", row_group_size=1000)
    out = io.BytesIO()
    api.run(
        "gae",
        "-",
        output="-",
        stdin=io.BytesIO(buf.getvalue()),
        stdout=out,
        device="cpu",
        backend="torch",
    )
    got = tmp_path / "out.parquet"
    got.write_bytes(out.getvalue())
    src = tmp_path / "in.parquet"
    src.write_bytes(buf.getvalue())
    assert_parquet_kept(src, got, same_bytes=True)


def test_a_failed_rewrite_leaves_the_input_as_it_was(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table(columns()), path, compression="zstd", row_group_size=500)
    before = digest(path)
    calls = []
    real = pq.ParquetWriter.write_table

    def failing(self: Any, table: Any, *args: Any, **kw: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk went away")
        return real(self, table, *args, **kw)

    monkeypatch.setattr(pq.ParquetWriter, "write_table", failing)
    with pytest.raises((OSError, RltscanError)):
        gae(path)
    assert len(calls) == 3 and digest(path) == before
    assert [p.name for p in tmp_path.iterdir()] == ["in.parquet"]  # no temp left


def test_mixed_row_groups_are_written_like_the_first_with_a_note(tmp_path: Path) -> None:
    """polars decides the dictionary per row group: one writer cannot, so the report says
    every group is written like the first."""
    pl = pytest.importorskip("polars")
    n = 4000
    cols = columns(n)
    noise = np.random.default_rng(3).integers(0, 2**40, n // 2)
    action = np.concatenate([np.zeros(n // 2, np.int64), noise])  # few values, then many
    path = tmp_path / "mixed.parquet"
    pl.DataFrame({**cols, "action": action}).write_parquet(path, row_group_size=n // 2)
    groups = chunks(path)
    assert [g[1]["action"]["dictionary"] for g in groups] == [True, False]
    before = pq.read_table(path)
    report = gae(path)
    assert any('"action"' in note and "like the first" in note for note in report.notes)
    assert [g[1]["action"]["dictionary"] for g in chunks(path)] == [True, True]
    assert pq.read_table(path, columns=before.column_names).equals(before)


# --------------------------------------------------------------------------- Arrow IPC


def ipc_codecs(path: Path, stream: bool) -> set[str | None]:
    """The body compression of every record batch, read with pyarrow's own reader."""
    source = pa.memory_map(str(path))
    if not stream:
        source.seek(8)
    found = set()
    for message in ipc.MessageReader.open_stream(source):
        if message.type == "record batch":
            body = message.body.to_pybytes()
            # a compressed buffer starts with its uncompressed length, then the frame
            found.add(_frame(body))
    return found


def _frame(body: bytes) -> str | None:
    if b"\x04\x22\x4d\x18" in body:  # LZ4 frame magic
        return "lz4"
    if b"\x28\xb5\x2f\xfd" in body:  # zstd frame magic
        return "zstd"
    return None


@pytest.mark.parametrize(
    ("kind", "codec"),
    [("feather", "lz4"), ("feather", "zstd"), ("feather", None), ("stream", "lz4")],
)
def test_arrow_ipc_keeps_its_compression(kind: str, codec: str | None, tmp_path: Path) -> None:
    table = pa.table({**columns(), "obs": pa.array(observations(), pa.list_(pa.float32()))})
    table = table.replace_schema_metadata({b"producer": b"sampler"})
    if kind == "feather":
        path = tmp_path / "rollouts.feather"
        feather.write_feather(table, path, compression=codec or "uncompressed", chunksize=1000)
    else:
        path = tmp_path / "rollouts.arrows"
        options = ipc.IpcWriteOptions(compression=codec)
        with ipc.new_stream(str(path), table.schema, options=options) as writer:
            writer.write_table(table, max_chunksize=1000)
    stream = kind == "stream"
    before = rewrite_twice(path, tmp_path)
    assert ipc_codecs(path, stream) == ipc_codecs(before, stream) == {codec}
    read = ipc.open_stream if stream else ipc.open_file
    old = read(pa.memory_map(str(before))).read_all()
    got = read(pa.memory_map(str(path))).read_all()
    assert [b.num_rows for b in got.to_batches()] == [1000] * 3
    assert got.select(table.column_names).equals(old)
    assert got.schema.metadata[b"producer"] == b"sampler"


@pytest.mark.parametrize("codec", ["lz4", "zstd", "uncompressed"])
def test_polars_arrow_ipc_file_is_read_and_keeps_its_compression(
    codec: str, tmp_path: Path
) -> None:
    """polars' ``write_ipc`` puts the schema message after the magic without the
    length prefix a stream has (file readers find messages through the footer): the
    file is valid, pyarrow and polars read it, so it is no "corrupt" exit 3; the
    rewrite keeps its body compression and polars reads the outputs back."""
    pl = pytest.importorskip("polars")
    cols = columns()
    path = tmp_path / "polars.arrow"
    pl.DataFrame(cols).write_ipc(path, compression=codec)
    before = ipc.open_file(pa.memory_map(str(path))).read_all()
    rewrite_twice(path, tmp_path)
    assert ipc_codecs(path, stream=False) == {None if codec == "uncompressed" else codec}
    back = pl.read_ipc(path)
    assert back.select(before.column_names).to_arrow().equals(before)
    assert set(OUTPUTS) <= set(back.columns)


def test_arrow_ipc_metadata_version_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "v4.arrow"
    options = ipc.IpcWriteOptions(metadata_version=ipc.MetadataVersion.V4)
    table = pa.table(columns())
    with ipc.new_file(str(path), table.schema, options=options) as writer:
        writer.write_table(table)
    rewrite_twice(path, tmp_path)
    source = pa.memory_map(str(path))
    source.seek(8)
    versions = {m.metadata_version for m in ipc.MessageReader.open_stream(source)}
    assert versions == {ipc.MetadataVersion.V4}


# --------------------------------------------------------------------------- HDF5 and -o


def h5_storage(path: Path) -> dict[str, tuple]:
    """Every dataset's filters, chunks and layout, and its raw bytes' digest."""
    out = {}
    with h5py.File(path, "r") as f:

        def visit(name: str, obj: Any) -> None:
            if isinstance(obj, h5py.Dataset):
                plist = obj.id.get_create_plist()
                filters = tuple(plist.get_filter(i)[:3] for i in range(plist.get_nfilters()))
                out[name] = (filters, obj.chunks, obj.maxshape, obj.fillvalue, obj[()].tobytes())

        f.visititems(visit)
    return out


def test_hdf5_write_back_keeps_every_datasets_filters(tmp_path: Path) -> None:
    cols = columns()
    path = tmp_path / "rollouts.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("rewards", data=cols["rewards"], compression="gzip", compression_opts=7,
                         shuffle=True, chunks=(250,))  # fmt: skip
        f.create_dataset("values", data=cols["values"], compression="lzf", chunks=(500,))
        f.create_dataset("next_values", data=cols["next_values"], fletcher32=True, chunks=(300,))
        f.create_dataset("terminated", data=cols["terminated"], maxshape=(None,), chunks=(1000,))
        f.create_dataset("truncated", data=cols["truncated"])
        f.create_dataset("step", data=cols["step"], scaleoffset=0, chunks=(100,))
    before = h5_storage(path)
    gae(path)
    after = h5_storage(path)
    gae(path, overwrite=True)  # the same datasets again (HDF5's free space moves)
    assert h5_storage(path) == after
    assert {k: after[k] for k in before} == before
    for name in OUTPUTS:  # compressed like the rewards column
        filters = [f[0] for f in after[name][0]]
        assert h5py.h5z.FILTER_DEFLATE in filters and h5py.h5z.FILTER_SHUFFLE in filters
        with h5py.File(path, "r") as f:
            assert f[name].compression_opts == 7 and f[name].chunks == (250,)


def test_hdf5_to_parquet_keeps_gzip_and_its_level(tmp_path: Path) -> None:
    cols = columns()
    path = tmp_path / "rollouts.h5"
    with h5py.File(path, "w") as f:
        for name, arr in cols.items():
            opts = {"compression": "gzip", "compression_opts": 2} if name != "step" else {}
            f.create_dataset(name, data=arr, **opts)
    out = tmp_path / "out.parquet"
    gae(path, output=str(out))
    codecs = {p: c["codec"] for p, c in chunks(out)[0][1].items()}
    assert codecs.pop("step") == "UNCOMPRESSED"  # an uncompressed dataset stays so
    assert set(codecs.values()) == {"GZIP"}  # the rest, outputs included, as gzip
    plain = io.BytesIO()
    pq.write_table(pq.read_table(out, columns=["rewards"]), plain, compression="gzip")
    level9 = pq.ParquetFile(io.BytesIO(plain.getvalue())).metadata.row_group(0).column(0)
    assert chunks(out)[0][1]["rewards"]["size"] > level9.total_compressed_size  # level 2


def test_parquet_to_hdf5_keeps_gzip(tmp_path: Path) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table(columns()), path, compression={"rewards": "gzip", "values": "gzip"})
    out = tmp_path / "out.h5"
    gae(path, output=str(out))
    with h5py.File(out, "r") as f:
        assert f["rewards"].compression == "gzip" and f["values"].compression == "gzip"
        assert f["next_values"].compression is None  # snappy: HDF5 has no snappy
        assert f["advantages"].compression == "gzip"  # like the rewards


@pytest.mark.parametrize(
    ("codec", "want"), [("zstd", "zstd"), ("lz4", "lz4"), ("snappy", None), ("none", None)]
)
def test_parquet_to_arrow_keeps_a_codec_ipc_has(
    codec: str, want: str | None, tmp_path: Path
) -> None:
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table(columns()), path, compression=codec)
    out = tmp_path / "out.arrow"
    gae(path, output=str(out))
    assert ipc_codecs(out, stream=False) == {want}


@pytest.mark.parametrize(
    ("codec", "want"), [("lz4", "LZ4"), ("zstd", "ZSTD"), (None, "UNCOMPRESSED")]
)
def test_arrow_to_parquet_keeps_the_codec(codec: str | None, want: str, tmp_path: Path) -> None:
    path = tmp_path / "in.feather"
    feather.write_feather(pa.table(columns()), path, compression=codec or "uncompressed")
    out = tmp_path / "out.parquet"
    gae(path, output=str(out))
    assert {c["codec"] for c in chunks(out)[0][1].values()} == {want}


def test_converted_file_records_no_levels_when_pyarrow_s_own(tmp_path: Path) -> None:
    """Only levels that differ from pyarrow's defaults go into the ``rltscan`` entry."""
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table(columns()), path, compression="zstd")
    gae(path)
    record = json.loads(pq.ParquetFile(path).metadata.metadata[b"rltscan"])
    assert "compression_level" not in record
