"""The estimators as torch custom ops, for training code: ``torch.compile(fullgraph=True)``
and CUDA-graph capture.

``rltscan.ops.gae(rewards, values, terminated=..., gamma=..., ...)`` takes the same
arguments as ``rltscan.gae`` (tensors only; no carry, one setting) and returns a dict
of output tensors. Each call is one ``torch.ops.rltscan.estimate`` node: opaque to
the compiler, with a fake implementation that gives the outputs' shapes and dtypes,
so a compiled graph never breaks at it. A call it cannot take (numpy arrays, lists,
several settings, a carry) is refused with ParameterError; while ``torch.compile``
traces, as one ``torch.ops.rltscan.refuse`` node that raises it when the graph runs
(dynamo cannot trace a raise). The public functions (``rltscan.gae``, ...)
call it themselves while ``torch.compile`` traces them. It runs on the caller's
current stream; under CUDA-graph capture its launch is captured (look-back scratch
and its reset come from the graph's memory pool), and validation never syncs
(docs/CONVENTIONS.md §5.1).

The op's schema is typed (:func:`estimate`): the estimator's name, its arrays in a
fixed order (:func:`array_names`, None where not given), its numeric parameters in
declaration order (:func:`number_names`), the word options, ``time_dim``,
``validate`` and ``backend``.

Gradients: the outputs are constants of the loss (advantages and targets are
stop-gradient in PPO, IMPALA and their kin); inputs that require grad are read
through ``detach()`` and no gradient flows back through rltscan — the same as the
plain functions.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rltscan.errors import ParameterError
from rltscan.estimators import DECLARATIONS
from rltscan.estimators.declaration import Declaration, is_sweep

_BY_NAME = {d.name: d for d in DECLARATIONS.values()}
# arrays every estimator's op may take besides its inputs: γ/λ as tensors (one value or
# one per step, docs/CONVENTIONS.md §8) and episode ends stored as one flag
_ALSO_ARRAYS = ("gamma", "lam", "dones", "episode_starts", "last_dones")
_WORDS = ("missing_bootstrap", "trace", "dones_mean", "ends_are")


# (plain dicts, not functools.cache: torch.compile traces the look-ups)
_ARRAYS = {k: (*d.inputs, *d.extra_arguments, *_ALSO_ARRAYS) for k, d in _BY_NAME.items()}
_NUMBERS = {
    k: tuple(p.name for p in d.parameters if p.choices is None) for k, d in _BY_NAME.items()
}
_FALLBACK = {p.name: p.fallback for d in _BY_NAME.values() for p in d.parameters if p.fallback}


def array_names(kind: str) -> tuple[str, ...]:
    """The op's array slots for estimator ``kind``, in order."""
    return _ARRAYS[kind]


def number_names(kind: str) -> tuple[str, ...]:
    """The op's numbers for estimator ``kind``: its numeric parameters, in declaration
    order (a None default, pg_rho_clip, is sent as its fallback's value)."""
    return _NUMBERS[kind]


def _outputs(kind: str, arrays: list[Tensor | None]) -> list[str]:
    """The outputs the op returns: the declared ones, less an optional output whose input
    is absent (Retrace's advantages without v_pi)."""
    d = _BY_NAME[kind]
    given = {n for n, a in zip(array_names(kind), arrays, strict=True) if a is not None}
    optional = dict(d.optional_outputs)
    return [o for o in d.outputs if optional.get(o) is None or optional[o] in given]


@torch.library.custom_op("rltscan::estimate", mutates_args=())
def estimate(
    kind: str,
    arrays: list[Tensor | None],
    numbers: list[float],
    missing_bootstrap: str | None,
    trace: str | None,
    dones_mean: str | None,
    ends_are: str | None,
    time_dim: int | None,
    validate: bool,
    backend: str,
) -> list[Tensor]:
    """One estimator call: ``arrays`` in :func:`array_names` order, ``numbers`` in
    :func:`number_names` order; the outputs in declaration order (contiguous)."""
    from rltscan.estimators import functions

    d = _BY_NAME[kind]
    kwargs: dict[str, Any] = dict(zip(number_names(kind), numbers, strict=True))
    kwargs.update((n, a) for n, a in zip(array_names(kind), arrays, strict=True) if a is not None)
    words = (missing_bootstrap, trace, dones_mean, ends_are)
    kwargs.update((n, w) for n, w in zip(_WORDS, words, strict=True) if w is not None)
    res = getattr(functions, d.function_name)(
        **kwargs, time_dim=time_dim, validate=validate, backend=backend
    )
    return [res[o].contiguous() for o in _outputs(kind, arrays)]


