"""One estimator call in normal form (:class:`Problem`: ``[R, T]`` columns, flags,
parameters) and what the estimator modules build their coefficients from: the derived
flags (done, cut, boot, first), γ_t/λ_t, and the next-state value nv_t (§1.2).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import TYPE_CHECKING, Any

import numpy as np

from rltscan.errors import (
    DataError,
    ParameterError,
)
from rltscan.estimators._carry import Carry
from rltscan.estimators.declaration import BOOTSTRAP_INPUTS

if TYPE_CHECKING:  # torch loads where a function needs it: a numpy problem never does
    import torch
    from torch import Tensor

    from rltscan.estimators.declaration import Declaration

ArrayLike = Any  # torch.Tensor | numpy.ndarray | nested sequences

# How the effective next-state value nv_t (docs/CONVENTIONS.md §1.2) is formed.
NV_NEXT = "next"  # next_values given: nv_t = next_values_t
NV_BOOT = "boot"  # values + bootstrap_values: nv_t = bootstrap_t if boot_t else values_{t+1}
NV_LAST = "last"  # values + last_value: bootstrap only at t = T-1
NV_NONE = "none"  # no bootstrap source: missing wherever boot_t


@dataclasses.dataclass(frozen=True)
class Problem:
    """One estimator call in normal form: ``[R, T]`` columns (time last), flags, params.

    ``cols`` holds float columns (any float dtype, upcast on use) and the 1-byte
    flags ``terminated``/``truncated``/``is_first`` (bool or uint8). ``last_value``
    and ``init`` are per-row ``[R]``. ``dtype`` is the compute and output dtype.

    ``settings`` (several (γ, λ) in one pass, docs/CONVENTIONS.md §1.7): each entry
    overrides ``params``; :func:`solve` then returns ``[K, R, T]`` outputs and the
    carry's ``y`` is ``[R, K]`` (one value per sequence and setting).
    """

    kind: str
    reverse: bool
    cols: dict[str, Tensor]
    dtype: torch.dtype
    params: dict[str, float]
    nv_mode: str = NV_NONE
    missing_zero: bool = False
    last_value: Tensor | None = None
    init: Tensor | None = None
    carry: Carry | None = None  # the sequence continues past this chunk (§2.4)
    settings: tuple[dict[str, float], ...] | None = None

    @property
    def continues(self) -> bool:
        return self.carry is not None

    @property
    def boundary(self) -> Tensor | None:
        """The scan's boundary value: the carry, else the user's ``init``."""
        return self.carry.y if self.carry is not None else self.init

    @property
    def shape(self) -> tuple[int, int]:
        ref = self.cols.get("rewards", self.cols.get("x"))
        if ref is None:
            ref = next(iter(self.cols.values()))
        return (int(ref.shape[0]), int(ref.shape[1]))

    @property
    def device(self) -> torch.device:
        return next(iter(self.cols.values())).device

    def has(self, name: str) -> bool:
        return name in self.cols

    def col(self, name: str) -> Tensor:
        """A float column upcast to the compute dtype."""
        return self.cols[name].to(self.dtype)

    def flag(self, name: str) -> Tensor:
        """A flag as a bool tensor (all False when absent); a bool numpy array in a
        problem of numpy columns (the torch-free lane, ``rltscan.estimators.host``)."""
        f = self.cols.get(name)
        if isinstance(next(iter(self.cols.values())), np.ndarray):
            return np.zeros(self.shape, dtype=bool) if f is None else f.astype(bool, copy=False)
        import torch

        if f is None:
            return torch.zeros(self.shape, dtype=torch.bool, device=self.device)
        return f if f.dtype == torch.bool else f != 0

    def with_dtype(self, dtype: torch.dtype) -> Problem:
        """The same problem computed in ``dtype`` (the reference path uses float64)."""
        return dataclasses.replace(self, dtype=dtype)

    # Derived flags, computed once per call (frozen dataclass: cached in __dict__).
    @functools.cached_property
    def done(self) -> Tensor:
        return self.flag("terminated") | self.flag("truncated")

    @functools.cached_property
    def cut(self) -> Tensor:
        cut = copied(self.done)
        if not self.continues:  # the window end is a truncation (D3); a chunk end is not
            cut[:, -1] = True
        return cut

    @functools.cached_property
    def boot(self) -> Tensor:
        return self.cut & ~self.flag("terminated")


def copied(x: Tensor | np.ndarray) -> Tensor | np.ndarray:
    """A copy of a tensor or of a numpy array (a problem's columns are either)."""
    return x.copy() if isinstance(x, np.ndarray) else x.clone()


def bootstrap_mode(
    next_values: Any,
    bootstrap_values: Any,
    last_value: Any,
    values: Any,
    *,
    values_required: bool = True,
) -> str:
    """How nv_t is formed (``NV_*``, docs/CONVENTIONS.md §1.2) from the bootstrap
    arguments given: at most one of them, and ``values`` beside a bootstrap that fills
    V(s_t+1) only at cuts (where the estimator reads ``values``: ``values_required``)."""
    given = [
        n
        for n, x in (
            ("next_values", next_values),
            ("bootstrap_values", bootstrap_values),
            ("last_value", last_value),
        )
        if x is not None
    ]
    if len(given) > 1:
        raise ParameterError(
            f"{' and '.join(repr(g) for g in given)} were both given; "
            "pass exactly one bootstrap form (docs/CONVENTIONS.md §1.2)"
        )
    if next_values is not None:
        return NV_NEXT
    needs = bootstrap_values is not None or last_value is not None
    if needs and values is None and values_required:
        raise ParameterError(
            f'"{given[0]}" needs "values" (it fills V(s_t+1) only at cuts); pass values '
            'or give "next_values" instead'
        )
    if bootstrap_values is not None:
        return NV_BOOT
    if last_value is not None:
        return NV_LAST
    return NV_NONE


def prepared_call(d: Declaration, module: Any, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """``args`` through the estimator module's ``prepare`` (where it has one), and the
    bootstrap form they then give (:func:`bootstrap_mode`; ``NV_NONE`` for an estimator
    that takes none): the public function and the torch-free lane read a call alike."""
    prepare = getattr(module, "prepare", None)
    if prepare is not None:
        args = prepare(args)
    if not any(i in d.inputs for i in BOOTSTRAP_INPUTS):
        return args, NV_NONE
    return args, bootstrap_mode(
        args.get("next_values"),
        args.get("bootstrap_values"),
        args.get("last_value"),
        args.get("values"),
        values_required="values" in d.inputs,
    )


def missing_zero(mode: str) -> bool:
    """Whether a missing bootstrap counts as 0 (``missing_bootstrap="zero"``)."""
    if mode not in ("error", "zero"):
        raise ParameterError(f'missing_bootstrap = "{mode}"; pass "error" or "zero"')
    return mode == "zero"


# ---------------------------------------------------------------------------
# Derived flags and the nv select (torch; used by the reference and torch backends)


def done_mask(p: Problem) -> Tensor:
    """done_t = terminated_t OR truncated_t."""
    return p.done


def cut_mask(p: Problem) -> Tensor:
    """cut_t = done_t OR t == T-1: no credit flows from t+1 into t (docs/CONVENTIONS.md §1.1)."""
    return p.cut


def boot_mask(p: Problem) -> Tensor:
    """boot_t = cut_t AND NOT terminated_t: V(s_{t+1}) must be bootstrapped."""
    return p.boot


def first_mask(p: Problem) -> Tensor:
    """first_t = done_{t-1} (first_0 = 0), or the explicit ``is_first`` markers."""
    import torch

    if p.has("is_first"):
        return p.flag("is_first")
    done = done_mask(p)
    first = torch.zeros_like(done)
    first[:, 1:] = done[:, :-1]
    if p.carry is not None and p.carry.prev_done is not None:
        first[:, 0] = p.carry.prev_done
    return first


def select(mask: Tensor, if_true: float | Tensor, if_false: float | Tensor, p: Problem) -> Tensor:
    """``where(mask, if_true, if_false)`` for constants or per-step tensors (a per-step
    discount), in the compute dtype."""
    import torch

    t = torch.as_tensor(if_true, dtype=p.dtype, device=p.device)
    f = torch.as_tensor(if_false, dtype=p.dtype, device=p.device)
    return torch.where(mask, t, f)


def discount(p: Problem) -> float | Tensor:
    """γ_t: the per-step ``discount`` column when given, else the scalar ``gamma``
    (docs/CONVENTIONS.md §1.7)."""
    return p.col("discount") if p.has("discount") else p.params["gamma"]


def trace_decay(p: Problem) -> float | Tensor:
    """λ_t: the per-step ``lam_per_step`` column when given, else the scalar ``lam``."""
    return p.col("lam_per_step") if p.has("lam_per_step") else p.params["lam"]


def shift_next(x: Tensor, last: Tensor | float = 0.0) -> Tensor:
    """``out_t = x_{t+1}``; the last column gets ``last``: the next chunk's first value
    when the sequence continues, else a filler that is never read (a cut is there)."""
    import torch

    out = torch.empty_like(x)
    out[:, :-1] = x[:, 1:]
    out[:, -1] = last
    return out


def next_of(p: Problem, what: str) -> Tensor | float:
    """The value of ``what`` at the first step after this chunk (0.0 when none follows)."""
    if p.carry is None:
        return 0.0
    v = getattr(p.carry, what)
    if v is None:
        raise DataError(
            f"the carry from the next chunk has no {what}",
            "pass every chunk of a sequence with the same bootstrap form",
        )
    return v.to(p.dtype)


def missing_value(p: Problem) -> float:
    """What a required-but-absent bootstrap becomes: 0 on opt-in, NaN otherwise.

    With validation on, a missing bootstrap is an error before any kernel runs;
    NaN makes the unvalidated path fail loudly instead of silently biasing.
    """
    return 0.0 if p.missing_zero else math.nan


def next_state_values(p: Problem) -> Tensor:
    """nv_t per docs/CONVENTIONS.md §1.2, built with selects (garbage in ignored slots
    stays out)."""
    import torch

    if p.nv_mode == NV_NEXT:
        return p.col("next_values")
    boot = boot_mask(p)
    miss = missing_value(p)
    if p.has("values"):
        inside = shift_next(p.col("values"), next_of(p, "next_value"))
    else:  # discounted returns without a critic: nv is only read at boot steps
        inside = torch.zeros(p.shape, dtype=p.dtype, device=p.device)
    if p.nv_mode == NV_BOOT:
        return torch.where(boot, p.col("bootstrap_values"), inside)
    fallback = torch.full_like(inside, miss)
    if p.nv_mode == NV_LAST:
        fallback[:, -1] = p.last_value.to(p.dtype)
    return torch.where(boot, fallback, inside)


def live_next_values(p: Problem) -> Tensor:
    """nv_t, 0 after a terminal step (a select: NaN-safe)."""
    import torch

    return torch.where(p.flag("terminated"), 0.0, next_state_values(p))


def decay_to_cut(p: Problem, decay: float | Tensor) -> Tensor:
    """The backward kinds' a_t: 0 where cut_t, else ``decay`` (γλ, γ, 1)."""
    return select(cut_mask(p), 0.0, decay, p)


def reset_at_first(p: Problem, decay: float | Tensor) -> tuple[Tensor, Tensor]:
    """The forward kinds' (a, b): a_t = 0 where first_t, else ``decay``; b = ``x``."""
    return select(first_mask(p), 0.0, decay, p), p.col("x")


def clipped_ratio(p: Problem, clip: float) -> Tensor:
    """``min(clip, pi/mu)`` computed as ``exp(min(log pi - log mu, log clip))`` (§2.6)."""
    import torch

    log_ratio = p.col("logp_target") - p.col("logp_behavior")
    return torch.exp(torch.clamp(log_ratio, max=math.log(clip)))
