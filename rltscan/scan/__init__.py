"""The one numerical engine: a first-order linear-recurrence scan.

    backward (reverse=True):  y_t = a_t * y_{t+1} + b_t,   y_T    = init (default 0)
    forward  (reverse=False): y_t = a_t * y_{t-1} + b_t,   y_{-1} = init (default 0)

Backends share one signature, ``linear_scan(a, b, *, reverse, init)`` over
``[R, T]`` tensors:

- ``reference``: float64 Python loop, the oracle (``reference.py``);
- ``torch``: vectorised chunked scan, CPU or GPU (``torch_scan.py``);
- ``triton``: the fused single-pass kernel (``triton_scan.py``), loaded lazily;
  triton is optional (:func:`triton_missing`, :func:`resolve_backend`);
- ``cpu``: fused numba kernels for CPU tensors (``cpu_fused.py``); numba is optional
  (``pip install 'rltscan[cpu]'``, :func:`numba_missing`).

Estimators with a fused Triton prologue do not call this for the Triton backend:
they hand the kernel their raw columns so the coefficients are built on-chip
(``estimators._solve.solve``); any other estimator builds ``(a, b)`` with torch and
runs the kernel's plain linear mode. This package imports no estimator.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
import warnings
from typing import TYPE_CHECKING, Any

from rltscan.errors import BackendUnavailableError, DataError, ParameterError

if TYPE_CHECKING:  # torch loads with the first scan: choosing a backend needs none
    from torch import Tensor

BACKENDS = ("auto", "triton", "torch", "cpu", "reference")
# The fix named wherever the triton backend cannot load (README, "Install").
TRITON_FIX = (
    "install it (pip install 'rltscan[triton]'; CUDA builds of torch on Linux bring it) "
    'or pass --backend torch (backend="torch")'
)
# The oldest Triton the kernel compiles on: 3.3.1 stops in ConvertTritonToTritonGPU ("type
# mismatch for bb argument" in the look-back's loop), 3.2 on the kinds' argument tuples;
# 3.4, 3.5, 3.6 and 3.9 compile it (sm_90a, offline), and 3.6 runs the GPU suite. torch
# pins its own Triton (torch 2.8 brings 3.4), so the fix is a newer torch.
MIN_TRITON = (3, 4)
UPGRADE_TORCH = "upgrade torch to 2.8 or newer (pip install -U torch), which brings triton 3.4"
OLD_TRITON_FIX = f'{UPGRADE_TORCH}, or pass --backend torch (backend="torch")'

# The estimators the cpu backend's fused kernel solves from their raw columns (with scalar
# γ and λ; ``cpu_fused.fused`` decides for one problem); the others run its plain scan.
CPU_FUSED = ("gae", "returns", "td_lambda", "vtrace")

# The fix named wherever the cpu backend cannot load.
NUMBA_FIX = "install it (pip install 'rltscan[cpu]') or pass --backend torch (backend=\"torch\")"


class BackendFallbackWarning(RuntimeWarning):
    """``backend="auto"`` on CUDA ran the torch backend because triton cannot load."""


def triton_interpreting() -> bool:
    """True when Triton runs through its CPU interpreter (CI, no GPU)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def triton_missing(*, load: bool = True) -> str | None:
    """Why the triton backend cannot run here, or None when it can.

    Triton is an optional dependency (CUDA builds of torch on Linux bring their own;
    CPU-only installs need none). ``load=False`` asks only whether the package is
    installed (no import: for plans and dry runs); ``load=True`` also imports the
    kernel module, and triton with it, so that a broken install is caught here too."""
    try:
        installed = importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):
        installed = False
    if not installed:
        return "the triton package is not installed"
    too_old = triton_too_old()
    if too_old is not None:
        return too_old
    return _import_failure() if load else None


@functools.cache
def triton_too_old() -> str | None:
    """Why the installed triton cannot compile the kernel (older than
    :data:`MIN_TRITON`), or None; read from the package's metadata, without importing it
    (a build that names itself otherwise, ``pytorch-triton``, is judged by its version
    the same way)."""
    from importlib import metadata

    for dist in ("triton", "pytorch-triton"):
        try:
            version = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
        release = _release(version)
        if release and release < MIN_TRITON:  # (a version it cannot read is not judged)
            need = ".".join(map(str, MIN_TRITON))
            return f"triton {version} is installed and the fused kernel needs triton>={need}"
        return None
    return None


def _release(version: str) -> tuple[int, ...]:
    """The leading release numbers of a version string ("3.4.0+git1a2b" -> (3, 4, 0),
    "3.5.0rc1" -> (3, 5, 0))."""
    parts = []
    for piece in version.split("+")[0].split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group()))
    return tuple(parts)


def numba_missing(*, load: bool = True) -> str | None:
    """Why the cpu backend cannot run here, or None when it can (numba is optional).
    ``load=False`` asks only whether numba is installed (no import)."""
    try:
        installed = importlib.util.find_spec("numba") is not None
    except (ImportError, ValueError):
        installed = False
    if not installed:
        return "the numba package is not installed"
    return _cpu_import_failure() if load else None


