"""What every reader exposes: the columns it holds and a way to read one of them.

A :class:`Source` is format-neutral. ``layout`` says how time is stored:

* ``flat``: one sequence of ``N`` rows (D4RL HDF5, Parquet, Arrow);
* ``episodes``: one group/directory per episode (Minari, robomimic);
* ``time-major``: ``[T, B]`` arrays (rollout buffers); ``batch-major``: ``[B, T]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from rltscan.io.columns import ColumnInfo

Layout = Literal["flat", "episodes", "time-major", "batch-major"]
LAYOUTS: tuple[str, ...] = ("flat", "episodes", "time-major", "batch-major")


@dataclass
class Source:
    """An opened input. ``read(name)`` returns an array, or one array per episode."""

    format: str  # "hdf5" | "parquet" | "arrow" | "arrow-stream" | "minari"
    layout: Layout
    where: str  # how messages name the input: "rollouts.h5" or "rollouts.h5:/data"
    path: Path | None  # None for stdin
    columns: dict[str, ColumnInfo]  # per-step columns (episodes: shapes of the first one)
    read: Callable[[str], np.ndarray | list[np.ndarray]]
    extra: dict[str, ColumnInfo] = field(default_factory=dict)  # e.g. last_values [B]
    group: str = "/"
    episode_keys: list[str] = field(default_factory=list)  # episodes layout: group names
    episode_lengths: list[int] = field(default_factory=list)  # T per episode
    padded: bool = False  # Minari Arrow/Parquet: every column has one padding row
    backend: str | None = None  # Minari: "hdf5" | "parquet" | "arrow"
    attrs: dict[str, object] = field(default_factory=dict)
    close: Callable[[], None] = lambda: None
    raw: object = None  # the format's own handle (pyarrow Table, h5py File); io-internal

    def describe_columns(self) -> list[ColumnInfo]:
        return [*self.columns.values(), *self.extra.values()]
