"""A rewrite through a table (Arrow IPC and Feather in place, a Minari part file, ``-o``
to Parquet or Arrow) keeps every input field as the producer declared it: its type,
its nullability (``not null``) and its field metadata (README "Where results go and
what is kept")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from rltscan import api

N = 300


def declared_table() -> pa.Table:
    rng = np.random.default_rng(0)
    terminated = np.zeros(N, bool)
    terminated[[40, 170]] = True
    truncated = np.zeros(N, bool)
    truncated[-1] = True
    values = rng.standard_normal(N).astype(np.float32)
    columns = {
        "rewards": pa.array(rng.standard_normal(N).astype(np.float32)),
        "values": pa.array(values),
        "next_values": pa.array(np.roll(values, -1)),
        "terminated": pa.array(terminated),
        "truncated": pa.array(truncated),
        "task": pa.array(["reach"] * N, pa.large_string()),
        "stamp": pa.array(np.arange(N).astype("datetime64[us]"), pa.timestamp("us", tz="UTC")),
    }
    fields = [
        pa.field(
            name,
            arr.type,
            nullable=name not in ("rewards", "terminated"),
            metadata={b"unit": f"{name}-unit".encode()},
        )
        for name, arr in columns.items()
    ]
    schema = pa.schema(fields, metadata={b"producer": b"collector v2"})
    return pa.table(list(columns.values()), schema=schema)


def gae(path: Path, **kw) -> None:
    api.run("gae", str(path), device="cpu", backend="torch", **kw)


def assert_fields_kept(before: pa.Schema, after: pa.Schema) -> None:
    for field in before:
        assert after.field(field.name).equals(field, check_metadata=True), field.name
    assert after.metadata[b"producer"] == b"collector v2"


@pytest.mark.parametrize("compression", ["zstd", "uncompressed"])
def test_arrow_ipc_in_place_keeps_nullability_and_field_metadata(
    tmp_path: Path, compression: str
) -> None:
    path = tmp_path / "rollout.arrow"
    feather.write_feather(declared_table(), path, compression=compression, chunksize=100)
    before = ipc.open_file(path).read_all()
    gae(path)
    after = ipc.open_file(path).read_all()
    assert_fields_kept(before.schema, after.schema)
    assert after.select(before.column_names).equals(before)
    first = path.read_bytes()
    gae(path, overwrite=True)
    assert path.read_bytes() == first


@pytest.mark.parametrize(("src", "dst"), [(".parquet", ".arrow"), (".arrow", ".parquet")])
def test_a_conversion_keeps_nullability_and_field_metadata(
    tmp_path: Path, src: str, dst: str
) -> None:
    path = tmp_path / f"rollout{src}"
    table = declared_table()
    if src == ".parquet":
        pq.write_table(table, path)
    else:
        feather.write_feather(table, path)
    out = tmp_path / f"out{dst}"
    gae(path, output=str(out))
    got = pq.read_schema(out) if dst == ".parquet" else ipc.open_file(out).schema
    assert_fields_kept(table.schema, got)
