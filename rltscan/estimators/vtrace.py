"""V-trace (IMPALA), docs/CONVENTIONS.md §3.4.

    ratio_t = exp(min(log π_t - log μ_t, log clip))      (clipped in log space, §2.6)
    ρ_t = min(ρ̄, ratio_t),  c_t = λ min(c̄, ratio_t),  ρpg_t = min(ρ̄_pg, ratio_t)
    delta_t = ρ_t (r_t - V_t)              if terminated_t
            = ρ_t (r_t + γ nv_t - V_t)     otherwise
    D_t = delta_t + a_t D_{t+1},   a_t = 0 if cut_t else γ c_t        backward, D_T = 0
    vs_t = V_t + D_t
    pg_t = ρpg_t (r_t - V_t)                if terminated_t
         = ρpg_t (r_t + γ nv_t - V_t)       if boot_t        (raw bootstrap at a cut, D7)
         = ρpg_t (r_t + γ vs_{t+1} - V_t)   otherwise

Espeholt et al., "IMPALA", ICML 2018, arXiv:1802.01561, eq. 1 and Remark 1
(the recursive form); λ as in their §4.2 ("c_t = λ min(c̄, ratio)").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltscan.estimators.declaration import (
    BOOTSTRAP_INPUTS,
    PER_STEP_PARAMETERS,
    Declaration,
    Param,
    c_clip_param,
    gamma_param,
    lam_param,
)

if TYPE_CHECKING:  # torch loads with the first call, not with the declaration
    from torch import Tensor

    from rltscan.estimators._problem import Problem

DECLARATION = Declaration(
    name="vtrace",
    command="vtrace",
    function_name="vtrace",
    direction="backward",
    inputs=(
        "rewards",
        "values",
        "logp_target",
        "logp_behavior",
        "terminated",
        "truncated",
        *BOOTSTRAP_INPUTS,
        *PER_STEP_PARAMETERS,
    ),
    required=("rewards", "values", "logp_target", "logp_behavior", "terminated"),
    outputs=("vs", "pg_advantages"),
    normalizable=("pg_advantages",),
    parameters=(
        gamma_param(),
        lam_param(1.0),
        Param.clip("rho_clip", 1.0, "ρ̄, clip of the importance ratio (> 0)."),
        c_clip_param(),
        Param.clip(
            "pg_rho_clip",
            None,
            "ρ̄ of the policy-gradient advantage (> 0).",
            fallback="rho_clip",
        ),
    ),
    missing_bootstrap="error",
    help="V-trace (IMPALA): writes vs and pg_advantages.",
    positional=2,
    contraction_warning=True,
    carry_base="values",
    result="VTraceResult",
)
REVERSE = DECLARATION.reverse
OUTPUTS = DECLARATION.outputs


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    from rltscan.estimators._problem import (
        clipped_ratio,
        decay_to_cut,
        discount,
        live_next_values,
        trace_decay,
    )

    gamma, lam = discount(p), trace_decay(p)
    r, v = p.col("rewards"), p.col("values")
    nv = live_next_values(p)
    rho = clipped_ratio(p, p.params["rho_clip"])
    c = lam * clipped_ratio(p, p.params["c_clip"])
    return decay_to_cut(p, gamma * c), rho * (r + gamma * nv - v)


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    import torch

    from rltscan.estimators._problem import (
        boot_mask,
        clipped_ratio,
        discount,
        live_next_values,
        next_of,
        shift_next,
    )

    gamma = discount(p)
    r, v = p.col("rewards"), p.col("values")
    vs = v + y
    term = p.flag("terminated")
    nv = live_next_values(p)
    # vs_{t+1}: only read where t is not a cut, so the next row is the same episode
    # vs at the first step of the next chunk = V + y there (both from the carry)
    vs_last = next_of(p, "next_value") + p.carry.y.to(p.dtype) if p.continues else 0.0
    target = torch.where(boot_mask(p) | term, nv, shift_next(vs, vs_last))
    rhopg = clipped_ratio(p, p.params["pg_rho_clip"])
    return {"vs": vs, "pg_advantages": rhopg * (r + gamma * target - v)}
