"""The checks of a call: scalar parameters in range, every read entry finite, the
missing-bootstrap rule (docs/CONVENTIONS.md §5), and the contraction warning."""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from rltscan.errors import (
    DataError,
    MissingBootstrapError,
    ParameterError,
    outside_stacklevel,
)
from rltscan.estimators import check_params as declared_check_params
from rltscan.estimators._frame import Frame
from rltscan.estimators._problem import (
    NV_LAST,
    NV_NONE,
    Problem,
    boot_mask,
    copied,
    cut_mask,
)
from rltscan.estimators.declaration import (
    READ_AFTER_UNCUT,
    READ_ALL,
    READ_BOOT,
    READ_NOT_TERMINATED,
)

if TYPE_CHECKING:  # torch loads where a function needs it: a numpy problem never does
    from torch import Tensor


def check_params(**params: float) -> None:
    """Scalar hyperparameters: real numbers (numpy and 0-d torch scalars too) in their
    declared ranges (``rltscan.estimators.check_params``, the one table and wording).
    None is refused too: a ``None`` default has been filled from its fallback already
    (``pg_rho_clip``), so a None here was passed for a parameter that has no such rule
    (``gamma=None`` was float()'s TypeError)."""
    for name, v in params.items():
        if not _is_real_scalar(v):
            raise ParameterError(
                f"{name} must be a number, got {v!r}", "pass a float, or leave it out"
            )
    declared_check_params({k: float(v) for k, v in params.items()})


def _is_real_scalar(v: object) -> bool:
    """Python, numpy or 0-d torch real numbers (not bools)."""
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, (int, float, np.integer, np.floating)):
        return True
    torch = sys.modules.get("torch")  # (not loaded: v is no tensor)
    return (
        torch is not None
        and isinstance(v, torch.Tensor)
        and v.ndim == 0
        and (v.dtype.is_floating_point or (not v.dtype.is_complex and v.dtype != torch.bool))
    )


# When an entry of a column is read (docs/CONVENTIONS.md §5: only read entries are
# checked): the READ_* rules the declarations name (estimators/declaration.py).


def read_mask(p: Problem, when: str) -> Tensor | None:
    import torch

    if when == READ_ALL:
        return None
    if when == READ_NOT_TERMINATED:
        return ~p.flag("terminated")
    if when == READ_BOOT:
        return boot_mask(p)
    if when == READ_AFTER_UNCUT:
        m = torch.zeros(p.shape, dtype=torch.bool, device=p.device)
        m[:, 1:] = ~cut_mask(p)[:, :-1]
        return m
    raise ValueError(when)  # internal: a module named an unknown read rule


def validate_contents(p: Problem, reads: Mapping[str, str], frame: Frame) -> None:
    """Finite checks on every read entry, plus the missing-bootstrap rule (D5)."""
    import torch

    checks: list[tuple[str, Tensor, str]] = []
    for name, when in reads.items():
        if name not in p.cols:
            continue
        x = p.cols[name]
        if finite_sum(x):  # the common case: one reduction, no temporaries
            continue
        if name == "logp_target":  # -inf is a legal log-probability (ratio 0)
            bad = torch.isnan(x) | (x == math.inf)
            what = "NaN or +Inf"
        else:
            bad = ~torch.isfinite(x)
            what = "NaN or Inf"
        mask = read_mask(p, when)
        checks.append((name, bad if mask is None else bad & mask, what))
    if p.last_value is not None:
        lv_bad = ~torch.isfinite(p.last_value) & ~p.flag("terminated")[:, -1]
        checks.append(("last_value", lv_bad[:, None], "NaN or Inf"))
    if bootstrap_checked(p):
        checks.append(("bootstrap", missing_bootstrap(p), "missing"))
    if not checks:
        return
    flags = torch.stack([c[1].any() for c in checks]).tolist()  # the one sync
    for (name, bad, what), hit in zip(checks, flags, strict=True):
        if not hit:
            continue
        r, t = (int(i) for i in torch.nonzero(bad)[0].tolist())
        # the index is the user's (time at frame.time_dim); "{index}" is where it is said
        idx = frame.user_index(r, t)
        if what == "missing":
            raise missing_bootstrap_error(p, frame, r, t)
        if name == "last_value":  # one value per sequence: the index is the row's
            raise DataError(
                f'"last_value" has {what}', "pass finite bootstrap values", column=name, index=r
            )
        raise DataError(
            f'"{name}" has {what} at index {{index}}, an entry that is read',
            "fix or mask the data (NaN is only allowed in ignored slots)",
            column=name,
            index=idx,
            time_axis=frame.time_dim,
        )


