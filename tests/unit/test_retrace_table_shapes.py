"""Retrace's per-action tables beside TorchRL-shaped rewards: ``next_target_probs`` and
``next_q`` of ``[B, T, A]`` beside rewards ``[B, T, 1]`` were refused naming
``"next_expected_q"``, an argument the caller never passed. The refusal names the
tables and the shape they need (``[B, T, 1, A]``), which gives rlax's expectation."""

from __future__ import annotations

import pytest
import torch

import rltscan
from rltscan import DataError

B, T, A = 2, 5, 3


def _batch():
    g = torch.Generator().manual_seed(0)
    r, q = (torch.randn(B, T, 1, generator=g, dtype=torch.float64) for _ in range(2))
    nq = torch.randn(B, T, A, generator=g, dtype=torch.float64)
    pi = torch.softmax(torch.randn(B, T, A, generator=g, dtype=torch.float64), -1)
    return r, q, nq, pi, torch.zeros(B, T, 1, dtype=torch.bool)


def test_tables_without_the_feature_axis_are_refused_by_their_own_names():
    r, q, nq, pi, term = _batch()
    with pytest.raises(DataError, match=r'"next_target_probs" and "next_q".*\[2, 5, 1, A\]'):
        rltscan.retrace(r, q, next_target_probs=pi, next_q=nq, terminated=term,
                        trace="q-lambda", time_dim=-2)  # fmt: skip


def test_the_named_shape_is_the_expectation():
    r, q, nq, pi, term = _batch()
    ev = (pi * nq).sum(-1, keepdim=True)
    want = rltscan.retrace(r, q, next_expected_q=ev, terminated=term, trace="q-lambda",
                           time_dim=-2).retrace_targets  # fmt: skip
    tables = {"next_target_probs": pi.unsqueeze(-2), "next_q": nq.unsqueeze(-2)}
    got = rltscan.retrace(r, q, **tables, terminated=term, trace="q-lambda", time_dim=-2)
    got = got.retrace_targets
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_the_unsqueeze_hint_only_where_it_fits():
    """Tables of one step too many need no unsqueeze: the hint names it only beside
    TorchRL's [*B, T, 1] rewards (one axis short)."""
    r, q, nq, pi, term = _batch()
    with pytest.raises(DataError, match="unsqueeze"):
        rltscan.retrace(r, q, next_target_probs=pi, next_q=nq, terminated=term,
                        trace="q-lambda", time_dim=-2)  # fmt: skip
    r2, q2, t2 = r[..., 0], q[..., 0], term[..., 0]
    longer = {"next_target_probs": pi[:, :4], "next_q": nq[:, :4]}
    with pytest.raises(DataError) as err:
        rltscan.retrace(r2, q2, **longer, terminated=t2, trace="q-lambda")
    assert "unsqueeze" not in str(err.value)
