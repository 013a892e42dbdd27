"""The state one chunk of a long sequence hands to the next (docs/CONVENTIONS.md §2.4)."""

from __future__ import annotations

import dataclasses

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