def missing_bootstrap(p: Problem) -> Tensor | np.ndarray:
    """Where ``p`` needs V(s_t+1) and no source gives it, where :func:`bootstrap_checked`
    (D5): every boot step, but the last one where ``last_value`` gives it. A bool mask of
    the columns' kind (tensor, or numpy in the torch-free lane)."""
    if p.nv_mode != NV_LAST:
        return boot_mask(p)
    boot = copied(boot_mask(p))
    boot[:, -1] = False
    return boot


def missing_bootstrap_error(p: Problem, frame: Frame, r: int, t: int) -> MissingBootstrapError:
    """The refusal of a missing bootstrap at element ``(r, t)`` of ``p``'s ``[R, T]``
    columns, at the user's index."""
    end = "the window ends" if t == p.shape[1] - 1 else "the episode is truncated"
    return MissingBootstrapError(
        f"{end} at index {{index}} without termination but no bootstrap value was given",
        'pass "next_values", "bootstrap_values" or "last_value" '
        '(or missing_bootstrap="zero" to treat it as 0)',
        index=frame.user_index(r, t),
        time_axis=frame.time_dim,
    )


def refuse_missing_bootstrap(p: Problem, frame: Frame) -> None:
    """The missing-bootstrap check of :func:`validate_contents` on a problem of numpy
    columns (the torch-free lane): raises its error at the first such step."""
    if not bootstrap_checked(p):
        return
    missing = missing_bootstrap(p)
    if missing.any():
        r, t = np.argwhere(missing)[0]
        raise missing_bootstrap_error(p, frame, int(r), int(t))


def finite_sum(x: Tensor | np.ndarray) -> bool:
    """Whether the sum of ``x`` is finite: then every entry is (NaN and Inf propagate; an
    overflowing sum just says no). float32/float64 numpy arrays and host tensors are
    summed by numpy through their strides (one SIMD pass: 2 ms for a 4M-step window
    against torch's 16 ms on the 2-core machine, where a streamed run checks 3-5 columns
    per window); other tensors by torch."""
    if not isinstance(x, np.ndarray):
        if x.device.type != "cpu" or str(x.dtype) not in ("torch.float32", "torch.float64"):
            import torch

            return bool(torch.isfinite(x.sum()))
        x = x.detach().numpy()
    with np.errstate(over="ignore", invalid="ignore"):  # a non-finite sum is the answer
        return bool(np.isfinite(np.add.reduce(x, axis=None)))


def passes(p: Problem, reads: Mapping[str, str]) -> bool:
    """Whether :func:`validate_contents` finds nothing before its missing-bootstrap check,
    told at a glance: every read column's sum is finite, no ``last_value``. False only
    says that the full check must run (it names what it finds). Torch-free on numpy
    problems (``rltscan.estimators.host``, which then runs
    :func:`refuse_missing_bootstrap`)."""
    if p.last_value is not None:
        return False
    return all(finite_sum(p.cols[name]) for name in reads if name in p.cols)


def bootstrap_checked(p: Problem) -> bool:
    """Whether a truncation without a bootstrap value is refused in ``p`` (D5): the
    estimator reads V(s_t+1) (its declaration has a missing-bootstrap rule), the rule is
    not "zero", and the bootstrap form can leave a value missing (last_value, none)."""
    from rltscan.estimators import declared_module

    if p.missing_zero or p.nv_mode not in (NV_LAST, NV_NONE):
        return False
    return declared_module(p.kind).DECLARATION.missing_bootstrap is not None


def warn_not_contractive(gamma: float, lam: float, c_clip: float, who: str) -> None:
    """Warn when γ·λ·c̄ > 1 (the traces may grow without bound), at the user's line."""
    if gamma * lam * c_clip > 1.0:
        warnings.warn(
            f"{who}: gamma * lam * c_clip = {gamma * lam * c_clip:g} > 1, the recurrence is not "
            "contractive and traces can grow without bound; lower c_clip or lam",
            RuntimeWarning,
            stacklevel=outside_stacklevel(),
        )
