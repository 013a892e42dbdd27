"""Discounted returns (reward-to-go), docs/CONVENTIONS.md §3.3.

    b_t = r_t + γ nv_t      if boot_t        (truncation or window end; nv from §1.3)
        = r_t               otherwise        (terminal and interior steps)
    G_t = b_t + a_t G_{t+1},   a_t = 0 if cut_t else γ             backward, G_T = 0

Sutton & Barto 2018, §3.3 (eq. 3.8/3.9). Missing bootstraps default to 0 (D5):
returns are often computed without a critic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rltscan.estimators.declaration import (
    BOOTSTRAP_INPUTS,
    READ_BOOT,
    Declaration,
    gamma_param,
)

if TYPE_CHECKING:  # torch loads with the first call, not with the declaration
    from torch import Tensor

    from rltscan.estimators._problem import Problem

DECLARATION = Declaration(
    name="returns",
    command="returns",
    function_name="discounted_returns",
    direction="backward",
    inputs=("rewards", "terminated", "truncated", *BOOTSTRAP_INPUTS, "discount"),
    required=("rewards", "terminated"),
    outputs=("returns",),
    parameters=(gamma_param(),),
    missing_bootstrap="zero",  # returns are often computed without a critic (D5)
    help="Discounted reward-to-go: writes returns.",
    # values are accepted like the other bootstrapping estimators' but never read: nv is
    # only needed at truncations and the window end
    arguments=(
        "rewards",
        "terminated",
        "truncated",
        "values",
        *BOOTSTRAP_INPUTS,
        "discount",
        "gamma",
    ),
    reads=(("next_values", READ_BOOT),),
)
REVERSE = DECLARATION.reverse
OUTPUTS = DECLARATION.outputs


def coefficients(p: Problem) -> tuple[Tensor, Tensor]:
    import torch

    from rltscan.estimators._problem import boot_mask, decay_to_cut, discount, next_state_values

    gamma = discount(p)
    r = p.col("rewards")
    b = torch.where(boot_mask(p), r + gamma * next_state_values(p), r)
    return decay_to_cut(p, gamma), b


def finalize(p: Problem, y: Tensor) -> dict[str, Tensor]:
    return {"returns": y}