def _output_dtype(kind: str, arrays: list[Tensor | None]) -> torch.dtype:
    """The outputs' dtype by the rule the call itself follows (``compute_dtype`` of the
    float columns it reads, each in its ``read_dtype``: int64 rewards are read as
    float64). Flags, per-sequence values (``last_value``, ``init``) and a one-element
    γ/λ (a number) do not count; a per-step γ/λ does (it is the discount/λ column), and
    so does Retrace's E_π Q(s_t+1, ·) made from ``next_target_probs`` and ``next_q``.
    The fake must give the real dtype: a compiled graph reads the op's outputs as the
    fake typed them."""
    from rltscan.estimators.functions import compute_dtype, read_dtype  # the call's own rule

    d = _BY_NAME[kind]
    given = {n: a for n, a in zip(array_names(kind), arrays, strict=True) if a is not None}
    read = [a.dtype for n, a in given.items() if n in d.float_inputs]
    read += [given[n].dtype for n in ("gamma", "lam") if n in given and given[n].numel() > 1]
    pair = ("next_target_probs", "next_q")  # E_π Q is their product's sum: its dtype
    if "next_expected_q" not in given and all(n in given for n in pair):
        read.append(torch.promote_types(*(given[n].dtype for n in pair)))
    return compute_dtype(read_dtype(t) for t in read)


@estimate.register_fake
def _estimate_fake(kind: str, arrays: list[Tensor | None], *_: Any) -> list[Tensor]:
    ref = arrays[0]
    dtype = _output_dtype(kind, arrays)
    return [ref.new_empty(ref.shape, dtype=dtype) for _ in _outputs(kind, arrays)]


@torch.library.custom_op("rltscan::refuse", mutates_args=())
def refuse(
    what: str, fix: str, shape: list[int], dtype: torch.dtype, device: torch.device, count: int
) -> list[Tensor]:
    """A refusal inside a compiled graph: raises rltscan's one-line ParameterError when the
    graph runs. Under ``torch.compile(fullgraph=True)`` a raise cannot be traced (dynamo
    reports "Unsupported" instead of the message), so a refused call traces as this op,
    whose fake gives ``count`` outputs of ``shape``, ``dtype`` and ``device`` for the code
    that follows (an output on another device or of another dtype than the call's would
    fail that code's tracing first, with torch's error instead of the message)."""
    raise ParameterError(what, fix)


@refuse.register_fake
def _refuse_fake(
    what: str, fix: str, shape: list[int], dtype: torch.dtype, device: torch.device, count: int
) -> list[Tensor]:
    return [torch.empty(shape, dtype=dtype, device=device) for _ in range(count)]


def _refuse(d: Declaration, kwargs: dict[str, Any], what: str, fix: str) -> dict[str, Tensor]:
    """Raise ParameterError(what, fix); while ``torch.compile`` traces, the :func:`refuse`
    op that raises it when the graph runs, with outputs of the reference array's shape."""
    if not torch.compiler.is_compiling():
        raise ParameterError(what, fix)
    ref = kwargs.get(d.inputs[0])
    if isinstance(ref, Tensor):
        shape = list(ref.shape)
    else:  # an array or a nested list; anything else (a TensorDict) gets 0-d outputs
        shape = list(np.shape(ref)) if isinstance(ref, (np.ndarray, list, tuple)) else []
    arrays = [kwargs.get(n) for n in array_names(d.name)]
    tensors = [a if isinstance(a, Tensor) else None for a in arrays]
    device = next((t.device for t in tensors if t is not None), torch.device("cpu"))
    dtype = _output_dtype(d.name, tensors)  # of the tensors given: the call's own rule
    names = _outputs(d.name, arrays)
    outs = torch.ops.rltscan.refuse(what, fix, shape, dtype, device, len(names))
    return dict(zip(names, outs, strict=True))


