"""TD(λ)'s prologue in the scan kernel (docs/CONVENTIONS.md §3.2; the torch coefficients:
``estimators/td_lambda.py``): c0 = r, c1 = V, c2 = the nv source; output y.

    b_t = r_t + (γ if boot_t else γ(1 - λ)) nv_t,   a_t = 0 if cut_t else γλ
"""

from __future__ import annotations

import triton
import triton.language as tl

from rltscan.scan.kinds._common import STEP_SLOTS, load_next, prepare_next

SLOTS = {
    "rewards": "c0", "values": "c1", "next_values": "c2", "bootstrap_values": "c2", **STEP_SLOTS,
}  # fmt: skip
load = load_next
prepare = prepare_next


@triton.jit
def coefficients(st, g, lm, cut, boot, COMPUTE: tl.constexpr):
    r, nv = st
    b = r + tl.where(boot, g, g * (1.0 - lm)) * nv
    a = tl.where(cut, 0.0, g * lm).to(COMPUTE)
    return a, b
