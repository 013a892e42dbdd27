"""Where the streaming engine puts output windows: an HDF5 copy or a Parquet rewrite.

A sink receives ``write(start, stop, arrays)`` calls in any order (backward
estimators walk a file from its end) and makes the outputs visible only in
``commit()``, through :func:`rltscan.io.atomic.atomic_path`: until then the
target is the old file (or absent), whatever happens to the process.

* :class:`HDF5Sink` copies the file to a temp name, creates the output datasets
  at full size and writes each window into them (HDF5 has no transactions, see
  :mod:`rltscan.io.hdf5`).
* :class:`ParquetSink` spills each window to a raw temp file (``pwrite`` at the
  window's offset, no memory map, so resident memory stays bounded) and at commit
  rewrites the table row group by row group with the spilled columns appended.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rltscan.errors import OutputRefusedError
from rltscan.io import hdf5, parquet
from rltscan.io.atomic import TMP_MARK, atomic_path, check_space


class HDF5Sink:
    """Outputs written window by window into a temp copy of ``src``, moved to ``dst``."""

    def __init__(
        self,
        src: Path,
        dst: Path,
        *,
        group: str,
        shape: tuple[int, ...],
        time_axis: int,
        attrs: Mapping[str, Any],
        template: str | None,
        overwrite: bool,
    ) -> None:
        self.dst, self.group, self.shape, self.time_axis = dst, group, shape, time_axis
        self.attrs = {k: hdf5._attr_value(v) for k, v in attrs.items()}
        self.template, self.overwrite = template, overwrite
        self._stack = contextlib.ExitStack()
        tmp = self._stack.enter_context(atomic_path(dst, copy_from=src))
        self._fh = self._stack.enter_context(hdf5.open_file(tmp, "r+"))
        self._root = self._fh[group]
        self._datasets: dict[str, Any] = {}
        self.bytes = 0

    def _dataset(self, name: str, arr: np.ndarray) -> Any:
        ds = self._datasets.get(name)
        if ds is not None:
            return ds
        if name in self._root:
            if not self.overwrite:
                raise OutputRefusedError(
                    f'{self.dst} already has "{name}"; pass --overwrite or --prefix P'
                )
            del self._root[name]
        like = self._root.get(self.template) if self.template else None
        storage = hdf5._storage_like(like)
        full = (*self.shape, *arr.shape[len(self.shape) :])
        ds = self._root.create_dataset(name, shape=full, dtype=arr.dtype, **storage)
        for key, val in self.attrs.items():
            ds.attrs[key] = val
        self._datasets[name] = ds
        return ds

    def write(self, start: int, stop: int, arrays: Mapping[str, np.ndarray]) -> None:
        index = (slice(None), slice(start, stop)) if self.time_axis == 1 else slice(start, stop)
        for name, arr in arrays.items():
            self._dataset(name, arr)[index] = np.ascontiguousarray(arr)
            self.bytes += int(arr.nbytes)

    def commit(self) -> int:
        self._stack.close()
        return self.bytes

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self._stack.__exit__(RuntimeError, RuntimeError("aborted"), None)


class SpillColumn:
    """A 1-D column kept in a temp file; ``col[a:b]`` reads rows back (``pread``)."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype, length: int) -> None:
        self.dtype, self.length = np.dtype(dtype), length
        fd, path = tempfile.mkstemp(prefix=f".{name}{TMP_MARK}", suffix=".spill", dir=directory)
        self.fd, self.path = fd, Path(path)
        os.unlink(path)  # nothing is left behind, even after SIGKILL
        self.nbytes = self.dtype.itemsize * length

    def write(self, start: int, values: np.ndarray) -> None:
        data = np.ascontiguousarray(values, dtype=self.dtype).reshape(-1)
        view, offset = memoryview(data).cast("B"), start * self.dtype.itemsize
        while view:
            done = os.pwrite(self.fd, view, offset)
            view, offset = view[done:], offset + done

    def __getitem__(self, index: slice) -> np.ndarray:
        start, stop, _ = index.indices(self.length)
        out = np.empty(max(stop - start, 0), self.dtype)
        view, offset = memoryview(out).cast("B"), start * self.dtype.itemsize
        while view:
            got = os.preadv(self.fd, [view], offset)
            if got == 0:
                raise OSError("spill file is shorter than expected")
            view, offset = view[got:], offset + got
        return out

    def __len__(self) -> int:
        return self.length

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


class ParquetSink:
    """Outputs spilled window by window; ``commit`` rewrites the Parquet table with them."""

    def __init__(
        self,
        pf: Any,
        dst: Path,
        *,
        steps: int,
        metadata: Mapping[str, Any],
        overwrite: bool,
        where: str,
    ) -> None:
        self.pf, self.dst, self.steps = pf, dst, steps
        self.metadata, self.overwrite, self.where = metadata, overwrite, where
        self.columns: dict[str, SpillColumn] = {}
        directory = Path(dst).absolute().parent
        if not directory.is_dir():
            raise OutputRefusedError(
                f"{directory} is not a directory; create it or pick another -o"
            )
        self.directory = directory

    def write(self, start: int, stop: int, arrays: Mapping[str, np.ndarray]) -> None:
        for name, arr in arrays.items():
            col = self.columns.get(name)
            if col is None:
                check_space(self.dst, arr.dtype.itemsize * self.steps)
                col = self.columns[name] = SpillColumn(self.directory, name, arr.dtype, self.steps)
            col.write(start, arr)

    def commit(self) -> int:
        try:
            return parquet.write_parquet(
                self.pf,
                self.dst,
                outputs=self.columns,
                metadata=self.metadata,
                overwrite=self.overwrite,
                where=self.where,
            )
        finally:
            self.abort()

    def abort(self) -> None:
        for col in self.columns.values():
            col.close()


class NullSink:
    """``--dry-run``: outputs are computed and dropped."""

    bytes = 0

    def write(self, start: int, stop: int, arrays: Mapping[str, np.ndarray]) -> None:
        pass

    def commit(self) -> int:
        return 0

    def abort(self) -> None:
        pass