def _refusal(d: Declaration, kwargs: dict[str, Any]) -> tuple[str, str] | None:
    """Why the op cannot take these arguments (what, fix), or None. Only tests that
    trace: the values themselves (a γ out of range) are checked when the op runs."""
    if kwargs.get("carry") is not None:
        return (
            "carry is not supported by rltscan.ops or under torch.compile",
            f"call rltscan.{d.function_name} outside the compiled function",
        )
    wrong = next(
        (n for n in array_names(d.name) if n not in ("gamma", "lam")
         and kwargs.get(n) is not None and not isinstance(kwargs[n], Tensor)),
        None,
    )  # fmt: skip
    if wrong is not None:
        return (
            f'rltscan.ops.{d.function_name} takes tensors, "{wrong}" is a '
            f"{type(kwargs[wrong]).__name__}",
            f"pass tensors, or call rltscan.{d.function_name} outside torch.compile and "
            "rltscan.ops",
        )
    if not isinstance(kwargs.get("validate", True), (bool, np.bool_)):
        return f"validate must be True or False, got {kwargs['validate']!r}", "pass a bool"
    for name in number_names(d.name):
        value = kwargs.get(name)
        if is_sweep(value):
            return (
                f"several settings ({name}={value!r}) are not supported by rltscan.ops",
                "call once per setting",
            )
        if isinstance(value, (bool, np.bool_, str, bytes)):  # float() would take them
            return f"{name} must be a number, got {value!r}", "pass a float"
        if value is None and name in kwargs and name not in _FALLBACK:  # only pg_rho_clip
            return f"{name} must be a number, got None", "pass a float, or leave it out"
    return None


def call(d: Declaration, kwargs: dict[str, Any]) -> dict[str, Tensor]:
    """The op on a public function's keyword arguments (unset ones may be absent)."""
    refused = _refusal(d, kwargs)
    if refused is not None:
        return _refuse(d, kwargs, *refused)
    defaults = d.defaults()
    numbers = []
    for name in number_names(d.name):
        value = kwargs.get(name, defaults[name])
        if isinstance(value, Tensor):
            value = defaults[name]  # passed in its array slot
        if value is None:  # a None default is the value of its fallback (pg_rho_clip)
            value = kwargs.get(_FALLBACK[name], defaults[_FALLBACK[name]])
        numbers.append(float(value))
    arrays = [kwargs.get(n) for n in array_names(d.name)]
    arrays = [a if not isinstance(a, Tensor) else a.detach() for a in arrays]  # constants
    arrays = [a if isinstance(a, Tensor) else None for a in arrays]
    outs = torch.ops.rltscan.estimate(
        d.name,
        arrays,
        numbers,
        *(kwargs.get(w) for w in _WORDS),
        kwargs.get("time_dim"),
        kwargs.get("validate", True),
        kwargs.get("backend", "auto"),
    )
    return dict(zip(_outputs(d.name, arrays), outs, strict=True))


def _wrapper(d: Declaration) -> Callable[..., dict[str, Tensor]]:
    def op(*args: Any, **kwargs: Any) -> dict[str, Tensor]:
        kwargs.update(zip(d.signature, args, strict=False))
        if len(args) > d.positional:
            return _refuse(
                d,
                kwargs,
                f"{d.function_name} takes {d.positional} positional arrays",
                "pass the others by name",
            )
        return call(d, kwargs)

    op.__name__ = op.__qualname__ = d.function_name
    op.__doc__ = (
        f"``rltscan.{d.function_name}`` as a custom op: the same arguments (tensors, no "
        "carry, one setting), a dict of outputs; see :mod:`rltscan.ops`."
    )
    return op


gae = _wrapper(_BY_NAME["gae"])
vtrace = _wrapper(_BY_NAME["vtrace"])
retrace = _wrapper(_BY_NAME["retrace"])
td_lambda = _wrapper(_BY_NAME["td_lambda"])
discounted_returns = _wrapper(_BY_NAME["returns"])
eligibility_traces = _wrapper(_BY_NAME["traces"])
prefix_sum = _wrapper(_BY_NAME["prefix_sum"])
return_to_go = _wrapper(_BY_NAME["return_to_go"])

__all__ = [d.function_name for d in DECLARATIONS.values()]
