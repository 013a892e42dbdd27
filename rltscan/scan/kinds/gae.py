"""GAE's prologue and epilogue in the scan kernel (docs/CONVENTIONS.md §3.1; the torch
coefficients: ``estimators/gae.py``): c0 = r, c1 = V, c2 = the nv source.

    b_t = r_t + γ nv_t - V_t,   a_t = 0 if cut_t else γλ;   outputs y, y + V
"""

from __future__ import annotations

import triton
import triton.language as tl

from rltscan.scan.kinds._common import STEP_SLOTS, load_delta, prepare_next, put_out

SLOTS = {
    "rewards": "c0", "values": "c1", "next_values": "c2", "bootstrap_values": "c2", **STEP_SLOTS,
}  # fmt: skip
load = load_delta
prepare = prepare_next  # (r, nv, V)


@triton.jit
def coefficients(st, g, lm, cut, boot, COMPUTE: tl.constexpr):
    r, nv, v = st
    b = r + g * nv - v
    a = tl.where(cut, 0.0, g * lm).to(COMPUTE)
    return a, b


@triton.jit
def epilogue(st, y, carry, g, cut, cols, ptrs, at, outs, log_pg, HAS_OUT1: tl.constexpr,
             CONTINUES: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
             PER: tl.constexpr, COMPUTE: tl.constexpr):  # fmt: skip
    """advantages, value_targets."""
    _, _, v = st
    put_out(0, y, outs, at, ROWS, CHUNK, PER)
    put_out(1, y + v, outs, at, ROWS, CHUNK, PER)
