"""Retrace(λ), docs/CONVENTIONS.md §3.5.

    c_t     = λ min(c̄, π(a_t|s_t) / μ(a_t|s_t))               (log space, §2.6)
    delta_t = r_t - Q_t                        if terminated_t
            = r_t + γ E_π Q(s_{t+1}, ·) - Q_t  otherwise
    D_t = delta_t + a_t D_{t+1},   a_t = 0 if cut_t else γ c_{t+1}   backward, D_T = 0
    retrace_targets_t = Q_t + D_t;     advantages_t = retrace_targets_t - V^π_t (if given)

The trace uses the NEXT row's ratio and is never read at a cut, so c_0 and the
ratio past a cut are ignored. Munos et al., "Safe and Efficient Off-Policy
Reinforcement Learning", NeurIPS 2016, arXiv:1606.02647, eq. 3 (written as a
sum of TD errors with E_π Q of the successor state).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from rltscan.estimators.declaration import (
    READ_AFTER_UNCUT,
    READ_NOT_TERMINATED,
    Declaration,
    c_clip_param,
    gamma_param,
    lam_param,
)

if TYPE_CHECKING:  # torch loads with the first call, not with the declaration
    from torch import Tensor

    from rltscan.estimators._common import Problem

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
    ),
    required=(
        "rewards",
        "q_values",
        "next_expected_q",
        "logp_target",
        "logp_behavior",
        "terminated",
    ),
    outputs=("retrace_targets", "advantages"),
    parameters=(gamma_param(), lam_param(1.0), c_clip_param()),
    missing_bootstrap=None,
    help="Retrace(λ): writes retrace_targets (and advantages with --v-pi).",
    doc="""Retrace(λ) targets ``retrace_targets`` (+ ``advantages`` with ``v_pi``), §3.5.

    ``q_values`` is Q(s_t, a_t); ``next_expected_q`` is E_{a~π(.|s_{t+1})} Q(s_{t+1}, a)
    for the true successor of step t (ignored at terminal steps). For discrete
    actions pass ``next_target_probs`` and ``next_q`` (``[..., A]``, both describing
    s_{t+1}) instead and the expectation is taken here.
    """,
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
)
REVERSE = DECLARATION.reverse
OUTPUTS = DECLARATION.outputs


def prepare(args: dict[str, Any]) -> dict[str, Any]:
    """E_π Q(s_t+1, ·) from ``next_target_probs`` and ``next_q`` when it is not given."""
    from rltscan.errors import ParameterError

    if args["next_expected_q"] is None:
        args["next_expected_q"] = _expected_next_q(
            args["next_target_probs"], args["next_q"], args["validate"], args["terminated"]
        )
    elif args["next_target_probs"] is not None or args["next_q"] is not None:
        raise ParameterError(
            '"next_expected_q" and "next_target_probs"/"next_q" were both given; pass one form'
        )
    return args


def _expected_next_q(probs: Any, q: Any, validate: bool, terminated: Any) -> Any:
    import torch

    from rltscan.errors import DataError, ParameterError
    from rltscan.estimators._common import as_tensor

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
                stacklevel=5,  # the caller of retrace (prepare <- the driver <- retrace)
            )
    ev = (p * qq).sum(-1)
    return ev if isinstance(probs, torch.Tensor) else ev.numpy()


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    import torch

    from rltscan.estimators._common import clipped_ratio, cut_mask, next_of, shift_next

    gamma, lam = p.params["gamma"], p.params["lam"]
    r, q = p.col("rewards"), p.col("q_values")
    ev = torch.where(p.flag("terminated"), 0.0, p.col("next_expected_q"))
    delta = r + gamma * ev - q
    c = lam * clipped_ratio(p, p.params["c_clip"])
    if p.continues:  # c_{t+1} at the chunk end comes from the next chunk's first ratio
        nlr = next_of(p, "next_log_ratio")
        c_last = lam * torch.exp(torch.clamp(nlr, max=math.log(p.params["c_clip"])))
        c_next = shift_next(c, c_last)
    else:
        c_next = shift_next(c)
    a = torch.where(cut_mask(p), 0.0, gamma * c_next)  # select: garbage ratio at a cut stays out
    return a, delta


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    targets = p.col("q_values") + y
    out = {"retrace_targets": targets}
    if p.has("v_pi"):
        out["advantages"] = targets - p.col("v_pi")
    return out
