"""Accumulating eligibility traces, docs/CONVENTIONS.md §3.6.

    z_t = x_t + a_t z_{t-1},   a_t = 0 if first_t else γλ,   z_{-1} = init     forward

``first_t = done_{t-1}``: both termination and truncation end the episode.
``x`` may carry trailing feature axes (``[T, D]``); ``a_t`` broadcasts over them.
Sutton & Barto 2018, §12.2 (eq. 12.5), accumulating traces only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltscan.estimators.declaration import Declaration, gamma_param, lam_param

if TYPE_CHECKING:  # torch loads with the first call, not with the declaration
    from torch import Tensor

    from rltscan.estimators._problem import Problem

DECLARATION = Declaration(
    name="traces",
    command="traces",
    function_name="eligibility_traces",
    direction="forward",
    inputs=("x", "terminated", "truncated", "init"),
    required=("x", "terminated"),
    outputs=("eligibility_traces",),
    parameters=(gamma_param(), lam_param(0.95)),
    missing_bootstrap=None,
    bootstraps=False,
    help="Accumulating eligibility traces of --x (default: the rewards).",
    features=True,
)
REVERSE = DECLARATION.reverse
OUTPUTS = DECLARATION.outputs


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    from rltscan.estimators._problem import reset_at_first

    return reset_at_first(p, p.params["gamma"] * p.params["lam"])


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    return {"eligibility_traces": y}
