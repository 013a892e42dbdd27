"""The seven estimators as a Python API (torch): the public functions and the registry.

Each function validates its inputs, brings them to ``[R, T]`` (``_common.Frame``),
and hands a ``Problem`` to the chosen backend. The estimator modules beside this
file declare themselves (``DECLARATION``, torch-free) and build the recurrence
coefficients and post-process; none loops over time. ``ESTIMATORS`` and
``MODULES`` are derived from the declarations (:data:`rltscan.estimators.DECLARATIONS`).
``rltscan.estimators`` re-exports this module's names lazily.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

from rltscan.errors import DataError, ParameterError
from rltscan.estimators import DECLARATIONS, declared_module
from rltscan.estimators._common import (
    NV_BOOT,
    NV_LAST,
    NV_NEXT,
    NV_NONE,
    READ_AFTER_UNCUT,
    READ_ALL,
    READ_BOOT,
    READ_NOT_TERMINATED,
    ArrayLike,
    Carry,
    Frame,
    Problem,
    Result,
    as_tensor,
    check_params,
    check_shape,
    compute_device,
    compute_dtype,
    flag_column,
    float_column,
    normal_time_dim,
    per_row,
    solve,
    warn_not_contractive,
)

# Problem.kind -> the estimator module (coefficients, finalize, REVERSE, OUTPUTS)
MODULES: dict[str, ModuleType] = {
    kind: declared_module(kind)
    for kind in ("gae", "td_lambda", "returns", "vtrace", "retrace", "traces", "prefix_sum")
}


# ---------------------------------------------------------------------------
# Result types


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class GAEResult(Result):
    advantages: Any
    value_targets: Any


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class TDLambdaResult(Result):
    lambda_returns: Any


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ReturnsResult(Result):
    returns: Any


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class VTraceResult(Result):
    vs: Any
    pg_advantages: Any


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class RetraceResult(Result):
    retrace_targets: Any
    advantages: Any = None


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class TracesResult(Result):
    eligibility_traces: Any


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class PrefixSumResult(Result):
    prefix_sums: Any


# ---------------------------------------------------------------------------
# The shared driver


def _device_of(*xs: Any) -> torch.device:
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def _bootstrap_mode(
    next_values: Any,
    bootstrap_values: Any,
    last_value: Any,
    values: Any,
    *,
    values_required: bool = True,
) -> str:
    given = [
        n
        for n, x in (
            ("next_values", next_values),
            ("bootstrap_values", bootstrap_values),
            ("last_value", last_value),
        )
        if x is not None
    ]
    if len(given) > 1:
        raise ParameterError(
            f"{' and '.join(repr(g) for g in given)} were both given; "
            "pass exactly one bootstrap form (docs/CONVENTIONS.md §1.2)"
        )
    if next_values is not None:
        return NV_NEXT
    needs = bootstrap_values is not None or last_value is not None
    if needs and values is None and values_required:
        raise ParameterError(
            f'"{given[0]}" needs "values" (it fills V(s_t+1) only at cuts); pass values '
            'or give "next_values" instead'
        )
    if bootstrap_values is not None:
        return NV_BOOT
    if last_value is not None:
        return NV_LAST
    return NV_NONE


def _missing(mode: str) -> bool:
    if mode not in ("error", "zero"):
        raise ParameterError(f'missing_bootstrap = "{mode}"; pass "error" or "zero"')
    return mode == "zero"


def _run(
    kind: str,
    *,
    ref: str,
    floats: dict[str, ArrayLike | None],
    flags: dict[str, ArrayLike | None],
    reads: dict[str, str],
    params: dict[str, float],
    time_dim: int,
    backend: str,
    validate: bool,
    nv_mode: str = NV_NONE,
    missing_zero: bool = False,
    last_value: ArrayLike | None = None,
    init: ArrayLike | None = None,
    features: bool = False,
    carry: Carry | None = None,
) -> dict[str, Any]:
    """Normalise, validate, solve, and map the outputs back to the user's layout."""
    given = {k: v for k, v in floats.items() if v is not None}
    user_device = _device_of(*given.values(), *flags.values(), last_value, init)
    device = compute_device(backend, user_device)
    as_numpy = not isinstance(given[ref], torch.Tensor)
    tensors = {k: float_column(k, v, device) for k, v in given.items()}
    flag_t = {k: flag_column(k, v, device, validate) for k, v in flags.items() if v is not None}

    # the step shape comes from the flags when x carries trailing feature axes
    main = tensors[ref]
    step_src = next(iter(flag_t.values())) if (features and flag_t) else main
    step_shape = tuple(step_src.shape)
    td = normal_time_dim(time_dim, len(step_shape), ref)
    if step_shape[td] == 0:
        raise DataError(f'"{ref}" has no steps (length 0 on time_dim {time_dim}); pass data')
    feature_shape: tuple[int, ...] = ()
    if features:
        if tuple(main.shape[: len(step_shape)]) != step_shape:
            check_shape(ref, main, step_shape, next(iter(flag_t)))
        feature_shape = tuple(main.shape[len(step_shape) :])
    for name, t in {**tensors, **flag_t}.items():
        want = (*step_shape, *feature_shape) if (features and name == ref) else step_shape
        check_shape(name, t, want, ref)

    frame = Frame(step_shape, td, feature_shape, as_numpy, user_device)
    flat_frame = Frame(step_shape, td)
    nfeat = math.prod(feature_shape)
    cols = {k: frame.rows(v) if k == ref else flat_frame.rows(v) for k, v in tensors.items()}
    for k, v in flag_t.items():
        cols[k] = flat_frame.rows(v)
    if features and nfeat > 1:
        # features become extra rows sharing their sequence's flags (a copy; traces only)
        for k in [*flag_t, *(n for n in tensors if n != ref)]:
            r, t = cols[k].shape
            cols[k] = cols[k].unsqueeze(0).expand(nfeat, r, t).reshape(nfeat * r, t)

    p = Problem(
        kind=kind,
        reverse=MODULES[kind].REVERSE,
        cols=cols,
        dtype=compute_dtype(tensors),
        params=params,
        nv_mode=nv_mode,
        missing_zero=missing_zero,
        last_value=per_row("last_value", last_value, flat_frame, device),
        init=per_row("init", init, frame, device),
        carry=_check_carry(kind, carry, last_value, init, len(next(iter(cols.values()))), device),
    )
    out = solve(p, backend, validate=validate, reads=reads, frame=frame)
    result = {k: frame.output(v) for k, v in out.items()}
    result["_carry_fn"] = functools.partial(_carry_out, p, out)
    return result


