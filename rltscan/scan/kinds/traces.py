"""Eligibility traces' prologue in the scan kernel (docs/CONVENTIONS.md §3.6; the torch
coefficients: ``estimators/eligibility_traces.py``): c0 = x; forward, output y.

    b_t = x_t,   a_t = 0 if first_t else γλ
"""

from __future__ import annotations

import triton
import triton.language as tl

from rltscan.scan.kinds._common import load_x, prepare_first

SLOTS = {"x": "c0"}
load = load_x
prepare = prepare_first


@triton.jit
def coefficients(st, g, lm, cut, boot, COMPUTE: tl.constexpr):
    x, first = st
    decay = g * lm
    a = tl.where(first, 0.0, decay).to(COMPUTE)
    return a, x