def load_cpu_target() -> None:
    """numba and its CPU target loaded, where numba can load: the target's registries
    (~0.6-0.9 s of CPU on the 2-core machine, numba's ``scipy.linalg`` probe among them)
    load with the first kernel compiled or read from numba's cache, so a caller that
    loads them ahead (the CLI's :mod:`rltscan.preload` thread) takes them off the first
    window's path. Under numba's compiler lock, as its own first compile would."""
    if numba_missing() is not None:
        return
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target

    with global_compiler_lock:
        cpu_target.target_context.refresh()


@functools.cache
def _cpu_import_failure() -> str | None:
    try:
        importlib.import_module("rltscan.scan.cpu_fused")
    except ImportError as err:
        return f"numba cannot be imported ({err})"
    return None


@functools.cache
def _import_failure() -> str | None:
    try:
        importlib.import_module("rltscan.scan.triton_scan")
    except ImportError as err:
        return f"triton cannot be imported ({err})"
    return None


def resolve_backend(backend: str, device: Any, *, load: bool = True) -> str:
    """Pick the backend that will run on ``device`` (a ``torch.device`` or anything with
    its ``type``); raise if the named one cannot run there.

    ``auto``: triton on CUDA; on the CPU cpu (fused numba kernels) when numba can load,
    else torch; on CUDA without triton, torch, with a
    :class:`BackendFallbackWarning` once (a file run's report says it in a note,
    :func:`fallback_note`). ``triton`` without triton is exit 6 naming the fix.
    ``load=False`` decides without importing anything (see :func:`triton_missing`)."""
    if backend not in BACKENDS:
        raise ParameterError(
            f'unknown backend "{backend}"; pass one of {", ".join(repr(b) for b in BACKENDS)}'
        )
    if backend == "auto":
        if device.type != "cuda":
            return "cpu" if numba_missing(load=load) is None else "torch"
        if triton_missing(load=load) is None:
            return "triton"
        if load:
            _warn_fallback()
        return "torch"
    if backend == "cpu":
        if device.type != "cpu":
            raise BackendUnavailableError(
                f"the cpu backend needs CPU tensors, got {device.type}; "
                'move the inputs to the CPU (--device cpu) or pass backend="torch"'
            )
        missing = numba_missing(load=load)
        if missing is not None:
            raise BackendUnavailableError(f"the cpu backend was asked for but {missing}", NUMBA_FIX)
    if backend == "triton":
        if device.type != "cuda" and not triton_interpreting():
            raise BackendUnavailableError(
                f"the triton backend needs CUDA tensors, got {device.type}; "
                'move the inputs to a GPU or pass backend="torch"'
            )
        missing = triton_missing(load=load)
        if missing is not None:
            fix = OLD_TRITON_FIX if triton_too_old() is not None else TRITON_FIX
            raise BackendUnavailableError(f"the triton backend was asked for but {missing}", fix)
    return backend


def fallback_note(backend: str, device: Any) -> str | None:
    """The report's note when ``backend`` (as asked) ran torch instead of triton on
    ``device``; None otherwise. For a run that computed (it may import triton)."""
    if backend != "auto" or device.type != "cuda" or triton_missing() is None:
        return None
    return (
        f"--backend auto ran the torch backend on CUDA because {triton_missing()}: "
        f"same results to float rounding, slower; for the fused kernel {_install_fix()}"
    )


def _install_fix() -> str:
    """What gives this machine a Triton the kernel runs on."""
    if triton_too_old() is not None:
        return UPGRADE_TORCH
    return "install triton (pip install 'rltscan[triton]')"


@functools.cache
def _warn_fallback() -> None:
    warnings.warn(
        f'{triton_missing()}: backend="auto" runs the torch backend on CUDA '
        f"(same results to float rounding, slower); {_install_fix()}",
        BackendFallbackWarning,
        stacklevel=4,
    )


def host_tensor(x: Any) -> Tensor:
    """``torch.as_tensor(x)`` (a numpy array's memory shared), without torch's warning for
    a read-only array (``np.load(mmap_mode="r")``, a pandas Series under copy-on-write):
    rltscan never writes into its inputs, so the warning would only be noise in the
    user's log."""
    import numpy as np
    import torch

    if not isinstance(x, np.ndarray) or x.flags.writeable:
        return torch.as_tensor(x)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.as_tensor(x)


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
    import torch

    a, b = host_tensor(a), host_tensor(b)
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
    elif which == "cpu":
        from rltscan.scan import cpu_fused

        y = cpu_fused.linear_scan(a2, b2, reverse=reverse, init=init2)
    elif which == "torch":
        from rltscan.scan import torch_scan

        y = torch_scan.linear_scan(a2, b2, reverse=reverse, init=init2)
    else:
        from rltscan.scan import triton_scan

        y = triton_scan.linear_scan(a2, b2, reverse=reverse, init=init2)
    return y.reshape(b.shape).to(user_device)
