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
    thread, its widest store (two barriers and 8 bytes of shared memory a step)."""
    if PER == 8:
        x0, x1 = _halves(x, ROWS, CHUNK, PER)
        tl.store(ptr + o3, x0, mask=m3a)
        tl.store(ptr + o3 + PER // 2, x1, mask=m3b)
    else:
        tl.store(ptr + offs, x, mask=mask)


@triton.jit
def _nonfinite(x):
    return (x != x) | (tl.abs(x) == float("inf"))


@triton.jit
def _flag(ptr, offs, mask):
    return tl.load(ptr + offs, mask=mask, other=0) != 0
