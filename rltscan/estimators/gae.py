"""Generalized advantage estimation (GAE), docs/CONVENTIONS.md §3.1.

    delta_t = r_t - V_t                     if terminated_t
            = r_t + γ nv_t - V_t            otherwise          (nv: §1.3, a select)
    A_t     = delta_t + a_t A_{t+1},   a_t = 0 if cut_t else γλ      backward, A_T = 0
    value_targets_t = A_t + V_t

Schulman et al., "High-Dimensional Continuous Control Using Generalized
Advantage Estimation", ICLR 2016, arXiv:1506.02438, eq. 16.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltscan.estimators.declaration import (
    CRITIC_INPUTS,
    Declaration,
    gamma_param,
    lam_param,
)

if TYPE_CHECKING:  # torch loads with the first call, not with the declaration
    from torch import Tensor

    from rltscan.estimators._problem import Problem

DECLARATION = Declaration(
    name="gae",
    command="gae",
    function_name="gae",
    direction="backward",
    inputs=CRITIC_INPUTS,
    required=("rewards", "values", "terminated"),
    outputs=("advantages", "value_targets"),
    parameters=(gamma_param(), lam_param(0.95)),
    missing_bootstrap="error",
    help="Generalized advantage estimation: writes advantages and value_targets.",
    positional=2,
    result="GAEResult",
    normalizable=("advantages",),
)
REVERSE = DECLARATION.reverse
OUTPUTS = DECLARATION.outputs


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    import torch

    from rltscan.estimators._problem import decay_to_cut, discount, live_next_values, trace_decay

    gamma = discount(p)
    r, v = p.col("rewards"), p.col("values")
    nv = live_next_values(p)
    if isinstance(gamma, float):
        delta = torch.add(r, nv, alpha=gamma).sub_(v)
    else:
        delta = (r + gamma * nv).sub_(v)
    return decay_to_cut(p, gamma * trace_decay(p)), delta


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    return {"advantages": y, "value_targets": y + p.col("values")}
