"""The state one chunk of a long sequence hands to the next (docs/CONVENTIONS.md §2.4)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # a torch-free run's carry holds numpy arrays
    from torch import Tensor


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
    last step ended an episode). Per sequence, ``[R]`` in the estimator's row order:
    torch tensors, or numpy arrays from a torch-free run (``rltscan.estimators.host``).
    """

    estimator: str
    y: Tensor
    next_value: Tensor | None = None
    next_log_ratio: Tensor | None = None
    prev_done: Tensor | None = None

    @property
    def rows(self) -> int:
        return int(self.y.shape[0])


def carry_out(p: Any, out: dict[str, Any]) -> Carry:
    """The state the next chunk in scan order needs (docs/CONVENTIONS.md §2.4), from an
    ``estimators`` ``Problem`` ``p`` and its ``{output: [R, T]}``: torch tensors, or numpy
    arrays of a numpy problem (then the carry holds numpy arrays)."""
    from rltscan.estimators import declared_module

    mod = declared_module(p.kind)
    d = mod.DECLARATION
    edge = 0 if p.reverse else -1  # only one column of anything is touched

    def col(name: str) -> Any:
        return _cast(p.cols[name][:, edge], p.dtype)

    # the recurrence's own value y, from the first output (minus its base: vs = V + y)
    y = _cast(out[d.outputs[0]][:, edge], p.dtype)
    if d.carry_base:
        y = y - col(d.carry_base)
    if p.reverse:
        # an estimator that reads the next row's ratio (Retrace's c_{t+1}) carries it
        # (the module says which log-ratio its trace reads: Retrace's four traces differ)
        log_ratio_at = getattr(mod, "log_ratio_at", None)
        nlr = log_ratio_at(p, edge) if log_ratio_at is not None else None
        nv = col("values") if p.has("values") else None
        return Carry(p.kind, _copy(y), next_value=nv, next_log_ratio=nlr)
    done = p.flag("terminated")[:, edge] | p.flag("truncated")[:, edge]
    return Carry(p.kind, _copy(y), prev_done=_copy(done))


def _cast(x: Any, dtype: Any) -> Any:
    """``x`` in ``dtype`` (itself when it is already): a numpy array or a torch tensor."""
    return x.astype(dtype, copy=False) if isinstance(x, np.ndarray) else x.to(dtype)


def _copy(x: Any) -> Any:
    return x.copy() if isinstance(x, np.ndarray) else x.clone()
