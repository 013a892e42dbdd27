"""Episodic (segmented) inclusive prefix sums, docs/CONVENTIONS.md §3.7.

    S_t = x_t + a_t S_{t-1},   a_t = 0 if first_t else 1,   S_{-1} = init     forward

``first_t = done_{t-1}``, or the explicit ``is_first`` markers when given (RLDS,
document starts). Blelloch, "Prefix Sums and Their Applications", 1990 (segmented scan).
"""

from __future__ import annotations

from torch import Tensor

from rltscan.estimators._common import Problem, first_mask, select

REVERSE = False
OUTPUTS = ("prefix_sums",)


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    a = select(first_mask(p), 0.0, 1.0, p)
    return a, p.col("x")


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    return {"prefix_sums": y}
