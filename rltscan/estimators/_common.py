"""What every estimator shares: input normalisation, validation, the nv select,
the result type and the backend dispatch.

Every input is brought to ``[R, T]`` (rows × time, time last) as a *view* where
possible, so time-major ``[T, B]`` buffers reach the kernels through strides,
without a transposition copy. Flags stay 1 byte wide (bool or uint8).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from rltscan.errors import (
    AmbiguousInputError,
    DataError,
    DTypeError,
    MissingBootstrapError,
    ParameterError,
)
from rltscan.estimators import check_params as declared_check_params
from rltscan.estimators.declaration import (
    PER_STEP_PARAMETERS,
    READ_AFTER_UNCUT,
    READ_ALL,
    READ_BOOT,
    READ_NOT_TERMINATED,
    setting_columns,
)
from rltscan.scan import resolve_backend

ArrayLike = Any  # torch.Tensor | numpy.ndarray | nested sequences

# How the effective next-state value nv_t (docs/CONVENTIONS.md §1.2) is formed.
NV_NEXT = "next"  # next_values given: nv_t = next_values_t
NV_BOOT = "boot"  # values + bootstrap_values: nv_t = bootstrap_t if boot_t else values_{t+1}
NV_LAST = "last"  # values + last_value: bootstrap only at t = T-1
NV_NONE = "none"  # no bootstrap source: missing wherever boot_t


@dataclasses.dataclass(frozen=True)
class Carry:
    """What one chunk of a long sequence hands to the next chunk in scan order.

    docs/CONVENTIONS.md §2.4: a chunk (or file shard, or a GPU's share) is processed
    with the state at its boundary, and a chunk boundary is not a cut. Backward
    estimators walk the sequence from its end: the chunk after (later in time)
    gives ``y`` (the recurrence value at its first step), ``next_value`` (V at its
    first step, for nv) and, for Retrace, ``next_log_ratio`` (log π − log μ at its
    first step, for c_{t+1}). Forward estimators walk from the start: the chunk
    before gives ``y`` (the value at its last step) and ``prev_done`` (whether its
    last step ended an episode). Per sequence, ``[R]`` in the estimator's row order.
    """

    estimator: str
    y: Tensor
    next_value: Tensor | None = None
    next_log_ratio: Tensor | None = None
    prev_done: Tensor | None = None

    @property
    def rows(self) -> int:
        return int(self.y.shape[0])


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
        """A flag as a bool tensor (all False when absent)."""
        f = self.cols.get(name)
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
        cut = self.done.clone()
        if not self.continues:  # the window end is a truncation (D3); a chunk end is not
            cut[:, -1] = True
        return cut

    @functools.cached_property
    def boot(self) -> Tensor:
        return self.cut & ~self.flag("terminated")


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


def clipped_ratio(p: Problem, clip: float) -> Tensor:
    """``min(clip, pi/mu)`` computed as ``exp(min(log pi - log mu, log clip))`` (§2.6)."""
    log_ratio = p.col("logp_target") - p.col("logp_behavior")
    return torch.exp(torch.clamp(log_ratio, max=math.log(clip)))


# ---------------------------------------------------------------------------
# Results


class _MappingMixin(Mapping):
    """Lets a frozen result dataclass act as ``{name: array}`` (fields left None are absent).

    With several settings (``gamma=[0.9, 0.99]``) each output field holds the settings
    stacked on a leading axis, and the mapping's names are the written columns, one per
    setting: ``advantages_g0.9_l0.95`` -> that setting's array (``estimators.declaration
    .setting_columns``); the field names still give the stacked arrays.
    """

    def _outputs(self) -> list[str]:
        return [
            f.name
            for f in dataclasses.fields(self)
            if f.metadata.get("output", True) and getattr(self, f.name) is not None
        ]

    def _columns(self) -> dict[str, tuple[str, int]]:
        settings = getattr(self, "settings", None)
        return {c: (o, k) for c, o, k in setting_columns(self._outputs(), settings)}

    def _present(self) -> list[str]:
        return list(self._columns())

    def __getitem__(self, key: str) -> Any:
        where = self._columns().get(key)
        if where is None:
            if key in self._outputs():  # the stacked array of every setting
                return getattr(self, key)
            raise KeyError(key)
        output, k = where
        value = getattr(self, output)
        return value if k < 0 else value[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._present())

    def __len__(self) -> int:
        return len(self._present())


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Result(_MappingMixin):
    """Base of every estimator's result: a mapping of output name -> array.

    ``carry`` (not an output) is the state to hand to the next chunk in scan order
    when a long sequence is processed in pieces (see ``Carry``).
    """

    # Computed on first access only: a call that is not chunked never pays for it.
    _carry_fn: Any = dataclasses.field(
        default=None, kw_only=True, repr=False, metadata={"output": False}
    )
    # Several settings in one pass: the (γ, λ) of each entry of the leading axis.
    settings: tuple[dict[str, float], ...] | None = dataclasses.field(
        default=None, kw_only=True, repr=False, metadata={"output": False}
    )

    @property
    def carry(self) -> Carry | None:
        """The state to pass as ``carry=`` with the next chunk in scan order."""
        cached = self.__dict__.get("_carry")
        if cached is None and self._carry_fn is not None:
            cached = self._carry_fn()
            object.__setattr__(self, "_carry", cached)
        return cached

    def __repr__(self) -> str:
        parts = [
            f"{k}={tuple(v.shape)} {str(v.dtype).replace('torch.', '')}" for k, v in self.items()
        ]
        return f"{type(self).__name__}({', '.join(parts)})"


# ---------------------------------------------------------------------------
# Normalisation: user arrays -> [R, T] views


@dataclasses.dataclass(frozen=True)
class Frame:
    """How user arrays map to ``[R, T]``: their step shape and time axis, and the way back.

    ``squeeze``: the user's arrays carry one more trailing axis of length 1 after the
    time axis (TorchRL's ``[*B, T, 1]``, a ``[T, B, 1]`` buffer): it is dropped on the
    way in (a view) and restored on the way out, so outputs keep the input's shape
    (docs/CONVENTIONS.md §8)."""

    step_shape: tuple[int, ...]
    time_dim: int
    feature_shape: tuple[int, ...] = ()  # traces / prefix sums: trailing per-step features
    as_numpy: bool = False
    device: torch.device | None = None
    squeeze: bool = False

    @property
    def steps(self) -> int:
        return self.step_shape[self.time_dim]

    @property
    def lead_shape(self) -> tuple[int, ...]:
        return tuple(s for i, s in enumerate(self.step_shape) if i != self.time_dim)

    def rows(self, x: Tensor) -> Tensor:
        """``[*step_shape, *features]`` -> ``[features × lead, T]`` (a view when strides allow)."""
        if self.squeeze:
            x = x[..., 0]
        nf = len(self.feature_shape)
        nd = len(self.step_shape)
        if nf == 0 and nd <= 2:  # the hot path: [T], [B, T] or [T, B], no copy, few ops
            if nd == 1:
                return x.unsqueeze(0)
            return x if self.time_dim == 1 else x.t()
        # features first, then the lead dims, then time
        order = [nd + i for i in range(nf)]
        order += [i for i in range(nd) if i != self.time_dim] + [self.time_dim]
        return x.permute(order).reshape(-1, self.steps)

    def back(self, y: Tensor) -> Tensor:
        """Inverse of ``rows``: ``[R, T]`` -> the user's ``[*step_shape, *features]``."""
        nf = len(self.feature_shape)
        nd = len(self.step_shape)
        if nf == 0 and nd <= 2:
            out = y.squeeze(0) if nd == 1 else (y if self.time_dim == 1 else y.t())
            return out.unsqueeze(-1) if self.squeeze else out
        y = y.reshape(*self.feature_shape, *self.lead_shape, self.steps)
        # y dims: features (nf), lead (nd-1), time (1) -> user order
        lead_pos = [i for i in range(nd) if i != self.time_dim]
        src = [0] * (nd + nf)
        for k, pos in enumerate(lead_pos):
            src[pos] = nf + k
        src[self.time_dim] = nf + nd - 1
        for i in range(nf):
            src[nd + i] = i
        out = y.permute(src)
        return out.unsqueeze(-1) if self.squeeze else out

    def user_index(self, r: int, t: int) -> tuple[int, ...]:
        """The user's index of element ``(r, t)`` of an ``[R, T]`` column."""
        rows_shape = (*self.feature_shape, *self.lead_shape)
        idx = np.unravel_index(r, rows_shape) if rows_shape else ()
        feats, lead = list(idx[: len(self.feature_shape)]), list(idx[len(self.feature_shape) :])
        out = []
        for i in range(len(self.step_shape)):
            out.append(t if i == self.time_dim else int(lead.pop(0)))
        squeezed = [0] if self.squeeze else []
        return tuple(int(v) for v in out + squeezed + [int(f) for f in feats])

    def output(self, y: Tensor) -> Any:
        out = self.back(y)
        if self.as_numpy:
            return out.detach().cpu().numpy()
        return out if self.device is None else out.to(self.device)


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def as_tensor(name: str, x: ArrayLike, device: torch.device | None = None) -> Tensor:
    """Wrap without copying where possible (numpy shares memory; we never write into it).

    Tensors are read through ``detach()``: the outputs are constants of any loss
    (stop-gradient, README "Latency"), whatever the backend."""
    if isinstance(x, Tensor):
        t = x.detach() if x.requires_grad else x
    elif isinstance(x, np.ndarray):
        if x.dtype.kind not in "biuf":
            raise DTypeError(
                f'"{name}" has dtype {x.dtype}',
                "pass a numeric (float or 0/1 flag) array",
                column=name,
            )
        t = (
            torch.from_numpy(x)
            if x.dtype.isnative
            else torch.from_numpy(x.astype(x.dtype.newbyteorder("=")))
        )
    else:
        try:
            t = torch.as_tensor(np.asarray(x))
        except (TypeError, ValueError) as e:
            raise DTypeError(
                f'"{name}" is not an array ({type(x).__name__})',
                "pass a numpy array or torch tensor",
                column=name,
            ) from e
    if device is not None and t.device != device:
        t = t.to(device)
    return t


def float_column(name: str, x: ArrayLike, device: torch.device | None) -> Tensor:
    t = as_tensor(name, x, device)
    if t.dtype in _FLOATS:
        return t
    if t.dtype.is_complex or t.dtype == torch.bool:
        raise DTypeError(f'"{name}" has dtype {t.dtype}', "pass a float array", column=name)
    # integer rewards etc.: a lossless upcast, not a silent change of meaning
    return t.to(torch.float32 if t.element_size() <= 2 else torch.float64)


def flag_column(
    name: str,
    x: ArrayLike,
    device: torch.device | None,
    validate: bool,
    time_dim: int | None = None,
) -> Tensor:
    """Flags stay 1 byte wide: bool and uint8 pass through; 0/1 ints and floats become bool.

    ``time_dim`` (None: only a 1-D array's is known) says which entry of an error's
    index is the time step."""
    t = as_tensor(name, x, device)
    if t.dtype == torch.bool:
        return t
    if validate:
        bad = (t != 0) & (t != 1)
        if t.dtype.is_floating_point:
            bad |= torch.isnan(t)
        if bool(bad.any()):
            first = tuple(int(i) for i in torch.nonzero(bad)[0].tolist())
            axis = 0 if t.ndim == 1 else (None if time_dim is None else time_dim % t.ndim)
            raise DataError(
                f'"{name}" must hold 0/1 flags but has {t[first].item()!r}',
                "pass a boolean array",
                column=name,
                index=first,
                time_axis=axis,
            )
    if t.dtype == torch.uint8:
        return t
    return t != 0


def check_params(**params: float | None) -> None:
    """Scalar hyperparameters: real numbers (numpy and 0-d torch scalars too) in their
    declared ranges (``rltscan.estimators.check_params``, the one table and wording)."""
    for name, v in params.items():
        if v is not None and not _is_real_scalar(v):
            raise ParameterError(f"{name} must be a number, got {v!r}", "pass a float")
    declared_check_params({k: None if v is None else float(v) for k, v in params.items()})


def _is_real_scalar(v: object) -> bool:
    """Python, numpy or 0-d torch real numbers (not bools)."""
    if isinstance(v, (bool, np.bool_)):
        return False
    if isinstance(v, (int, float, np.integer, np.floating)):
        return True
    return (
        isinstance(v, Tensor)
        and v.ndim == 0
        and (v.dtype.is_floating_point or (not v.dtype.is_complex and v.dtype != torch.bool))
    )


def said(time_dim: int | None) -> str:
    """``time_dim`` as a message names it: ``time_dim=0``, ``time_dim=None (time last)``."""
    return "time_dim=None (time last)" if time_dim is None else f"time_dim={time_dim}"


def check_shape(
    name: str, t: Tensor, want: tuple[int, ...], ref: str, time_dim: int | None = None
) -> None:
    """Every per-step array has the reference's shape (the one rule, named with ``time_dim``)."""
    if tuple(t.shape) != want:
        raise DataError(
            f'"{name}" has shape {tuple(t.shape)} but "{ref}" has {want}',
            f"pass per-step arrays of one shape, with time on the axis {said(time_dim)} names",
            column=name,
        )


def time_axis(shape: tuple[int, ...], time_dim: int | None, ref: str) -> tuple[int, bool]:
    """Where time is in per-step arrays of ``shape``, and whether a trailing axis of length
    1 after it is dropped (docs/CONVENTIONS.md §8): ``(axis of the shape without that
    axis, dropped)``.

    An explicit ``time_dim`` is taken as said; a trailing length-1 axis after the time
    axis (TorchRL's ``[*B, T, 1]`` with ``time_dim=-2``, ``[T, B, 1]`` with
    ``time_dim=0``) is a feature axis of one value. ``time_dim=None`` means time on the
    last axis of a ``[T]`` or ``[B, T]`` array, and refuses what could be read two ways:
    three or more axes, a square ``[N, N]``, and a time axis of length 1 (a ``[B, 1]``
    or ``[1]`` array: one step per sequence, or a column of values?).

    Args:
        shape: the per-step arrays' shape (without trailing feature axes).
        time_dim: the caller's ``time_dim`` (None: the default).
        ref: the reference array's name, for the messages.

    Returns:
        ``(axis, squeeze)``: the time axis (non-negative) of ``shape``, less its last
        axis when ``squeeze``.
    """
    nd = len(shape)
    if nd == 0:
        raise DataError(
            f'"{ref}" is a scalar', "pass a per-step array of shape [T] or [B, T]", column=ref
        )
    if time_dim is not None:
        if isinstance(time_dim, bool) or not isinstance(time_dim, (int, np.integer)):
            raise ParameterError(
                f"time_dim must be an axis (an int) or None, got {time_dim!r}",
                "pass e.g. time_dim=-1 for [B, T] or time_dim=0 for [T, B]",
            )
        if not -nd <= time_dim < nd:
            raise ParameterError(
                f'time_dim = {time_dim} is out of range for "{ref}" with {nd} dims',
                f"pass a value in [{-nd}, {nd - 1}]",
            )
        axis = int(time_dim) % nd
        return axis, axis < nd - 1 and shape[-1] == 1
    if nd >= 3:
        raise AmbiguousInputError(
            f'"{ref}" has shape {shape}: with {nd} axes and time_dim=None the time axis '
            "is not known",
            "pass time_dim=-2 for TorchRL's [*B, T, 1] or [*B, T, F], time_dim=0 for "
            "[T, B, ...], or time_dim=-1 if time is the last axis",
        )
    if nd == 2 and shape[0] == shape[1]:
        raise AmbiguousInputError(
            f'"{ref}" has shape {shape}: square, so time_dim=None cannot tell [B, T] from [T, B]',
            "pass time_dim=-1 if time is the last axis ([B, T]) or time_dim=0 if it is the "
            "first ([T, B])",
        )
    if shape[-1] == 1:
        if nd == 1:
            raise AmbiguousInputError(
                f'"{ref}" has one step (shape {shape}) and time_dim=None',
                "pass time_dim=-1 to compute a sequence of one step",
            )
        raise AmbiguousInputError(
            f'"{ref}" has shape {shape}: with time_dim=None (time last) that is '
            f"{shape[0]} sequences of one step",
            f"pass time_dim=0 if the first axis is time (one sequence of {shape[0]} steps), "
            "or time_dim=-1 for sequences of one step",
        )
    return nd - 1, False


@functools.lru_cache(maxsize=1)
def _cuda_available() -> bool:
    return torch.cuda.is_available()


def compute_device(backend: str, device: torch.device) -> torch.device:
    """Where the work runs: the inputs' device, except that an explicit ``backend="triton"``
    on CPU inputs runs on the GPU when one is present (results come back to the CPU)."""
    if backend == "triton" and device.type == "cpu" and _cuda_available():
        from rltscan.scan import triton_interpreting

        if not triton_interpreting():
            return torch.device("cuda")
    return device


def compute_dtype(cols: Mapping[str, Tensor]) -> torch.dtype:
    """fp64 if any float input is fp64, else fp32 (fp16/bf16 upcast on load)."""
    floats = [t.dtype for t in cols.values() if t.dtype.is_floating_point]
    return torch.float64 if torch.float64 in floats else torch.float32


def per_row(
    name: str,
    x: ArrayLike | None,
    frame: Frame,
    device: torch.device,
    *,
    layout: str = "",
    flag: bool = False,
    validate: bool = True,
) -> Tensor | None:
    """A per-sequence value (``last_value``, ``init``, ``last_dones``) -> ``[R]`` in the
    row order of ``rows``.

    Accepts a scalar, the lead (batch) shape, the feature shape, or both, with
    numpy broadcasting; with the frame's trailing length-1 axis too (TorchRL's ``[B,
    1]``). ``layout`` says in the shape error how the sequences were read (the
    reference's shape and ``time_dim``); ``flag``: 0/1 flags (kept 1 byte wide).
    """
    if x is None:
        return None
    t = flag_column(name, x, device, validate) if flag else float_column(name, x, device)
    lead, feats = frame.lead_shape, frame.feature_shape
    if frame.squeeze and t.ndim == len(lead) + 1 and t.shape[-1] == 1:
        t = t[..., 0]  # [B, 1] beside [B, T, 1]
    if not feats and tuple(t.shape) == lead and t.is_contiguous():
        return t.reshape(-1)
    user = (*lead, *feats)
    candidates = [t]
    if feats and tuple(t.shape) == lead:  # one value per sequence, shared by its features
        candidates.insert(0, t.reshape(*lead, *([1] * len(feats))))
    for c in candidates:
        try:
            full = torch.broadcast_to(c, user)
            break
        except RuntimeError:
            continue
    else:
        raise DataError(
            f'"{name}" has shape {tuple(t.shape)} but there are {lead} sequences{layout}',
            "pass a scalar or one value per sequence, or the time_dim that names the time "
            "axis (time_dim=0 for [T, B])",
            column=name,
        )
    nl = len(lead)
    perm = [nl + i for i in range(len(feats))] + list(range(nl))
    return full.permute(perm).reshape(-1).contiguous()


# ---------------------------------------------------------------------------
# Validation of contents (one device sync for all checks; details only on failure)

# When an entry of a column is read (docs/CONVENTIONS.md §5: only read entries are
# checked): the READ_* rules the declarations name (estimators/declaration.py).


def read_mask(p: Problem, when: str) -> Tensor | None:
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
    checks: list[tuple[str, Tensor, str]] = []
    for name, when in reads.items():
        if name not in p.cols:
            continue
        x = p.cols[name]
        # The common case in one reduction, no temporaries: a finite sum means every
        # entry is finite (NaN/Inf propagate); an overflowing sum just falls through.
        if bool(torch.isfinite(x.sum())):
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
    if not p.missing_zero and p.nv_mode in (NV_LAST, NV_NONE) and _needs_nv(p):
        boot = boot_mask(p).clone()
        if p.nv_mode == NV_LAST:
            boot[:, -1] = False
        checks.append(("bootstrap", boot, "missing"))
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
            end = "the window ends" if t == p.shape[1] - 1 else "the episode is truncated"
            raise MissingBootstrapError(
                f"{end} at index {{index}} without termination but no bootstrap value was given",
                'pass "next_values", "bootstrap_values" or "last_value" '
                '(or missing_bootstrap="zero" to treat it as 0)',
                index=idx,
                time_axis=frame.time_dim,
            )
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


def _needs_nv(p: Problem) -> bool:
    """The estimator reads V(s_t+1) and so has a missing-bootstrap rule (its declaration)."""
    from rltscan.estimators import declared_module

    return declared_module(p.kind).DECLARATION.missing_bootstrap is not None


# ---------------------------------------------------------------------------
# Dispatch


def solve(
    p: Problem,
    backend: str,
    *,
    validate: bool = False,
    reads=None,
    frame=None,
    defer: bool = False,
    on_launch=None,
) -> dict[str, Tensor]:
    """Validate (when asked) and run one estimator; returns ``{output: [R, T]}``.

    On the Triton backend the content checks are fused into the kernel as a
    screen; only when it fires does the host validator run, to name the input and
    the first bad index. With ``defer`` (results that stay on the GPU) nothing
    waits for the screen: a hit is raised by a later call (docs/CONVENTIONS.md §5.1).
    ``on_launch`` receives the fused kernel's launch (``triton_scan.Fired``), for
    binding later calls of the same shape to it. A problem with ``settings`` runs
    them all in one launch on the fused kernel, else one solve per setting; its
    outputs are ``[K, R, T]``.
    """
    from rltscan.estimators import declared_module

    mod = declared_module(p.kind)
    which = resolve_backend(backend, p.device)
    if p.settings is not None and not (which == "triton" and settings_fused(p)):
        return _each_setting(p, backend, validate=validate, reads=reads, frame=frame)
    if which == "triton":
        from rltscan.scan import triton_scan

        if triton_fused(p):
            if p.carry is not None and p.carry.next_value is None and _reads_next_value(p):
                next_of(p, "next_value")  # raises: the chunks mix bootstrap forms
            check = ("defer" if defer else True) if validate else False
            out, suspicious, fired = triton_scan.solve(p, _kernel_outputs(p, mod), check=check)
            if suspicious:
                validate_contents(p, reads, frame)  # raises with the exact message
            if on_launch is not None:
                on_launch(fired)
            return out
        # The generic path: no fused prologue for this kind (or for a column it was
        # given), so its module builds (a, b) with torch and the kernel runs its plain
        # linear-scan mode.
        if validate:
            validate_contents(p, reads, frame)
        a, b = mod.coefficients(p)
        init = None if p.boundary is None else p.boundary.to(p.dtype)
        y = triton_scan.linear_scan(a.to(p.dtype), b.to(p.dtype), reverse=p.reverse, init=init)
        return mod.finalize(p, y)
    if validate:
        validate_contents(p, reads, frame)
    if which == "cpu":
        from rltscan.scan import cpu_fused

        return cpu_fused.solve(p, mod.coefficients, mod.finalize, tuple(mod.OUTPUTS))
    if which == "reference":
        from rltscan.scan import reference

        q = p.with_dtype(torch.float64)
        a, b = mod.coefficients(q)
        init = None if q.boundary is None else q.boundary.to(torch.float64)
        y = reference.linear_scan(a, b, reverse=q.reverse, init=init)
        return {k: v.to(p.dtype) for k, v in mod.finalize(q, y).items()}
    from rltscan.scan import torch_scan

    a, b = mod.coefficients(p)
    init = None if p.boundary is None else p.boundary.to(p.dtype)
    y = torch_scan.linear_scan(a, b, reverse=p.reverse, init=init)
    return mod.finalize(p, y)


def triton_fused(p: Problem) -> bool:
    """Whether the Triton backend solves ``p`` with its kind's fused prologue (else the
    generic path: the module's torch ``coefficients`` and the kernel's linear mode): a
    fused kind whose prologue reads every per-step column given (γ_t, λ_t, §1.7)."""
    from rltscan.scan import triton_scan

    return triton_scan.fused(p.kind) and all(
        triton_scan.reads_column(p.kind, c) for c in PER_STEP_PARAMETERS if c in p.cols
    )


def settings_fused(p: Problem) -> bool:
    """Whether the Triton kernel solves every setting of ``p`` in one launch: a fused
    estimator with scalar γ and λ. Per-step columns are excluded here (the settings
    table would carry γ and λ for them): they run one fused launch per setting."""
    from rltscan.scan import triton_scan

    return triton_scan.fused(p.kind) and not any(c in p.cols for c in PER_STEP_PARAMETERS)


def _each_setting(p: Problem, backend: str, **checks: Any) -> dict[str, Tensor]:
    """One solve per setting (backends without a settings launch), stacked ``[K, R, T]``;
    the contents are validated once."""
    if checks["validate"]:
        validate_contents(p, checks["reads"], checks["frame"])
    outs: list[dict[str, Tensor]] = []
    for k, s in enumerate(p.settings):
        carry = p.carry
        if carry is not None and carry.y.ndim == 2:
            carry = dataclasses.replace(carry, y=carry.y[:, k])
        one = dataclasses.replace(p, params={**p.params, **s}, settings=None, carry=carry)
        outs.append(solve(one, backend))
    return {name: torch.stack([o[name] for o in outs]) for name in outs[0]}


def _reads_next_value(p: Problem) -> bool:
    """The fused kernel reads V of the next chunk's first step (values, not next_values)."""
    return "values" in p.cols and p.nv_mode != NV_NEXT


def _kernel_outputs(p: Problem, mod: Any) -> tuple[str, ...]:
    """The outputs the fused epilogue writes: the declared ones, less an optional one
    whose input is absent (Retrace's advantages without v_pi)."""
    outputs = tuple(mod.OUTPUTS)
    optional = dict(mod.DECLARATION.optional_outputs)
    return tuple(o for o in outputs if optional.get(o) is None or optional[o] in p.cols)


def warn_not_contractive(gamma: float, lam: float, c_clip: float, who: str) -> None:
    if gamma * lam * c_clip > 1.0:
        warnings.warn(
            f"{who}: gamma * lam * c_clip = {gamma * lam * c_clip:g} > 1, the recurrence is not "
            "contractive and traces can grow without bound; lower c_clip or lam",
            RuntimeWarning,
            stacklevel=3,
        )
