"""The estimators as a Python API (torch): one hand-written function per estimator, and
the registry (``ESTIMATORS``, ``MODULES``).

Every function has the same shape. On ``torch.compile`` it is one custom op
(:mod:`rltscan.ops`: no graph break). Otherwise a call of a shape seen before on the
GPU is bound (:mod:`rltscan.estimators._bound`: one launch, no front end); any other
call runs the driver (:func:`rltscan.estimators._driver.front_end`: check the
parameters, read the bootstrap form, bring the arrays to ``[R, T]``, solve).

Arguments every function shares (docs/CONVENTIONS.md §8):

* arrays are numpy arrays or torch tensors; ``time_dim`` names the time axis (None:
  time last on ``[T]`` or ``[B, T]``; what reads two ways is refused); a trailing axis
  of length 1 after it (TorchRL's ``[*B, T, 1]`` with ``time_dim=-2``) is kept in the
  outputs;
* ``dones`` (with ``dones_mean``: ``"ended"`` or ``"starts"``), ``episode_starts``,
  ``last_dones`` and ``ends_are`` (``"terminal"`` or ``"truncated"``) give episode
  ends stored as one flag, in place of ``terminated``/``truncated``;
* ``gamma``/``lam`` as a list are several settings (the outputs gain a leading axis),
  as a tensor one value or one per step; a clip of ``inf`` is no clipping;
* ``carry`` is the ``.carry`` of the previous chunk's result in scan order (a long
  sequence in pieces, §2.4); ``backend`` is ``"auto"``, ``"triton"``, ``"torch"`` or
  ``"reference"`` (float64); ``validate`` checks every read entry (§5).

``gae``, ``td_lambda`` and ``vtrace`` also take a TorchRL TensorDict in place of the
arrays and write their results into it under TorchRL's keys.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rltscan.errors import DataError, ParameterError
from rltscan.estimators import DECLARATIONS
from rltscan.estimators import _bound as bound
from rltscan.estimators._arguments import ENDS_ARGUMENTS
from rltscan.estimators._carry import Carry
from rltscan.estimators._driver import (
    MODULES,
    SettingsCarry,
    as_op,
    bound_call,
    front_end,
)
from rltscan.estimators._frame import compute_dtype, read_dtype, torch_readable
from rltscan.estimators._problem import ArrayLike, Problem
from rltscan.estimators._result import (
    RESULTS,
    GAEResult,
    PrefixSumResult,
    Result,
    RetraceResult,
    ReturnsResult,
    ReturnToGoResult,
    TDLambdaResult,
    TracesResult,
    VTraceResult,
)
from rltscan.estimators.declaration import Declaration

_compiling = torch.compiler.is_compiling
_GAE, _VTRACE, _RETRACE, _TD_LAMBDA = (
    DECLARATIONS[c] for c in ("gae", "vtrace", "retrace", "td-lambda")
)
_RETURNS, _TRACES, _PREFIX_SUM, _RETURN_TO_GO = (
    DECLARATIONS[c] for c in ("returns", "traces", "prefix-sum", "return-to-go")
)
# the call keys (bound look-up), made once per estimator
_GAE_KEY, _VTRACE_KEY, _RETRACE_KEY, _TD_LAMBDA_KEY = map(
    bound.key_function, (_GAE, _VTRACE, _RETRACE, _TD_LAMBDA)
)
_RETURNS_KEY, _TRACES_KEY, _PREFIX_SUM_KEY, _RETURN_TO_GO_KEY = map(
    bound.key_function, (_RETURNS, _TRACES, _PREFIX_SUM, _RETURN_TO_GO)
)


def _compiles_as_op(d: Declaration) -> Callable[[Callable[..., Result]], Callable[..., Result]]:
    """Under ``torch.compile`` a public function is the one custom op (:mod:`rltscan.ops`),
    so the graph does not break at the front end's host checks. This wrapper hands the op
    the arguments by name: the function's own ``locals()`` cannot be traced by dynamo
    before torch 2.13 (measured on torch 2.11: "Failed to trace builtin operator")."""

    def wrap(fn: Callable[..., Result]) -> Callable[..., Result]:
        params = inspect.signature(fn).parameters.values()
        positional = tuple(p.name for p in params if p.kind is p.POSITIONAL_OR_KEYWORD)

        @functools.wraps(fn)
        def public(*args: Any, **kwargs: Any) -> Result:
            if _compiling():
                named = dict(zip(positional[: len(args)], args, strict=True))
                return as_op(d, {**named, **kwargs})
            return fn(*args, **kwargs)

        return public

    return wrap


def _call(d: Declaration, key_of: Callable[[dict[str, Any]], Any], args: dict[str, Any]) -> Result:
    """Every public function's body: the bound launch of a call of this shape when there
    is one (a call with dones-style arguments never is: their flags are derived by the
    front end); else the whole front end. ``args``: the function's ``locals()``."""
    bindable = (
        args["dones"] is args["dones_mean"] is args["episode_starts"] is args["last_dones"]
        is args["ends_are"] is None
    )  # fmt: skip
    key = key_of(args) if bindable else None
    b = None if key is None else bound.lookup(d, key)
    if b is not None:
        return bound_call(d, b, args)
    # numpy is never bound: arrays torch cannot wrap as they are, copied or refused
    arrays = {n: torch_readable(n, x) for n, x in args.items() if isinstance(x, np.ndarray)}
    return front_end(d, {**args, **arrays} if arrays else args, key)


