"""The ``LINEAR`` kind: the bare recurrence, ``(a, b)`` read as columns (``c0``, ``c1``):
any estimator without a fused prologue, through ``triton_scan.linear_scan``."""

from __future__ import annotations

import triton
import triton.language as tl

from rltscan.scan._tile import _ld


@triton.jit
def load(cols, at, NV_MODE: tl.constexpr, HAS_V: tl.constexpr, TRACE: tl.constexpr,
         ROWS: tl.constexpr, CHUNK: tl.constexpr, PER: tl.constexpr,
         COMPUTE: tl.constexpr):  # fmt: skip
    a_ptr, b_ptr, _, _, _, _ = cols
    offs, _, mask, _, _, _, _, _, _ = at
    a_in = _ld(a_ptr, offs, mask, COMPUTE)
    b_in = _ld(b_ptr, offs, mask, COMPUTE)
    return a_in, b_in


@triton.jit
def coefficients(st, g, lm, cut, boot, COMPUTE: tl.constexpr):
    a_in, b_in = st
    return a_in, b_in
