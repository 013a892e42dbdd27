"""New HDF5 outputs are stored like the rewards dataset (README "Where results go and
what is kept"): its shuffle and checksum filters even without a compressor, its chunk
shape, and its unlimited axes (a resizable buffer's outputs stay appendable). A lossy
filter (scale-offset) is never put on an output."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from rltscan import api

N = 400


def write_rollout(path: Path, **rewards_storage) -> None:
    rng = np.random.default_rng(0)
    terminated = np.zeros(N, bool)
    terminated[[150, N - 1]] = True
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "rewards", data=rng.standard_normal(N).astype(np.float32), **rewards_storage
        )
        f.create_dataset("values", data=rng.standard_normal(N).astype(np.float32))
        f.create_dataset("terminated", data=terminated)


def storage(ds: h5py.Dataset) -> tuple:
    return ds.compression, ds.compression_opts, ds.shuffle, ds.fletcher32, ds.chunks, ds.maxshape


@pytest.mark.parametrize(
    "rewards_storage",
    [
        {"shuffle": True, "fletcher32": True, "chunks": (50,)},
        {"chunks": (64,), "maxshape": (None,)},
        {"compression": "gzip", "compression_opts": 4, "chunks": (100,), "maxshape": (None,)},
    ],
    ids=["shuffle-checksum", "resizable", "gzip-resizable"],
)
def test_outputs_are_stored_like_the_rewards(tmp_path: Path, rewards_storage: dict) -> None:
    path = tmp_path / "rollout.h5"
    write_rollout(path, **rewards_storage)
    api.run("gae", str(path), device="cpu", backend="torch")
    with h5py.File(path, "r") as f:
        want = storage(f["rewards"])
        for name in ("advantages", "value_targets"):
            assert storage(f[name]) == want, name
    first = path.read_bytes()
    api.run("gae", str(path), device="cpu", backend="torch", overwrite=True)
    assert path.read_bytes() == first


def test_a_scale_offset_rewards_gives_exact_outputs(tmp_path: Path) -> None:
    path = tmp_path / "rollout.h5"
    write_rollout(path, scaleoffset=2, chunks=(50,))
    api.run("gae", str(path), device="cpu", backend="torch")
    with h5py.File(path, "r") as f:
        assert f["advantages"].scaleoffset is None
        assert f["advantages"].chunks is None
