"""A dataset with a null dataspace (``h5py.Empty``: no values, a holder of attributes,
as some producers keep a run's configuration) is part of a healthy file: a run writes
back beside it and keeps it, and a conversion carries it with its attributes, instead
of calling the file corrupt."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq

from rltscan import api

N = 100


def write_rollout(path: Path) -> None:
    rng = np.random.default_rng(0)
    terminated = np.zeros(N, bool)
    terminated[[30, N - 1]] = True
    with h5py.File(path, "w") as f:
        f.create_dataset("rewards", data=rng.standard_normal(N).astype(np.float32))
        f.create_dataset("values", data=rng.standard_normal(N).astype(np.float32))
        f.create_dataset("terminated", data=terminated)
        config = f.create_dataset("config", data=h5py.Empty("f4"))
        config.attrs["learning_rate"] = 3e-4


def test_a_null_dataspace_dataset_is_kept_in_place(tmp_path: Path) -> None:
    path = tmp_path / "rollout.h5"
    write_rollout(path)
    api.run("gae", str(path), device="cpu", backend="torch")
    with h5py.File(path, "r") as f:
        assert f["config"].shape is None and f["config"].dtype == np.float32
        assert f["config"].attrs["learning_rate"] == 3e-4
        assert f["advantages"].shape == (N,)


def test_a_null_dataspace_dataset_is_carried_to_parquet(tmp_path: Path) -> None:
    path = tmp_path / "rollout.h5"
    write_rollout(path)
    out = tmp_path / "rollout.parquet"
    api.run("gae", str(path), output=str(out), device="cpu", backend="torch")
    record = json.loads(pq.read_metadata(out).metadata[b"rltscan.convert"])
    assert record["datasets"]["config"] == {"dtype": "float32", "shape": None, "value": None}
    assert record["attrs"]["config"] == {"learning_rate": 3e-4}
