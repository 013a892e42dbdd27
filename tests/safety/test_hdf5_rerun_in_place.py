"""A re-run with ``--overwrite`` writes an HDF5 file's outputs into the datasets the first
run made: HDF5 never gives a deleted dataset's space back, so deleting and recreating
them would grow the file by the outputs' size at every re-run (README "Where results go
and what is kept": re-running gives byte-identical outputs)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from rltscan import api

N = 20_000


def write_rollout(path: Path, *, episodes: bool, **storage) -> None:
    rng = np.random.default_rng(0)
    terminated = rng.random(N) < 0.01
    truncated = np.zeros(N, bool)
    truncated[-1] = True
    values = rng.standard_normal(N).astype(np.float32)
    cols = {
        "rewards": rng.standard_normal(N).astype(np.float32),
        "values": values,
        "next_values": np.roll(values, -1),
        "terminated": terminated & ~truncated,
        "truncated": truncated,
    }
    with h5py.File(path, "w") as f:
        if not episodes:
            for name, arr in cols.items():
                f.create_dataset(name, data=arr, **(storage if name == "rewards" else {}))
            return
        cut = N // 2
        for i, part in enumerate((slice(0, cut), slice(cut, N))):
            group = f.create_group(f"episode_{i}")
            for name, arr in cols.items():
                data = arr[part].copy()
                if name in ("terminated", "truncated"):
                    data[:] = False
                    data[-1] = name == "terminated"
                group.create_dataset(name, data=data, **(storage if name == "rewards" else {}))


@pytest.mark.parametrize("episodes", [False, True], ids=["flat", "episode-groups"])
@pytest.mark.parametrize(
    "storage",
    [{}, {"compression": "gzip", "chunks": (1000,)}],
    ids=["contiguous", "gzip"],
)
def test_a_rerun_with_overwrite_reuses_the_outputs_space(
    tmp_path: Path, episodes: bool, storage: dict
) -> None:
    path = tmp_path / "rollout.h5"
    write_rollout(path, episodes=episodes, **storage)
    api.run("gae", str(path), device="cpu", backend="torch")
    size = path.stat().st_size
    with h5py.File(path, "r") as f:
        first = (
            {name: f[name][()] for name in ("advantages", "value_targets")} if not episodes else {}
        )
    api.run("gae", str(path), device="cpu", backend="torch", overwrite=True)
    second = path.read_bytes()
    api.run("gae", str(path), device="cpu", backend="torch", overwrite=True)
    assert path.read_bytes() == second, "a second re-run changed the file"
    assert len(second) < size + 4 * N, "the re-run kept a dead copy of the outputs"
    with h5py.File(path, "r") as f:
        for name, arr in first.items():
            np.testing.assert_array_equal(f[name][()], arr)
            assert "rltscan_version" in f[name].attrs


def test_a_rerun_leaves_a_hard_link_to_the_old_outputs_alone(tmp_path: Path) -> None:
    """A user who kept the first run's outputs under a second name (``f["kept"] =
    f["advantages"]``, one dataset with two names) keeps them: the re-run writes a new
    dataset for "advantages" instead of rewriting the shared one in place."""
    path = tmp_path / "rollout.h5"
    write_rollout(path, episodes=False)
    api.run("gae", str(path), device="cpu", backend="torch", params={"gamma": 0.5})
    with h5py.File(path, "a") as f:
        f["kept"] = f["advantages"]
        kept = f["kept"][()]
    api.run("gae", str(path), device="cpu", backend="torch", overwrite=True)
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["kept"][()], kept)
        assert not np.array_equal(f["advantages"][()], kept)
