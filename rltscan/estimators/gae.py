"""Generalized advantage estimation (GAE), docs/CONVENTIONS.md §3.1.

    delta_t = r_t - V_t                     if terminated_t
            = r_t + γ nv_t - V_t            otherwise          (nv: §1.3, a select)
    A_t     = delta_t + a_t A_{t+1},   a_t = 0 if cut_t else γλ      backward, A_T = 0
    value_targets_t = A_t + V_t

Schulman et al., "High-Dimensional Continuous Control Using Generalized
Advantage Estimation", ICLR 2016, arXiv:1506.02438, eq. 16.
"""

from __future__ import annotations

import torch
from torch import Tensor

from rltscan.estimators._common import Problem, cut_mask, next_state_values, select

REVERSE = True
OUTPUTS = ("advantages", "value_targets")


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    gamma, lam = p.params["gamma"], p.params["lam"]
    r, v = p.col("rewards"), p.col("values")
    nv = torch.where(p.flag("terminated"), 0.0, next_state_values(p))  # select: NaN-safe
    delta = torch.add(r, nv, alpha=gamma).sub_(v)
    a = select(cut_mask(p), 0.0, gamma * lam, p)
    return a, delta


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    return {"advantages": y, "value_targets": y + p.col("values")}
