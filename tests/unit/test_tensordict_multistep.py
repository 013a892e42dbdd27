"""A TensorDict that went through TorchRL's ``MultiStep`` holds n-step rewards and
``steps_to_next_obs``; TorchRL's value modules then discount each step by
``gamma ** steps_to_next_obs``. ``rltscan.gae(td)`` read it with the plain γ and gave
other numbers with no word (0.69 off TorchRL's GAE on the batch below). It is refused
now (as a file with those keys is, docs/CONVENTIONS.md §1.11), and the fix it names,
``gamma=gamma ** td["steps_to_next_obs"]``, gives TorchRL's numbers."""

from __future__ import annotations

import pytest
import torch
from conftest import assert_close_to_oracle

import rltscan
from rltscan import AmbiguousInputError

tensordict = pytest.importorskip("tensordict")
value = pytest.importorskip("torchrl.objectives.value")
tf = pytest.importorskip("torchrl.objectives.value.functional")
F32 = torch.float32


def _multistep_batch(B=2, T=8):
    g = torch.Generator().manual_seed(0)
    done = torch.rand(B, T, 1, generator=g) < 0.2
    term = done & (torch.rand(B, T, 1, generator=g) < 0.5)
    return tensordict.TensorDict(
        {
            "state_value": torch.randn(B, T, 1, generator=g),
            "steps_to_next_obs": torch.randint(1, 4, (B, T, 1), generator=g),
            "sample_log_prob": torch.randn(B, T, 1, generator=g) * 0.3,
            "next": {"reward": torch.randn(B, T, 1, generator=g), "done": done,
                     "terminated": term, "state_value": torch.randn(B, T, 1, generator=g)},
        },
        [B, T],
    )  # fmt: skip


@pytest.mark.parametrize("estimator", ["gae", "td_lambda", "vtrace"])
def test_multistep_tensordict_is_refused_naming_torchrls_discount(estimator):
    td = _multistep_batch()
    extra = {"logp_target": torch.zeros(2, 8, 1)} if estimator == "vtrace" else {}
    with pytest.raises(AmbiguousInputError, match=r"steps_to_next_obs.*gamma \*\* td"):
        getattr(rltscan, estimator)(td, gamma=0.9, **extra)
    assert td.get("advantage", None) is None  # nothing written
    del td["steps_to_next_obs"]
    td["next", "original_reward"] = td["next", "reward"]
    with pytest.raises(AmbiguousInputError, match="original_reward"):
        getattr(rltscan, estimator)(td, gamma=0.9, **extra)


@pytest.mark.parametrize(
    "estimator,module", [("gae", value.GAE), ("td_lambda", value.TDLambdaEstimator)]
)
def test_the_named_fix_is_torchrls_value_module(estimator, module):
    td = _multistep_batch()
    want = module(gamma=0.9, lmbda=0.8, value_network=None)(td.clone())
    getattr(rltscan, estimator)(td, gamma=0.9 ** td["steps_to_next_obs"], lam=0.8)
    assert_close_to_oracle(td["value_target"], want["value_target"], F32)
    assert_close_to_oracle(td["advantage"], want["advantage"], F32)


def test_the_named_fix_is_torchrls_vtrace():
    td = _multistep_batch()
    log_pi = torch.randn(2, 8, 1, generator=torch.Generator().manual_seed(1)) * 0.3
    gamma = 0.9 ** td["steps_to_next_obs"]  # what TorchRL's VTrace module passes
    adv, vs = tf.vtrace_advantage_estimate(
        gamma, log_pi, td["sample_log_prob"], td["state_value"], td["next", "state_value"],
        td["next", "reward"], td["next", "done"], td["next", "terminated"],
    )  # fmt: skip
    rltscan.vtrace(td, logp_target=log_pi, gamma=gamma)
    assert_close_to_oracle(td["advantage"], adv, F32)
    assert_close_to_oracle(td["value_target"], vs, F32)


@pytest.mark.parametrize(
    "gamma",
    [torch.tensor(0.9), torch.tensor([0.9]), torch.full((2, 1, 1), 0.9)],
    ids=["0-d (a value module's .gamma buffer)", "one element", "one per sequence"],
)
def test_a_tensor_gamma_that_is_not_per_step_is_refused_too(gamma):
    """A TorchRL value module keeps gamma as a 0-d tensor buffer (``module.gamma``), so
    ``gamma=module.gamma`` is the natural call; it is one γ for every step, not
    ``gamma ** steps_to_next_obs``, and it was let through (0.77 off TorchRL's GAE)."""
    td = _multistep_batch()
    with pytest.raises(AmbiguousInputError, match=r"steps_to_next_obs.*gamma \*\* td"):
        rltscan.gae(td, gamma=gamma, lam=0.8)
    assert td.get("advantage", None) is None  # nothing written
