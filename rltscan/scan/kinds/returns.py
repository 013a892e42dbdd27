"""Discounted returns' prologue in the scan kernel (docs/CONVENTIONS.md §3.3; the torch
coefficients: ``estimators/discounted_returns.py``): c0 = r, c2 = the nv source; output y.

    b_t = r_t + γ nv_t if boot_t else r_t,   a_t = 0 if cut_t else γ
"""

from __future__ import annotations

import triton
import triton.language as tl

from rltscan.scan.kinds._common import STEP_SLOTS, load_next, prepare_next

SLOTS = {"rewards": "c0", "next_values": "c2", "bootstrap_values": "c2", **STEP_SLOTS}
load = load_next
prepare = prepare_next


@triton.jit
def coefficients(st, g, lm, cut, boot, COMPUTE: tl.constexpr):
    r, nv = st
    b = tl.where(boot, r + g * nv, r)
    a = tl.where(cut, 0.0, g).to(COMPUTE)
    return a, b
