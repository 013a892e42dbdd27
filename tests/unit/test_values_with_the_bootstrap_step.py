"""``values`` holding V(s_0) … V(s_T), one step more than the rewards (how CleanRL and
SB3 compute the critic over a rollout before splitting off the bootstrap), is refused
with that split as the fix, on every time axis; the split gives the float64 loop's
numbers. Before, the message only asked for "per-step arrays of one shape", and
discounted_returns, which accepts ``values`` but never reads them, dropped them unchecked."""

from __future__ import annotations

import numpy as np
import pytest

import rltscan
from tests import oracles

B, T = 3, 6


@pytest.mark.parametrize("name", ["gae", "td_lambda", "vtrace", "discounted_returns"])
@pytest.mark.parametrize("layout", ["[B, T]", "[T, B]", "[B, T, 1]"])
def test_values_with_one_more_step_name_the_split(name, layout, rng):
    r, v = rng.normal(size=(B, T)), rng.normal(size=(B, T + 1))
    term = rng.random((B, T)) < 0.2
    shape, time_dim = {
        "[B, T]": (lambda x: x, None),
        "[T, B]": (lambda x: x.T, 0),
        "[B, T, 1]": (lambda x: x[..., None], -2),
    }[layout]
    kw = {"logp_target": shape(r * 0), "logp_behavior": shape(r * 0)} if name == "vtrace" else {}
    with pytest.raises(
        rltscan.DataError, match=f"first {T} steps as values and its last as last_value"
    ):
        getattr(rltscan, name)(shape(r), values=shape(v), terminated=shape(term),
                               time_dim=time_dim, **kw)  # fmt: skip


def test_the_split_is_the_oracle(rng):
    r, v = rng.normal(size=(B, T)), rng.normal(size=(B, T + 1))
    term = rng.random((B, T)) < 0.2
    res = rltscan.gae(r, v[:, :-1], terminated=term, last_value=v[:, -1], gamma=0.9, lam=0.8)
    want = [oracles.gae(r[b], v[b, :-1], v[b, 1:], term[b], gamma=0.9, lam=0.8)["advantages"]
            for b in range(B)]  # fmt: skip
    np.testing.assert_allclose(res.advantages, np.array(want), rtol=1e-12)


def test_values_discounted_returns_never_reads_still_have_the_rewards_shape(rng):
    """Before, any array (even (7, 9)) was dropped without a look."""
    r, term = rng.normal(size=(B, T)), rng.random((B, T)) < 0.2
    with pytest.raises(rltscan.DataError, match=r'"values" has shape \(7, 9\).*reads no values'):
        rltscan.discounted_returns(r, values=np.zeros((7, 9)), terminated=term)
    same = rltscan.discounted_returns(r, values=np.zeros((B, T)), terminated=term, gamma=0.9)
    np.testing.assert_array_equal(
        same.returns, rltscan.discounted_returns(r, terminated=term, gamma=0.9).returns
    )
