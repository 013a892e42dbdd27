"""Episodic prefix sums' prologue in the scan kernel (docs/CONVENTIONS.md §3.7; the torch
coefficients: ``estimators/prefix_sum.py``): c0 = x (with FIRST_GIVEN the terminated
slot holds ``is_first``); forward, output y.

    b_t = x_t,   a_t = 0 if first_t else 1
"""

from __future__ import annotations

import triton
import triton.language as tl

from rltscan.scan.kinds._common import load_x, prepare_first, reset_at_first

SLOTS = {"x": "c0"}
load = load_x
prepare = prepare_first


@triton.jit
def coefficients(st, g, lm, cut, boot, COMPUTE: tl.constexpr):
    return reset_at_first(st, 1.0, COMPUTE)