# The recurrence's own value y in terms of an estimator's first output
_Y_BASE = {"vtrace": "values", "retrace": "q_values"}


def _carry_out(p: Problem, out: dict[str, Any]) -> Carry:
    """The state the next chunk in scan order needs (docs/CONVENTIONS.md §2.4)."""
    edge = 0 if p.reverse else -1  # only one column of anything is touched

    def col(name: str) -> torch.Tensor:
        return p.cols[name][:, edge].to(p.dtype)

    y = out[MODULES[p.kind].OUTPUTS[0]][:, edge].to(p.dtype)
    base = _Y_BASE.get(p.kind)
    if base:
        y = y - col(base)
    if p.reverse:
        nlr = col("logp_target") - col("logp_behavior") if p.kind == "retrace" else None
        nv = col("values") if p.has("values") else None
        return Carry(p.kind, y.clone(), next_value=nv, next_log_ratio=nlr)
    done = p.flag("terminated")[:, edge] | p.flag("truncated")[:, edge]
    return Carry(p.kind, y.clone(), prev_done=done.clone())


def _check_carry(
    kind: str,
    carry: Carry | None,
    last_value: Any,
    init: Any,
    rows: int,
    device: torch.device,
) -> Carry | None:
    if carry is None:
        return None
    if not isinstance(carry, Carry) or carry.estimator != kind:
        got = getattr(carry, "estimator", type(carry).__name__)
        raise ParameterError(
            f"carry comes from {got!r}, not {kind!r}; pass the .carry of this estimator's "
            "result for the neighbouring chunk"
        )
    if carry.rows != rows:
        raise DataError(
            f"carry holds {carry.rows} sequences but this chunk has {rows}; "
            "chunks of one batch must keep their rows"
        )
    if last_value is not None:
        raise ParameterError(
            '"last_value" bootstraps the window end, but a chunk with a carry does not end '
            'the window; pass "bootstrap_values" or "next_values" for truncations'
        )
    if init is not None:
        raise ParameterError('"init" and carry were both given; the carry is the initial value')
    return dataclasses.replace(
        carry,
        **{
            f.name: getattr(carry, f.name).to(device)
            for f in dataclasses.fields(carry)
            if isinstance(getattr(carry, f.name), torch.Tensor)
        },
    )


