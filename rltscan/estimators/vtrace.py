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

import torch
from torch import Tensor

from rltscan.estimators._common import (
    Problem,
    boot_mask,
    clipped_ratio,
    cut_mask,
    next_of,
    next_state_values,
    shift_next,
)

REVERSE = True
OUTPUTS = ("vs", "pg_advantages")


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    gamma, lam = p.params["gamma"], p.params["lam"]
    r, v = p.col("rewards"), p.col("values")
    nv = torch.where(p.flag("terminated"), 0.0, next_state_values(p))
    rho = clipped_ratio(p, p.params["rho_clip"])
    c = lam * clipped_ratio(p, p.params["c_clip"])
    delta = rho * (r + gamma * nv - v)
    a = torch.where(cut_mask(p), 0.0, gamma * c)
    return a, delta


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    gamma = p.params["gamma"]
    r, v = p.col("rewards"), p.col("values")
    vs = v + y
    term = p.flag("terminated")
    nv = torch.where(term, 0.0, next_state_values(p))
    # vs_{t+1}: only read where t is not a cut, so the next row is the same episode
    # vs at the first step of the next chunk = V + y there (both from the carry)
    vs_last = next_of(p, "next_value") + p.carry.y.to(p.dtype) if p.continues else 0.0
    target = torch.where(boot_mask(p) | term, nv, shift_next(vs, vs_last))
    rhopg = clipped_ratio(p, p.params["pg_rho_clip"])
    return {"vs": vs, "pg_advantages": rhopg * (r + gamma * target - v)}
