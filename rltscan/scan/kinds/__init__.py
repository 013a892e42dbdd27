"""Each estimator kind of the scan kernel: its prologue (load its raw columns, then build
``a_t``, ``b_t`` on-chip) and epilogue (its outputs from the scan's ``y``), one module a
kind, each beside the torch coefficients it mirrors (``estimators/<name>.py``, named in
its docstring), and which Problem column feeds which kernel slot (``SLOTS``).

``triton_scan._scan_kernel`` is the shell: tiles, flags, settings, the scan, the
look-back and the stores. It calls the functions here with its constexpr ``KIND``; each
dispatcher below picks the kind's function at compile time (by name, through
:func:`_call`) and Triton inlines it, so the kernel compiles to the code the single-body
kernel did (bench/results/kernel-kinds-sass-sm90-2026-12-05). A kind's functions take
the same arguments (a tuple ``args``, unpacked): the shell's column pointers ``cols``
(c0..c5), flag and per-row pointers ``ptrs``, tile positions ``at``, and the state
``st`` that the kind's ``load`` returned and its ``prepare`` completed.
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
def _call(KIND: tl.constexpr, NAME: tl.constexpr, args):
    """Kind ``KIND``'s function ``NAME`` on ``args``: the one place a KIND number names
    its module (the numbers of ``KINDS``), resolved at compile time like every branch
    on a constexpr."""
    if KIND == 0:
        out = getattr(linear, NAME)(*args)
    elif KIND == 1:
        out = getattr(gae, NAME)(*args)
    elif KIND == 2:
        out = getattr(td_lambda, NAME)(*args)
    elif KIND == 3:
        out = getattr(returns, NAME)(*args)
    elif KIND == 4:
        out = getattr(vtrace, NAME)(*args)
    elif KIND == 5:
        out = getattr(retrace, NAME)(*args)
    elif KIND == 6:
        out = getattr(traces, NAME)(*args)
    else:
        out = getattr(prefix_sum, NAME)(*args)
    return out


@triton.jit
def load(KIND: tl.constexpr, args):
    """The columns read at every step (before the flags): the kind's state."""
    return _call(KIND, "load", args)


@triton.jit
def prepare(KIND: tl.constexpr, args):
    """The state once the flags are in, shared by every setting (LINEAR: as loaded)."""
    st = args[0]
    if KIND != 0:
        st = _call(KIND, "prepare", args)
    return st


@triton.jit
def coefficients(KIND: tl.constexpr, args):
    """One setting's ``(a, b)``."""
    return _call(KIND, "coefficients", args)


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
