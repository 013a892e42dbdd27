"""rl-triton 0.1.3 beside rltscan: the calls of it that compute what an rltscan call
computes, on the same tensors.

rl-triton is not a dependency: it is found on ``PYTHONPATH`` (``bench/device.sh`` puts
``bench/.baselines/rl_triton-0.1.3`` there when that folder was carried) or not at all,
and rltscan itself never imports it. It runs on CUDA only, in float32, with flags as
float32 0/1 tensors, one program per row.

What "the same" means here, input by input (rltscan's call is ``rltscan.bench.call``
on ``rltscan.bench.make_inputs``):

* ``[B, T]`` rows with ``last_value`` and ``missing_bootstrap="zero"``: rl-triton's
  ``truncateds`` and a ``bootstrap_values`` column of zeros with ``last_value`` in its
  last step (its own ``last_value`` cannot be combined with truncations, and its
  bootstrap at a truncation is that column's entry);
* a flat sequence with ``bootstrap_values``: rl-triton's ``[1, N]`` view with the
  bootstrap kept only at truncations and the last step (it adds the column everywhere);
* GAE: its one output, the advantages; returns: the returns; V-trace (λ = 1, both
  clips 1): ``vs`` and the policy-gradient advantages.

Its Retrace takes discrete-action probabilities ``[B, T, A]`` and action indices, not
the log-probabilities of the taken action rltscan reads: not the same inputs, so not
timed. Whether a call here does compute the same thing is checked against the float64
solve before it is timed (``bench/table.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

KINDS = ("gae", "returns", "vtrace")
NAME = "rl-triton 0.1.3"


def missing() -> str | None:
    """Why rl-triton cannot be timed here (None when it can)."""
    if not torch.cuda.is_available():
        return "rl-triton runs on CUDA only"
    try:
        import rl_triton
    except ImportError:
        return "rl_triton is not on PYTHONPATH (carry bench/.baselines/rl_triton-0.1.3)"
    if getattr(rl_triton, "__version__", None) != "0.1.3":
        return f"rl_triton {getattr(rl_triton, '__version__', '?')} found, not 0.1.3"
    return None


def call(
    kind: str, inputs: dict[str, Any], gammas: tuple[float, ...] = (0.99,)
) -> tuple[Callable[[], Any], Callable[[Any], dict[str, Tensor]]]:
    """``(fn, named)``: ``fn()`` runs rl-triton's ``kind`` once per γ of ``gammas`` on
    ``inputs`` (what is timed: every conversion is made here, before), ``named(fn())``
    its outputs under rltscan's names (with one γ) or ``"name#i"`` (the i-th γ)."""
    import rl_triton

    flat = inputs["rewards"].ndim == 1
    row = (lambda t: t[None]) if flat else (lambda t: t)
    r = row(inputs["rewards"])
    term = row(inputs["terminated"]).float()
    trunc = row(inputs["truncated"]).float()
    boot: dict[str, Tensor] = {}  # its per-step column: zero but at truncations and the end
    if "last_value" in inputs:  # (its last_value cannot be combined with truncations)
        boot["bootstrap_values"] = torch.zeros_like(r)
        boot["bootstrap_values"][:, -1] = inputs["last_value"]
    elif "bootstrap_values" in inputs:
        keep = trunc.clone()
        keep[:, -1] = 1.0
        boot["bootstrap_values"] = row(inputs["bootstrap_values"]) * keep
    if kind == "gae":
        v = row(inputs["values"])

        def one(g: float) -> Any:
            return rl_triton.compute_gae(r, v, term, trunc, gamma=g, lambda_=0.95, **boot)

        names: tuple[str, ...] = ("advantages",)
    elif kind == "returns":

        def one(g: float) -> Any:
            return rl_triton.compute_discounted_returns(r, term, trunc, gamma=g, **boot)

        names = ("returns",)
    elif kind == "vtrace":
        v = row(inputs["values"])
        lt, lb = row(inputs["logp_target"]), row(inputs["logp_behavior"])

        def one(g: float) -> Any:
            return rl_triton.compute_vtrace(
                lt, lb, v, r, term, trunc, gamma=g, rho_bar=1.0, c_bar=1.0, **boot
            )

        names = ("vs", "pg_advantages")
    else:
        raise ValueError(f"{NAME} has no {kind!r} on rltscan's inputs")
    shape = inputs["rewards"].shape

    def fn() -> list[Any]:
        return [one(g) for g in gammas]

    def named(results: list[Any]) -> dict[str, Tensor]:
        out: dict[str, Tensor] = {}
        for i, res in enumerate(results):
            parts = res if isinstance(res, tuple) else (res,)
            for name, t in zip(names, parts, strict=True):
                out[name if len(gammas) == 1 else f"{name}#{i}"] = t.reshape(shape)
        return out

    return fn, named
