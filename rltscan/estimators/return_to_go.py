"""Undiscounted return-to-go (Decision Transformer), docs/CONVENTIONS.md §2.

    b_t = r_t / scale
    R_t = b_t + a_t R_{t+1},   a_t = 0 if cut_t else 1            backward, R_T = 0

so ``returns_to_go_t`` is the sum of the rewards from step t to the end of its episode
(terminated, truncated or the end of the data), divided by ``scale``. Nothing is
bootstrapped: a truncated episode's return-to-go is the rewards it saw, as in the
datasets Decision Transformer is trained on. Chen et al., "Decision Transformer:
Reinforcement Learning via Sequence Modeling", NeurIPS 2021, arXiv:2106.01345, §3
(R̂_t = Σ_{t'=t}^T r_{t'}); ``scale`` as in their Gym experiments (1000 for MuJoCo).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltscan.estimators.declaration import Declaration, Param

if TYPE_CHECKING:  # torch loads with the first call, not with the declaration
    from torch import Tensor

    from rltscan.estimators._problem import Problem

DECLARATION = Declaration(
    name="return_to_go",
    command="return-to-go",
    function_name="return_to_go",
    direction="backward",
    inputs=("rewards", "terminated", "truncated"),
    required=("rewards", "terminated"),
    outputs=("returns_to_go",),
    parameters=(
        Param.positive(
            "scale", 1.0, "Divide the returns-to-go by this (> 0; Decision Transformer: 1000)."
        ),
    ),
    missing_bootstrap=None,
    bootstraps=False,
    help="Undiscounted return-to-go (Decision Transformer), / --scale: writes returns_to_go.",
)
REVERSE = DECLARATION.reverse
OUTPUTS = DECLARATION.outputs


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    from rltscan.estimators._problem import decay_to_cut

    return decay_to_cut(p, 1.0), p.col("rewards") / p.params["scale"]


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    return {"returns_to_go": y}
