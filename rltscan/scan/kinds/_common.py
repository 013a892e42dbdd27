"""What several kinds share: the next-state value nv_t of the bootstrapping kinds
(GAE, TD(λ), returns, V-trace), the TD error's columns (GAE, V-trace), the forward
kinds' episode starts and resets, and the epilogues' stores."""

from __future__ import annotations

import triton
import triton.language as tl

from rltscan.scan._tile import _flag, _ld, _ld_next, _put

# the per-step γ_t, λ_t columns (docs/CONVENTIONS.md §1.7) of the kinds that take them
STEP_SLOTS = {"discount": "disc", "lam_per_step": "lamt"}


@triton.jit
def _dense_next(v_ptr, src_ptr, at, NV_MODE: tl.constexpr, HAS_V: tl.constexpr,
                ROWS: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr,
                COMPUTE: tl.constexpr):  # fmt: skip
    """(V at t where it is read, else zeros; the part of nv_t read at every step, no flag
    needed): the ``next_values`` column, or V at t+1 from V at t (:func:`_ld_next`; a
    cut's slot is read and dropped by :func:`_next_value`)."""
    offs, offs1, mask, at_end, _, _, _, _, _ = at
    v = tl.zeros(offs.shape, COMPUTE)
    dense = v
    if NV_MODE == 0:
        dense = _ld(src_ptr, offs, mask, COMPUTE)
    elif HAS_V:
        v = _ld(v_ptr, offs, mask, COMPUTE)
        dense = _ld_next(v_ptr, v, offs1, mask & ~at_end, ROWS, CHUNK, PER, COMPUTE)
    return v, dense


@triton.jit
def _next_value(dense, src_ptr, row_ptr, offs, mask, rows, rmask, term, boot, last, missing,
                at_end, nxt_ptr, NV_MODE: tl.constexpr, HAS_V: tl.constexpr,
                COMPUTE: tl.constexpr, CONTINUES: tl.constexpr):  # fmt: skip
    """nv_t of docs/CONVENTIONS.md §1.2 as selects over ``dense`` (:func:`_dense_next`);
    the sparse bootstrap slots are loaded only where they are used."""
    if NV_MODE == 0:
        nv = dense
    else:
        inside = dense
        if HAS_V and CONTINUES:  # past the chunk end, V(s_{t+1}) is the next chunk's first value
            nx = tl.load(nxt_ptr + rows, mask=rmask, other=0.0).to(COMPUTE)
            inside = tl.where(at_end, nx[:, None], inside)
        if NV_MODE == 1:
            bootv = _ld(src_ptr, offs, mask & boot, COMPUTE)
        elif NV_MODE == 2:
            lv = tl.load(row_ptr + rows, mask=rmask, other=0.0).to(COMPUTE)
            bootv = tl.where(last, lv[:, None], missing)
        else:
            bootv = tl.zeros(offs.shape, COMPUTE) + missing
        nv = tl.where(boot, bootv, inside)
    return tl.where(term, 0.0, nv)


@triton.jit
def load_next(cols, at, NV_MODE: tl.constexpr, HAS_V: tl.constexpr, TRACE: tl.constexpr,
              ROWS: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr,
              COMPUTE: tl.constexpr):  # fmt: skip
    """The rewards and the dense part of nv_t (TD(λ), returns; GAE and V-trace read more)."""
    r_ptr, v_ptr, nv_ptr, _, _, _ = cols
    offs, _, mask, _, _, _, _, _, _ = at
    r = _ld(r_ptr, offs, mask, COMPUTE)
    _, dense_nv = _dense_next(v_ptr, nv_ptr, at, NV_MODE, HAS_V, ROWS, CHUNK, PER, COMPUTE)
    return r, dense_nv


@triton.jit
def load_delta(cols, at, NV_MODE: tl.constexpr, HAS_V: tl.constexpr, TRACE: tl.constexpr,
               ROWS: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr,
               COMPUTE: tl.constexpr):  # fmt: skip
    """(r, the dense part of nv_t, V): the columns of the TD error r_t + γ nv_t - V_t
    (GAE; V-trace reads its log-ratios beside). V is read once where nv_t is V at t+1."""
    r_ptr, v_ptr, nv_ptr, _, _, _ = cols
    offs, _, mask, _, _, _, _, _, _ = at
    r = _ld(r_ptr, offs, mask, COMPUTE)
    v, dense_nv = _dense_next(v_ptr, nv_ptr, at, NV_MODE, HAS_V, ROWS, CHUNK, PER, COMPUTE)
    if NV_MODE == 0 or not HAS_V:
        v = _ld(v_ptr, offs, mask, COMPUTE)
    return r, dense_nv, v


