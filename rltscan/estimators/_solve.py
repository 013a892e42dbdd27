"""Dispatch: one ``Problem`` to its backend (the fused Triton kernel, the generic
kernel path on the module's torch coefficients, torch, or the float64 reference)."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor

from rltscan.estimators._checks import validate_contents
from rltscan.estimators._problem import NV_NEXT, Problem, next_of
from rltscan.estimators.declaration import (
    PER_STEP_PARAMETERS,
)
from rltscan.scan import resolve_backend


def solve(
    p: Problem,
    backend: str,
    *,
    validate: bool = False,
    reads=None,
    frame=None,
    defer: bool = False,
    on_launch=None,
) -> dict[str, Tensor]:
    """Validate (when asked) and run one estimator; returns ``{output: [R, T]}``.

    On the Triton backend the content checks are fused into the kernel as a
    screen; only when it fires does the host validator run, to name the input and
    the first bad index. With ``defer`` (results that stay on the GPU) nothing
    waits for the screen: a hit is raised by a later call (docs/CONVENTIONS.md §5.1).
    ``on_launch`` receives the fused kernel's launch (``triton_scan.Fired``), for
    binding later calls of the same shape to it. A problem with ``settings`` runs
    them all in one launch on the fused kernel, else one solve per setting; its
    outputs are ``[K, R, T]``.
    """
    from rltscan.estimators import declared_module

    mod = declared_module(p.kind)
    which = resolve_backend(backend, p.device)
    if p.settings is not None and not (which == "triton" and settings_fused(p)):
        return _each_setting(p, backend, validate=validate, reads=reads, frame=frame)
    if which == "triton":
        from rltscan.scan import triton_scan

        if triton_fused(p):
            if p.carry is not None and p.carry.next_value is None and _reads_next_value(p):
                next_of(p, "next_value")  # raises: the chunks mix bootstrap forms
            check = ("defer" if defer else True) if validate else False
            out, suspicious, fired = triton_scan.solve(p, _kernel_outputs(p, mod), check=check)
            if suspicious:
                validate_contents(p, reads, frame)  # raises with the exact message
            if on_launch is not None:
                on_launch(fired)
            return out
        # The generic path: no fused prologue for this kind (or for a column it was
        # given), so its module builds (a, b) with torch and the kernel runs its plain
        # linear-scan mode.
        if validate:
            validate_contents(p, reads, frame)
        a, b = mod.coefficients(p)
        init = None if p.boundary is None else p.boundary.to(p.dtype)
        y = triton_scan.linear_scan(a.to(p.dtype), b.to(p.dtype), reverse=p.reverse, init=init)
        return mod.finalize(p, y)
    if validate:
        validate_contents(p, reads, frame)
    if which == "cpu":
        from rltscan.scan import cpu_fused

        return cpu_fused.solve(p, mod.coefficients, mod.finalize, tuple(mod.OUTPUTS))
    if which == "reference":
        from rltscan.scan import reference

        q = p.with_dtype(torch.float64)
        a, b = mod.coefficients(q)
        init = None if q.boundary is None else q.boundary.to(torch.float64)
        y = reference.linear_scan(a, b, reverse=q.reverse, init=init)
        return {k: v.to(p.dtype) for k, v in mod.finalize(q, y).items()}
    from rltscan.scan import torch_scan

    a, b = mod.coefficients(p)
    init = None if p.boundary is None else p.boundary.to(p.dtype)
    y = torch_scan.linear_scan(a, b, reverse=p.reverse, init=init)
    return mod.finalize(p, y)


def triton_fused(p: Problem) -> bool:
    """Whether the Triton backend solves ``p`` with its kind's fused prologue (else the
    generic path: the module's torch ``coefficients`` and the kernel's linear mode): a
    fused kind whose prologue reads every per-step column given (γ_t, λ_t, §1.7)."""
    from rltscan.scan import triton_scan

    return triton_scan.fused(p.kind) and all(
        triton_scan.reads_column(p.kind, c) for c in PER_STEP_PARAMETERS if c in p.cols
    )


def settings_fused(p: Problem) -> bool:
    """Whether the Triton kernel solves every setting of ``p`` in one launch: a fused
    estimator with scalar γ and λ. Per-step columns are excluded here (the settings
    table would carry γ and λ for them): they run one fused launch per setting."""
    from rltscan.scan import triton_scan

    return triton_scan.fused(p.kind) and not any(c in p.cols for c in PER_STEP_PARAMETERS)


def _each_setting(p: Problem, backend: str, **checks: Any) -> dict[str, Tensor]:
    """One solve per setting (backends without a settings launch), stacked ``[K, R, T]``;
    the contents are validated once."""
    if checks["validate"]:
        validate_contents(p, checks["reads"], checks["frame"])
    outs: list[dict[str, Tensor]] = []
    for k, s in enumerate(p.settings):
        carry = p.carry
        if carry is not None and carry.y.ndim == 2:
            carry = dataclasses.replace(carry, y=carry.y[:, k])
        one = dataclasses.replace(p, params={**p.params, **s}, settings=None, carry=carry)
        outs.append(solve(one, backend))
    return {name: torch.stack([o[name] for o in outs]) for name in outs[0]}


def _reads_next_value(p: Problem) -> bool:
    """The fused kernel reads V of the next chunk's first step (values, not next_values)."""
    return "values" in p.cols and p.nv_mode != NV_NEXT


def _kernel_outputs(p: Problem, mod: Any) -> tuple[str, ...]:
    """The outputs the fused epilogue writes: the declared ones, less an optional one
    whose input is absent (Retrace's advantages without v_pi)."""
    outputs = tuple(mod.OUTPUTS)
    optional = dict(mod.DECLARATION.optional_outputs)
    return tuple(o for o in outputs if optional.get(o) is None or optional[o] in p.cols)
