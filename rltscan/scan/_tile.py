"""The tile-level Triton helpers the scan kernel's shell (``triton_scan``) and each
kind's prologue and epilogue (``kinds``) share: loads, flags, the NaN/Inf screen and
the stores. All ``@triton.jit``: Triton inlines them into ``_scan_kernel``."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _ld(ptr, offs, mask, COMPUTE: tl.constexpr):
    return tl.load(ptr + offs, mask=mask, other=0.0).to(COMPUTE)


@triton.jit
def _halves(x, ROWS: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr):
    """``x`` ([ROWS, CHUNK], ``PER`` consecutive steps a thread) as the two halves of
    every thread's steps, each ``[ROWS, CHUNK // PER, PER // 2]``."""
    x4 = tl.reshape(x, [ROWS, CHUNK // PER, 2, PER // 2])
    return tl.split(tl.permute(x4, (0, 1, 3, 2)))


@triton.jit
def _put(ptr, x, offs, mask, o3, m3a, m3b, ROWS: tl.constexpr, CHUNK: tl.constexpr,
         PER: tl.constexpr):  # fmt: skip
    """``tl.store(ptr + offs, x, mask)``. With 8 steps a thread, as two 16-byte halves a
    thread (``o3``: the first half's offsets, ``m3a``, ``m3b``: each half's mask):
    Triton would otherwise first move the tile through shared memory into 4 steps a
    thread, its widest store (two barriers and 8 bytes of shared memory a step).

    At 16 steps a thread (GAE's and returns' 2048-step tiles) the same 16-byte groups,
    four a thread, took GAE from 18 barriers a thread to 2 (sm_90a SASS) but ran slower
    on an H100 at 2^26 flat steps, kernel % of the copy floor: GAE 89.2 -> 75.9, returns
    89.0 -> 74.9 (bench/results/kernel-nextv-h100-2026-12-07): a warp's store then
    touches 16-byte pieces 64 bytes apart, where through shared memory it writes 512
    contiguous bytes. Those tiles keep Triton's store."""
    if PER == 8:
        x0, x1 = _halves(x, ROWS, CHUNK, PER)
        tl.store(ptr + o3, x0, mask=m3a)
        tl.store(ptr + o3 + PER // 2, x1, mask=m3b)
    else:
        tl.store(ptr + offs, x, mask=mask)


@triton.jit
def _pairs(x, ROWS: tl.constexpr, G: tl.constexpr, N: tl.constexpr):
    """(even, odd) steps of each thread's ``N`` (``x``: ``[ROWS, G, N]``), each
    ``[ROWS, G, N // 2]``: registers renamed, no data moves."""
    return tl.split(tl.reshape(x, [ROWS, G, N // 2, 2]))


@triton.jit
def _weave(odd, nxt, ROWS: tl.constexpr, G: tl.constexpr, N: tl.constexpr):
    """``[ROWS, G, N]`` from each thread's odd steps and the even steps shifted by one."""
    return tl.reshape(tl.join(odd, nxt), [ROWS, G, N])


@triton.jit
def _shift(x, nx, ROWS: tl.constexpr, G: tl.constexpr, N: tl.constexpr):
    """Each thread's ``N`` steps (``x``: ``[ROWS, G, N]``, N a power of two up to 32)
    moved one step down, ``nx`` (``[ROWS, G, 1]``) in the last: ``y[p] = x[p + 1]``,
    ``y[N - 1] = nx``. Step ``p + 1`` of the even steps is the odd step ``p``, and the odd
    steps' successors are the even steps shifted, so one level of (even, odd) halves a
    power of two: the shift is register renaming, no shuffle and no shared memory.

    The levels are written out, not a call of ``_shift`` on ``N // 2``: Triton 3.4
    cannot hash a ``@triton.jit`` function that calls itself (RecursionError in
    ``JITFunction.cache_key``; 3.5 on can, and compile the recursion to the same PTX)."""
    e1, o1 = _pairs(x, ROWS, G, N)
    if N == 2:
        s1 = nx
    else:
        e2, o2 = _pairs(e1, ROWS, G, N // 2)
        if N == 4:
            s2 = nx
        else:
            e3, o3 = _pairs(e2, ROWS, G, N // 4)
            if N == 8:
                s3 = nx
            else:
                e4, o4 = _pairs(e3, ROWS, G, N // 8)
                if N == 16:
                    s4 = nx
                else:
                    _, o5 = _pairs(e4, ROWS, G, N // 16)
                    s4 = _weave(o5, nx, ROWS, G, 2)
                s3 = _weave(o4, s4, ROWS, G, N // 8)
            s2 = _weave(o3, s3, ROWS, G, N // 4)
        s1 = _weave(o2, s2, ROWS, G, N // 2)
    return _weave(o1, s1, ROWS, G, N)


@triton.jit
def _last(x, ROWS: tl.constexpr, G: tl.constexpr, N: tl.constexpr):
    """Each thread's last step of ``x`` (``[ROWS, G, N]``) as ``[ROWS, G, 1]``."""
    _, o = _pairs(x, ROWS, G, N)
    if N > 2:
        _, o = _pairs(o, ROWS, G, N // 2)
        if N > 4:
            _, o = _pairs(o, ROWS, G, N // 4)
            if N > 8:
                _, o = _pairs(o, ROWS, G, N // 8)
                if N > 16:
                    _, o = _pairs(o, ROWS, G, N // 16)
    return o


@triton.jit
def _ld_next(ptr, x, offs1, has_next, ROWS: tl.constexpr, CHUNK: tl.constexpr,
             PER: tl.constexpr, COMPUTE: tl.constexpr):  # fmt: skip
    """The column at step t+1 where ``has_next`` (elsewhere 0, or a value the caller
    drops), given ``x``, the same column at step t (0 past the window, as loaded). With
    2 to 32 consecutive steps a thread (a time-contiguous tile: the time stride is 1) it
    is ``x`` moved one step along each thread's registers (:func:`_shift`) and one load a
    thread for the step after its last: the misaligned load at ``offs1`` it replaces
    splits into a 4-byte load a step, where the aligned column loads 16 bytes at a time.
    Otherwise that load.

    sm_90a SASS (Triton 3.6, the launches of 2^26 flat steps), global load instructions
    a thread: GAE 45 -> 30, TD(λ) 23 -> 18, V-trace 38 -> 24 (its ``vs_{t+1}`` too),
    no register more (bench/results/kernel-nextv-sass-sm90-2026-12-07); kernel time on an
    H100 at 2^26 flat steps, % of the copy floor: GAE 89.6 -> 91.7, V-trace 86.5-87.2 ->
    88.6-88.7, TD(λ) 80.6 -> 81.5, and TD(λ) on 2048-step tiles 88.5
    (bench/results/kernel-nextv-h100-2026-12-07, call2)."""
    if PER > 1 and PER <= 32:
        o_next = _last(tl.reshape(offs1, [ROWS, CHUNK // PER, PER]), ROWS, CHUNK // PER, PER)
        h_last = _last(tl.reshape(has_next, [ROWS, CHUNK // PER, PER]), ROWS, CHUNK // PER, PER)
        nx = tl.load(ptr + o_next, mask=h_last, other=0.0).to(COMPUTE)
        # (a step without a successor takes x's next step: 0 past the window where x was
        # loaded there, else a value the caller drops)
        y = _shift(tl.reshape(x, [ROWS, CHUNK // PER, PER]), nx, ROWS, CHUNK // PER, PER)
        y = tl.reshape(y, [ROWS, CHUNK])
    else:
        y = _ld(ptr, offs1, has_next, COMPUTE)
    return y


@triton.jit
def _nonfinite(x):
    return (x != x) | (tl.abs(x) == float("inf"))


@triton.jit
def _flag(ptr, offs, mask):
    return tl.load(ptr + offs, mask=mask, other=0) != 0
