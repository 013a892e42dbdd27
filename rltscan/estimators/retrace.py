"""Retrace(λ), docs/CONVENTIONS.md §3.5.

    c_t     = λ min(c̄, π(a_t|s_t) / μ(a_t|s_t))               (log space, §2.6)
    delta_t = r_t - Q_t                        if terminated_t
            = r_t + γ E_π Q(s_{t+1}, ·) - Q_t  otherwise
    D_t = delta_t + a_t D_{t+1},   a_t = 0 if cut_t else γ c_{t+1}   backward, D_T = 0
    retrace_targets_t = Q_t + D_t;     advantages_t = retrace_targets_t - V^π_t (if given)

The trace uses the NEXT row's ratio and is never read at a cut, so c_0 and the
ratio past a cut are ignored. Munos et al., "Safe and Efficient Off-Policy
Reinforcement Learning", NeurIPS 2016, arXiv:1606.02647, eq. 3 (written as a
sum of TD errors with E_π Q of the successor state).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from rltscan.estimators._common import Problem, clipped_ratio, cut_mask, next_of, shift_next

REVERSE = True
OUTPUTS = ("retrace_targets", "advantages")


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    gamma, lam = p.params["gamma"], p.params["lam"]
    r, q = p.col("rewards"), p.col("q_values")
    ev = torch.where(p.flag("terminated"), 0.0, p.col("next_expected_q"))
    delta = r + gamma * ev - q
    c = lam * clipped_ratio(p, p.params["c_clip"])
    if p.continues:  # c_{t+1} at the chunk end comes from the next chunk's first ratio
        nlr = next_of(p, "next_log_ratio")
        c_last = lam * torch.exp(torch.clamp(nlr, max=math.log(p.params["c_clip"])))
        c_next = shift_next(c, c_last)
    else:
        c_next = shift_next(c)
    a = torch.where(cut_mask(p), 0.0, gamma * c_next)  # select: garbage ratio at a cut stays out
    return a, delta


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    targets = p.col("q_values") + y
    out = {"retrace_targets": targets}
    if p.has("v_pi"):
        out["advantages"] = targets - p.col("v_pi")
    return out
