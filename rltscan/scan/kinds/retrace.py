"""Retrace's prologue and epilogue in the scan kernel (docs/CONVENTIONS.md §3.5; the
torch coefficients: ``estimators/retrace.py``): c0 = r, c1 = Q, c2 = E_π Q(s_{t+1}),
c3 = log π, c4 = log μ, c5 = V^π.

    b_t = r_t + γ E_π Q_{t+1} - Q_t,   a_t = 0 if cut_t else γλ c_{t+1}/λ;
    outputs Q + y (and, with V^π, Q + y - V^π)
"""

from __future__ import annotations

import triton
import triton.language as tl

from rltscan.scan._tile import _ld, _nonfinite
from rltscan.scan.kinds._common import STEP_SLOTS, put_out

SLOTS = {
    "rewards": "c0", "q_values": "c1", "next_expected_q": "c2",
    "logp_target": "c3", "logp_behavior": "c4", "v_pi": "c5", **STEP_SLOTS,
}  # fmt: skip
# The trace c_{t+1} / λ (constexpr TRACE)
TRACES = {"retrace": 0, "tree-backup": 1, "q-lambda": 2, "is": 3}


@triton.jit
def load(cols, at, NV_MODE: tl.constexpr, HAS_V: tl.constexpr, TRACE: tl.constexpr,
         ROWS: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr,
         COMPUTE: tl.constexpr):  # fmt: skip
    r_ptr, q_ptr, ev_ptr, lt_ptr, lb_ptr, _ = cols
    offs, offs1, mask, at_end, _, _, _, _, _ = at
    r = _ld(r_ptr, offs, mask, COMPUTE)
    q = _ld(q_ptr, offs, mask, COMPUTE)
    ev = _ld(ev_ptr, offs, mask, COMPUTE)  # (dropped at terminal steps below)
    # the trace c_{t+1} / λ by TRACE (0 Retrace, 1 tree-backup, 2 Q(λ), 3 IS), all
    # through one log-ratio at t+1: log π − log μ (Retrace, IS), log π
    # (tree-backup), 0 (Q(λ)); read at every step but the window's last, and
    # dropped at a cut (a = 0 there)
    nxt_mask = mask & ~at_end
    if TRACE == 2:
        lt = tl.zeros([ROWS, CHUNK], COMPUTE)
        lb = tl.zeros([ROWS, CHUNK], COMPUTE)
    else:
        lt = _ld(lt_ptr, offs1, nxt_mask, COMPUTE)
        if TRACE == 1:
            lb = tl.zeros([ROWS, CHUNK], COMPUTE)
        else:
            lb = _ld(lb_ptr, offs1, nxt_mask, COMPUTE)
    return r, q, ev, lt, lb


@triton.jit
def prepare(st, cols, ptrs, at, term, boot, last, missing, log_rho, log_c,
            NV_MODE: tl.constexpr, HAS_V: tl.constexpr, HAS_TERM: tl.constexpr,
            HAS_TRUNC: tl.constexpr, FIRST_GIVEN: tl.constexpr, CONTINUES: tl.constexpr,
            TRACE: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
            COMPUTE: tl.constexpr):  # fmt: skip
    r, q, ev, lt, lb = st
    _, _, _, _, nlr_ptr, _ = ptrs
    _, _, _, at_end, rows, rmask, _, _, _ = at
    ev = tl.where(term, 0.0, ev)
    lr1 = lt - lb
    if CONTINUES and TRACE != 2:
        nlr = tl.load(nlr_ptr + rows, mask=rmask, other=0.0).to(COMPUTE)
        lr1 = tl.where(at_end, nlr[:, None], lr1)
    if TRACE == 0:  # Retrace clips at c̄; tree-backup and IS do not; Q(λ): c = λ
        ratio1 = tl.exp(tl.minimum(lr1, log_c))
    elif TRACE == 2:
        ratio1 = tl.full([ROWS, CHUNK], 1.0, COMPUTE)
    else:
        ratio1 = tl.exp(lr1)
    return r, q, ev, lt, lb, ratio1


@triton.jit
def coefficients(st, g, lm, cut, boot, COMPUTE: tl.constexpr):
    r, q, ev, _, _, ratio1 = st
    b = r + g * ev - q
    a = tl.where(cut, 0.0, g * lm * ratio1)
    return a, b


@triton.jit
def screen(st, bad, cut, cols, at, HAS_OUT1: tl.constexpr, COMPUTE: tl.constexpr):
    """The log-ratio at t+1 is used, and screened, only past no cut; V^π does not reach b."""
    _, _, _, lt, lb, _ = st
    _, _, _, _, _, vpi_ptr = cols
    offs, _, mask, _, _, _, _, _, _ = at
    bad = bad | (((lt != lt) | (lt == float("inf")) | _nonfinite(lb)) & ~cut)
    if HAS_OUT1:
        bad = bad | _nonfinite(_ld(vpi_ptr, offs, mask, COMPUTE))
    return bad


@triton.jit
def epilogue(st, y, carry, g, cut, cols, ptrs, at, outs, log_pg, HAS_OUT1: tl.constexpr,
             CONTINUES: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
             PER: tl.constexpr, COMPUTE: tl.constexpr):  # fmt: skip
    """targets (+ advantages against V^π)."""
    _, q, _, _, _, _ = st
    _, _, _, _, _, vpi_ptr = cols
    offs, _, mask, _, _, _, _, _, _ = at
    tgt = q + y
    put_out(0, tgt, outs, at, ROWS, CHUNK, PER)
    if HAS_OUT1:
        vpi = _ld(vpi_ptr, offs, mask, COMPUTE)
        put_out(1, tgt - vpi, outs, at, ROWS, CHUNK, PER)
