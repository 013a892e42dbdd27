"""A Parquet file written by Hugging Face ``datasets`` keeps its features complete: the
columns rltscan adds are declared in its ``huggingface`` schema metadata as ``datasets``
declares a scalar column, and ``datasets`` reads them back with those features."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.io import hf

datasets = pytest.importorskip("datasets")


def _features(path: Path) -> dict:
    return json.loads(pq.read_schema(path).metadata[b"huggingface"])["info"]["features"]


@pytest.mark.parametrize("output", [None, "out.parquet"])
def test_outputs_are_declared_in_a_datasets_parquet(tmp_path: Path, output: str | None) -> None:
    rng = np.random.default_rng(0)
    n = 40
    episode = np.repeat(np.arange(4), 10)
    ds = datasets.Dataset.from_dict(
        {
            "reward": rng.normal(size=n).astype(np.float32),
            "terminated": np.isin(np.arange(n), [9, 19, 29, 39]),
            "episode_id": episode,
        }
    )
    path = tmp_path / "rollouts.parquet"
    ds.to_parquet(str(path))
    before = _features(path)
    target = path if output is None else tmp_path / output
    api.run(
        "returns",
        str(path),
        output=None if output is None else str(target),
        params={"gamma": 0.9},
        device="cpu",
    )
    after = _features(target)
    assert {k: after[k] for k in before} == before
    assert after["returns"] == {"dtype": "float32", "_type": "Value"}
    back = datasets.Dataset.from_parquet(str(target))
    assert back.features["returns"] == datasets.Value("float32")
    assert back.features["reward"] == ds.features["reward"]


def test_metadata_without_features_is_left_alone() -> None:
    assert hf.declared({}, {"x": "float32"}) == {}
    odd = {b"huggingface": b'{"info": {"features": null}}'}
    assert hf.declared(odd, {"x": "float32"}) == odd
    broken = {b"huggingface": b"not json", b"other": b"1"}
    assert hf.declared(broken, {"x": "float32"}) == broken
