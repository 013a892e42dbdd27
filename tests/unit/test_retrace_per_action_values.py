"""Retrace takes Q(s_t, a_t) per step; a user coming from a ``[B, T, A]`` table of
Q-values per action (rl-triton, DQN-style heads) who passes the table is told to gather
the taken action's value (and, for ``v_pi``, to take the expectation), instead of the
generic "per-step arrays of one shape" (docs/CONVENTIONS.md §3.5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rltscan
from tests import oracles

B, T, A = 2, 6, 3


def _data():
    g = torch.Generator().manual_seed(0)
    r = torch.randn(B, T, generator=g, dtype=torch.float64)
    q_all = torch.randn(B, T, A, generator=g, dtype=torch.float64)
    probs = torch.softmax(torch.randn(B, T, A, generator=g, dtype=torch.float64), -1)
    actions = torch.randint(0, A, (B, T), generator=g)
    term = torch.rand(B, T, generator=g) < 0.2
    return r, q_all, probs, actions, term


def test_a_per_action_q_table_is_refused_with_the_gather():
    r, q_all, probs, _, term = _data()
    with pytest.raises(rltscan.DataError, match=r'"q_values" has shape \(2, 6, 3\).*gather'):
        rltscan.retrace(r, q_all, next_target_probs=probs, next_q=q_all, terminated=term,
                        trace="q-lambda")  # fmt: skip


def test_a_per_action_v_pi_is_refused_with_the_expectation():
    r, q_all, probs, actions, term = _data()
    q = q_all.gather(-1, actions[..., None])[..., 0]
    with pytest.raises(rltscan.DataError, match=r'"v_pi" has shape \(2, 6, 3\).*sum\(-1\)'):
        rltscan.retrace(r, q, next_target_probs=probs, next_q=q_all, v_pi=q_all,
                        terminated=term, trace="q-lambda")  # fmt: skip


def test_the_gathered_call_is_the_oracle():
    r, q_all, probs, actions, term = _data()
    q = q_all.gather(-1, actions[..., None])[..., 0]
    ev = (probs * q_all).sum(-1)  # E_π Q(s_t+1, ·): the tables here describe s_t+1
    res = rltscan.retrace(r, q, next_target_probs=probs, next_q=q_all, terminated=term,
                          trace="q-lambda", lam=0.8, gamma=0.9)  # fmt: skip
    ones = [1.0] * T  # Q(λ): c = λ, the ratio 1
    want = [
        oracles.retrace(
            r[b].tolist(), q[b].tolist(), ev[b].tolist(), ones, term[b].tolist(), gamma=0.9, lam=0.8
        )["retrace_targets"]
        for b in range(B)
    ]
    np.testing.assert_allclose(res.retrace_targets, want, rtol=1e-12)


def test_logits_or_log_probabilities_as_next_target_probs_are_refused():
    """A row of logits (or log-probabilities) can sum to 1 by chance, and a sum check
    alone only warns: negative entries are refused, since no expectation is meant."""
    r, q_all, probs, actions, term = _data()
    q = q_all.gather(-1, actions[..., None])[..., 0]
    for bad in (torch.log(probs), torch.tensor([1.5, -0.5, 0.0], dtype=torch.float64)):
        table = bad.expand(B, T, A).clone() if bad.ndim == 1 else bad
        with pytest.raises(rltscan.DataError, match=r'"next_target_probs" has a negative.*softmax'):
            rltscan.retrace(r, q, next_target_probs=table, next_q=q_all, terminated=term,
                            trace="q-lambda")  # fmt: skip
    # rows after a terminal step are never read: what they hold is not checked
    after = probs.clone()
    t = torch.nonzero(term)[0]
    after[t[0], t[1]] = torch.tensor([1.5, -0.5, 0.0], dtype=torch.float64)
    rltscan.retrace(r, q, next_target_probs=after, next_q=q_all, terminated=term,
                    trace="q-lambda")  # fmt: skip
