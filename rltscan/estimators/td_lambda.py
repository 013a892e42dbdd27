"""TD(λ) returns, docs/CONVENTIONS.md §3.2.

    b_t = r_t                           if terminated_t
        = r_t + γ nv_t                  if boot_t        (truncation or window end)
        = r_t + γ (1 - λ) nv_t          otherwise        (nv_t = V_{t+1} inside an episode)
    G_t = b_t + a_t G_{t+1},   a_t = 0 if cut_t else γλ          backward, G_T = 0

The λ-weighted mixture of n-step returns, each stopping at the first cut and
bootstrapping there: Sutton, "Learning to predict by the methods of temporal
differences", 1988; Sutton & Barto 2018, §12.1 (eq. 12.3 in recursive form).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rltscan.estimators.declaration import (
    CRITIC_INPUTS,
    READ_AFTER_UNCUT,
    Declaration,
    gamma_param,
    lam_param,
)

if TYPE_CHECKING:  # torch loads with the first call, not with the declaration
    from torch import Tensor

    from rltscan.estimators._problem import Problem

DECLARATION = Declaration(
    name="td_lambda",
    command="td-lambda",
    function_name="td_lambda",
    direction="backward",
    inputs=CRITIC_INPUTS,
    required=("rewards", "terminated"),
    outputs=("lambda_returns",),
    parameters=(gamma_param(), lam_param(0.95)),
    missing_bootstrap="error",
    help="TD(λ) returns: writes lambda_returns.",
    positional=2,
    reads=(("values", READ_AFTER_UNCUT),),
    result="TDLambdaResult",
)
REVERSE = DECLARATION.reverse
OUTPUTS = DECLARATION.outputs


def prepare(args: dict[str, Any]) -> dict[str, Any]:
    """Before the bootstrap form is read: V(s_t+1) has to come from somewhere."""
    from rltscan.errors import ParameterError

    if args["values"] is None and args["next_values"] is None:
        raise ParameterError('td_lambda needs "values" or "next_values"; pass one of them')
    return args


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    from rltscan.estimators._problem import (
        boot_mask,
        decay_to_cut,
        discount,
        live_next_values,
        select,
        trace_decay,
    )

    gamma, lam = discount(p), trace_decay(p)
    weight = select(boot_mask(p), gamma, gamma * (1.0 - lam), p)
    return decay_to_cut(p, gamma * lam), p.col("rewards") + weight * live_next_values(p)


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    return {"lambda_returns": y}