# ---------------------------------------------------------------------------
# Public API


def gae(
    rewards: ArrayLike,
    values: ArrayLike,
    *,
    terminated: ArrayLike,
    truncated: ArrayLike | None = None,
    next_values: ArrayLike | None = None,
    bootstrap_values: ArrayLike | None = None,
    last_value: ArrayLike | None = None,
    gamma: float = 0.99,
    lam: float = 0.95,
    missing_bootstrap: str = "error",
    carry: Carry | None = None,
    time_dim: int = -1,
    backend: str = "auto",
    validate: bool = True,
) -> GAEResult:
    """Generalized advantage estimation: ``advantages`` and ``value_targets``.

    ``terminated_t``/``truncated_t`` mark the END of step t (Gymnasium). The value of
    the true successor state comes from exactly one of ``next_values`` (per step),
    ``bootstrap_values`` (read only where a cut is not a termination) or
    ``last_value`` (one per sequence, for the window end). See docs/CONVENTIONS.md §3.1.
    """
    check_params(gamma=gamma, lam=lam)
    mode = _bootstrap_mode(next_values, bootstrap_values, last_value, values)
    out = _run(
        "gae",
        ref="rewards",
        floats={
            "rewards": rewards,
            "values": values,
            "next_values": next_values,
            "bootstrap_values": bootstrap_values,
        },
        flags={"terminated": terminated, "truncated": truncated},
        reads={
            "rewards": READ_ALL,
            "values": READ_ALL,
            "next_values": READ_NOT_TERMINATED,
            "bootstrap_values": READ_BOOT,
        },
        params={"gamma": float(gamma), "lam": float(lam)},
        time_dim=time_dim,
        backend=backend,
        validate=validate,
        carry=carry,
        nv_mode=mode,
        missing_zero=_missing(missing_bootstrap),
        last_value=last_value,
    )
    return GAEResult(**out)


def td_lambda(
    rewards: ArrayLike,
    values: ArrayLike | None = None,
    *,
    terminated: ArrayLike,
    truncated: ArrayLike | None = None,
    next_values: ArrayLike | None = None,
    bootstrap_values: ArrayLike | None = None,
    last_value: ArrayLike | None = None,
    gamma: float = 0.99,
    lam: float = 0.95,
    missing_bootstrap: str = "error",
    carry: Carry | None = None,
    time_dim: int = -1,
    backend: str = "auto",
    validate: bool = True,
) -> TDLambdaResult:
    """TD(λ) returns (``lambda_returns``), docs/CONVENTIONS.md §3.2.

    Needs ``next_values``, or ``values`` plus a bootstrap form; ``values`` is only
    read as V(s_{t+1}) inside episodes.
    """
    check_params(gamma=gamma, lam=lam)
    if values is None and next_values is None:
        raise ParameterError('td_lambda needs "values" or "next_values"; pass one of them')
    mode = _bootstrap_mode(next_values, bootstrap_values, last_value, values)
    out = _run(
        "td_lambda",
        ref="rewards",
        floats={
            "rewards": rewards,
            "values": values,
            "next_values": next_values,
            "bootstrap_values": bootstrap_values,
        },
        flags={"terminated": terminated, "truncated": truncated},
        reads={
            "rewards": READ_ALL,
            "values": READ_AFTER_UNCUT,
            "next_values": READ_NOT_TERMINATED,
            "bootstrap_values": READ_BOOT,
        },
        params={"gamma": float(gamma), "lam": float(lam)},
        time_dim=time_dim,
        backend=backend,
        validate=validate,
        carry=carry,
        nv_mode=mode,
        missing_zero=_missing(missing_bootstrap),
        last_value=last_value,
    )
    return TDLambdaResult(**out)


