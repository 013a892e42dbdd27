"""What every reader exposes: the columns it holds and a way to read one of them.

A :class:`Source` is format-neutral. ``layout`` says how time is stored:

* ``flat``: one sequence of ``N`` rows (D4RL HDF5, Parquet, Arrow);
* ``episodes``: one group/directory per episode (Minari, robomimic);
* ``time-major``: ``[T, B]`` arrays (rollout buffers); ``batch-major``: ``[B, T]``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

from rltscan.errors import DataError
from rltscan.io.columns import ColumnInfo

Layout = Literal["flat", "episodes", "time-major", "batch-major"]
LAYOUTS: tuple[str, ...] = ("flat", "episodes", "time-major", "batch-major")


@dataclass
class Source:
    """An opened input. ``read(name)`` returns an array, or one array per episode."""

    format: str  # a word of a format registry row (rltscan.io.formats): "hdf5", ...
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
    backend: str | None = None  # Minari: its data_format; TorchRL: the storage kind
    attrs: dict[str, object] = field(default_factory=dict)
    close: Callable[[], None] = lambda: None
    raw: object = None  # the format's own handle (pyarrow Table, h5py File); io-internal
    # How the file was written (codecs, encodings, ...: rltscan.io.physical), kept by a
    # rewrite; io-internal, None where the format's writer needs nothing (HDF5 is copied)
    form: object = None
    # ``read_range(name, start, stop)``: steps [start, stop) of a per-step column, read
    # from the file without the rest (time axis by layout). None where the format can
    # only be read whole (episodes, stdin, Arrow); the streaming engine needs it.
    read_range: Callable[[str, int, int], np.ndarray] | None = None
    steps: int | None = None  # length of the time axis when known without reading
    steps_column: str | None = None  # the column ``steps`` comes from (the rewards)
    # What the reader derived rather than read (e.g. how a [T, B] layout was proved);
    # the report copies these into its notes.
    notes: list[str] = field(default_factory=list)
    # What the format documents that a flag column cannot say, applied only where the
    # user passed nothing: ``{"ends_are": "truncated", "why": "..."}`` for a LeRobot
    # dataset (its ``next.done`` marks the end of a recording); the report says so.
    conventions: dict[str, str] = field(default_factory=dict)

    def describe_columns(self) -> list[ColumnInfo]:
        return [*self.columns.values(), *self.extra.values()]

    def window(self, start: int, stop: int, *, final: bool) -> Source:
        """A view of steps ``[start, stop)``: ``read`` returns that range of each per-step
        column. The window-end extras (``last_values``/``last_dones`` of a buffer) belong
        to the data's last step and are visible only in the ``final`` window."""
        if self.read_range is None:
            raise TypeError(f"{self.where}: this source cannot be read by ranges")
        read_range = self.read_range
        columns, whole = self.columns, self.read

        axis = 1 if self.layout == "batch-major" else 0
        where, total = self.where, self.steps
        ref = self.steps_column
        ref_shape = tuple(columns[ref].shape) if ref in columns else (total,)

        def read(name: str) -> np.ndarray | list[np.ndarray]:
            if name not in columns:
                return whole(name)
            shape = tuple(columns[name].shape)
            if len(shape) <= axis or shape[axis] != total:
                raise DataError(
                    f'{where}: column "{name}" has shape {shape} but "{ref}" has {ref_shape}; '
                    "every per-step column needs the same shape"
                )
            return read_range(name, start, stop)

        return dataclasses.replace(
            self,
            read=read,
            extra=dict(self.extra) if final else {},
            close=lambda: None,
            steps=stop - start,
        )
