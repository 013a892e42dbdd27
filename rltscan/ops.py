"""The estimators as torch custom ops, for training code: ``torch.compile(fullgraph=True)``
and CUDA-graph capture.

``rltscan.ops.gae(rewards, values, terminated=..., gamma=..., ...)`` takes the same
arguments as ``rltscan.gae`` (tensors only; no carry) and returns a dict of output
tensors. Each call is one ``torch.ops.rltscan.estimate`` node: opaque to the
compiler, with a fake implementation that gives the outputs' shapes and dtypes, so
a compiled graph never breaks at it. It runs on the caller's current stream; under
CUDA-graph capture its launch is captured (look-back scratch and its reset come
from the graph's memory pool), and validation never syncs (docs/CONVENTIONS.md §5.1).

Gradients: the outputs are constants of the loss (advantages and targets are
stop-gradient in PPO, IMPALA and their kin); inputs that require grad are read
through ``detach()`` and no gradient flows back through rltscan — the same as the
plain functions.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from rltscan.errors import ParameterError
from rltscan.estimators import DECLARATIONS

_BY_NAME = {d.name: d for d in DECLARATIONS.values()}


def _declaration(kind: str):
    return _BY_NAME[kind]


def _options(text: str) -> dict[str, Any]:
    """The op's non-tensor arguments, written by the wrapper as ``k=repr(v)|...``."""
    out: dict[str, Any] = {}
    for item in filter(None, text.split("|")):
        k, _, v = item.partition("=")
        out[k] = ast.literal_eval(v)
    return out


def _outputs(kind: str, present: set[str]) -> list[str]:
    d = _declaration(kind)
    optional = dict(d.optional_outputs)
    return [o for o in d.outputs if optional.get(o) is None or optional[o] in present]


@torch.library.custom_op("rltscan::estimate", mutates_args=())
def _estimate(kind: str, names: str, arrays: list[Tensor], options: str) -> list[Tensor]:
    from rltscan.estimators import functions

    d = _declaration(kind)
    kwargs: dict[str, Any] = _options(options)
    kwargs.update(zip(names.split(","), arrays, strict=True))
    res = getattr(functions, d.function_name)(**kwargs)
    return [res[o].contiguous() for o in _outputs(kind, set(names.split(",")))]


@_estimate.register_fake
def _estimate_fake(kind: str, names: str, arrays: list[Tensor], options: str) -> list[Tensor]:
    listed = names.split(",")
    ref = arrays[listed.index(_declaration(kind).inputs[0])]
    # a one-element γ/λ tensor is a number: it does not decide the dtype (a per-step one does)
    floats = [a.dtype for n, a in zip(listed, arrays, strict=True) if a.dtype.is_floating_point
              and not (n in ("gamma", "lam") and a.numel() == 1)]  # fmt: skip
    dtype = torch.float64 if torch.float64 in floats else torch.float32
    return [ref.new_empty(ref.shape, dtype=dtype) for _ in _outputs(kind, set(names.split(",")))]


def _wrapper(kind: str) -> Callable[..., dict[str, Tensor]]:
    d = _declaration(kind)

    def call(*args: Any, **kwargs: Any) -> dict[str, Tensor]:
        if len(args) > d.positional:
            raise ParameterError(
                f"{d.function_name} takes {d.positional} positional arrays",
                "pass the others by name",
            )
        kwargs.update(zip(d.signature, args, strict=False))
        if kwargs.get("carry") is not None:
            raise ParameterError(
                "carry is not supported by rltscan.ops", f"call rltscan.{d.function_name}"
            )
        # arrays: the inputs, and γ/λ given as tensors (read in the op as the function
        # reads them: one value or one per step, docs/CONVENTIONS.md §8)
        tensors = (*d.inputs, "gamma", "lam", "dones", "episode_starts", "last_dones")
        names = [n for n in tensors if isinstance(kwargs.get(n), Tensor)]
        given = [n for n in (*d.inputs, "dones", "episode_starts", "last_dones") if n in kwargs]
        wrong = next((n for n in given if kwargs[n] is not None and n not in names), None)
        if wrong is not None:
            raise ParameterError(
                f'rltscan.ops.{d.function_name} takes tensors, "{wrong}" is a '
                f"{type(kwargs[wrong]).__name__}",
                f"pass a tensor, or call rltscan.{d.function_name}",
            )
        arrays = [kwargs.pop(n).detach() for n in names]  # outputs are constants of the loss
        for n in given:
            kwargs.pop(n, None)
        options = "|".join(f"{k}={kwargs[k]!r}" for k in sorted(kwargs))
        outs = torch.ops.rltscan.estimate(kind, ",".join(names), arrays, options)
        return dict(zip(_outputs(kind, set(names)), outs, strict=True))

    call.__name__ = call.__qualname__ = d.function_name
    call.__doc__ = (
        f"``rltscan.{d.function_name}`` as a custom op: the same arguments (tensors, no "
        "carry), a dict of outputs; see :mod:`rltscan.ops`."
    )
    return call


for _d in DECLARATIONS.values():
    globals()[_d.function_name] = _wrapper(_d.name)
del _d

__all__ = [d.function_name for d in DECLARATIONS.values()]
