"""Retrace(λ) and the general off-policy return, docs/CONVENTIONS.md §3.5.

    delta_t = r_t - Q_t                        if terminated_t
            = r_t + γ E_π Q(s_{t+1}, ·) - Q_t  otherwise
    D_t = delta_t + a_t D_{t+1},   a_t = 0 if cut_t else γ c_{t+1}   backward, D_T = 0
    retrace_targets_t = Q_t + D_t;     advantages_t = retrace_targets_t - V^π_t (if given)

which is ``G_t = r_t + γ (E_π Q(s_{t+1}) − c_{t+1} Q(s_{t+1}, a_{t+1}) + c_{t+1} G_{t+1})``.
The trace ``c`` picks the member of the family (``trace``):

    retrace      c_t = λ min(c̄, π(a_t|s_t) / μ(a_t|s_t))   (log space, §2.6)
    tree-backup  c_t = λ π(a_t|s_t)
    q-lambda     c_t = λ
    is           c_t = λ π(a_t|s_t) / μ(a_t|s_t)

The trace uses the NEXT row's coefficient and is never read at a cut, so c_0 and
the coefficient past a cut are ignored. Munos et al., "Safe and Efficient
Off-Policy Reinforcement Learning", NeurIPS 2016, arXiv:1606.02647, eq. 3 and
Table 1 (the four traces); Precup et al. 2000 (tree-backup, importance sampling);
Harutyunyan et al. 2016 (Q(λ) with off-policy corrections).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rltscan.errors import outside_stacklevel
from rltscan.estimators.declaration import (
    PER_STEP_PARAMETERS,
    READ_AFTER_UNCUT,
    READ_NOT_TERMINATED,
    Declaration,
    c_clip_param,
    gamma_param,
    lam_param,
    trace_param,
)

if TYPE_CHECKING:  # torch loads with the first call, not with the declaration
    from torch import Tensor

    from rltscan.estimators._problem import Problem

DECLARATION = Declaration(
    name="retrace",
    command="retrace",
    function_name="retrace",
    direction="backward",
    inputs=(
        "rewards",
        "q_values",
        "next_expected_q",
        "logp_target",
        "logp_behavior",
        "terminated",
        "truncated",
        "v_pi",
        *PER_STEP_PARAMETERS,
    ),
    required=("rewards", "q_values", "next_expected_q", "terminated"),
    outputs=("retrace_targets", "advantages"),
    parameters=(gamma_param(), lam_param(1.0), c_clip_param(), trace_param()),
    missing_bootstrap=None,
    help="Retrace(λ) and its family (--trace): writes retrace_targets (+ advantages with --v-pi).",
    positional=2,
    extra_arguments=("next_target_probs", "next_q"),
    derivable=("next_expected_q",),
    reads=(
        ("next_expected_q", READ_NOT_TERMINATED),
        ("logp_target", READ_AFTER_UNCUT),
        ("logp_behavior", READ_AFTER_UNCUT),
    ),
    optional_outputs=(("advantages", "v_pi"),),
    contraction_warning=True,
    carry_base="q_values",
    choice_inputs=(
        ("trace", "retrace", ("logp_target", "logp_behavior")),
        ("trace", "tree-backup", ("logp_target",)),
        ("trace", "is", ("logp_target", "logp_behavior")),
    ),
    only_with=(("c_clip", "trace", "retrace"),),
    normalizable=("advantages",),
)
REVERSE = DECLARATION.reverse
OUTPUTS = DECLARATION.outputs


def prepare(args: dict[str, Any]) -> dict[str, Any]:
    """The trace's log-probabilities are given; E_π Q(s_t+1, ·) from
    ``next_target_probs`` and ``next_q`` when it is not given."""
    from rltscan.errors import ParameterError

    for name in DECLARATION.required_for(args):
        if name.startswith("logp_") and args[name] is None:
            raise ParameterError(f'trace="{args["trace"]}" needs "{name}"; pass it')

    if args["next_expected_q"] is None:
        ev = _expected_next_q(
            args["next_target_probs"], args["next_q"], args["validate"], args["terminated"]
        )
        _check_table_shape(ev, args["rewards"])
        args["next_expected_q"] = ev
    elif args["next_target_probs"] is not None or args["next_q"] is not None:
        raise ParameterError(
            '"next_expected_q" and "next_target_probs"/"next_q" were both given; pass one form'
        )
    return args


def _expected_next_q(probs: Any, q: Any, validate: bool, terminated: Any) -> Any:
    import torch

    from rltscan.errors import DataError, ParameterError
    from rltscan.estimators._frame import as_tensor

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
        negative = (p < 0).any(-1)
        term = as_tensor("terminated", terminated)
        if term.shape == off.shape:  # rows after a terminal step are never read (§6)
            off &= term == 0
            negative &= term == 0
        if bool(negative.any()):  # logits or log-probabilities: no expectation at all
            raise DataError(
                f'"next_target_probs" has a negative entry (first at index '
                f"{tuple(torch.nonzero(negative)[0].tolist())})",
                "pass probabilities pi(a|s_t+1) (a softmax of the logits), not logits or "
                "log-probabilities",
                column="next_target_probs",
            )
        if bool(off.any()):
            warnings.warn(
                f'"next_target_probs" rows do not sum to 1 (first at index '
                f"{tuple(torch.nonzero(off)[0].tolist())}); the expectation is taken as given",
                RuntimeWarning,
                stacklevel=outside_stacklevel(),
            )
    ev = (p * qq).sum(-1)
    return ev if isinstance(probs, torch.Tensor) else ev.numpy()


def _check_table_shape(ev: Any, rewards: Any) -> None:
    """The expectation of ``[..., A]`` tables has the rewards' shape, or the refusal names
    the tables (not ``next_expected_q``, which the caller never passed)."""
    import numpy as np

    from rltscan.errors import DataError

    got, want = tuple(np.shape(ev)), tuple(np.shape(rewards))
    if rewards is not None and got != want:

        def shape(s: tuple[int, ...]) -> str:
            return "[" + ", ".join([*map(str, s), "A"]) + "]"

        # TorchRL's [*B, T, 1] rewards beside [*B, T, A] tables: one axis short
        hint = "; x.unsqueeze(-2) beside TorchRL's [*B, T, 1]" if want == (*got, 1) else ""
        raise DataError(
            f'"next_target_probs" and "next_q" have shape {shape(got)} but "rewards" has {want}',
            f"pass tables of shape {shape(want)} (the rewards' shape and one more axis of "
            f"A actions{hint})",
            column="next_q",
        )


def log_ratio_at(p: Problem, t: int | slice) -> Tensor | None:
    """The log of c_t / λ before Retrace's clip, at time index ``t``: log π − log μ
    (Retrace, importance sampling), log π (tree-backup); None for Q(λ) (c_t = λ)."""
    trace = p.params.get("trace", "retrace")
    if trace == "q-lambda":
        return None
    lt = p.cols["logp_target"][:, t].to(p.dtype)
    return lt if trace == "tree-backup" else lt - p.cols["logp_behavior"][:, t].to(p.dtype)


def _ratio(p: Problem, log_ratio: Tensor | None, like: Tensor) -> Tensor:
    """c / λ: the trace's ratio (clipped at c̄ for Retrace only; 1 for Q(λ))."""
    import torch

    if log_ratio is None:
        return torch.ones_like(like)
    if p.params.get("trace", "retrace") == "retrace":
        log_ratio = torch.clamp(log_ratio, max=math.log(p.params["c_clip"]))
    return torch.exp(log_ratio)


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    import torch

    from rltscan.estimators._problem import cut_mask, discount, next_of, shift_next, trace_decay

    gamma, lam = discount(p), trace_decay(p)
    r, q = p.col("rewards"), p.col("q_values")
    ev = torch.where(p.flag("terminated"), 0.0, p.col("next_expected_q"))
    delta = r + gamma * ev - q
    ratio = _ratio(p, log_ratio_at(p, slice(None)), r)
    if p.continues and p.params.get("trace", "retrace") != "q-lambda":
        # the ratio at t+1 past the chunk end comes from the next chunk's first step
        nlr = next_of(p, "next_log_ratio")
        ratio_next = shift_next(ratio, _ratio(p, nlr, nlr))
    else:
        ratio_next = shift_next(ratio, 1.0)
    # c_{t+1} = λ_t · ratio_{t+1}: λ_t decays the continuation of step t (§1.7)
    a = torch.where(cut_mask(p), 0.0, gamma * lam * ratio_next)  # select: a cut stays out
    return a, delta


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    targets = p.col("q_values") + y
    out = {"retrace_targets": targets}
    if p.has("v_pi"):
        out["advantages"] = targets - p.col("v_pi")
    return out