def discounted_returns(
    rewards: ArrayLike,
    *,
    terminated: ArrayLike,
    truncated: ArrayLike | None = None,
    values: ArrayLike | None = None,
    next_values: ArrayLike | None = None,
    bootstrap_values: ArrayLike | None = None,
    last_value: ArrayLike | None = None,
    gamma: float = 0.99,
    missing_bootstrap: str = "zero",
    carry: Carry | None = None,
    time_dim: int = -1,
    backend: str = "auto",
    validate: bool = True,
) -> ReturnsResult:
    """Discounted reward-to-go (``returns``), docs/CONVENTIONS.md §3.3.

    Bootstrap values are read only at truncations and the window end; without
    any, they count as 0 (``missing_bootstrap="zero"``, the default here).
    """
    check_params(gamma=gamma)
    # values are never read here: nv is only needed at truncations and the window end
    mode = _bootstrap_mode(next_values, bootstrap_values, last_value, values, values_required=False)
    out = _run(
        "returns",
        ref="rewards",
        floats={
            "rewards": rewards,
            "next_values": next_values,
            "bootstrap_values": bootstrap_values,
        },
        flags={"terminated": terminated, "truncated": truncated},
        reads={
            "rewards": READ_ALL,
            "next_values": READ_BOOT,
            "bootstrap_values": READ_BOOT,
        },
        params={"gamma": float(gamma)},
        time_dim=time_dim,
        backend=backend,
        validate=validate,
        carry=carry,
        nv_mode=mode,
        missing_zero=_missing(missing_bootstrap),
        last_value=last_value,
    )
    return ReturnsResult(**out)


def vtrace(
    rewards: ArrayLike,
    values: ArrayLike,
    *,
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    terminated: ArrayLike,
    truncated: ArrayLike | None = None,
    next_values: ArrayLike | None = None,
    bootstrap_values: ArrayLike | None = None,
    last_value: ArrayLike | None = None,
    gamma: float = 0.99,
    lam: float = 1.0,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
    pg_rho_clip: float | None = None,
    missing_bootstrap: str = "error",
    carry: Carry | None = None,
    time_dim: int = -1,
    backend: str = "auto",
    validate: bool = True,
) -> VTraceResult:
    """V-trace value targets ``vs`` and ``pg_advantages`` (IMPALA), docs/CONVENTIONS.md §3.4."""
    pg = rho_clip if pg_rho_clip is None else pg_rho_clip
    check_params(gamma=gamma, lam=lam, rho_clip=rho_clip, c_clip=c_clip, pg_rho_clip=pg)
    warn_not_contractive(float(gamma), float(lam), float(c_clip), "vtrace")
    mode = _bootstrap_mode(next_values, bootstrap_values, last_value, values)
    out = _run(
        "vtrace",
        ref="rewards",
        floats={
            "rewards": rewards,
            "values": values,
            "next_values": next_values,
            "bootstrap_values": bootstrap_values,
            "logp_target": logp_target,
            "logp_behavior": logp_behavior,
        },
        flags={"terminated": terminated, "truncated": truncated},
        reads={
            "rewards": READ_ALL,
            "values": READ_ALL,
            "next_values": READ_NOT_TERMINATED,
            "bootstrap_values": READ_BOOT,
            "logp_target": READ_ALL,
            "logp_behavior": READ_ALL,
        },
        params={
            "gamma": float(gamma),
            "lam": float(lam),
            "rho_clip": float(rho_clip),
            "c_clip": float(c_clip),
            "pg_rho_clip": float(pg),
        },
        time_dim=time_dim,
        backend=backend,
        validate=validate,
        carry=carry,
        nv_mode=mode,
        missing_zero=_missing(missing_bootstrap),
        last_value=last_value,
    )
    return VTraceResult(**out)


