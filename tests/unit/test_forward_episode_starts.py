"""Forward estimators (eligibility traces, prefix sums) read ``episode_starts[0]``.

In the "starts" reading (Stable-Baselines3's ``episode_starts``, CleanRL's ``dones``)
``starts[0] = 1`` says step 0 starts an episode. Backward estimators have nothing to
carry in from before the data, so they need not read it; a forward one continues from
``init`` or a previous chunk's ``carry``, and must not where step 0 starts an episode
(docs/CONVENTIONS.md §3.6, §3.7, §8.2). Before, ``starts[0]`` was never read: the
trace of the previous chunk ran into the new episode, and a sequence in two chunks
differed from the whole sequence (§2.4).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import assert_close_to_oracle, is_slow_backend

import rltscan

F64 = torch.float64


def forward_loop(x, starts, decay, init):
    """z_t = x_t + (0 if step t starts an episode else decay)·z_{t−1}, z_{−1} = init;
    ``x`` and ``starts`` are ``[B, T]``, ``init`` ``[B]`` (float64)."""
    out = np.zeros_like(x, dtype=np.float64)
    for b in range(x.shape[0]):
        z = float(init[b])
        for t in range(x.shape[1]):
            z = x[b, t] + (0.0 if starts[b, t] else decay) * z
            out[b, t] = z
    return out


def _data(rng, B=3, T=10):
    x = rng.normal(size=(B, T))
    starts = rng.random((B, T)) < 0.25
    starts[0, 0], starts[1, 0] = True, False  # one sequence starts an episode, one does not
    return x, starts, rng.normal(size=B)


@pytest.mark.parametrize("how", ["episode_starts", "dones"])
def test_a_start_on_step_0_drops_init(how, backend, rng):
    x, starts, init = _data(rng)
    ends = {"episode_starts": starts} if how == "episode_starts" else {
        "dones": starts, "dones_mean": "starts"}  # fmt: skip
    got = rltscan.prefix_sum(x, **ends, init=init, time_dim=-1, backend=backend)
    assert_close_to_oracle(got.prefix_sums, forward_loop(x, starts, 1.0, init), F64)
    got = rltscan.eligibility_traces(x, **ends, init=init, gamma=0.9, lam=0.8, time_dim=-1,
                                     backend=backend)  # fmt: skip
    assert_close_to_oracle(got.eligibility_traces, forward_loop(x, starts, 0.72, init), F64)
    # the same as is_first (RLDS), which always read its step 0
    same = rltscan.prefix_sum(x, is_first=starts, init=init, time_dim=-1, backend=backend)
    np.testing.assert_allclose(same.prefix_sums, forward_loop(x, starts, 1.0, init), rtol=1e-12)


def test_chunks_of_episode_starts_equal_the_whole_sequence(backend, rng):
    T = 10 if is_slow_backend(backend) else 40
    x, starts, _ = _data(rng, T=T)
    cut = T // 2
    starts[:, cut] = [True, False, True]  # chunk 2 starts an episode on two sequences
    for fn, kw, out in (
        (rltscan.prefix_sum, {}, "prefix_sums"),
        (rltscan.eligibility_traces, {"gamma": 0.9, "lam": 0.8}, "eligibility_traces"),
    ):
        whole = getattr(fn(x, episode_starts=starts, time_dim=-1, backend=backend, **kw), out)
        first = fn(x[:, :cut], episode_starts=starts[:, :cut], time_dim=-1, backend=backend, **kw)
        second = fn(x[:, cut:], episode_starts=starts[:, cut:], carry=first.carry, time_dim=-1,
                    backend=backend, **kw)  # fmt: skip
        joined = np.concatenate([getattr(first, out), getattr(second, out)], axis=1)
        np.testing.assert_allclose(joined, whole, rtol=1e-12, atol=1e-12)


def test_a_start_on_step_0_with_features_and_settings(rng):
    """x ``[B, T, D]`` beside starts ``[B, T]`` (each feature its own row inside), init
    per sequence and feature, and several settings: each reset where its sequence starts."""
    B, T, D = 2, 7, 3
    x = rng.normal(size=(B, T, D))
    starts = rng.random((B, T)) < 0.3
    starts[:, 0] = [True, False]
    init = rng.normal(size=(B, D))
    got = rltscan.eligibility_traces(x, episode_starts=starts, init=init, gamma=[0.9, 1.0],
                                     lam=0.5, time_dim=-1)  # fmt: skip
    for k, gamma in enumerate((0.9, 1.0)):
        for f in range(D):
            want = forward_loop(x[..., f], starts, gamma * 0.5, init[:, f])
            np.testing.assert_allclose(got.eligibility_traces[k][..., f], want, rtol=1e-12)
