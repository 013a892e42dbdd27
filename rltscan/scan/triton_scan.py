"""THE Triton kernel: one single-pass linear-recurrence scan for every estimator.

    backward:  y_t = a_t * y_{t+1} + b_t        forward:  y_t = a_t * y_{t-1} + b_t

One kernel, ``_scan_kernel``. The first seven estimators are each a constexpr ``KIND``
that selects a small prologue (load its raw columns, build ``a_t``/``b_t`` on-chip)
and epilogue (``value_targets = A + V``, V-trace's ``pg_advantages``, ...), each kind's
in its own module, ``kinds/<name>.py``; the kernel here is the shell around them
(tiles, flags, settings, the scan, the look-back, the stores), and Triton inlines them
into it: the same sm_90a code as when they were branches of its body
(bench/results/kernel-kinds-sass-sm90-2026-12-05). For them no ``a``, ``b`` or
``delta`` tensor ever reaches device memory; flags are read as stored (1 byte). A
per-step discount γ_t or λ_t (docs/CONVENTIONS.md §1.7) is two more columns read at
step t in place of the scalars (constexpr ``HAS_DISC``, ``HAS_LAMT``:
without them the scalar kernel is compiled as before). Any other estimator
(:func:`fused` is False) runs the ``LINEAR`` kind: its module builds ``(a, b)`` with
torch and :func:`linear_scan` solves it (``estimators._solve.solve``), so a new
estimator module runs here unchanged. This module knows estimators only by kind name;
it imports none of them.

Work decomposition: the ``[R, T]`` problem (any strides: batch-major, time-major
or one flat sequence) is cut into tiles of ``ROWS × CHUNK``. A program scans its
tile with ``tl.associative_scan`` (the affine-map composition below) and, when
the time axis spans several tiles, joins them in the same pass with decoupled
look-back (Merrill & Garland, "Single-pass Parallel Prefix Scan with Decoupled
Look-back", NVIDIA 2016): a tile publishes its aggregate ``(A, B)`` (its inclusive
value at once when it holds an episode end, ``A == 0``, or starts its row), looks
back over earlier tiles (in scan order) until it meets an inclusive value, applies the
aggregates between forward from there (so the carry's bits do not depend on which
tiles finished first), then publishes its own inclusive value. Tiles are numbered so that scan-order
predecessors have lower program ids, so they were scheduled first and the
spin-wait always makes progress (under the interpreter too, which runs programs in
order). Several settings (γ, λ) (``NSET``) are a loop inside the program over the
columns it read once: a scan, a look-back and the stores per setting. K = 3 at 2^26
flat steps (kernel time, 4 steps a thread): GAE 1108 µs against 1397 for three
launches, V-trace 1466 against 2187; floors (inputs once, K outputs) 537 and 664 µs,
so 2.1× and 2.2×: the scans, not the reads, bound it. The kernel before ran settings as
virtual rows (each re-read its row's inputs from L1; a K of 3 padded to 4): 2113 µs.

Memory traffic per step is what the README's memory floor counts: each input read once,
each output written once (V-trace re-reads one step a thread of its own ``vs`` from
L1/L2 to form ``vs_{t+1}``; V at t+1 is V at t moved along a thread's registers,
``_tile._ld_next``). The look-back's words are 16 bytes per tile row and setting (32 in
float64), never zeroed between launches: each carries the epoch of its launch.

Measured on the H200 at 2^26 flat steps, episode ends every ~1000, full-call µs
(bench/results/kernel-probe-h200-2026-12-04, -b; the copy floor is 284.5 µs for GAE,
158 returns, 221 TD(λ), 411 V-trace and Retrace), before the in-tile changes at the end
of this text (timed below, on an H100):

=================  =====  =======  ======  =======  =======
kernel             GAE    returns  TD(λ)   V-trace  Retrace
=================  =====  =======  ======  =======  =======
tagged words       415.5  273.7    366.0   686.8    515.2
flag + release     466.9  309.7    412.4   917.1    551.8
reduce-then-scan   677.1  492.5    (two launches, 4 steps a thread: 478 and 349 in one)
=================  =====  =======  ======  =======  =======

"tagged words" is this look-back; "flag + release" the one it replaced, same tiles
(1024 steps, 4 warps): a flag word per tile raised with a release after a block barrier,
polled with atomics, the data read in a second round trip, and the aggregate summed
over the tile (two reductions, with barriers) where this one takes it from the thread
that holds it.
Reduce-then-scan (a first launch publishes every aggregate, so the scan never waits)
reads the inputs twice: slower everywhere.
The look-back still costs: the same steps as rows of one tile (no look-back) run GAE
at 83% of the floor, Retrace at 101% (4 steps a thread). What remains is the wait for
a predecessor's aggregate, which a program spends holding its loads' registers; a
persistent program that loads its next tile while it waits is the way past it.

The in-tile work, read from the sm_90 SASS of the 2^26-flat launches (Triton 3.6,
1024-step tiles of 4 warps, 8 steps a thread; bench/results/kernel-sass-sm90-2026-12-05):
Triton's ``associative_scan(reverse=True)`` reverses the whole tile across lanes before
and after the scan, five butterfly shuffles a register (160 a thread, against 12 for the
scan itself), even along an axis held inside one thread; and it stores 8 steps a thread
by first moving the tile through shared memory into 4 steps a thread (two barriers an
output). :func:`_tile_scan` scans each thread's steps in its registers (reversed there,
which costs no shuffle) and only the threads' aggregates across lanes; :func:`_put`
stores two 16-byte halves a thread. GAE went from 648 instructions a thread (172
shuffles, 5 barriers) to 472 (30, 2), returns from 520 to 376, V-trace from 968 to 744.
ptxas also issued the flag loads first and the dense columns only once the flags had
arrived (their values gate the sparse bootstrap reads): a barrier after the dense loads
now keeps them first, at the price of registers (GAE 40 before, 48 without the barrier,
61 with it; 12, 10 and 8 programs an SM). Register caps (``maxnreg``) that would win the
occupancy back spill for V-trace at any cap up to 64 and for GAE, Retrace with
validation at 48.

Timed on an H100 (bench/results/kernel-probe-h100-2026-12-05, the H200 was not lent),
kernel µs at 2^26 flat, before -> after these in-tile changes (% of the copy floor):
GAE 492.9 -> 513.3 (81.7 -> 78.4%), returns 307.4 -> 308.7 (72.8 -> 72.4%), TD(λ)
409.3 -> 388.6 (76.5 -> 80.5%), V-trace 771.6 -> 701.0 (75.4 -> 82.9%), Retrace 618.0 ->
599.6 (94.1 -> 96.9%); without the load barrier GAE 520.5, TD(λ) 407.0, V-trace 725.8,
so the barrier stays. GAE's loss is the occupancy the early loads cost (above).

Persistent programs that take tiles by ticket and load their next tile while the current
one waits for its look-back were built and timed against this kernel on an H100
(bench/results/kernel-persistent-h100-2026-12-05, 2^26 flat, % of the copy floor): GAE
56 against 78, returns 44 against 73, TD(λ) 50 against 81, V-trace 71 against 84,
Retrace 86 against 98. The second tile's registers (GAE 61 -> 94) cost more occupancy
than the hidden waits gave back; not kept.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import math
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from torch import Tensor

from rltscan.scan import kinds
from rltscan.scan._tile import _flag, _ld, _nonfinite

# Estimator kinds (constexpr KIND); each kind's prologue and epilogue: kinds/<name>.py
KINDS = kinds.KINDS
LINEAR = KINDS["linear"]
# nv modes (docs/CONVENTIONS.md §1.2), matching estimators._problem
NV_CODES = {"next": 0, "boot": 1, "last": 2, "none": 3}
# The off-policy trace of the RETRACE kind (docs/CONVENTIONS.md §3.5), constexpr TRACE
TRACES = kinds.TRACES


@triton.jit
def _combine(a1, b1, a2, b2):
    """Compose two affine maps y -> a*y + b, ``(a1, b1)`` applied after ``(a2, b2)``...

    ...in scan order: the forward operator ``L (+)f R = (a1*a2, a2*b1 + b2)`` of
    docs/CONVENTIONS.md §2 with L the earlier step. With ``reverse=True`` Triton
    feeds the later (already scanned) operand first, which turns the same
    function into the backward operator ``R (+)f L = L (+)b R``.
    """
    return a1 * a2, a2 * b1 + b2


@triton.jit
def _combine_ex(ea1, eb1, ia1, ib1, ea2, eb2, ia2, ib2):
    """:func:`_combine` over (exclusive, inclusive) pairs: scanning ``(identity, x)``
    gives both the exclusive and the inclusive value at every position in one scan."""
    xa, xb = _combine(ia1, ib1, ea2, eb2)
    na, nb = _combine(ia1, ib1, ia2, ib2)
    return xa, xb, na, nb


@triton.jit
def _tile_scan(a, b, ROWS: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr,
               REVERSE: tl.constexpr):  # fmt: skip
    """The inclusive scan ``(A, B)`` of a tile along time, in two levels: each thread's
    ``PER`` consecutive steps in its registers, then the threads' aggregates (an
    exclusive scan, one value a thread). Triton's backward scan of the whole tile
    reverses the tensor across lanes before and after (five butterfly shuffles a
    register: 160 a thread at 8 steps a thread, against 12 for the scan itself); here
    only the aggregates cross lanes."""
    if PER == 1:
        A, B = tl.associative_scan((a, b), axis=1, combine_fn=_combine, reverse=REVERSE)
    else:
        a3 = tl.reshape(a, [ROWS, CHUNK // PER, PER])
        b3 = tl.reshape(b, [ROWS, CHUNK // PER, PER])
        if REVERSE:
            A3, B3 = tl.associative_scan((tl.flip(a3, 2), tl.flip(b3, 2)), axis=2,
                                         combine_fn=_combine)  # fmt: skip
            A3 = tl.flip(A3, 2)
            B3 = tl.flip(B3, 2)
        else:
            A3, B3 = tl.associative_scan((a3, b3), axis=2, combine_fn=_combine)
        if REVERSE:
            col = 0
        else:
            col = PER - 1
        sel = (tl.arange(0, PER) == col)[None, None, :]
        ta = tl.sum(tl.where(sel, A3, 0.0), axis=2)
        tb = tl.sum(tl.where(sel, B3, 0.0), axis=2)
        xa, xb, _, _ = tl.associative_scan(
            (tl.full(ta.shape, 1.0, ta.dtype), tl.zeros(tb.shape, tb.dtype), ta, tb),
            axis=1, combine_fn=_combine_ex, reverse=REVERSE,
        )  # fmt: skip
        A = tl.reshape(A3 * xa[:, :, None], [ROWS, CHUNK])
        B = tl.reshape(B3 + A3 * xb[:, :, None], [ROWS, CHUNK])
    return A, B


# ---- the look-back's words ----------------------------------------------------------
# A tile publishes each value as self-validating 64-bit words: the tag epoch*4 + state
# (1: aggregate, 2: inclusive) in the high half, 32 bits of the value in the low half
# (fp64 values take two words, high bits first). One aligned 64-bit store is seen whole
# or not at all, so a reader needs no flag, no fence and no barrier: a word whose tag is
# not the one it expects is simply not there yet (older epochs included). Per tile and
# lane: the aggregate's a (written only while it is needed) and one word that holds
# first the aggregate's b, then the inclusive value y.


@triton.jit
def _word(bits, tag):
    return (tag.to(tl.int64) << 32) | (bits.to(tl.int64) & 0xFFFFFFFF)


@triton.jit
def _publish(ptr, x, tag, mask, ROWS: tl.constexpr, WIDE: tl.constexpr):
    """Store ``x`` with ``tag`` where ``mask`` (fp64: the low bits ROWS words further)."""
    if WIDE:
        xb = x.to(tl.int64, bitcast=True)
        tl.store(ptr, _word(xb >> 32, tag), mask=mask)
        tl.store(ptr + ROWS, _word(xb, tag), mask=mask)
    else:
        tl.store(ptr, _word(x.to(tl.int32, bitcast=True), tag), mask=mask)


@triton.jit
def _edge(x, ROWS: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr, REVERSE: tl.constexpr):
    """``x`` at the tile's last step in scan order (its first step backward), as
    ``[ROWS, CHUNK // PER]`` where only group 0 (backward) or the last group (forward)
    holds it. With ``PER`` consecutive steps per thread (the layout Triton gives a
    time-contiguous tile) the value is taken out of its thread's registers: no shared
    memory and no barrier, where a sum over the tile takes both."""
    if PER == 1:
        if REVERSE:
            col = 0
        else:
            col = CHUNK - 1
        v = tl.sum(tl.where((tl.arange(0, CHUNK) == col)[None, :], x, 0.0), axis=1)[:, None]
    else:  # (a sum over a thread's own registers, the others zero: no data moves)
        if REVERSE:
            col = 0
        else:
            col = PER - 1
        v = tl.reshape(x, [ROWS, CHUNK // PER, PER])
        v = tl.sum(tl.where((tl.arange(0, PER) == col)[None, None, :], v, 0.0), axis=2)
    return v


@triton.jit
def _read(ptr, mask, ROWS: tl.constexpr, WIDE: tl.constexpr):
    """(value, tag) of the words at ``ptr``; fp64 halves of two different publications
    (a read between the two stores) give tag -1: not there yet."""
    w = tl.load(ptr, mask=mask, other=0, volatile=True)
    tag = (w >> 32).to(tl.int32)
    if WIDE:
        lo = tl.load(ptr + ROWS, mask=mask, other=0, volatile=True)
        x = ((w << 32) | (lo & 0xFFFFFFFF)).to(tl.float64, bitcast=True)
        tag = tl.where((lo >> 32).to(tl.int32) == tag, tag, -1)
    else:
        x = w.to(tl.int32).to(tl.float32, bitcast=True)
    return x, tag


@triton.jit
def _lookback(ws_ptr, slot, k, boundary, epoch, offs_r, ROWS: tl.constexpr,
              NSET: tl.constexpr, WIDE: tl.constexpr):  # fmt: skip
    """Carry into this tile (y just past it in scan order), per lane, the same bits
    however the programs were scheduled.

    Back: walk over the predecessors' words (``slot - NSET`` is the previous tile of the
    same setting) until each lane meets an inclusive value; the walk moves on once every
    lane still searching sees at least an aggregate there (else it reads them again), one
    round trip per predecessor (the word that holds b or y, every lane at once). Forward: from
    that inclusive value, one tile at a time in scan order, each tile's inclusive value
    where it is published by now, else ``fma(a, carry, b)`` of its aggregate: the very
    operation that tile publishes (:func:`_inclusive`). So by induction the carry is the
    chain's value bit for bit, whether the walk stopped at the previous tile (the usual
    case: the forward loop does not run) or further back.

    The look-back this replaced folded the aggregates backward (``acc = acc ∘ agg``) and
    applied the fold to the first inclusive value it met: fewer reads where the walk is
    long, but the rounding then depended on how far back the walk went, that is on which
    programs happened to finish first, and a repeated call could differ in its last bits
    (seen on the H200: discounted returns at 2^22 flat steps differed from the first call
    in 30 of 30 repeats; this walk, 0 of 30). Against it, at 2^26 flat steps on the H200:
    GAE +1.7%, returns −6.3%, TD(λ), V-trace and Retrace within ±1.4%
    (bench/results/lookback-determinism-h200-2026-12-06). Earlier
    forms, measured on the H200 at 2^26 flat steps: a flag word per tile raised with a
    release after a block barrier, polled by atomics, then a second read of the data (GAE
    467 µs against 416 for the word-tagged walk, see the module's table); the same with
    32 predecessors per round (CUB's window: GAE 54% of copy bandwidth against 61%,
    bench/results/kernel-probe-h200-2026-12-03-b).
    """
    carry = boundary
    if k > 0:
        agg = epoch * 4 + 1
        inc = agg + 1
        start = offs_r * 0 + slot  # per lane: the slot whose inclusive value it starts from
        todo = offs_r >= 0
        j = slot - NSET
        while tl.max(todo.to(tl.int32), axis=0) > 0:
            lane = ws_ptr + j.to(tl.int64) * (2 * (1 + WIDE) * ROWS) + offs_r  # a, then b / y
            vb, tb = _read(lane + (1 + WIDE) * ROWS, todo, ROWS, WIDE)
            is_inc = tb == inc
            waiting = tl.sum((todo & ~is_inc & (tb != agg)).to(tl.int32), axis=0)
            found = todo & is_inc & ((offs_r + waiting) == offs_r)  # (no lane waiting)
            carry = tl.where(found, vb, carry)
            start = tl.where(found, j, start)
            todo = todo & ~found
            j = j - tl.where(waiting == 0, NSET, 0)
        j = tl.min(start, axis=0) + NSET
        while j < slot:
            need = start < j
            lane = ws_ptr + j.to(tl.int64) * (2 * (1 + WIDE) * ROWS) + offs_r
            vb, tb = _read(lane + (1 + WIDE) * ROWS, need, ROWS, WIDE)
            va, ta = _read(lane, need & (tb != inc), ROWS, WIDE)
            ready = (tb == inc) | ((tb == agg) & (ta == agg))  # (a torn fp64 read: again)
            if tl.sum((need & ~ready).to(tl.int32), axis=0) == 0:
                nxt = tl.where(tb == inc, vb, _inclusive(va, carry, vb))
                carry = tl.where(need, nxt, carry)
                j = j + NSET
    return carry


@triton.jit
def _inclusive(a, carry, b):
    """A tile's inclusive value from its aggregate ``(a, b)`` and the carry into it: one
    rounding, the same wherever it is computed (the tile itself, or a successor's
    look-back, :func:`_lookback`)."""
    return tl.fma(a, carry, b)


# The epoch grows by one per launch and check_id by one per checked call: Triton would
# otherwise specialise them (== 1, divisible by 16) and recompile on the 1st, 2nd, 16th call.
@triton.jit(do_not_specialize=["epoch", "check_id"])
def _scan_kernel(
    c0_ptr,
    c1_ptr,
    c2_ptr,
    c3_ptr,
    c4_ptr,
    c5_ptr,  # float columns; meaning per KIND
    term_ptr,
    trunc_ptr,
    row_ptr,  # flags (1 byte); per-row last_value or init (or the carry's y)
    nxt_ptr,  # per-row carry from the next chunk: V at its first step
    nlr_ptr,  # per-row carry from the next chunk: log π − log μ at its first step
    pdone_ptr,  # per-row carry from the previous chunk: its last step ended an episode
    out0_ptr,
    out1_ptr,
    ws_ptr,  # look-back words (int64), never zeroed between launches: tags carry the epoch
    err_ptr,  # int32[2] (CHECK): [0] counts tiles with a non-finite read entry, [1] = check_id
    set_ptr,  # NSET > 1: [NSET, 2] (γ, λ) per setting, in the compute dtype
    disc_ptr,  # HAS_DISC: the per-step discount γ_t (docs/CONVENTIONS.md §1.7)
    lamt_ptr,  # HAS_LAMT: the per-step λ_t
    R,
    T,
    stride_r,
    stride_t,
    n_tblocks,
    set_stride,  # NSET > 1: elements between one setting's outputs and the next's
    epoch,
    check_id,
    gamma,
    gamma_lo,
    lam,
    lam_lo,
    log_rho,
    log_rho_lo,
    log_c,
    log_c_lo,
    log_pg,
    log_pg_lo,
    missing,
    KIND: tl.constexpr,
    REVERSE: tl.constexpr,
    NV_MODE: tl.constexpr,
    HAS_V: tl.constexpr,
    HAS_TERM: tl.constexpr,
    HAS_TRUNC: tl.constexpr,
    FIRST_GIVEN: tl.constexpr,
    HAS_INIT: tl.constexpr,
    HAS_OUT1: tl.constexpr,
    CHECK: tl.constexpr,
    CONTINUES: tl.constexpr,  # the sequence goes on past T-1: no forced cut there (§2.4)
    ROWS: tl.constexpr,
    CHUNK: tl.constexpr,
    PER: tl.constexpr,  # consecutive steps a thread holds (1: time-major tiles)
    LOOKBACK: tl.constexpr,
    COMPUTE: tl.constexpr,
    WIDE: tl.constexpr,  # COMPUTE is float64: look-back values take two words
    TRACE: tl.constexpr,  # RETRACE only: which trace coefficient (TRACES below)
    NSET: tl.constexpr,  # settings (γ, λ) solved in this launch (fused kinds; 1: the scalars)
    HAS_DISC: tl.constexpr,  # γ_t from disc_ptr instead of the scalar γ
    HAS_LAMT: tl.constexpr,  # λ_t from lamt_ptr instead of the scalar λ
):
    # Columns by KIND: kinds/<name>.py (SLOTS); LINEAR: c0=a c1=b. GAE ... RETRACE may also
    # take γ_t (disc_ptr) and λ_t (lamt_ptr), read at step t: they belong to the transition
    # out of step t (§1.7), so no carry holds the next chunk's
    # Float scalars arrive as fp32; fp64 runs get them back to ~48 bits as hi + lo.
    gamma = (tl.zeros([], COMPUTE) + gamma) + gamma_lo
    lam = (tl.zeros([], COMPUTE) + lam) + lam_lo
    log_rho = (tl.zeros([], COMPUTE) + log_rho) + log_rho_lo
    log_c = (tl.zeros([], COMPUTE) + log_c) + log_c_lo
    log_pg = (tl.zeros([], COMPUTE) + log_pg) + log_pg_lo
    pid = tl.program_id(0)
    if R == 1:  # (Triton passes R == 1 as a constant: one flat sequence, no division)
        rb = 0
        k = pid
    else:
        rb = pid // n_tblocks
        k = pid - rb * n_tblocks  # position in scan order: predecessors have lower pids
    if REVERSE:
        tb = n_tblocks - 1 - k
    else:
        tb = k
    offs_r = tl.arange(0, ROWS)
    offs_c = tl.arange(0, CHUNK)
    rows = rb * ROWS + offs_r
    rmask = rows < R
    # Step positions inside the tile stay int32; only the tile's start is int64.
    t0 = tb.to(tl.int64) * CHUNK
    n_in = tl.minimum(T - t0, CHUNK).to(tl.int32)  # steps of this tile inside the window
    mask = rmask[:, None] & (offs_c < n_in)[None, :]
    base = rows.to(tl.int64) * stride_r + t0 * stride_t  # each tile row's first step
    offs = base[:, None] + (offs_c.to(tl.int64) * stride_t)[None, :]
    if PER == 8:  # the stores' halves (_put); PER > 1: stride_t is 1 (or T is 1)
        j3 = (tl.arange(0, CHUNK // 8) * 8)[None, :, None] + tl.arange(0, 4)[None, None, :]
        o3 = base[:, None, None] + j3
        m3a = rmask[:, None, None] & (j3 < n_in)
        m3b = rmask[:, None, None] & (j3 + 4 < n_in)
    else:
        o3 = offs
        m3a = mask
        m3b = mask
    offs1 = offs + stride_t  # step t+1 (backward kinds), never past the window's end
    # (the window's last step, if this tile holds it; CHUNK matches no step)
    last = (offs_c == tl.where(t0 + n_in == T, n_in - 1, CHUNK))[None, :]
    at_end = last
    if CONTINUES:
        last = tl.zeros([ROWS, CHUNK], tl.int1)  # a chunk end is not a window end

    # ---- prologue, the part shared by every setting: raw columns read once ----------
    # Every column read at every step is loaded first, the flags after: the reads that
    # depend on the flags' values (sparse bootstrap slots) then wait for the flags alone,
    # not for the dense columns too (ptxas keeps the order of independent loads).
    # Per-step γ_t / λ_t replace the scalars elementwise: every use below is at step t
    # (Retrace's trace too: a_t = γ_t·λ_t·ratio_{t+1}), and V-trace's epilogue reuses γ_t.
    if HAS_DISC:
        gamma = _ld(disc_ptr, offs, mask, COMPUTE)
    if HAS_LAMT:
        lam = _ld(lamt_ptr, offs, mask, COMPUTE)
    cols = (c0_ptr, c1_ptr, c2_ptr, c3_ptr, c4_ptr, c5_ptr)
    ptrs = (term_ptr, trunc_ptr, row_ptr, nxt_ptr, nlr_ptr, pdone_ptr)
    at = (offs, offs1, mask, at_end, rows, rmask, offs_c, t0, stride_t)
    st = kinds.load(KIND, (cols, at, NV_MODE, HAS_V, TRACE, ROWS, CHUNK, PER, COMPUTE))

    tl.debug_barrier()
    if HAS_TERM:
        term = _flag(term_ptr, offs, mask)
    else:
        term = tl.zeros([ROWS, CHUNK], tl.int1)
    if HAS_TRUNC:
        done = term | _flag(trunc_ptr, offs, mask)
    else:
        done = term
    cut = done | last
    boot = cut & ~term

    st = kinds.prepare(KIND, (st, cols, ptrs, at, term, boot, last, missing, log_rho, log_c,
                              NV_MODE, HAS_V, HAS_TERM, HAS_TRUNC, FIRST_GIVEN, CONTINUES,
                              TRACE, ROWS, CHUNK, COMPUTE))  # fmt: skip

    # Out-of-range steps are identities (1, 0); out-of-range rows resets (0, 0), so
    # they never hold a look-back open.
    pad_a = tl.where(rmask[:, None], 1.0, 0.0)
    # the look-back's lanes, [ROWS, G] as _edge gives them: only the group that holds the
    # tile's aggregate stores
    groups = tl.arange(0, CHUNK // PER)[None, :]
    if REVERSE:
        holder = groups == 0
    else:
        holder = groups == CHUNK // PER - 1
    lanes = ws_ptr + offs_r[:, None] + (groups * 0).to(tl.int64)
    for s in tl.static_range(NSET):
        if NSET == 1:
            g = gamma
            lm = lam
            oofs = offs  # outputs share the inputs' strides
            oo3 = o3
            brow = rows  # the boundary (carry y / init) of each tile row
        else:  # one block of outputs per setting; boundaries per (row, setting)
            g = tl.load(set_ptr + 2 * s).to(COMPUTE)
            lm = tl.load(set_ptr + 2 * s + 1).to(COMPUTE)
            oofs = offs + s * set_stride
            oo3 = o3 + s * set_stride
            brow = rows * NSET + s
        # ---- this setting's (a, b), built on-chip ------------------------------------
        a, b = kinds.coefficients(KIND, (st, g, lm, cut, boot, COMPUTE))

        if CHECK and s == 0:
            # A fast screen for validation: every read input flows into b (a missing
            # bootstrap arrives as NaN), except the log-ratios, which are clipped.
            # Only masked-in (read) entries can be non-finite here.
            bad = _nonfinite(b)
            bad = kinds.screen(KIND, (st, bad, cut, cols, at, HAS_OUT1, COMPUTE))
            # γ_t and λ_t must lie in [0, 1] (NaN fails both comparisons): checked here
            # rather than through b, which reads γ_t only where nv is read
            if HAS_DISC:
                bad = bad | ~((gamma >= 0.0) & (gamma <= 1.0))
            if HAS_LAMT:
                bad = bad | ~((lam >= 0.0) & (lam <= 1.0))
            if tl.max(tl.max((bad & mask).to(tl.int32), axis=1), axis=0) > 0:
                # only ever increased here (the host never writes it): a count the host
                # can read without a sync when the word lives in pinned memory
                tl.atomic_add(err_ptr, 1)
                tl.store(err_ptr + 1, check_id)

        a = tl.where(mask, a, pad_a).to(COMPUTE)
        b = tl.where(mask, b, 0.0).to(COMPUTE)

        # ---- the scan ------------------------------------------------------------------
        A, B = _tile_scan(a, b, ROWS, CHUNK, PER, REVERSE)
        if HAS_INIT:
            boundary = tl.load(row_ptr + brow, mask=rmask, other=0.0).to(COMPUTE)
        else:
            boundary = tl.zeros([ROWS], COMPUTE)
        if LOOKBACK:
            # Publish the tile's aggregate from the thread that holds it: a tile with an
            # episode end (a = 0) or at the row's start already knows its inclusive value.
            slot = pid * NSET + s
            here = lanes + slot.to(tl.int64) * (2 * (1 + WIDE) * ROWS)
            ea = _edge(A, ROWS, CHUNK, PER, REVERSE)
            eb = _edge(B, ROWS, CHUNK, PER, REVERSE)
            early = (ea == 0) | ((groups + k) == groups)  # (k == 0, as a tensor)
            agg = epoch * 4 + 1
            inc = agg + 1
            _publish(here, ea, agg, holder & ~early, ROWS, WIDE)
            _publish(here + (1 + WIDE) * ROWS, tl.where(k == 0, eb + ea * boundary[:, None], eb),
                     tl.where(early, inc, agg), holder, ROWS, WIDE)  # fmt: skip
            carry = _lookback(ws_ptr, slot, k, boundary, epoch, offs_r, ROWS, NSET, WIDE)
            _publish(here + (1 + WIDE) * ROWS, _inclusive(ea, carry[:, None], eb), inc,
                     holder & ~early, ROWS, WIDE)  # fmt: skip
            y = B + A * carry[:, None]
        else:
            carry = boundary
            y = B + A * carry[:, None]

        # ---- epilogue ------------------------------------------------------------------
        outs = (out0_ptr, out1_ptr, oofs, oo3, m3a, m3b)
        kinds.epilogue(KIND, (st, y, carry, g, cut, cols, ptrs, at, outs, log_pg, HAS_OUT1,
                              CONTINUES, ROWS, CHUNK, PER, COMPUTE))  # fmt: skip


# ---------------------------------------------------------------------------
# Launcher


@dataclass(frozen=True)
class Tiles:
    rows: int
    chunk: int
    num_warps: int

    def per_thread(self, time_contiguous: bool) -> int:
        """Consecutive steps of one row a thread holds in Triton's layout of the tile
        (time-major tiles: none, neighbouring rows are a thread's neighbours)."""
        if not time_contiguous:
            return 1
        per = max(1, min(self.chunk, self.rows * self.chunk // (32 * self.num_warps)))
        return 1 << (per.bit_length() - 1)  # (a power of two: it divides the chunk)


_override = threading.local()
# Called when a tile override begins: a launch kept by a caller for reuse
# (``estimators._bound``) was made with the tiles of before and must be dropped.
_ON_OVERRIDE: list[Callable[[], None]] = []


def on_tile_override(fn: Callable[[], None]) -> None:
    """Have ``fn`` called whenever :func:`tile_override` begins (once per ``fn``)."""
    if fn not in _ON_OVERRIDE:
        _ON_OVERRIDE.append(fn)


def tiles_forced() -> bool:
    """Whether a :func:`tile_override` is in force on this thread (launches made now
    must not be kept for reuse)."""
    return getattr(_override, "tiles", None) is not None


@contextlib.contextmanager
def tile_override(*, rows: int, chunk: int, num_warps: int = 1) -> Iterator[None]:
    """Force a tile shape (tests use tiny tiles to exercise multi-tile paths; benches
    sweep shapes). Launches kept for reuse are dropped on entry, and none are kept
    while it is in force, so every call inside runs these tiles."""
    prev = getattr(_override, "tiles", None)
    for fn in _ON_OVERRIDE:
        fn()
    _override.tiles = Tiles(rows, chunk, num_warps)
    try:
        yield
    finally:
        _override.tiles = prev


# Tile shape: 1024 steps a program (TILE_ELEMS), bench/results/kernel-probe-h200-2026-12-04-b.
TILE_ELEMS = 1024
MAX_CHUNK = 1024


def _pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def choose_tiles(n_rows: int, steps: int, time_contiguous: bool, kind: int,
                 wide: bool = False) -> Tiles:  # fmt: skip
    """The tile of one program (several settings share it: a program solves each of
    them over the inputs it read once) for estimator ``kind`` (``wide``: float64)."""
    forced = getattr(_override, "tiles", None)
    if forced is not None:
        return forced
    return _default_tiles(n_rows, steps, time_contiguous, kind, wide)


# Kinds whose rows that span several tiles take 2048-step tiles on 4 warps (16 steps a
# thread) in float32. 2^26 flat steps, 16×131072 and 2^22 flat on an H100, kernel % of
# the copy floor, 1024-step default -> 2048/4 (bench/results/kernel-sweep-h100-2026-12-06):
# GAE 77.7 -> 84.3, 88.1 -> 90.0, 66.0 -> 73.6; returns 75.7 -> 89.2, 81.8 -> 99.3,
# 75.5 -> 91.5. The same tile is worse for V-trace (83.6 -> 67.1 at 2^26) and Retrace
# (98.7 -> 97.7, 80.0 -> 70.3): they keep 1024. 4096 and 8192 steps a tile were slower
# for all but returns (88.6 at 4096/4, below 2048/4). On the H200
# (bench/results/kernel-tiles-h200-2026-12-06) at 2^26 flat: GAE 66 -> 71.5%, returns 61
# -> 78.9%. TD(λ) was mixed on this tile (80.4 -> 80.6, 97.3 -> 84.6, 65.7 -> 69.0) while
# it read V at t+1 misaligned; read from registers (``_tile._ld_next``) it gains on every
# shape of the sweep, on an H100 (bench/results/kernel-nextv-h100-2026-12-07, call3):
# 81.3 -> 88.5, 103.5 -> 115.9 (16×131072: its 29 MB stay in L2), 67.6 ->
# 72.9; with episode ends every ~10 steps at 2^26 it loses 1.6 points (77.8 -> 76.2).
_LONG_TILE_KINDS = frozenset({KINDS["gae"], KINDS["returns"], KINDS["td_lambda"]})
_LONG_CHUNK = 2048


@functools.lru_cache(maxsize=1024)
def _default_tiles(n_rows: int, steps: int, time_contiguous: bool, kind: int,
                   wide: bool) -> Tiles:  # fmt: skip
    chunk = min(_pow2(steps), MAX_CHUNK)
    if not time_contiguous:
        # time-major: neighbouring rows are neighbours in memory; take 32 of them
        # (32x128 measured best of 16-128 rows at 4096x128, within 4% at 4096x1024)
        chunk = min(chunk, 128)
        return Tiles(max(1, min(_pow2(n_rows), 32)), chunk, 4)
    if steps > MAX_CHUNK and kind in _LONG_TILE_KINDS and not wide:
        return Tiles(1, _LONG_CHUNK, 4)
    rows = max(1, min(_pow2(n_rows), TILE_ELEMS // chunk))
    elems = rows * chunk
    # 8 steps a thread (4 warps) where tiles join by the look-back: at 2^26 flat steps
    # on the H200, GAE 68% of copy bandwidth against 59% with 4 steps a thread (8 warps),
    # returns 58/45%, TD(λ) 60/53%, V-trace 60/57%, Retrace 80/78%; 2048-step tiles were
    # within 2 points, 512 (4 warps) and 2048 (16 warps) worse. A thread then holds more
    # loads in flight for its registers, which outweighs the layout change Triton makes
    # through shared memory before each store (it stores 16 bytes a thread at a time).
    num_warps = 4 if elems >= 1024 else 2
    if chunk == MAX_CHUNK and steps <= MAX_CHUNK:
        # a row in one 1024-step tile (no look-back): 8 warps measured faster on the
        # H200 at 65536x1024 (GAE 83% of copy bandwidth against 78%, Retrace 100% against
        # 87%, V-trace 75/73%, returns 64/65%) (bench/results/kernel-probe-h200-2026-12-03)
        num_warps = 8
    return Tiles(rows, chunk, num_warps)


# Registers a thread may use (ptxas's cap) in the plain launches of GAE and V-trace whose
# rows span several tiles: float32, one setting, scalar γ and λ, no validation screen.
# Left alone, GAE's 2048-step tile takes 118 (ncu on an H100: 4 programs an SM, 25%
# occupancy, DRAM 75% busy, 0.27 of 3.9 warps eligible a cycle); capped at 80, 6
# programs an SM hold more loads in flight. On an H100 at 2^26 flat steps, no cap -> 80,
# kernel % of the copy floor / whole call % (bench/results/kernel-regcap-h100-2026-12-07):
# GAE 84.2 -> 89.5 / 83.8 -> 88.9, V-trace 83.8 -> 87.1 / 83.0 -> 86.4; returns lose 2
# points and TD(λ), Retrace move within one, so they keep ptxas's choice. Three settings
# in one launch (GAE 886 -> 1081 µs) and a per-step γ_t (562 -> 597 µs) ran slower with
# the cap (and the hints below), and the screen was not measured with it: those launches
# keep ptxas's choice too. Again on an H100 with the cap alone
# (bench/results/kernel-caps-gpu-suite-h100-2026-12-07): GAE 84.0 -> 89.2, V-trace
# 83.2 -> 87.1, and K = 3 GAE in one launch 1268.9 µs capped. Not yet measured on an H200.
#
# Measured there and not kept: every load ``evict_first`` and every store streaming
# (``.cs``), each step being read and written once: kernel time GAE 84.2 -> 90.2%,
# returns 89.2 -> 94.3, TD(λ) 80.7 -> 85.0, V-trace 83.6 -> 79.6, but the whole call
# after an L2 flush slower for all but GAE (returns 253.9 -> 261.8 µs, TD(λ) 392.2 ->
# 398.7, Retrace 593.3 -> 608.9); and an L2 prefetch (``prefetch.global.L2``) of the tile
# 512 to 2048 tiles ahead: slower for every kind (GAE 82.2% at 512, 65.0 at 1024).
_REGISTER_CAP = {KINDS["gae"]: 80, KINDS["vtrace"]: 80}


def register_cap(kind: int, *, lookback: bool, wide: bool, nset: int, check: bool,
                 step_columns: bool) -> int:  # fmt: skip
    """ptxas's register cap for a launch (0: its own choice); see ``_REGISTER_CAP``."""
    if not lookback or wide or nset != 1 or check or step_columns:
        return 0
    return _REGISTER_CAP.get(kind, 0)


def workspace_words(n_slots: int, rows: int, dtype: torch.dtype) -> int:
    """Look-back words for ``n_slots`` tiles (× settings) of ``rows`` lanes: per lane the
    aggregate's a and the b / inclusive word, each two words wide in float64."""
    return n_slots * rows * (4 if dtype == torch.float64 else 2)


class _Workspace:
    """Look-back words per (device, stream), zeroed once: every word carries the epoch
    of the launch that wrote it, so a launch never reads another's. Keyed by stream so
    that launches on concurrent streams never share words; launches on one stream are
    ordered, so the epoch alone separates them.

    :meth:`lease` serves a caller that launches again and again (:class:`Direct`): the
    address and the stream's epoch cell, valid while :attr:`generation` (bumped
    whenever a buffer is replaced) is unchanged, so a repeated launch takes its scratch
    without a lookup."""

    def __init__(self) -> None:
        self.words: dict[object, Tensor] = {}
        self.epochs: dict[object, list[int]] = {}  # per (device, stream): one shared cell
        self.generation = 0

    def get(self, device: torch.device, n_words: int, stream: int) -> tuple[Tensor, int]:
        """Words for one launch and its epoch."""
        if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            # A captured graph replays its arguments: a fixed epoch would meet the words
            # of its own last replay. Its own words (from the graph's memory pool), zeroed
            # by a memset that is part of the graph, make every replay start clean.
            return torch.zeros(n_words, dtype=torch.int64, device=device), 1
        key = (device, stream)
        words = self.words.get(key)
        cell = self.epochs.setdefault(key, [0])
        cell[0] += 1
        if words is None or words.numel() < n_words or cell[0] >= EPOCH_LIMIT:
            words = torch.zeros(max(2 * n_words, 1 << 15), dtype=torch.int64, device=device)
            self.words[key] = words
            self.generation += 1
            cell[0] = 1
        return words, cell[0]

    def lease(self, device: torch.device, n_words: int, stream: int) -> tuple[Lease, int]:
        """:meth:`get` for this launch, and a :data:`Lease` to launch the same again."""
        words, epoch = self.get(device, n_words, stream)
        cell = self.epochs.get((device, stream)) or [epoch]  # (a capture's: not shared)
        return (stream, self.generation, words.data_ptr(), cell), epoch


# Tags hold epoch*4 + state in 32 bits: new, zeroed words before the epoch gets near it
EPOCH_LIMIT = 1 << 29
# (stream, workspace generation, words address, the stream's epoch cell)
Lease = tuple[int, int, int, list[int]]


_WS = _Workspace()


@functools.cache
def _raw_stream_getter():
    """Triton's own getter of the current raw CUDA stream (no Stream object is built)."""
    try:
        from triton.runtime import driver

        return driver.active.get_current_stream
    except Exception:  # another Triton layout: the public, slower way
        return lambda index: torch.cuda.current_stream(index).cuda_stream


def _stream_id(device: torch.device) -> int:
    if device.type != "cuda":
        return 0  # the interpreter runs programs in order on the host
    index = device.index if device.index is not None else torch.cuda.current_device()
    return _raw_stream_getter()(index)


# ---------------------------------------------------------------------------
# Validation without a blocking sync


class _Board:
    """Where checked launches on one device report a non-finite read entry.

    ``word`` is int32[2] in pinned host memory, which CUDA maps into the device's
    address space: a kernel that finds a bad entry adds 1 to ``word[0]`` and writes
    its launch's ``check_id`` to ``word[1]``. The host only reads it (a memory read,
    no device sync) and remembers how many hits it has reported, so a hit is never
    lost to a race with the host and a replayed CUDA graph reports again.
    """

    def __init__(self, device: torch.device) -> None:
        pinned = device.type == "cuda"
        self.word = torch.zeros(2, dtype=torch.int32, pin_memory=pinned)
        self._view = self.word.numpy()
        self.reported = 0
        self.last_id = 0

    def next_id(self) -> int:
        self.last_id = self.last_id % (1 << 30) + 1
        return self.last_id

    def take(self) -> int | None:
        """The check_id of a launch that hit since the last take (its latest), or None."""
        hits = int(self._view[0])
        if hits == self.reported:
            return None
        self.reported = hits
        return int(self._view[1])


_BOARDS: dict[torch.device, _Board] = {}


def _board(device: torch.device) -> _Board:
    b = _BOARDS.get(device)
    if b is None:
        b = _BOARDS[device] = _Board(device)
    return b


def next_check_id(device: torch.device) -> int:
    """A fresh id for a deferred-check launch on ``device`` (see :func:`deferred_hit`)."""
    return _board(device).next_id()


def deferred_hit(device: torch.device) -> int | None:
    """The check id of a deferred-check launch on ``device`` whose kernel, finished since
    the last call of this function, read a non-finite entry; None when none did.
    Reads host memory only: a launch still queued or running is seen by a later call."""
    b = _BOARDS.get(device)
    return None if b is None else b.take()


def deferred_devices() -> list[torch.device]:
    """Devices that have run deferred-check launches (for a final synchronised check)."""
    return list(_BOARDS)


_ERR: dict[torch.device, Tensor] = {}


def _err_word(device: torch.device) -> Tensor:
    """A persistent int32[2] per device for synchronous checks: read and cleared by
    :func:`read_error` after a sync."""
    w = _ERR.get(device)
    if w is None:
        w = _ERR[device] = torch.zeros(2, dtype=torch.int32, device=device)
    return w


def read_error(word: Tensor | None) -> bool:
    """True when a checked launch saw a non-finite read entry (one device sync)."""
    if word is None or int(word[0].item()) == 0:
        return False
    word.zero_()
    return True


# ---------------------------------------------------------------------------
# One launch: a plan (everything but addresses) and the call of the compiled kernel

# Kernel argument positions: the 19 tensors, then the runtime integers and floats.
_WS_SLOT = 14  # the look-back words
ERR_SLOT = 15  # the error word (a bound call keeps it fixed)
SETTINGS_SLOT = 16  # the settings' (γ, λ) table (fixed too: the call's key decides it)
_STEP_SLOTS = ("disc", "lamt")  # slots 17, 18: per-step γ_t and λ_t (HAS_DISC, HAS_LAMT)
_IN_SLOTS = ("c0", "c1", "c2", "c3", "c4", "c5", "term", "trunc")
_CARRY_ROWS = ("next_value", "next_log_ratio", "prev_done")

# Launch through the compiled kernel's launcher once Triton has compiled it for a key
# (tests switch it off to compare with Triton's own dispatch).
DIRECT = True


@dataclass(frozen=True)
class Launch:
    """A kernel launch except for the tensors' addresses, the epoch and the check id.

    Built once per call shape (:func:`plan_launch`); :meth:`fire` launches it. Its
    ``key`` holds everything Triton specialises the kernel on besides pointer
    alignment (checked per call): constexprs, warps, the pointer dtypes, and the
    ``== 1`` / multiple-of-16 / 32-bit facts about the integer arguments.
    """

    grid: int
    num_warps: int
    max_registers: int  # 0: ptxas's choice
    ws_words: int  # look-back words (0: every row in one tile, no look-back)
    ints: tuple[int, ...]  # R, T, stride_r, stride_t, n_tblocks, set_stride
    scalars: tuple[float, ...]  # gamma (hi, lo) ... missing
    consts: tuple[tuple[str, object], ...]  # the constexprs, in the kernel's order
    ptr_dtypes: tuple[torch.dtype, ...]
    check: bool

    @functools.cached_property
    def key(self) -> tuple:
        facts = tuple((v == 1, v % 16 == 0, -(1 << 31) <= v < (1 << 31)) for v in self.ints)
        return (self.consts, self.num_warps, self.max_registers, self.ptr_dtypes, facts)

    @functools.cached_property
    def _tail(self) -> tuple:
        return tuple(v for _, v in self.consts)

    def fire(self, tensors: list[Tensor], device: torch.device, check_id: int = 0) -> None:
        """Launch on the current stream. ``tensors``: the 19 pointer arguments; the
        workspace slot is filled here."""
        stream = _stream_id(device)
        if self.ws_words:
            tensors[_WS_SLOT], epoch = _WS.get(device, self.ws_words, stream)
        else:
            epoch = 0  # the workspace slot is never touched
        ck = _COMPILED.get((self.key, device)) if DIRECT else None
        if ck is not None and _hooks_idle():
            ptrs = [t.data_ptr() for t in tensors]
            aligned = 0
            for p in ptrs:
                aligned |= p
            if aligned & 15 == 0:
                ck.run(
                    self.grid, 1, 1, stream, ck.function, ck.packed_metadata, None,
                    _knobs.runtime.launch_enter_hook, _knobs.runtime.launch_exit_hook,
                    *ptrs, *self.ints, epoch, check_id, *self.scalars, *self._tail,
                )  # fmt: skip
                return
        # FMA contraction said, not left to Triton's default: Triton 3.9 warns that its
        # default turns to no contraction in 3.10, which would change the kernel's rounding
        # (and its speed) with the Triton version a user happens to have.
        ck = _scan_kernel[(self.grid,)](
            *tensors, *self.ints, epoch, check_id, *self.scalars,
            **dict(self.consts), num_warps=self.num_warps, enable_fp_fusion=True,
            **({"maxnreg": self.max_registers} if self.max_registers else {}),
        )  # fmt: skip
        if DIRECT and _direct_supported(ck) and all(t.data_ptr() % 16 == 0 for t in tensors):
            _COMPILED[(self.key, device)] = ck

    def direct(self, device: torch.device) -> Direct | None:
        """This launch through the compiled kernel's launcher with every lookup done
        (for a caller that fires it again and again: ``estimators._bound``); None until
        Triton has compiled it for ``device`` with a launcher this module can call."""
        ck = _COMPILED.get((self.key, device)) if DIRECT and device.type == "cuda" else None
        return None if ck is None else Direct(self, ck, device)


class Direct:
    """One :class:`Launch` bound to its compiled kernel on one device: a call takes the
    19 pointer arguments as integers (16-byte aligned: the caller checks) and the check
    id, and launches on the current stream. It returns False, launching nothing, when a
    launch hook (a profiler's) is installed: the caller then takes :meth:`Launch.fire`."""

    __slots__ = (
        "_after", "_device", "_fn", "_grid", "_index", "_ints", "_lease", "_meta", "_run",
        "_words",
    )  # fmt: skip

    def __init__(self, launch: Launch, ck: object, device: torch.device) -> None:
        self._device, self._words, self._lease = device, launch.ws_words, None
        self._index = device.index if device.index is not None else torch.cuda.current_device()
        self._run, self._fn, self._meta = ck.run, ck.function, ck.packed_metadata  # type: ignore[attr-defined]
        self._grid, self._ints = launch.grid, launch.ints
        self._after = (*launch.scalars, *launch._tail)

    def __call__(self, ptrs: list[int], check_id: int) -> bool:
        rt = _knobs.runtime
        enter, leave = rt.launch_enter_hook, rt.launch_exit_hook
        if not DIRECT or ((enter is not None or leave is not None) and not _hooks_idle()):
            return False
        stream = _raw_stream_getter()(self._index)
        epoch = 0
        if self._words:
            lease = self._lease
            if (
                lease is not None
                and lease[0] == stream
                and lease[1] == _WS.generation
                and lease[3][0] + 1 < EPOCH_LIMIT
                and not torch.cuda.is_current_stream_capturing()
            ):
                lease[3][0] += 1
                epoch = lease[3][0]
            else:  # first launch, another stream, a replaced buffer, or a capture
                lease, epoch = _WS.lease(self._device, self._words, stream)
                # (a capture's scratch is its own: never reused outside the graph)
                self._lease = None if torch.cuda.is_current_stream_capturing() else lease
            ptrs[_WS_SLOT] = lease[2]
        self._run(
            self._grid, 1, 1, stream, self._fn, self._meta, None, enter, leave,
            *ptrs, *self._ints, epoch, check_id, *self._after,
        )  # fmt: skip
        return True


_COMPILED: dict[tuple, object] = {}
_knobs = getattr(triton, "knobs", None)


def _hooks_idle() -> bool:
    """No launch hook (a profiler's) is installed: those need Triton's own dispatch."""
    rt = _knobs.runtime
    for hook in (rt.launch_enter_hook, rt.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return False
    return True


def _direct_supported(ck: object) -> bool:
    """Whether this Triton's compiled kernels take the launcher call :meth:`Launch.fire`
    makes (Triton >= 3.3: every argument, constexprs included, after the hooks)."""
    if _knobs is None or _interpreting() or ck is None:
        return False
    if not all(hasattr(ck, a) for a in ("run", "function", "packed_metadata")):
        return False
    try:
        major, minor = (int(x) for x in triton.__version__.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (3, 3)


@functools.cache
def _kernel_arg_names() -> tuple[str, ...]:
    names = getattr(_scan_kernel, "arg_names", None)
    if not names:
        names = list(inspect.signature(_scan_kernel.fn).parameters)
    return tuple(names)


@functools.cache
def _interpreting() -> bool:
    from rltscan.scan import triton_interpreting

    return triton_interpreting()


def plan_launch(
    kind: int,
    *,
    reverse: bool,
    cols: dict[str, Tensor],
    dtype: torch.dtype,
    n_out: int,
    has_row: bool = False,
    has_init: bool = False,
    nv_mode: int = 3,
    missing: float = 0.0,
    params: dict[str, float] | None = None,
    first_given: bool = False,
    check: bool = False,
    continues: bool = False,
    trace: int = 0,
    ptr_dtypes: tuple[torch.dtype, ...] = (),
    nset: int = 1,
    set_stride: int = 0,
) -> Launch:
    """The :class:`Launch` for ``cols`` (all ``[R, T]`` with one layout, see
    :func:`_same_layout`) and the estimator's switches."""
    params = params or {}
    ref = cols["c0"] if "c0" in cols else cols["c1"]
    n_rows, steps = ref.shape
    time_contiguous = ref.stride(1) == 1 or steps == 1
    tiles = choose_tiles(n_rows, steps, time_contiguous, kind, dtype == torch.float64)
    # (plain integer ceil: triton.cdiv from Python goes through the JIT machinery)
    n_tblocks = -(-steps // tiles.chunk)
    n_rblocks = -(-n_rows // tiles.rows)
    grid = n_rblocks * n_tblocks
    compute = tl.float64 if dtype == torch.float64 else tl.float32
    consts = dict(
        KIND=kind, REVERSE=reverse, NV_MODE=nv_mode,
        HAS_V="c1" in cols, HAS_TERM="term" in cols, HAS_TRUNC="trunc" in cols,
        FIRST_GIVEN=first_given, HAS_INIT=has_init, HAS_OUT1=n_out > 1, CHECK=check,
        CONTINUES=continues,
        ROWS=tiles.rows, CHUNK=tiles.chunk, PER=tiles.per_thread(time_contiguous),
        LOOKBACK=n_tblocks > 1, COMPUTE=compute,
        WIDE=dtype == torch.float64, TRACE=trace, NSET=nset,
        HAS_DISC="disc" in cols, HAS_LAMT="lamt" in cols,
    )  # fmt: skip
    order = [n for n in _kernel_arg_names() if n in consts]
    scalars = (
        *_scalar_args(
            params.get("gamma", 1.0), params.get("lam", 1.0), params.get("rho_clip", 1.0),
            params.get("c_clip", 1.0), params.get("pg_rho_clip", 1.0),
        ),
        missing,
    )  # fmt: skip
    return Launch(
        grid=grid,
        num_warps=tiles.num_warps,
        max_registers=register_cap(
            kind,
            lookback=n_tblocks > 1,
            wide=dtype == torch.float64,
            nset=nset,
            check=check,
            step_columns="disc" in cols or "lamt" in cols,
        ),
        ws_words=workspace_words(grid * nset, tiles.rows, dtype) if n_tblocks > 1 else 0,
        ints=(n_rows, steps, ref.stride(0), ref.stride(1), n_tblocks, set_stride),
        scalars=scalars,
        consts=tuple((n, consts[n]) for n in order),
        ptr_dtypes=ptr_dtypes,
        check=check,
    )


def _same_layout(cols: dict[str, Tensor], ref: Tensor) -> tuple[dict[str, Tensor], Tensor]:
    """All [R, T] columns must share strides; copy the odd ones (rare) to ref's layout."""
    stride = ref.stride()
    if 0 in stride or not _dense(ref):
        ref = ref.contiguous()
        stride = ref.stride()
    out = {}
    for name, x in cols.items():
        if x.stride() == stride:
            out[name] = x
        else:
            y = torch.empty_strided(ref.shape, stride, dtype=x.dtype, device=x.device)
            y.copy_(x)
            out[name] = y
    return out, ref


def _dense(x: Tensor) -> bool:
    r, t = x.shape
    s0, s1 = x.stride()
    return (s1 == 1 and s0 >= t) or (s0 == 1 and s1 >= r) or r == 1 or t == 1


def _launch(
    kind: int,
    *,
    reverse: bool,
    cols: dict[str, Tensor],
    dtype: torch.dtype,
    out_names: tuple[str, ...],
    row: Tensor | None = None,
    has_init: bool = False,
    nv_mode: int = 3,
    missing: float = 0.0,
    params: dict[str, float] | None = None,
    first_given: bool = False,
    check: bool | str = False,
    carry_rows: dict[str, Tensor] | None = None,
    trace: int = 0,
    settings: Tensor | None = None,
) -> tuple[dict[str, Tensor], Tensor | None, Launch, list[Tensor], int]:
    """Plan and fire one launch. ``check``: False, True (a device word read after a
    sync, :func:`read_error`) or ``"defer"`` (the pinned board, :func:`deferred_hit`).
    ``settings``: a ``[K, 2]`` table of (γ, λ) in ``dtype``; each output is then
    ``[K, R, T]``, one ``[R, T]`` block per setting with the inputs' strides (``row``,
    the boundary, is then ``[R*K]``, settings inner).
    Returns the outputs, the sync word (or None), and the plan, the pointer arguments
    and the check id it ran with (for a caller that binds later calls of the shape)."""
    ref_name = next(n for n in ("c0", "c1") if n in cols)
    cols, ref = _same_layout(cols, cols[ref_name])
    device = ref.device
    nset, set_stride = 1, 0
    if settings is None:
        outs = [
            torch.empty_strided(ref.shape, ref.stride(), dtype=dtype, device=device)
            for _ in out_names
        ]
    else:
        nset = int(settings.shape[0])
        (n_rows, steps), (s0, s1) = ref.shape, ref.stride()
        set_stride = (n_rows - 1) * s0 + (steps - 1) * s1 + 1  # the span of one [R, T]
        outs = [
            torch.empty_strided(
                (nset, n_rows, steps), (set_stride, s0, s1), dtype=dtype, device=device
            )
            for _ in out_names
        ]
    dummy = outs[0]
    word, check_id = None, 0
    if check == "defer":
        err, check_id = _board(device).word, next_check_id(device)
    elif check:
        err = word = _err_word(device)
    else:
        err = dummy
    tensors = [cols.get(s, dummy) for s in _IN_SLOTS]
    tensors += [row if row is not None else dummy]
    tensors += [(carry_rows or {}).get(k, dummy) for k in _CARRY_ROWS]
    # the workspace slot holds the dummy until fire() fills it (look-back only)
    tensors += [outs[0], outs[1] if len(outs) > 1 else dummy, dummy, err]
    tensors += [settings if settings is not None else dummy]
    tensors += [cols.get(s, dummy) for s in _STEP_SLOTS]
    plan = plan_launch(
        kind, reverse=reverse, cols=cols, dtype=dtype, n_out=len(outs), has_row=row is not None,
        has_init=has_init, nv_mode=nv_mode, missing=missing, params=params,
        first_given=first_given, check=bool(check), continues=carry_rows is not None,
        trace=trace, ptr_dtypes=tuple(t.dtype for t in tensors), nset=nset,
        set_stride=set_stride,
    )  # fmt: skip
    plan.fire(list(tensors), device, check_id)
    return dict(zip(out_names, outs, strict=True)), word, plan, tensors, check_id


def _hi_lo(x: float) -> tuple[float, float]:
    """Split a float into an fp32 pair with hi + lo == x to ~48 bits (fp64 kernels)."""
    if not math.isfinite(x):
        return x, 0.0
    hi = struct.unpack("f", struct.pack("f", x))[0]
    return hi, x - hi


@functools.lru_cache(maxsize=256)
def _scalar_args(
    gamma: float, lam: float, rho_clip: float, c_clip: float, pg_rho_clip: float
) -> tuple[float, ...]:
    return (
        *_hi_lo(gamma),
        *_hi_lo(lam),
        *_hi_lo(_log(rho_clip)),
        *_hi_lo(_log(c_clip)),
        *_hi_lo(_log(pg_rho_clip)),
    )


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def linear_scan(a: Tensor, b: Tensor, *, reverse: bool, init: Tensor | None = None) -> Tensor:
    """The bare recurrence over ``[R, T]`` (same signature as the other backends)."""
    out, *_ = _launch(
        LINEAR,
        reverse=reverse,
        cols={"c0": a, "c1": b},
        dtype=b.dtype,
        out_names=("y",),
        row=None if init is None else init.to(b.dtype).contiguous(),
        has_init=init is not None,
    )
    return out["y"]


def fused(kind: str) -> bool:
    """Whether ``kind`` has a fused prologue here; any other estimator runs through
    :func:`linear_scan` with the ``(a, b)`` its module builds (``estimators._solve.solve``)."""
    return kind in kinds.SLOTS


def reads_column(kind: str, name: str) -> bool:
    """Whether the fused prologue of ``kind`` reads the Problem column ``name`` (a per-step
    ``discount`` or ``lam_per_step`` included); a column it does not read sends the call
    to the generic path (``estimators._solve.solve``)."""
    return name in kinds.SLOTS.get(kind, ())


@dataclass(frozen=True)
class Fired:
    """How a :func:`solve` launched: its plan and pointer arguments (the caller may bind
    later calls of the same shape to them, ``estimators.bound``)."""

    launch: Launch
    tensors: list[Tensor]
    check_id: int


def solve(
    p, outputs: tuple[str, ...], check: bool | str = False
) -> tuple[dict[str, Tensor], bool, Fired]:
    """Run an ``estimators._problem.Problem`` of a :func:`fused` kind through the kernel.

    ``outputs`` are the estimator's output names, in the order its epilogue writes
    them (``out0``, ``out1``). A problem with ``settings`` (several (γ, λ)) runs them
    all in this one launch: each output is then ``[K, R, T]``, and a carry's ``y`` (or
    the ``init``) is per setting, ``[R, K]`` (``[R]``: the same for every setting).
    With ``check`` the kernel also screens every entry it reads for NaN/Inf (a missing
    bootstrap counts): ``True`` reads the result after a device sync and the second
    result says whether any was found; ``"defer"`` never syncs: a hit lands on the
    device's board, read later by :func:`deferred_hit` (the second result is then
    False). A carry's fields must be complete (the caller checks: a chunk from another
    bootstrap form has no ``next_value``).
    """
    slots = kinds.SLOTS[p.kind]
    cols = {slots[name]: x for name, x in p.cols.items() if name in slots}
    first_given = "is_first" in p.cols
    if first_given:
        cols["term"] = p.cols["is_first"]
    else:
        if "terminated" in p.cols:
            cols["term"] = p.cols["terminated"]
        if "truncated" in p.cols:
            cols["trunc"] = p.cols["truncated"]
    table = None
    settings = getattr(p, "settings", None)
    if settings is not None:
        table = _settings_table(p.params, settings, p.dtype, p.device)
    row, has_init = None, False
    if p.boundary is not None:
        row, has_init = p.boundary.to(p.dtype), True
        if table is not None:  # per virtual row (data row outer, setting inner)
            if row.ndim == 1:
                row = row[:, None].expand(row.shape[0], len(settings))
            row = row.reshape(-1)
        row = row.contiguous()
    elif p.last_value is not None:
        row = p.last_value.to(p.dtype).contiguous()
    carry_rows = None
    if p.carry is not None:
        c = p.carry
        carry_rows = {
            k: (v.to(torch.uint8) if k == "prev_done" else v.to(p.dtype)).contiguous()
            for k in _CARRY_ROWS
            if (v := getattr(c, k)) is not None
        }
    out, word, plan, tensors, check_id = _launch(
        KINDS[p.kind],
        reverse=p.reverse,
        cols=cols,
        dtype=p.dtype,
        out_names=outputs,
        row=row,
        has_init=has_init,
        nv_mode=NV_CODES[p.nv_mode],
        missing=0.0 if p.missing_zero else math.nan,
        params=p.params,
        first_given=first_given,
        check=check,
        carry_rows=carry_rows,
        trace=TRACES[p.params.get("trace", "retrace")] if p.kind == "retrace" else 0,
        settings=table,
    )
    return out, read_error(word), Fired(plan, tensors, check_id)


_TABLES: dict[tuple, Tensor] = {}


def _settings_table(params: dict, settings: tuple, dtype: torch.dtype, device: torch.device):
    """The ``[K, 2]`` (γ, λ) table of a settings launch, kept per device and dtype (a
    streamed file reuses it every window: no host-to-device copy per window)."""
    pairs = tuple(
        (
            float(s.get("gamma", params.get("gamma", 1.0))),
            float(s.get("lam", params.get("lam", 1.0))),
        )
        for s in settings
    )
    key = (pairs, dtype, device)
    t = _TABLES.get(key)
    if t is None:
        if len(_TABLES) > 64:
            _TABLES.clear()
        t = _TABLES[key] = torch.tensor(pairs, dtype=dtype, device=device)
    return t