def retrace(
    rewards: ArrayLike,
    q_values: ArrayLike,
    *,
    next_expected_q: ArrayLike | None = None,
    logp_target: ArrayLike,
    logp_behavior: ArrayLike,
    terminated: ArrayLike,
    truncated: ArrayLike | None = None,
    v_pi: ArrayLike | None = None,
    next_target_probs: ArrayLike | None = None,
    next_q: ArrayLike | None = None,
    gamma: float = 0.99,
    lam: float = 1.0,
    c_clip: float = 1.0,
    carry: Carry | None = None,
    time_dim: int = -1,
    backend: str = "auto",
    validate: bool = True,
) -> RetraceResult:
    """Retrace(λ) targets ``retrace_targets`` (+ ``advantages`` with ``v_pi``), §3.5.

    ``q_values`` is Q(s_t, a_t); ``next_expected_q`` is E_{a~π(.|s_{t+1})} Q(s_{t+1}, a)
    for the true successor of step t (ignored at terminal steps). For discrete
    actions pass ``next_target_probs`` and ``next_q`` (``[..., A]``, both describing
    s_{t+1}) instead and the expectation is taken here.
    """
    check_params(gamma=gamma, lam=lam, c_clip=c_clip)
    warn_not_contractive(float(gamma), float(lam), float(c_clip), "retrace")
    if next_expected_q is None:
        next_expected_q = _expected_next_q(next_target_probs, next_q, validate, terminated)
    elif next_target_probs is not None or next_q is not None:
        raise ParameterError(
            '"next_expected_q" and "next_target_probs"/"next_q" were both given; pass one form'
        )
    out = _run(
        "retrace",
        ref="rewards",
        floats={
            "rewards": rewards,
            "q_values": q_values,
            "next_expected_q": next_expected_q,
            "logp_target": logp_target,
            "logp_behavior": logp_behavior,
            "v_pi": v_pi,
        },
        flags={"terminated": terminated, "truncated": truncated},
        reads={
            "rewards": READ_ALL,
            "q_values": READ_ALL,
            "next_expected_q": READ_NOT_TERMINATED,
            "logp_target": READ_AFTER_UNCUT,
            "logp_behavior": READ_AFTER_UNCUT,
            "v_pi": READ_ALL,
        },
        params={"gamma": float(gamma), "lam": float(lam), "c_clip": float(c_clip)},
        time_dim=time_dim,
        backend=backend,
        validate=validate,
        carry=carry,
        nv_mode=NV_NEXT,
    )
    return RetraceResult(**out)


def _expected_next_q(
    probs: ArrayLike | None, q: ArrayLike | None, validate: bool, terminated: ArrayLike
) -> Any:
    if probs is None or q is None:
        raise ParameterError(
            'retrace needs "next_expected_q", or both "next_target_probs" and "next_q"; '
            "pass E_{a~pi(.|s_t+1)} Q(s_t+1, a) per step"
        )
    p, qq = as_tensor("next_target_probs", probs), as_tensor("next_q", q)
    if p.shape != qq.shape or p.ndim < 2:
        raise DataError(
            f'"next_target_probs" has shape {tuple(p.shape)} and "next_q" {tuple(qq.shape)}; '
            "pass two [..., A] arrays of one shape"
        )
    if validate:
        import warnings

        off = (p.double().sum(-1) - 1.0).abs() > 1e-4
        term = as_tensor("terminated", terminated)
        if term.shape == off.shape:  # rows after a terminal step are never read (§6)
            off &= term == 0
        if bool(off.any()):
            warnings.warn(
                f'"next_target_probs" rows do not sum to 1 (first at index '
                f"{tuple(torch.nonzero(off)[0].tolist())}); the expectation is taken as given",
                RuntimeWarning,
                stacklevel=3,
            )
    ev = (p * qq).sum(-1)
    return ev if isinstance(probs, torch.Tensor) else ev.numpy()