@_compiles_as_op(_GAE)
def gae(
    rewards: ArrayLike,
    values: ArrayLike | None = None,
    *,
    terminated: ArrayLike | None = None,
    truncated: ArrayLike | None = None,
    next_values: ArrayLike | None = None,
    bootstrap_values: ArrayLike | None = None,
    last_value: ArrayLike | None = None,
    discount: ArrayLike | None = None,
    lam_per_step: ArrayLike | None = None,
    gamma: float | list[float] | ArrayLike = 0.99,
    lam: float | list[float] | ArrayLike = 0.95,
    missing_bootstrap: str = "error",
    dones: ArrayLike | None = None,
    dones_mean: str | None = None,
    episode_starts: ArrayLike | None = None,
    last_dones: ArrayLike | None = None,
    ends_are: str | None = None,
    carry: Carry | None = None,
    time_dim: int | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> GAEResult:
    """Generalized advantage estimation (Schulman et al. 2016, eq. 16), docs/CONVENTIONS.md §3.1.

    ``δ_t = r_t + γ nv_t (1 − terminated_t) − V_t``, ``A_t = δ_t + γλ (1 − cut_t) A_{t+1}``
    (backward), ``value_targets_t = A_t + V_t``; ``nv_t`` is V of the true successor
    state (§1.2), a cut is a termination, a truncation or the window end.

    Args:
        rewards: r_t, per step (or a TorchRL TensorDict holding every array).
        values: V(s_t), per step.
        terminated, truncated: 0/1 flags marking the END of step t (Gymnasium).
        next_values: V(s_{t+1}) per step; or ``bootstrap_values`` (read only where a
            cut is not a termination); or ``last_value`` (one per sequence, for the
            window end). At most one of the three.
        discount, lam_per_step: γ_t and λ_t per step, in place of ``gamma``/``lam``.
        gamma: the discount γ in [0, 1] (a list: several settings).
        lam: the trace decay λ in [0, 1] (a list: several settings).
        missing_bootstrap: ``"error"`` (a truncation with no bootstrap value is refused)
            or ``"zero"`` (it counts as 0).
        dones, dones_mean, episode_starts, last_dones, ends_are, carry, time_dim,
            backend, validate: shared by every estimator (module docstring).

    Returns:
        A :class:`GAEResult` with ``advantages`` and ``value_targets``, each of the
        rewards' shape (numpy in, numpy out); ``.carry`` hands the state on.
    """
    return _call(_GAE, _GAE_KEY, locals())


@_compiles_as_op(_VTRACE)
def vtrace(
    rewards: ArrayLike,
    values: ArrayLike | None = None,
    *,
    logp_target: ArrayLike | None = None,
    logp_behavior: ArrayLike | None = None,
    terminated: ArrayLike | None = None,
    truncated: ArrayLike | None = None,
    next_values: ArrayLike | None = None,
    bootstrap_values: ArrayLike | None = None,
    last_value: ArrayLike | None = None,
    discount: ArrayLike | None = None,
    lam_per_step: ArrayLike | None = None,
    gamma: float | list[float] | ArrayLike = 0.99,
    lam: float | list[float] | ArrayLike = 1.0,
    rho_clip: float = 1.0,
    c_clip: float = 1.0,
    pg_rho_clip: float | None = None,
    missing_bootstrap: str = "error",
    dones: ArrayLike | None = None,
    dones_mean: str | None = None,
    episode_starts: ArrayLike | None = None,
    last_dones: ArrayLike | None = None,
    ends_are: str | None = None,
    carry: Carry | None = None,
    time_dim: int | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> VTraceResult:
    """V-trace value targets and policy-gradient advantages (IMPALA, Espeholt et al.
    2018, eq. 1), docs/CONVENTIONS.md §3.4.

    With ``ratio_t = π/μ`` (clipped in log space), ``ρ_t = min(ρ̄, ratio_t)`` and
    ``c_t = λ min(c̄, ratio_t)``: ``δ_t = ρ_t (r_t + γ nv_t (1 − terminated_t) − V_t)``,
    ``D_t = δ_t + γ c_t (1 − cut_t) D_{t+1}`` (backward), ``vs_t = V_t + D_t``,
    ``pg_advantages_t = min(ρ̄_pg, ratio_t) (r_t + γ vs_{t+1} − V_t)`` (at a cut the
    bootstrap value in place of ``vs_{t+1}``). Warns when γ·λ·c̄ > 1.

    Args:
        rewards, values: r_t and V(s_t), per step (or a TorchRL TensorDict).
        logp_target, logp_behavior: log π(a_t|s_t) and log μ(a_t|s_t), per step (logs,
            not ratios: from rlax's ``rho_tm1`` pass ``logp_target=log(rho_tm1)``,
            ``logp_behavior=0``).
        terminated, truncated: 0/1 flags marking the END of step t.
        next_values, bootstrap_values, last_value: the bootstrap form, at most one
            (see :func:`gae`).
        discount, lam_per_step: γ_t and λ_t per step, in place of ``gamma``/``lam``.
        gamma, lam: γ and λ in [0, 1] (a list: several settings).
        rho_clip, c_clip: ρ̄ and c̄, the clips of ρ_t and c_t (> 0; inf: no clip).
        pg_rho_clip: ρ̄ of the policy-gradient advantage (None: ``rho_clip``).
        missing_bootstrap: ``"error"`` or ``"zero"`` (see :func:`gae`).
        dones, dones_mean, episode_starts, last_dones, ends_are, carry, time_dim,
            backend, validate: shared by every estimator (module docstring).

    Returns:
        A :class:`VTraceResult` with ``vs`` and ``pg_advantages``.
    """
    return _call(_VTRACE, _VTRACE_KEY, locals())


@_compiles_as_op(_RETRACE)
def retrace(
    rewards: ArrayLike,
    q_values: ArrayLike | None = None,
    *,
    next_expected_q: ArrayLike | None = None,
    logp_target: ArrayLike | None = None,
    logp_behavior: ArrayLike | None = None,
    terminated: ArrayLike | None = None,
    truncated: ArrayLike | None = None,
    v_pi: ArrayLike | None = None,
    discount: ArrayLike | None = None,
    lam_per_step: ArrayLike | None = None,
    next_target_probs: ArrayLike | None = None,
    next_q: ArrayLike | None = None,
    gamma: float | list[float] | ArrayLike = 0.99,
    lam: float | list[float] | ArrayLike = 1.0,
    c_clip: float = 1.0,
    trace: str = "retrace",
    dones: ArrayLike | None = None,
    dones_mean: str | None = None,
    episode_starts: ArrayLike | None = None,
    last_dones: ArrayLike | None = None,
    ends_are: str | None = None,
    carry: Carry | None = None,
    time_dim: int | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> RetraceResult:
    """Retrace(λ) targets and the general off-policy return (Munos et al. 2016, eq. 3),
    docs/CONVENTIONS.md §3.5.

    ``δ_t = r_t + γ E_π Q(s_{t+1}, ·) (1 − terminated_t) − Q_t``,
    ``D_t = δ_t + γ c_{t+1} (1 − cut_t) D_{t+1}`` (backward),
    ``retrace_targets_t = Q_t + D_t``, ``advantages_t = retrace_targets_t − V^π_t``.
    The trace c picks the family member: ``"retrace"`` λ min(c̄, π/μ),
    ``"tree-backup"`` λ π, ``"q-lambda"`` λ, ``"is"`` λ π/μ. Warns when γ·λ·c̄ > 1.

    Args:
        rewards, q_values: r_t and Q(s_t, a_t), per step.
        next_expected_q: E_{a~π(.|s_{t+1})} Q(s_{t+1}, a) per step (ignored at terminal
            steps); or, for discrete actions, ``next_target_probs`` and ``next_q``
            (``[..., A]``, both of s_{t+1}) and the expectation is taken here.
        logp_target, logp_behavior: log π and log μ of a_t (what ``trace`` reads).
        terminated, truncated: 0/1 flags marking the END of step t.
        v_pi: V^π(s_t) per step, for ``advantages``.
        discount, lam_per_step: γ_t and λ_t per step, in place of ``gamma``/``lam``.
        gamma, lam: γ and λ in [0, 1] (a list: several settings).
        c_clip: c̄ (> 0; inf: no clip), Retrace's trace only.
        trace: ``"retrace"``, ``"tree-backup"``, ``"q-lambda"`` or ``"is"``.
        dones, dones_mean, episode_starts, last_dones, ends_are, carry, time_dim,
            backend, validate: shared by every estimator (module docstring).

    Returns:
        A :class:`RetraceResult` with ``retrace_targets`` (and ``advantages`` when
        ``v_pi`` is given, else None).
    """
    return _call(_RETRACE, _RETRACE_KEY, locals())


@_compiles_as_op(_TD_LAMBDA)
def td_lambda(
    rewards: ArrayLike,
    values: ArrayLike | None = None,
    *,
    terminated: ArrayLike | None = None,
    truncated: ArrayLike | None = None,
    next_values: ArrayLike | None = None,
    bootstrap_values: ArrayLike | None = None,
    last_value: ArrayLike | None = None,
    discount: ArrayLike | None = None,
    lam_per_step: ArrayLike | None = None,
    gamma: float | list[float] | ArrayLike = 0.99,
    lam: float | list[float] | ArrayLike = 0.95,
    missing_bootstrap: str = "error",
    dones: ArrayLike | None = None,
    dones_mean: str | None = None,
    episode_starts: ArrayLike | None = None,
    last_dones: ArrayLike | None = None,
    ends_are: str | None = None,
    carry: Carry | None = None,
    time_dim: int | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> TDLambdaResult:
    """TD(λ) returns (Sutton & Barto 2018, eq. 12.3 in recursive form), docs/CONVENTIONS.md §3.2.

    ``G_t = r_t + γ nv_t`` at a truncation or the window end, ``r_t`` at a termination,
    else ``r_t + γ ((1 − λ) V_{t+1} + λ G_{t+1})`` (backward).

    Args:
        rewards: r_t, per step (or a TorchRL TensorDict).
        values: V(s_t) per step, read only as V(s_{t+1}) inside episodes; with
            ``next_values`` it may be left out.
        terminated, truncated: 0/1 flags marking the END of step t.
        next_values, bootstrap_values, last_value: the bootstrap form, at most one
            (see :func:`gae`).
        discount, lam_per_step: γ_t and λ_t per step, in place of ``gamma``/``lam``.
        gamma, lam: γ and λ in [0, 1] (a list: several settings).
        missing_bootstrap: ``"error"`` or ``"zero"`` (see :func:`gae`).
        dones, dones_mean, episode_starts, last_dones, ends_are, carry, time_dim,
            backend, validate: shared by every estimator (module docstring).

    Returns:
        A :class:`TDLambdaResult` with ``lambda_returns``.
    """
    return _call(_TD_LAMBDA, _TD_LAMBDA_KEY, locals())


@_compiles_as_op(_RETURNS)
def discounted_returns(
    rewards: ArrayLike,
    *,
    terminated: ArrayLike | None = None,
    truncated: ArrayLike | None = None,
    values: ArrayLike | None = None,
    next_values: ArrayLike | None = None,
    bootstrap_values: ArrayLike | None = None,
    last_value: ArrayLike | None = None,
    discount: ArrayLike | None = None,
    gamma: float | list[float] | ArrayLike = 0.99,
    missing_bootstrap: str = "zero",
    dones: ArrayLike | None = None,
    dones_mean: str | None = None,
    episode_starts: ArrayLike | None = None,
    last_dones: ArrayLike | None = None,
    ends_are: str | None = None,
    carry: Carry | None = None,
    time_dim: int | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> ReturnsResult:
    """Discounted reward-to-go (Sutton & Barto 2018, eq. 3.8), docs/CONVENTIONS.md §3.3.

    ``G_t = r_t + γ (1 − cut_t) G_{t+1}`` (backward), plus ``γ nv_t`` at a truncation
    or the window end. Without a bootstrap value that counts as 0
    (``missing_bootstrap="zero"``, the default here: returns often have no critic).

    Args:
        rewards: r_t, per step.
        terminated, truncated: 0/1 flags marking the END of step t.
        values, next_values, bootstrap_values, last_value: the bootstrap form, read
            only at truncations and the window end (see :func:`gae`).
        discount: γ_t per step, in place of ``gamma``.
        gamma: γ in [0, 1] (a list: several settings).
        missing_bootstrap: ``"zero"`` or ``"error"``.
        dones, dones_mean, episode_starts, last_dones, ends_are, carry, time_dim,
            backend, validate: shared by every estimator (module docstring).

    Returns:
        A :class:`ReturnsResult` with ``returns``.
    """
    return _call(_RETURNS, _RETURNS_KEY, locals())


@_compiles_as_op(_TRACES)
def eligibility_traces(
    x: ArrayLike,
    *,
    terminated: ArrayLike | None = None,
    truncated: ArrayLike | None = None,
    gamma: float | list[float] | ArrayLike = 0.99,
    lam: float | list[float] | ArrayLike = 0.95,
    init: ArrayLike | None = None,
    dones: ArrayLike | None = None,
    dones_mean: str | None = None,
    episode_starts: ArrayLike | None = None,
    last_dones: ArrayLike | None = None,
    ends_are: str | None = None,
    carry: Carry | None = None,
    time_dim: int | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> TracesResult:
    """Accumulating eligibility traces (Sutton & Barto 2018, eq. 12.5), docs/CONVENTIONS.md §3.6.

    ``z_t = x_t + γλ (1 − first_t) z_{t−1}`` (forward), ``z_{−1} = init``, where
    ``first_t`` follows a termination or a truncation.

    Args:
        x: the per-step values, of the flags' shape, optionally with trailing feature
            axes (``[T, D]``).
        terminated, truncated: 0/1 flags marking the END of step t.
        gamma, lam: γ and λ in [0, 1] (a list: several settings).
        init: the trace before step 0 (scalar, ``[D]``, per sequence, or both; where
            there are as many sequences as features, ``[B, 1]`` or ``[1, D]``).
        dones, dones_mean, episode_starts, last_dones, ends_are, carry, time_dim,
            backend, validate: shared by every estimator (module docstring).

    Returns:
        A :class:`TracesResult` with ``eligibility_traces``, of ``x``'s shape.
    """
    return _call(_TRACES, _TRACES_KEY, locals())


@_compiles_as_op(_PREFIX_SUM)
def prefix_sum(
    x: ArrayLike,
    *,
    terminated: ArrayLike | None = None,
    truncated: ArrayLike | None = None,
    is_first: ArrayLike | None = None,
    init: ArrayLike | None = None,
    dones: ArrayLike | None = None,
    dones_mean: str | None = None,
    episode_starts: ArrayLike | None = None,
    last_dones: ArrayLike | None = None,
    ends_are: str | None = None,
    carry: Carry | None = None,
    time_dim: int | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> PrefixSumResult:
    """Episodic inclusive prefix sums (Blelloch 1990, a segmented scan), docs/CONVENTIONS.md §3.7.

    ``S_t = x_t + (1 − first_t) S_{t−1}`` (forward), ``S_{−1} = init``, where
    ``first_t`` follows a termination or a truncation, or is an ``is_first`` marker.

    Args:
        x: the per-step values, optionally with trailing feature axes (``[T, D]``).
        terminated, truncated: 0/1 flags marking the END of step t.
        is_first: explicit episode starts (RLDS), in place of the flags.
        init: the sum before step 0 (scalar, ``[D]``, per sequence, or both; where
            there are as many sequences as features, ``[B, 1]`` or ``[1, D]``).
        dones, dones_mean, episode_starts, last_dones, ends_are, carry, time_dim,
            backend, validate: shared by every estimator (module docstring).

    Returns:
        A :class:`PrefixSumResult` with ``prefix_sums``, of ``x``'s shape.
    """
    return _call(_PREFIX_SUM, _PREFIX_SUM_KEY, locals())


@_compiles_as_op(_RETURN_TO_GO)
def return_to_go(
    rewards: ArrayLike,
    *,
    terminated: ArrayLike | None = None,
    truncated: ArrayLike | None = None,
    scale: float = 1.0,
    dones: ArrayLike | None = None,
    dones_mean: str | None = None,
    episode_starts: ArrayLike | None = None,
    last_dones: ArrayLike | None = None,
    ends_are: str | None = None,
    carry: Carry | None = None,
    time_dim: int | None = None,
    backend: str = "auto",
    validate: bool = True,
) -> ReturnToGoResult:
    """Undiscounted return-to-go (Decision Transformer, Chen et al. 2021, §3), divided by
    ``scale``, docs/CONVENTIONS.md §2.

    ``R_t = r_t / scale + (1 − cut_t) R_{t+1}`` (backward): the rewards from step t to
    the end of its episode (terminated, truncated or the end of the data); nothing is
    bootstrapped.

    Args:
        rewards: r_t, per step.
        terminated, truncated: 0/1 flags marking the END of step t.
        scale: the divisor (> 0; Decision Transformer uses 1000 for MuJoCo).
        dones, dones_mean, episode_starts, last_dones, ends_are, carry, time_dim,
            backend, validate: shared by every estimator (module docstring).

    Returns:
        A :class:`ReturnToGoResult` with ``returns_to_go``.
    """
    return _call(_RETURN_TO_GO, _RETURN_TO_GO_KEY, locals())


# ---------------------------------------------------------------------------
# Registry (CLI command name -> spec)

# Problem.kind -> its public function
FUNCTIONS: dict[str, Callable[..., Result]] = {
    "gae": gae,
    "vtrace": vtrace,
    "retrace": retrace,
    "td_lambda": td_lambda,
    "returns": discounted_returns,
    "traces": eligibility_traces,
    "prefix_sum": prefix_sum,
    "return_to_go": return_to_go,
}


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
        FUNCTIONS[d.name],
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
    "FUNCTIONS",
    "MODULES",
    "RESULTS",
    "Carry",
    "EstimatorSpec",
    "GAEResult",
    "PrefixSumResult",
    "PreparedCall",
    "Problem",
    "Result",
    "RetraceResult",
    "ReturnToGoResult",
    "ReturnsResult",
    "SettingsCarry",
    "TDLambdaResult",
    "TracesResult",
    "VTraceResult",
    "compute_dtype",  # the outputs' dtype rule (rltscan.ops's fake follows it)
    "discounted_returns",
    "eligibility_traces",
    "gae",
    "prefix_sum",
    "prepare_call",
    "read_dtype",
    "retrace",
    "return_to_go",
    "synchronize",
    "td_lambda",
    "vtrace",
]


# ---------------------------------------------------------------------------
# Prepared calls: an estimator bound to the shapes of its arrays


class PreparedCall:
    """``rltscan.prepare_call(rltscan.gae, rewards=r, values=v, ...)``: the estimator bound
    to these arrays' shapes, dtypes, strides and device and to these parameters.

    Calling it with arrays of the same kind (``prepared(rewards=r2, values=v2, ...)``:
    the arrays only, by name; parameters stay as prepared) costs one kernel launch
    and the outputs' allocation. Arrays of another shape, dtype, layout or device
    are an error naming the array, never a silent re-plan.

    Calling it with no arrays (``prepared()``) runs on the arrays it was prepared
    with, as they are at that moment (refill them in place: ``r.copy_(batch_r)``),
    and writes into the same output tensors every time (``prepared.outputs``): the
    cheapest call there is (one launch, nothing allocated, nothing checked on the
    host), and one that ``torch.cuda.graph`` can capture. Each such call overwrites
    the previous one's results (which carry no ``.carry``: chunked data goes through
    the estimator itself).
    """

    def __init__(self, function: Callable[..., Result], **arguments: Any) -> None:
        import inspect

        d = next((x for x in DECLARATIONS.values() if FUNCTIONS.get(x.name) is function), None)
        if d is None:
            raise ParameterError(
                f"{function!r} is not an rltscan estimator", "pass e.g. rltscan.gae"
            )
        bound_args = inspect.signature(function).bind(**arguments)
        bound_args.apply_defaults()
        self._args = dict(bound_args.arguments)
        self._declaration = d
        self._arrays = tuple(n for n in d.inputs if self._args.get(n) is not None)
        key = bound.call_key(d, self._args)
        if any(self._args.get(n) is not None for n in ENDS_ARGUMENTS):
            key = None  # flags derived from dones: the front end runs every time
        if key is not None:
            function(**arguments)  # the first call binds the launch (and compiles it)
        self._bound = None if key is None else bound.lookup(d, key)
        if self._bound is None:
            raise ParameterError(
                f"this {d.function_name} call cannot be prepared: it needs the whole "
                "front end every time (arrays not all CUDA tensors as the kernel reads "
                "them, a carry, several gamma/lam settings, a copy or conversion)",
                f"pass CUDA tensors of one layout and plain numbers, or call "
                f"rltscan.{d.function_name} directly",
            )
        self._key = key
        self._key_of = bound.key_function(d)
        self._again: Callable[[], None] | None = None
        self._fixed: Result | None = None

    @property
    def outputs(self) -> Result:
        """The output tensors ``prepared()`` (no arrays) writes into, allocated once."""
        if self._fixed is None:
            self._again, out = self._bound.fixed(self._args)
            self._fixed = RESULTS[self._declaration.name](**out)
        return self._fixed

    def __call__(self, **arrays: Any) -> Result:
        if not arrays:  # again on the prepared arrays, into the fixed outputs
            out = self.outputs
            self._again()
            return out
        if arrays.keys() != set(self._arrays):
            raise ParameterError(
                f"a prepared {self._declaration.function_name} takes exactly the arrays "
                f"{', '.join(self._arrays)}, got {', '.join(arrays) or 'none'}",
                "pass the same arrays by name (parameters stay as prepared)",
            )
        args = {**self._args, **arrays}
        if self._key_of(args) != self._key:
            bad = next(
                n
                for n in self._arrays
                if not isinstance(arrays[n], torch.Tensor)
                or (arrays[n].shape, arrays[n].dtype, arrays[n].stride(), arrays[n].device)
                != (
                    self._args[n].shape,
                    self._args[n].dtype,
                    self._args[n].stride(),
                    self._args[n].device,
                )
            )
            raise DataError(
                f'"{bad}" differs from the prepared call (shape, dtype, layout or device)',
                "prepare another call for this shape, or call the estimator directly",
                column=bad,
            )
        return bound_call(self._declaration, self._bound, args)


def prepare_call(function: Callable[..., Result], /, **arguments: Any) -> PreparedCall:
    """Bind ``function`` (e.g. ``rltscan.gae``) to these example arguments; see
    :class:`PreparedCall`."""
    return PreparedCall(function, **arguments)


def synchronize(device: Any = None) -> None:
    """Wait for the GPU and raise the deferred validation error of any earlier call
    (docs/CONVENTIONS.md §5.1)."""
    bound.synchronize(device)
