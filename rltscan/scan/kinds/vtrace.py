"""V-trace's prologue and epilogue in the scan kernel (docs/CONVENTIONS.md §3.4; the
torch coefficients: ``estimators/vtrace.py``): c0 = r, c1 = V, c2 = the nv source,
c3 = log π, c4 = log μ.

    b_t = ρ_t (r_t + γ nv_t - V_t),   a_t = 0 if cut_t else γλ c_t;
    outputs vs = V + y, pg_advantages = ρ̄pg_t (r_t + γ vs_{t+1} - V_t)
"""

from __future__ import annotations

import triton
import triton.language as tl

from rltscan.scan._tile import _ld, _ld_next, _nonfinite
from rltscan.scan.kinds._common import STEP_SLOTS, load_delta, next_value, put_out

SLOTS = {
    "rewards": "c0", "values": "c1", "next_values": "c2", "bootstrap_values": "c2",
    "logp_target": "c3", "logp_behavior": "c4", **STEP_SLOTS,
}  # fmt: skip


@triton.jit
def load(cols, at, NV_MODE: tl.constexpr, HAS_V: tl.constexpr, TRACE: tl.constexpr,
         ROWS: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr,
         COMPUTE: tl.constexpr):  # fmt: skip
    r, dense_nv, v = load_delta(cols, at, NV_MODE, HAS_V, TRACE, ROWS, CHUNK, PER, COMPUTE)
    _, _, _, lt_ptr, lb_ptr, _ = cols
    offs, _, mask, _, _, _, _, _, _ = at
    lt = _ld(lt_ptr, offs, mask, COMPUTE)
    lb = _ld(lb_ptr, offs, mask, COMPUTE)
    return r, dense_nv, v, lt, lb


@triton.jit
def prepare(st, cols, ptrs, at, term, boot, last, missing, log_rho, log_c,
            NV_MODE: tl.constexpr, HAS_V: tl.constexpr, HAS_TERM: tl.constexpr,
            HAS_TRUNC: tl.constexpr, FIRST_GIVEN: tl.constexpr, CONTINUES: tl.constexpr,
            TRACE: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
            COMPUTE: tl.constexpr):  # fmt: skip
    r, dense_nv, v, lt, lb = st
    nv = next_value(dense_nv, cols, ptrs, at, term, boot, last, missing, NV_MODE, HAS_V,
                    CONTINUES, COMPUTE)  # fmt: skip
    lr = lt - lb
    rho = tl.exp(tl.minimum(lr, log_rho))
    ratio = tl.exp(tl.minimum(lr, log_c))
    return r, nv, v, lt, lb, lr, rho, ratio


@triton.jit
def coefficients(st, g, lm, cut, boot, COMPUTE: tl.constexpr):
    r, nv, v, _, _, _, rho, ratio = st
    b = rho * (r + g * nv - v)
    a = tl.where(cut, 0.0, g * lm * ratio)
    return a, b


@triton.jit
def screen(st, bad, cut, cols, at, HAS_OUT1: tl.constexpr, COMPUTE: tl.constexpr):
    """The log-ratios are clipped, so they reach b finite: screened here."""
    _, _, _, lt, lb, _, _, _ = st
    return bad | (lt != lt) | (lt == float("inf")) | _nonfinite(lb)


@triton.jit
def epilogue(st, y, carry, g, cut, cols, ptrs, at, outs, log_pg, HAS_OUT1: tl.constexpr,
             CONTINUES: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
             PER: tl.constexpr, COMPUTE: tl.constexpr):  # fmt: skip
    """vs, pg_advantages."""
    r, nv, v, _, _, lr, _, _ = st
    _, v_ptr, _, _, _, _ = cols
    _, _, _, nxt_ptr, _, _ = ptrs
    _, offs1, mask, at_end, rows, rmask, offs_c, _, stride_t = at
    out0_ptr, _, oofs, _, _, _ = outs
    vs = v + y
    put_out(0, vs, outs, at, ROWS, CHUNK, PER)
    # vs_{t+1} as stored (in the outputs' dtype): a thread's own steps moved along its
    # registers, the step after its last re-read once the neighbour thread has written it
    # (_ld_next). Re-reading every step (8 misaligned loads a thread) was the form before;
    # a register shift through tl.gather measured slower on the H200 (64% of copy
    # bandwidth against 73% at 65536x1024, bench/results/kernel-probe-h200-2026-12-03-b).
    tl.debug_barrier()
    tile_end = (offs_c == CHUNK - 1)[None, :]
    inside = mask & ~cut
    vedge = tile_end
    if CONTINUES:  # past the chunk end: vs = the next chunk's first V + the carry y
        vedge = tile_end | at_end
    stored = vs.to(out0_ptr.dtype.element_ty).to(COMPUTE)
    vs_next = _ld_next(out0_ptr, stored, oofs + stride_t, inside & ~vedge, ROWS, CHUNK, PER,
                       COMPUTE)  # fmt: skip
    v_next = _ld(v_ptr, offs1, inside & tile_end & ~at_end, COMPUTE)
    if CONTINUES:
        nx = tl.load(nxt_ptr + rows, mask=rmask, other=0.0).to(COMPUTE)
        v_next = tl.where(at_end, nx[:, None], v_next)
    vs_next = tl.where(vedge, v_next + carry[:, None], vs_next)
    target = tl.where(cut, nv, vs_next)
    rhopg = tl.exp(tl.minimum(lr, log_pg))
    pg = rhopg * (r + g * target - v)
    put_out(1, pg, outs, at, ROWS, CHUNK, PER)
