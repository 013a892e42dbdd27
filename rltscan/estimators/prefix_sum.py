"""Episodic (segmented) inclusive prefix sums, docs/CONVENTIONS.md §3.7.

    S_t = x_t + a_t S_{t-1},   a_t = 0 if first_t else 1,   S_{-1} = init     forward

``first_t = done_{t-1}``, or the explicit ``is_first`` markers when given (RLDS,
document starts). Blelloch, "Prefix Sums and Their Applications", 1990 (segmented scan).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rltscan.estimators.declaration import Declaration

if TYPE_CHECKING:  # torch loads with the first call, not with the declaration
    from torch import Tensor

    from rltscan.estimators._problem import Problem

DECLARATION = Declaration(
    name="prefix_sum",
    command="prefix-sum",
    function_name="prefix_sum",
    direction="forward",
    inputs=("x", "terminated", "truncated", "is_first", "init"),
    required=("x",),
    outputs=("prefix_sums",),
    parameters=(),
    missing_bootstrap=None,
    bootstraps=False,
    help="Episodic prefix sums of --x (default: the rewards).",
    features=True,
)
REVERSE = DECLARATION.reverse
OUTPUTS = DECLARATION.outputs


def prepare(args: dict[str, Any]) -> dict[str, Any]:
    """Explicit episode starts replace the ones derived from the flags: one or the other."""
    from rltscan.errors import ParameterError

    if args["is_first"] is not None and (
        args["terminated"] is not None or args["truncated"] is not None
    ):
        raise ParameterError(
            '"is_first" replaces the episode starts derived from "terminated"/"truncated"; '
            "pass one or the other"
        )
    return args


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    from rltscan.estimators._problem import reset_at_first

    return reset_at_first(p, 1.0)


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    return {"prefix_sums": y}
