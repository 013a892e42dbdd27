"""Red team: TorchRL storages whose rewards carry more than one trailing axis of 1.

docs/CONVENTIONS.md §7.4: outputs are leaves "shaped like next/reward". A TensorDict of
batch ``[T]`` whose ``("next", "reward")`` is ``[T, 1, 1]`` (a per-agent axis of one
agent, kept as a plain axis) got ``advantages`` of shape ``[T]``: beside TorchRL's
``[T, 1, 1]`` log-probabilities a loss broadcasts that to ``[T, 1, T]``, silently.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.io_helpers import run_cli

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")
F = pytest.importorskip("torchrl.objectives.value.functional")


@pytest.mark.parametrize("shape", [(8, 1, 1), (8, 1)], ids=str)
def test_outputs_have_the_rewards_shape(shape: tuple[int, ...], tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(0)
    done = torch.zeros(shape, dtype=torch.bool)
    done[3] = True
    done[-1] = True
    term = done.clone()
    term[-1] = False
    td = tensordict.TensorDict(
        {
            "state_value": torch.randn(shape, generator=g, dtype=torch.float64),
            ("next", "reward"): torch.randn(shape, generator=g, dtype=torch.float64),
            ("next", "state_value"): torch.randn(shape, generator=g, dtype=torch.float64),
            ("next", "done"): done,
            ("next", "terminated"): term,
            ("next", "truncated"): done & ~term,
        },
        [shape[0]],
    )
    td.memmap_(tmp_path / "td")
    res = run_cli("gae", str(tmp_path / "td"), "--gamma", "0.9", "--lam", "0.8", "-q")
    assert res.returncode == 0, res.stderr
    got = tensordict.TensorDict.load_memmap(tmp_path / "td")["advantages"]
    want, _ = F.generalized_advantage_estimate(
        0.9, 0.8, td["state_value"], td["next", "state_value"], td["next", "reward"],
        done, term, time_dim=0,
    )  # fmt: skip
    assert tuple(got.shape) == shape
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-6)
