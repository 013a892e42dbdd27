"""Normalisation: user arrays (numpy or torch, any layout) -> ``[R, T]`` views.

Every input is brought to ``[R, T]`` (rows × time, time last) as a *view* where
possible, so time-major ``[T, B]`` buffers reach the kernels through strides,
without a transposition copy. Flags stay 1 byte wide (bool or uint8).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import numpy as np

from rltscan.errors import (
    AmbiguousInputError,
    DataError,
    DTypeError,
    ParameterError,
)
from rltscan.estimators._problem import ArrayLike
from rltscan.scan import host_tensor

if TYPE_CHECKING:  # torch loads where a function needs it (a torch-free run's Frame: never)
    import torch
    from torch import Tensor


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
        """``[*step_shape, *features]`` -> ``[features × lead, T]`` (a view when strides
        allow); without features and with at most two axes, of numpy arrays too."""
        if self.squeeze:
            x = x[..., 0]
        nf = len(self.feature_shape)
        nd = len(self.step_shape)
        if nf == 0 and nd <= 2:  # the hot path: [T], [B, T] or [T, B], no copy, few ops
            # (indexing and .T: torch tensors and numpy arrays alike)
            if nd == 1:
                return x[None]
            return x if self.time_dim == 1 else x.T
        # features first, then the lead dims, then time
        order = [nd + i for i in range(nf)]
        order += [i for i in range(nd) if i != self.time_dim] + [self.time_dim]
        return x.permute(order).reshape(-1, self.steps)

    def back(self, y: Tensor) -> Tensor:
        """Inverse of ``rows``: ``[R, T]`` -> the user's ``[*step_shape, *features]``."""
        nf = len(self.feature_shape)
        nd = len(self.step_shape)
        if nf == 0 and nd <= 2:
            out = y[0] if nd == 1 else (y if self.time_dim == 1 else y.T)
            return out[..., None] if self.squeeze else out
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


@functools.cache
def _floats() -> tuple[torch.dtype, ...]:
    import torch

    return (torch.float16, torch.bfloat16, torch.float32, torch.float64)


