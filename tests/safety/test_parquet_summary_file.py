"""A Parquet file that a ``_metadata`` summary lists (pyarrow's ``write_metadata``, Dask,
Spark) is never rewritten in place: the summary holds every row group's column offsets,
a rewrite moves them, and ``pyarrow.dataset.parquet_dataset`` then fails on the
dataset. The run stops (exit 5) naming ``-o``; nothing changes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import OutputRefusedError
from tests.io_helpers import digest

N = 400


def table() -> pa.Table:
    rng = np.random.default_rng(0)
    terminated = np.zeros(N, bool)
    terminated[[90, 199, 260, N - 1]] = True
    return pa.table(
        {
            "rewards": rng.standard_normal(N).astype(np.float32),
            "values": rng.standard_normal(N).astype(np.float32),
            "terminated": terminated,
        }
    )


def summarized(root: Path, partition: str = "") -> list[Path]:
    """Two part files (row groups of 50 rows) under ``root/partition`` and a
    ``_metadata`` at ``root`` listing them."""
    data = table()
    (root / partition).mkdir(parents=True, exist_ok=True)
    collected: list = []
    parts = []
    for i in range(2):
        rel = f"{partition}/part-{i}.parquet" if partition else f"part-{i}.parquet"
        pq.write_table(
            data.slice(i * 200, 200), root / rel, row_group_size=50, metadata_collector=collected
        )
        collected[-1].set_file_path(rel)
        parts.append(root / rel)
    pq.write_metadata(data.schema, root / "_metadata", metadata_collector=collected)
    return parts


@pytest.mark.parametrize("partition", ["", "year=2024"])
def test_a_listed_file_is_refused_in_place(tmp_path: Path, partition: str) -> None:
    root = tmp_path / "dataset"
    parts = summarized(root, partition)
    before = digest(root)
    with pytest.raises(OutputRefusedError, match=r"_metadata lists.*-o PATH"):
        api.run("gae", str(parts[0]), device="cpu", backend="torch")
    assert digest(root) == before
    assert ds.parquet_dataset(str(root / "_metadata")).to_table().equals(table())


def test_a_listed_dataset_directory_is_refused_in_place(tmp_path: Path) -> None:
    root = tmp_path / "dataset"
    summarized(root)
    before = digest(root)
    with pytest.raises(OutputRefusedError, match=r"_metadata lists.*-o PATH"):
        api.run("gae", str(root), device="cpu", backend="torch")
    assert digest(root) == before


def test_a_listed_file_converts_to_a_new_file(tmp_path: Path) -> None:
    root = tmp_path / "dataset"
    parts = summarized(root)
    out = tmp_path / "out.parquet"
    api.run("gae", str(parts[0]), output=str(out), device="cpu", backend="torch")
    assert pq.read_schema(out).names[-2:] == ["advantages", "value_targets"]
    assert ds.parquet_dataset(str(root / "_metadata")).to_table().equals(table())