def eligibility_traces(
    x: ArrayLike,
    *,
    terminated: ArrayLike,
    truncated: ArrayLike | None = None,
    gamma: float = 0.99,
    lam: float = 0.95,
    init: ArrayLike | None = None,
    carry: Carry | None = None,
    time_dim: int = -1,
    backend: str = "auto",
    validate: bool = True,
) -> TracesResult:
    """Accumulating eligibility traces (``eligibility_traces``), docs/CONVENTIONS.md §3.6.

    ``x`` has the flags' shape, optionally with trailing feature axes (``[T, D]``);
    ``init`` (scalar, ``[D]``, per sequence, or both) is the trace before step 0.
    """
    check_params(gamma=gamma, lam=lam)
    out = _run(
        "traces",
        ref="x",
        floats={"x": x},
        flags={"terminated": terminated, "truncated": truncated},
        reads={"x": READ_ALL},
        params={"gamma": float(gamma), "lam": float(lam)},
        time_dim=time_dim,
        backend=backend,
        validate=validate,
        carry=carry,
        init=init,
        features=True,
    )
    return TracesResult(**out)


def prefix_sum(
    x: ArrayLike,
    *,
    terminated: ArrayLike | None = None,
    truncated: ArrayLike | None = None,
    is_first: ArrayLike | None = None,
    init: ArrayLike | None = None,
    carry: Carry | None = None,
    time_dim: int = -1,
    backend: str = "auto",
    validate: bool = True,
) -> PrefixSumResult:
    """Episodic inclusive prefix sums (``prefix_sums``), docs/CONVENTIONS.md §3.7.

    Episodes restart after ``terminated``/``truncated`` steps, or at explicit
    ``is_first`` markers (which then replace the derived starts).
    """
    if is_first is not None and (terminated is not None or truncated is not None):
        raise ParameterError(
            '"is_first" replaces the episode starts derived from "terminated"/"truncated"; '
            "pass one or the other"
        )
    out = _run(
        "prefix_sum",
        ref="x",
        floats={"x": x},
        flags={"terminated": terminated, "truncated": truncated, "is_first": is_first},
        reads={"x": READ_ALL},
        params={},
        time_dim=time_dim,
        backend=backend,
        validate=validate,
        carry=carry,
        init=init,
        features=True,
    )
    return PrefixSumResult(**out)


# ---------------------------------------------------------------------------
# Registry (CLI command name -> spec)


@dataclasses.dataclass(frozen=True)
class EstimatorSpec:
    """What the file layer and the CLI need to know about one estimator."""

    name: str  # Problem.kind / module key
    command: str  # CLI subcommand
    function: Callable[..., Result]
    inputs: tuple[str, ...]  # every array argument it can take
    required: tuple[str, ...]  # arrays it always needs
    outputs: tuple[str, ...]
    params: tuple[str, ...]
    reverse: bool


ESTIMATORS: dict[str, EstimatorSpec] = {
    command: EstimatorSpec(
        d.name,
        d.command,
        globals()[d.function_name],
        d.inputs,
        d.required,
        d.outputs,
        d.params,
        d.reverse,
    )
    for command, d in DECLARATIONS.items()
}

__all__ = [
    "ESTIMATORS",
    "MODULES",
    "Carry",
    "EstimatorSpec",
    "GAEResult",
    "PrefixSumResult",
    "Problem",
    "Result",
    "RetraceResult",
    "ReturnsResult",
    "TDLambdaResult",
    "TracesResult",
    "VTraceResult",
    "discounted_returns",
    "eligibility_traces",
    "gae",
    "prefix_sum",
    "retrace",
    "td_lambda",
    "vtrace",
]
