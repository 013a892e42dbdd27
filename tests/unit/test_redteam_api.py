"""Red team: Python API calls that must give the caller's numbers or be refused.

Each case is checked against a float64 loop written here, the meaning the caller's
arrays have by numpy's and torch's own rules.
"""

from __future__ import annotations

import numpy as np
import pytest

import rltscan


def _traces_loop(x: np.ndarray, starts: np.ndarray, decay: float) -> np.ndarray:
    """z_t = x_t + (0 if t starts an episode else decay) z_{t-1}, along axis 0."""
    z = np.zeros_like(x, dtype=np.float64)
    prev = np.zeros(x.shape[1:])
    for t in range(x.shape[0]):
        prev = x[t] + np.where(starts[t], 0.0, decay) * prev
        z[t] = prev
    return z


def _batch_major(seed: int = 0):
    """x [B, T, D] beside flags [B, T] (B = 3, T = 7, D = 2)."""
    rng = np.random.default_rng(seed)
    term = rng.random((3, 7)) < 0.3
    x = rng.normal(size=(3, 7, 2))
    starts = np.zeros_like(term)
    starts[:, 1:] = term[:, :-1]
    want = _traces_loop(x.transpose(1, 0, 2), starts.T[..., None], 0.9 * 0.8)
    return x, term, want.transpose(1, 0, 2)


@pytest.mark.parametrize("fn", ["eligibility_traces", "prefix_sum"])
def test_a_negative_time_dim_that_names_two_axes_is_refused(fn: str) -> None:
    """x [B, T, D] beside flags [B, T] with ``time_dim=-2``: counted from x's end (numpy's
    and TorchRL's reading of -2 on a [B, T, D] array) it is T; counted from the flags'
    end it is B. The two readings give different numbers, so the call is refused and
    names the non-negative time_dim; time_dim=1 gives the loop's numbers."""
    x, term, want = _batch_major()
    kw = {"gamma": 0.9, "lam": 0.8} if fn == "eligibility_traces" else {}
    if fn == "prefix_sum":
        starts = np.zeros_like(term)
        starts[:, 1:] = term[:, :-1]
        want = _traces_loop(x.transpose(1, 0, 2), starts.T[..., None], 1.0).transpose(1, 0, 2)
    f = getattr(rltscan, fn)
    with pytest.raises(rltscan.AmbiguousInputError, match="time_dim=1"):
        f(x, terminated=term, time_dim=-2, **kw)
    got = f(x, terminated=term, time_dim=1, **kw)
    np.testing.assert_allclose(np.asarray(got[next(iter(got.keys()))]), want, atol=1e-6)


def test_a_negative_time_dim_that_names_one_axis_still_runs() -> None:
    """``time_dim=-1`` beside x [B, T, D]: counted from x's end it is D, which is no axis
    of the flags [B, T], so only the flags' reading (T) fits: no ambiguity."""
    x, term, want = _batch_major(1)
    got = rltscan.eligibility_traces(x, terminated=term, time_dim=-1, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(got.eligibility_traces, want, atol=1e-6)
