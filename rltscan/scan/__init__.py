"""The one numerical engine: a first-order linear-recurrence scan.

    backward (reverse=True):  y_t = a_t * y_{t+1} + b_t,   y_T    = init (default 0)
    forward  (reverse=False): y_t = a_t * y_{t-1} + b_t,   y_{-1} = init (default 0)

Backends share one signature, ``linear_scan(a, b, *, reverse, init)`` over
``[R, T]`` tensors:

- ``reference``: float64 Python loop, the oracle (``reference.py``);
- ``torch``: vectorised chunked scan, CPU or GPU (``torch_scan.py``);
- ``triton``: the fused single-pass kernel (``triton_scan.py``), loaded lazily.

Estimators with a fused Triton prologue do not call this for the Triton backend:
they hand the kernel their raw columns so the coefficients are built on-chip
(``estimators._common.solve``); any other estimator builds ``(a, b)`` with torch and
runs the kernel's plain linear mode. This package imports no estimator.
"""

from __future__ import annotations

import os

import torch
from torch import Tensor

from rltscan.errors import BackendUnavailableError, DataError, ParameterError

BACKENDS = ("auto", "triton", "torch", "reference")


def triton_interpreting() -> bool:
    """True when Triton runs through its CPU interpreter (CI, no GPU)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def resolve_backend(backend: str, device: torch.device) -> str:
    """Pick the backend that will run; raise if the named one cannot run on ``device``."""
    if backend not in BACKENDS:
        raise ParameterError(
            f'unknown backend "{backend}"; pass one of {", ".join(repr(b) for b in BACKENDS)}'
        )
    if backend == "auto":
        return "triton" if device.type == "cuda" else "torch"
    if backend == "triton" and device.type != "cuda" and not triton_interpreting():
        raise BackendUnavailableError(
            f"the triton backend needs CUDA tensors, got {device.type}; "
            'move the inputs to a GPU or pass backend="torch"'
        )
    return backend


def linear_scan(
    a: Tensor,
    b: Tensor,
    *,
    reverse: bool,
    init: Tensor | float | None = None,
    backend: str = "auto",
) -> Tensor:
    """Solve the recurrence along the LAST axis of ``a``/``b`` (any leading shape).

    ``init`` is the boundary value (``y_T`` backward, ``y_{-1}`` forward): a scalar
    or a tensor of the leading shape. Float64 inputs compute in float64; anything
    else in float32. Returns a tensor of ``b``'s shape on ``b``'s device.
    """
    a, b = torch.as_tensor(a), torch.as_tensor(b)
    if a.shape != b.shape:
        raise DataError(
            f'"a" has shape {tuple(a.shape)} but "b" has {tuple(b.shape)}; pass equal shapes'
        )
    if b.ndim == 0:
        raise DataError('"b" is a scalar; pass at least one step (shape [..., T])')
    dtype = torch.float64 if torch.float64 in (a.dtype, b.dtype) else torch.float32
    lead, steps = b.shape[:-1], b.shape[-1]
    a2 = a.to(dtype).reshape(-1, steps)
    b2 = b.to(dtype).reshape(-1, steps)
    init2 = None
    if init is not None:
        init2 = torch.as_tensor(init, dtype=dtype, device=b.device).expand(lead).reshape(-1)
    user_device = b.device
    on_cpu = user_device.type == "cpu"
    if backend == "triton" and on_cpu and torch.cuda.is_available() and not triton_interpreting():
        # as the estimators do: compute on the GPU, return to the caller's device
        a2, b2 = a2.cuda(), b2.cuda()
        init2 = None if init2 is None else init2.cuda()
    which = resolve_backend(backend, b2.device)
    if which == "reference":
        from rltscan.scan import reference

        y = reference.linear_scan(a2, b2, reverse=reverse, init=init2).to(dtype)
    elif which == "torch":
        from rltscan.scan import torch_scan

        y = torch_scan.linear_scan(a2, b2, reverse=reverse, init=init2)
    else:
        from rltscan.scan import triton_scan

        y = triton_scan.linear_scan(a2, b2, reverse=reverse, init=init2)
    return y.reshape(b.shape).to(user_device)