@triton.jit
def next_value(dense_nv, cols, ptrs, at, term, boot, last, missing, NV_MODE: tl.constexpr,
               HAS_V: tl.constexpr, CONTINUES: tl.constexpr, COMPUTE: tl.constexpr):  # fmt: skip
    """nv_t once the flags are in (:func:`_next_value`)."""
    _, _, nv_ptr, _, _, _ = cols
    _, _, row_ptr, nxt_ptr, _, _ = ptrs
    offs, _, mask, at_end, rows, rmask, _, _, _ = at
    return _next_value(dense_nv, nv_ptr, row_ptr, offs, mask, rows, rmask, term, boot, last,
                       missing, at_end, nxt_ptr, NV_MODE, HAS_V, COMPUTE, CONTINUES)  # fmt: skip


@triton.jit
def prepare_next(st, cols, ptrs, at, term, boot, last, missing, log_rho, log_c,
                 NV_MODE: tl.constexpr, HAS_V: tl.constexpr, HAS_TERM: tl.constexpr,
                 HAS_TRUNC: tl.constexpr, FIRST_GIVEN: tl.constexpr, CONTINUES: tl.constexpr,
                 TRACE: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
                 COMPUTE: tl.constexpr):  # fmt: skip
    """(r, nv, ...) from :func:`load_next`'s (r, dense part) or :func:`load_delta`'s
    (r, dense part, V): nv_t completed, the rest of the state carried as it is."""
    nv = next_value(st[1], cols, ptrs, at, term, boot, last, missing, NV_MODE, HAS_V,
                    CONTINUES, COMPUTE)  # fmt: skip
    # (Triton compiles a tuple's + and slice, not a starred element in a tuple literal)
    return (st[0], nv) + st[2:]  # noqa: RUF005


@triton.jit
def load_x(cols, at, NV_MODE: tl.constexpr, HAS_V: tl.constexpr, TRACE: tl.constexpr,
           ROWS: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr,
           COMPUTE: tl.constexpr):  # fmt: skip
    """The forward kinds' one column, x (b_t)."""
    x_ptr, _, _, _, _, _ = cols
    offs, _, mask, _, _, _, _, _, _ = at
    return _ld(x_ptr, offs, mask, COMPUTE)


@triton.jit
def prepare_first(st, cols, ptrs, at, term, boot, last, missing, log_rho, log_c,
                  NV_MODE: tl.constexpr, HAS_V: tl.constexpr, HAS_TERM: tl.constexpr,
                  HAS_TRUNC: tl.constexpr, FIRST_GIVEN: tl.constexpr, CONTINUES: tl.constexpr,
                  TRACE: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
                  COMPUTE: tl.constexpr):  # fmt: skip
    """(x, first): forward, reset at episode starts, ``first_t = done_{t-1}`` (or the
    ``is_first`` markers in the terminated slot, FIRST_GIVEN)."""
    term_ptr, trunc_ptr, _, _, _, pdone_ptr = ptrs
    offs, _, mask, _, rows, rmask, offs_c, t0, stride_t = at
    if FIRST_GIVEN:
        first = term
    else:
        prev = mask & (t0 + offs_c >= 1)[None, :]
        first = tl.zeros([ROWS, CHUNK], tl.int1)
        if HAS_TERM:
            first = _flag(term_ptr, offs - stride_t, prev)
        if HAS_TRUNC:
            first = first | _flag(trunc_ptr, offs - stride_t, prev)
        if CONTINUES:  # step 0 starts an episode if the previous chunk's last ended one
            pd = tl.load(pdone_ptr + rows, mask=rmask, other=0) != 0
            first = first | ((t0 + offs_c == 0)[None, :] & pd[:, None])
    return st, first


@triton.jit
def reset_at_first(st, decay, COMPUTE: tl.constexpr):
    """``(a, b)`` of the forward kinds from :func:`prepare_first`'s ``(x, first)``:
    ``a_t = 0`` where an episode starts, else ``decay``; ``b_t = x_t`` (the kernel's
    ``estimators._problem.reset_at_first``)."""
    x, first = st
    a = tl.where(first, 0.0, decay).to(COMPUTE)
    return a, x


@triton.jit
def put_out(SLOT: tl.constexpr, x, outs, at, ROWS: tl.constexpr, CHUNK: tl.constexpr,
            PER: tl.constexpr):  # fmt: skip
    """Store the tile ``x`` to output ``SLOT`` (0: out0, 1: out1) in the outputs' dtype
    (out0's: the shell allocates every output alike), every epilogue's store."""
    out0_ptr, out1_ptr, oofs, oo3, m3a, m3b = outs
    _, _, mask, _, _, _, _, _, _ = at
    out_ptr = out0_ptr
    if SLOT == 1:
        out_ptr = out1_ptr
    _put(out_ptr, x.to(out0_ptr.dtype.element_ty), oofs, mask, oo3, m3a, m3b, ROWS, CHUNK, PER)


@triton.jit
def store_y(st, y, carry, g, cut, cols, ptrs, at, outs, log_pg, HAS_OUT1: tl.constexpr,
            CONTINUES: tl.constexpr, ROWS: tl.constexpr, CHUNK: tl.constexpr,
            PER: tl.constexpr, COMPUTE: tl.constexpr):  # fmt: skip
    """The epilogue of the kinds whose one output is the scan's ``y``."""
    put_out(0, y, outs, at, ROWS, CHUNK, PER)