# the numpy dtypes torch wraps, as kind + itemsize
_TORCH_NUMPY = frozenset({"b1", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8"})


def torch_readable(name: str, x: np.ndarray) -> np.ndarray:
    """A numpy argument as torch can wrap it: a view with negative strides (``x[::-1]``)
    or in big-endian order copied, a dtype torch has no type for (strings, objects,
    long double) refused by name, a masked array (``np.ma``, netCDF4) read as its data
    when nothing is masked and refused otherwise (under a mask is a missing value, not
    a step's).

    Raises:
        DTypeError: the dtype is not a number torch holds.
        DataError: an entry is masked.
    """
    if isinstance(x, np.ma.MaskedArray):
        if np.ma.getmaskarray(x).any():
            raise DataError(
                f'"{name}" is a masked array with masked entries (missing data), and the '
                "values under its mask would be read as data",
                _masked_fix(x.dtype),
                column=name,
            )
        x = x.data
    if f"{x.dtype.kind}{x.dtype.itemsize}" not in _TORCH_NUMPY:
        fix = (
            "pass float64 or a narrower float (x.astype(np.float64))"
            if x.dtype.kind == "f"
            else "pass a numeric (float or 0/1 flag) array"
        )
        raise DTypeError(f'"{name}" has dtype {x.dtype}', fix, column=name)
    if not x.dtype.isnative:  # big-endian files' columns: torch takes native order only
        return x.astype(x.dtype.newbyteorder("="))
    return x.copy() if any(s < 0 for s in x.strides) else x


def _not_an_array(name: str, x: object) -> DTypeError:
    return DTypeError(
        f'"{name}" is not an array ({type(x).__name__})',
        "pass a numpy array or torch tensor",
        column=name,
    )


def as_tensor(name: str, x: ArrayLike, device: torch.device | None = None) -> Tensor:
    """Wrap without copying where possible (numpy shares memory; we never write into it).

    Tensors are read through ``detach()``: the outputs are constants of any loss
    (stop-gradient, README "Latency"), whatever the backend."""
    import torch

    if isinstance(x, torch.Tensor):
        _check_dense(name, x)
        t = x.detach() if x.requires_grad else x
    elif isinstance(x, np.ndarray):
        if x.dtype.kind not in "biuf":
            raise DTypeError(
                f'"{name}" has dtype {x.dtype}',
                "pass a numeric (float or 0/1 flag) array",
                column=name,
            )
        t = host_tensor(x if x.dtype.isnative else x.astype(x.dtype.newbyteorder("=")))
    else:
        try:
            arr = np.asarray(x)
        except (TypeError, ValueError) as e:
            raise _not_an_array(name, x) from e
        if arr.dtype == object:  # e.g. pandas' nullable dtypes holding pd.NA
            raise DTypeError(
                f'"{name}" ({type(x).__name__}) holds Python objects or missing values,'
                " not numbers",
                "pass numbers: a flag cannot be missing (fill it: pandas .fillna(False),"
                " polars .fill_null(False)); a missing float is NaN (pandas"
                " .to_numpy(dtype=float, na_value=np.nan))",
                column=name,
            )
        try:
            t = host_tensor(arr)
        except (TypeError, ValueError) as e:
            raise _not_an_array(name, x) from e
    if device is not None and t.device != device:
        t = t.to(device)
    return t


def _masked_fix(dtype: np.dtype) -> str:
    """What to do with masked entries: NaN for numbers (refused where it is read, ignored
    where it is not, docs/CONVENTIONS.md §5); a flag has no missing value (``filled(np.nan)``
    makes a masked boolean True, an episode end, and fails on integers)."""
    nan = "NaN is refused where it is read and ignored where it is not (docs/CONVENTIONS.md §5)"
    if dtype.kind == "f":
        return f"pass x.filled(np.nan): {nan}"
    flag = "a flag cannot be missing: pass x.filled(v) with the flag each masked step has"
    if dtype.kind == "b":
        return flag
    return f"{flag}; numbers: pass x.astype(np.float64).filled(np.nan): {nan}"


def read_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a float input of ``dtype`` is read in: a float as it is, an integer
    (integer rewards etc.) upcast losslessly, to float32 up to 2 bytes, else float64."""
    import torch

    if dtype in _floats():
        return dtype
    return torch.float32 if dtype.itemsize <= 2 else torch.float64


def _check_dense(name: str, x: Tensor) -> None:
    """A tensor whose entries the scan can read: dense (strided), not nested or quantized,
    with data (not on the meta device).

    Raises:
        DTypeError: naming the argument and how to convert it.
    """
    import torch

    if x.is_nested:
        raise DTypeError(
            f'"{name}" is a nested tensor',
            "pad it to [B, T] and mark each sequence's last step (terminated or truncated)",
            column=name,
        )
    if x.layout != torch.strided:
        raise DTypeError(
            f'"{name}" is a {str(x.layout).removeprefix("torch.")} tensor',
            f"pass a dense tensor ({name}.to_dense())",
            column=name,
        )
    if x.is_quantized:
        raise DTypeError(
            f'"{name}" is a quantized tensor', f"pass {name}.dequantize()", column=name
        )
    if x.device.type == "meta":
        raise DTypeError(
            f'"{name}" is on the meta device (it has no data)',
            "pass a tensor on the CPU or a GPU",
            column=name,
        )


def float_column(name: str, x: ArrayLike, device: torch.device | None) -> Tensor:
    import torch

    t = as_tensor(name, x, device)
    if t.dtype in _floats():
        return t
    if t.dtype == torch.bool:
        raise DTypeError(
            f'"{name}" holds booleans, not numbers',
            f"pass numbers ({name}.astype(np.float32) or .float() if True means 1)",
            column=name,
        )
    if t.dtype.is_complex:
        raise DTypeError(f'"{name}" has dtype {t.dtype}', "pass a float array", column=name)
    return t.to(read_dtype(t.dtype))  # a lossless upcast, not a silent change of meaning


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
    import torch

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
    import torch

    return torch.cuda.is_available()


def compute_device(backend: str, device: torch.device) -> torch.device:
    """Where the work runs: the inputs' device, except that an explicit ``backend="triton"``
    on CPU inputs runs on the GPU when one is present (results come back to the CPU)."""
    import torch

    if backend == "triton" and device.type == "cpu" and _cuda_available():
        from rltscan.scan import triton_interpreting

        if not triton_interpreting():
            return torch.device("cuda")
    return device


def compute_dtype(dtypes: Iterable[torch.dtype]) -> torch.dtype:
    """The compute and output dtype of float inputs read in ``dtypes`` (:func:`read_dtype`):
    fp64 if any is fp64, else fp32 (fp16/bf16 upcast on load)."""
    import torch

    return torch.float64 if in_float64(dtypes) else torch.float32


def in_float64(dtypes: Iterable[Any]) -> bool:
    """Whether float inputs read in ``dtypes`` (torch's or numpy's) compute in float64:
    when any of them is float64."""
    return any(str(d).removeprefix("torch.") == "float64" for d in dtypes)


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
    1]``); without features, also the lead shape and a
    trailing 1 (a value head's ``[B, 1]`` beside ``[T, B]``, SB3's ``last_values``) or
    one step of the layout (``[1, B]`` beside ``[T, B]``). ``layout`` says in the shape
    error how the sequences were read (the reference's shape and ``time_dim``);
    ``flag``: 0/1 flags (kept 1 byte wide).
    """
    import torch

    if x is None:
        return None
    t = flag_column(name, x, device, validate) if flag else float_column(name, x, device)
    lead, feats = frame.lead_shape, frame.feature_shape
    if frame.squeeze and t.ndim == len(lead) + 1 and t.shape[-1] == 1:
        t = t[..., 0]  # [B, 1] beside [B, T, 1]
    elif not feats and t.ndim == len(lead) + 1:
        # (a square buffer without time_dim was refused before: these shapes then fit
        # one reading of the axes only)
        if tuple(t.shape) == (*lead, 1):  # a value head's [B, 1] beside [T, B] (SB3)
            t = t[..., 0]
        elif frame.steps != 1 and tuple(t.shape) == _one_step(frame):
            t = t.select(frame.time_dim, 0)  # one step of the layout: [1, B] beside [T, B]
    if not feats and tuple(t.shape) == lead and t.is_contiguous():
        return t.reshape(-1)
    user = (*lead, *feats)
    candidates = [t]
    if feats and tuple(t.shape) == lead:  # one value per sequence, shared by its features
        per_sequence = (*lead, *([1] * len(feats)))
        if t.numel() > 1 and _broadcasts(tuple(t.shape), user):
            per_feature = (*([1] * len(lead)), *feats)
            raise AmbiguousInputError(
                f'"{name}" has shape {tuple(t.shape)}, both the sequences\' {lead}{layout} '
                f"and the features' {feats}: one value per sequence or per feature?",
                f"pass shape {per_sequence} for one per sequence or {per_feature} for one per "
                f"feature",
                column=name,
            )
        candidates.insert(0, t.reshape(per_sequence))
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


def _one_step(frame: Frame) -> tuple[int, ...]:
    """The frame's step shape with its time axis of length 1 (CleanRL's
    ``next_value.reshape(1, -1)`` beside ``[T, B]``)."""
    shape = list(frame.step_shape)
    shape[frame.time_dim] = 1
    return tuple(shape)


def _broadcasts(shape: tuple[int, ...], to: tuple[int, ...]) -> bool:
    """Whether numpy broadcasting takes ``shape`` to exactly ``to``."""
    try:
        return np.broadcast_shapes(shape, to) == to
    except ValueError:
        return False
