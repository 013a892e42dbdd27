"""Each estimator kind of the scan kernel: its prologue (load its raw columns, then build
``a_t``, ``b_t`` on-chip) and epilogue (its outputs from the scan's ``y``), one module a
kind, each beside the torch coefficients it mirrors (``estimators/<name>.py``, named in
its docstring), and which Problem column feeds which kernel slot (``SLOTS``).

``triton_scan._scan_kernel`` is the shell: tiles, flags, settings, the scan, the
look-back and the stores. It calls the functions here with its constexpr ``KIND``; each
dispatcher below picks the kind's function at compile time and Triton inlines it, so
the kernel compiles to the code the single-body kernel did
(bench/results/kernel-kinds-sass-sm90-2026-12-05). A kind's functions take the same
arguments (a tuple ``args``, unpacked): the shell's column pointers ``cols`` (c0..c5),
flag and per-row pointers ``ptrs``, tile positions ``at``, and the state ``st`` that
the kind's ``load`` returned and its ``prepare`` completed.

Each dispatcher names every kind's function (``gae.load(*args)``, ...), though one
``getattr(module, NAME)`` compiles to the same code: Triton's on-disk cache key hashes
the functions a kernel calls by name and misses those reached through ``getattr``, so
an edited kind would run a stale cached kernel (tests/unit/test_kernel_cache_key.py).
"""

from __future__ import annotations

import triton
import triton.language as tl

from rltscan.scan.kinds import (
    gae,
    linear,
    prefix_sum,
    retrace,
    returns,
    td_lambda,
    traces,
    vtrace,
)
from rltscan.scan.kinds._common import store_y

# kind name -> constexpr KIND; the numbers below match
KINDS = {
    "linear": 0,
    "gae": 1,
    "td_lambda": 2,
    "returns": 3,
    "vtrace": 4,
    "retrace": 5,
    "traces": 6,
    "prefix_sum": 7,
}
# Which Problem column feeds which kernel slot, per fused kind (not LINEAR: a and b)
SLOTS = {
    "gae": gae.SLOTS,
    "td_lambda": td_lambda.SLOTS,
    "returns": returns.SLOTS,
    "vtrace": vtrace.SLOTS,
    "retrace": retrace.SLOTS,
    "traces": traces.SLOTS,
    "prefix_sum": prefix_sum.SLOTS,
}
TRACES = retrace.TRACES


@triton.jit
def load(KIND: tl.constexpr, args):
    """The columns read at every step (before the flags): the kind's state."""
    if KIND == 0:
        st = linear.load(*args)
    elif KIND == 1:
        st = gae.load(*args)
    elif KIND == 2:
        st = td_lambda.load(*args)
    elif KIND == 3:
        st = returns.load(*args)
    elif KIND == 4:
        st = vtrace.load(*args)
    elif KIND == 5:
        st = retrace.load(*args)
    elif KIND == 6:
        st = traces.load(*args)
    else:
        st = prefix_sum.load(*args)
    return st


@triton.jit
def prepare(KIND: tl.constexpr, args):
    """The state once the flags are in, shared by every setting (LINEAR: as loaded)."""
    st = args[0]
    if KIND == 1:
        st = gae.prepare(*args)
    elif KIND == 2:
        st = td_lambda.prepare(*args)
    elif KIND == 3:
        st = returns.prepare(*args)
    elif KIND == 4:
        st = vtrace.prepare(*args)
    elif KIND == 5:
        st = retrace.prepare(*args)
    elif KIND == 6:
        st = traces.prepare(*args)
    elif KIND == 7:
        st = prefix_sum.prepare(*args)
    return st


@triton.jit
def coefficients(KIND: tl.constexpr, args):
    """One setting's ``(a, b)``."""
    if KIND == 0:
        ab = linear.coefficients(*args)
    elif KIND == 1:
        ab = gae.coefficients(*args)
    elif KIND == 2:
        ab = td_lambda.coefficients(*args)
    elif KIND == 3:
        ab = returns.coefficients(*args)
    elif KIND == 4:
        ab = vtrace.coefficients(*args)
    elif KIND == 5:
        ab = retrace.coefficients(*args)
    elif KIND == 6:
        ab = traces.coefficients(*args)
    else:
        ab = prefix_sum.coefficients(*args)
    return ab


@triton.jit
def screen(KIND: tl.constexpr, args):
    """``bad`` (``args[1]``: b is not finite) with the read entries that do not reach b."""
    bad = args[1]
    if KIND == 4:
        bad = vtrace.screen(*args)
    elif KIND == 5:
        bad = retrace.screen(*args)
    return bad


@triton.jit
def epilogue(KIND: tl.constexpr, args):
    """The outputs from ``y`` (the kinds without an epilogue write ``y`` as it is)."""
    if KIND == 1:
        gae.epilogue(*args)
    elif KIND == 4:
        vtrace.epilogue(*args)
    elif KIND == 5:
        retrace.epilogue(*args)
    else:
        store_y(*args)
