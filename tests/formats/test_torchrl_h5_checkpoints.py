"""TorchRL replay buffers dumped with ``H5StorageCheckpointer`` (one HDF5 file).

``rb.dumps(DIR)`` with ``storage.checkpointer = H5StorageCheckpointer()`` writes
``DIR/storage/checkpoint.h5`` in TorchRL's compact form (``TED2Nested``): the rows in
insertion order (a wrapped buffer unrolled from its cursor), cut into trajectories at
each ``done`` and at the cursor, one group ``traj_<i>`` each, the step outcomes
(``next/reward``, ``next/done``, ...) under the root names and ``observation`` /
``state_value`` with one more row per trajectory (``next``'s last). Beside them
``_len``, ``_storage_shape``, ``is_full`` and ``shift``. Read as episode groups, a full
buffer gives exactly the steps it holds (with T+1 values bootstrapping each
trajectory). A buffer that was not full stores its never-written rows as the last
groups: refused (exit 3), as is the dump directory, whose message names the file.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from rltscan import cli
from tests import oracles
from tests.io_helpers import digest

torch = pytest.importorskip("torch")
pytest.importorskip("tensordict")
pytest.importorskip("torchrl")

from tensordict import TensorDict  # noqa: E402 (after the skips)

runner = CliRunner()
GAMMA, LAM = 0.9, 0.8
T = 11  # steps written: terminated after step 3, truncated after step 6, the rest cut


def rollout() -> TensorDict:
    rng = np.random.default_rng(5)
    values = torch.as_tensor(rng.normal(size=(T + 1, 1)), dtype=torch.float32)
    obs = torch.arange(T + 1.0).unsqueeze(-1)

    def flags() -> torch.Tensor:
        return torch.zeros(T, 1, dtype=torch.bool)

    nxt = {
        "observation": obs[1:],
        "reward": torch.as_tensor(rng.normal(size=(T, 1)), dtype=torch.float32),
        "state_value": values[1:],
        "done": flags(),
        "terminated": flags(),
        "truncated": flags(),
    }
    td = TensorDict(
        {
            "observation": obs[:-1],
            "state_value": values[:-1],
            "done": flags(),
            "terminated": flags(),
            "truncated": flags(),
            "next": TensorDict(nxt, [T]),
        },
        [T],
    )
    td["next", "terminated"][3] = td["next", "done"][3] = True
    td["next", "truncated"][6] = td["next", "done"][6] = True
    return td


def dump(path: Path, capacity: int, td: TensorDict) -> Path:
    from torchrl.data import LazyMemmapStorage, ReplayBuffer
    from torchrl.data.replay_buffers.checkpointers import H5StorageCheckpointer

    rb = ReplayBuffer(storage=LazyMemmapStorage(capacity))
    rb.storage.checkpointer = H5StorageCheckpointer()
    rb.extend(td)
    rb.dumps(path)
    return path


def run(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(cli.app, [*args, "--device", "cpu", "-q"])
    return result.exit_code, result.stderr


def test_a_full_wrapped_buffer_is_read_in_insertion_order(tmp_path: Path) -> None:
    """8 slots, 11 writes: the file holds steps 3..10 in order, each trajectory
    bootstrapped by its next/state_value."""
    td = rollout()
    checkpoint = dump(tmp_path / "rb", 8, td) / "storage" / "checkpoint.h5"
    args = ["--gamma", str(GAMMA), "--lam", str(LAM), "--ends-are", "truncated"]
    code, err = run(["gae", str(checkpoint), *args])
    assert code == 0, err
    kept = slice(T - 8, T)
    term = td["next", "terminated"][kept, 0].tolist()
    trunc = td["next", "truncated"][kept, 0].tolist()
    want = oracles.gae(
        td["next", "reward"][kept, 0].double().tolist(),
        td["state_value"][kept, 0].double().tolist(),
        td["next", "state_value"][kept, 0].double().tolist(),
        term,
        trunc,
        gamma=GAMMA,
        lam=LAM,
    )
    with h5py.File(checkpoint) as f:
        groups = sorted((k for k in f if k.startswith("traj_")), key=lambda k: int(k[5:]))
        got = np.concatenate([f[k]["advantages"][:].reshape(-1) for k in groups])
    np.testing.assert_allclose(got, want["advantages"], rtol=1e-5, atol=1e-5)


def test_a_buffer_not_full_is_refused(tmp_path: Path) -> None:
    checkpoint = dump(tmp_path / "rb", 20, rollout()) / "storage" / "checkpoint.h5"
    before = digest(checkpoint)
    code, err = run(["returns", str(checkpoint), "--gamma", "0.9", "--ends-are", "truncated"])
    assert code == 3, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "11 of 20 rows written" in lines[0], lines
    assert "rb.storage.checkpointer = None" in lines[0]
    assert digest(checkpoint) == before


def test_the_refusal_s_recipe_reads_the_written_rows(tmp_path: Path) -> None:
    from torchrl.data import LazyMemmapStorage, ReplayBuffer
    from torchrl.data.replay_buffers.checkpointers import H5StorageCheckpointer

    td = rollout()
    rb = ReplayBuffer(storage=LazyMemmapStorage(20))
    rb.storage.checkpointer = H5StorageCheckpointer()
    rb.loads(dump(tmp_path / "rb", 20, td))
    rb.storage.checkpointer = None
    rb.dumps(tmp_path / "again")
    code, err = run(["returns", str(tmp_path / "again"), "--gamma", "0.9"])
    assert code == 0, err
    leaf = tmp_path / "again" / "storage" / "returns.memmap"
    got = np.fromfile(leaf, dtype=np.float32)[:T]
    want = oracles.discounted_returns(
        td["next", "reward"][:, 0].double().tolist(),
        td["next", "state_value"][:, 0].double().tolist(),
        td["next", "terminated"][:, 0].tolist(),
        td["next", "truncated"][:, 0].tolist(),
        gamma=0.9,
    )
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_storage_of_two_dimensions_is_refused(tmp_path: Path) -> None:
    """``LazyMemmapStorage(n, ndim=2)``: the compact form's groups run across envs."""
    from torchrl.data import LazyMemmapStorage, ReplayBuffer
    from torchrl.data.replay_buffers.checkpointers import H5StorageCheckpointer

    rb = ReplayBuffer(storage=LazyMemmapStorage(12, ndim=2))
    rb.storage.checkpointer = H5StorageCheckpointer()
    for _ in range(3):
        batch = torch.stack([rollout()[:5], rollout()[5:10]], 0)  # [B=2, T=5]
        rb.extend(batch.transpose(0, 1))
    rb.dumps(tmp_path / "rb")
    checkpoint = tmp_path / "rb" / "storage" / "checkpoint.h5"
    code, err = run(["returns", str(checkpoint), "--gamma", "0.9", "--ends-are", "truncated"])
    assert code == 3, err
    assert "storage of shape" in err and "rb.dumps(DIR)" in err


def test_the_dump_directory_names_its_file(tmp_path: Path) -> None:
    path = dump(tmp_path / "rb", 8, rollout())
    code, err = run(["returns", str(path), "--gamma", "0.9"])
    assert code == 3, err
    assert "H5StorageCheckpointer" in err and str(path / "storage" / "checkpoint.h5") in err
