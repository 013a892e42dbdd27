"""Accumulating eligibility traces, docs/CONVENTIONS.md §3.6.

    z_t = x_t + a_t z_{t-1},   a_t = 0 if first_t else γλ,   z_{-1} = init     forward

``first_t = done_{t-1}``: both termination and truncation end the episode.
``x`` may carry trailing feature axes (``[T, D]``); ``a_t`` broadcasts over them.
Sutton & Barto 2018, §12.2 (eq. 12.5), accumulating traces only.
"""

from __future__ import annotations

from torch import Tensor

from rltscan.estimators._common import Problem, first_mask, select

REVERSE = False
OUTPUTS = ("eligibility_traces",)


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    gl = p.params["gamma"] * p.params["lam"]
    a = select(first_mask(p), 0.0, gl, p)
    return a, p.col("x")


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    return {"eligibility_traces": y}
