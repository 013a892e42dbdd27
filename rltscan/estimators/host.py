"""The torch-free lane: one block of numpy columns solved by the cpu backend's fused kernel
without importing torch.

A streamed cpu run spent ~1.3 s of its ~5.5 s of CPU on 2 cores importing torch, only to
wrap numpy windows as tensors for a numba kernel (bench/results/cpu-stream-2core-
2026-12-07/). Where :func:`lane` says a run may take it (the cpu backend on the CPU, an
estimator with a fused kernel: the one place that chooses), the engine hands each block
to :func:`solve` instead of the public function. :func:`solve` reads the call with the
estimators' own rules (the parameter ranges and fallbacks, the module's ``prepare``, the
bootstrap form, the missing-bootstrap rule, the time axis, the compute dtype), builds
the ``Problem`` the public function builds, with numpy ``[R, T]`` views for columns, and
runs :func:`rltscan.scan.cpu_fused.run`, the entry the torch backend's solve runs too.

It takes only what it can do the same way: numpy arrays of one shape (one or two
axes), float32/float64 values and bool flags, scalar parameters, the CLI's controls, a
carry of this estimator, and contents that pass the checks at a glance
(``_checks.passes``). A truncation with no bootstrap value, where the missing-bootstrap
rule is in force, is refused here with the public function's own error
(``_checks.refuse_missing_bootstrap``: the check and its message are the ones
``validate_contents`` runs). Anything else, or any other refusal, is answered None and
the public function runs that block (importing torch), with its own messages; the
carries of the two cross freely. So the outputs are the torch lane's to the bit
(tests/engines/test_host_lane.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rltscan.errors import RltscanError
from rltscan.estimators import declared_module
from rltscan.estimators._carry import Carry, carry_out
from rltscan.estimators._checks import (
    check_params,
    passes,
    refuse_missing_bootstrap,
    warn_not_contractive,
)
from rltscan.estimators._frame import Frame, in_float64, time_axis
from rltscan.estimators._problem import Problem, missing_zero, prepared_call
from rltscan.estimators.declaration import (
    FLAG_INPUTS,
    PER_ROW_INPUTS,
    PER_STEP_OF,
    Declaration,
    is_sweep,
)
from rltscan.scan import CPU_FUSED, resolve_backend

# The controls a lane call may carry besides the inputs and the parameters (a file run's
# call: rltscan.plan.Plan.call); with anything else the public function runs the block.
CONTROLS = ("missing_bootstrap", "time_dim", "backend")
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def lane(kind: str, backend: Any, device: Any, *, load: bool = True) -> bool:
    """Whether the blocks of a run of estimator ``kind`` on ``device`` go to :func:`solve`
    (and the run need not import torch): on the CPU, with the cpu backend in force
    (``--backend cpu``, or ``auto`` where numba loads) and a kind the fused kernel
    solves. A backend that cannot run answers False: the public function refuses it.
    ``load=False`` decides without importing numba (the CLI, before its loading thread)."""
    if getattr(device, "type", None) != "cpu" or kind not in CPU_FUSED:
        return False
    try:
        return resolve_backend(backend, device, load=load) == "cpu"
    except RltscanError:
        return False


def solve(
    d: Declaration, args: Mapping[str, Any], carry: Any
) -> tuple[dict[str, np.ndarray], Carry] | None:
    """One block of a run :func:`lane` took: ``args`` are the public function's keyword
    arguments (the block's columns and the run's call), ``carry`` the previous block's
    in scan order. Returns ``({output: array in the inputs' layout}, carry)``, or None
    where the public function must run the block (see the module's docstring)."""
    try:
        made = _problem(d, args, carry)
    except RltscanError:  # the public function raises it, in its own order and words
        return None
    if made is None:
        return None
    p, frame = made
    from rltscan.scan import cpu_fused

    reads = {n: d.read_rule(n) for n in d.float_inputs}
    if not cpu_fused.fused(p) or not passes(p, reads):
        return None
    if d.contraction_warning:
        gamma, lam, c_clip = (float(p.params[n]) for n in ("gamma", "lam", "c_clip"))
        warn_not_contractive(gamma, lam, c_clip, d.function_name)
    refuse_missing_bootstrap(p, frame)  # the public function's refusal, raised here
    rows = p.shape[0]
    cols = {
        n: x.view(np.uint8) if n in FLAG_INPUTS else x.astype(p.dtype, copy=False)
        for n, x in p.cols.items()
    }
    c = p.carry
    out = cpu_fused.run(
        p,
        cols,
        p.dtype,
        tuple(declared_module(d.name).OUTPUTS),
        last_value=np.zeros(rows),
        boundary=_per_row(None if c is None else c.y, rows),
        next_value=_per_row(None if c is None else c.next_value, rows),
    )
    return {n: frame.back(y) for n, y in out.items()}, carry_out(p, out)


def _problem(d: Declaration, args: Mapping[str, Any], carry: Any) -> tuple[Problem, Frame] | None:
    """The block's ``Problem`` with numpy columns, by the public function's rules, and the
    ``Frame`` that maps its ``[R, T]`` rows back; None where the call is outside what
    :func:`solve` takes."""
    if set(args) - {*d.inputs, *d.params, *CONTROLS} or not {"time_dim", "backend"} <= set(args):
        return None
    if d.missing_bootstrap is None and "missing_bootstrap" in args:
        return None
    if carry is not None and not (isinstance(carry, Carry) and carry.estimator == d.name):
        return None
    arrays = {n: args[n] for n in d.inputs if args.get(n) is not None}
    ref = arrays.get(d.inputs[0])
    if not isinstance(ref, np.ndarray) or not 1 <= ref.ndim <= 2:
        return None
    for name, x in arrays.items():
        kinds = (np.dtype(bool),) if name in FLAG_INPUTS else _FLOATS
        if (
            type(x) is not np.ndarray  # (a masked array is read by the public function)
            or x.shape != ref.shape
            or x.dtype not in kinds
            or any(s < 0 for s in x.strides)
            or name in PER_ROW_INPUTS
            or name in PER_STEP_OF
        ):
            return None
    if set(arrays) - set(d.inputs_for(args)) or any(args.get(n) is None for n in d.required):
        return None
    params = d.with_fallbacks({p.name: args.get(p.name, p.default) for p in d.parameters})
    if any(p.choices is not None or is_sweep(params[p.name]) for p in d.parameters):
        return None
    check_params(**params)
    if d.misused(params) is not None:
        return None
    _, nv_mode = prepared_call(d, declared_module(d.name), {**dict.fromkeys(d.inputs), **args})
    missing = args.get("missing_bootstrap", d.missing_bootstrap)
    zero = d.missing_bootstrap is not None and missing_zero(missing)
    td, squeeze = time_axis(tuple(ref.shape), args["time_dim"], d.inputs[0])
    if squeeze or ref.shape[td] == 0:  # (a trailing axis of one: the public function's)
        return None
    frame = Frame(tuple(ref.shape), td)
    cols = {n: frame.rows(x) for n, x in arrays.items()}
    if carry is not None:
        if carry.rows != cols[d.inputs[0]].shape[0]:
            return None
        carry = Carry(**{k: _numpy(v) for k, v in vars(carry).items()})
    floats = [x.dtype for n, x in arrays.items() if n not in FLAG_INPUTS]
    p = Problem(
        kind=d.name,
        reverse=d.reverse,
        cols=cols,
        dtype=np.dtype(np.float64 if in_float64(floats) else np.float32),
        params={p.name: float(params[p.name]) for p in d.parameters},
        nv_mode=nv_mode,
        missing_zero=zero,
        carry=carry,
    )
    return p, frame


def _numpy(x: Any) -> Any:
    """A carry's field as numpy (a block the public function ran hands tensors on)."""
    if x is None or isinstance(x, (str, np.ndarray)):
        return x
    return x.detach().cpu().numpy()


def _per_row(x: np.ndarray | None, rows: int) -> np.ndarray:
    """A carry's ``[R]`` value as float64 (zeros when absent), as the kernel reads it."""
    return np.zeros(rows) if x is None else np.ascontiguousarray(x, dtype=np.float64)
