"""A TensorDict saved with ``TensorDict.to_h5``: ``next/done`` beside ``next/terminated``
and no ``next/truncated`` (what a TorchRL collector batch of an env without a truncated
key holds). TorchRL defines done as "terminated or truncated", and its GAE bootstraps
an end that is not a termination; rltscan read a TensorDict so through the API but asked
("reads two ways") for the same keys in a file. Both now give TorchRL's numbers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

tensordict = pytest.importorskip("tensordict")
functional = pytest.importorskip("torchrl.objectives.value.functional")

T, GAMMA, LAM = 12, 0.9, 0.8


def batch() -> tensordict.TensorDict:
    g = torch.Generator().manual_seed(0)
    term = torch.zeros(T, 1, dtype=torch.bool)
    trunc = torch.zeros(T, 1, dtype=torch.bool)
    term[4], trunc[8], trunc[-1] = True, True, True
    return tensordict.TensorDict(
        {
            "state_value": torch.randn(T, 1, generator=g),
            "next": {
                "reward": torch.randn(T, 1, generator=g),
                "done": term | trunc,
                "terminated": term,
                "state_value": torch.randn(T, 1, generator=g),
            },
        },
        batch_size=[T],
    )


def test_next_done_beside_next_terminated_is_torchrl_s_gae(tmp_path: Path) -> None:
    td = batch()
    path = tmp_path / "batch.h5"
    td.to_h5(str(path))
    cmd = [sys.executable, "-m", "rltscan", "gae", str(path), "--gamma", str(GAMMA),
           "--lam", str(LAM), "--device", "cpu", "-q"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    want, _ = functional.generalized_advantage_estimate(
        GAMMA, LAM, td["state_value"], td["next", "state_value"], td["next", "reward"],
        done=td["next", "done"], terminated=td["next", "terminated"], time_dim=-2,
    )  # fmt: skip
    with h5py.File(path) as f:
        got = np.asarray(f["advantages"]).reshape(-1)
    np.testing.assert_allclose(got, want.reshape(-1).numpy(), rtol=1e-5, atol=1e-6)
