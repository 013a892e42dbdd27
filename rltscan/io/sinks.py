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
import contextvars
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rltscan.errors import InputFileError, OutputRefusedError, RltscanError
from rltscan.io import hdf5, parquet, physical
from rltscan.io.atomic import (
    TMP_MARK,
    atomic_path,
    check_space,
    copy_verified,
    deferred_signals,
    is_full_disk,
    no_space,
    start_writeback,
)


class HDF5Sink:
    """Outputs written window by window into a temp copy of ``src``, moved to ``dst``.

    The copy runs on its own thread while the file is streamed: windows that arrive
    before it is done go to an unlinked spill file and are moved into the copy at
    commit; later windows go straight into the copy.
    """

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
        self.attrs = {k: hdf5.attr_value(v) for k, v in attrs.items()}
        self.template, self.overwrite = template, overwrite
        self._fh: Any = None
        self._datasets: dict[str, Any] = {}
        self._standardize: dict[str, tuple[float, float]] = {}
        self._spilled: list[tuple[int, int, str, int, tuple[int, ...], np.dtype]] = []
        self._spill: int | None = None
        self._spill_end = 0
        self._copy_error: BaseException | None = None
        self._copied = threading.Event()
        self._cancelled = threading.Event()
        self._src = src
        self._copier = threading.Thread(  # in this run's context: its WriteRun
            target=contextvars.copy_context().run,
            args=(self._copy, src),
            name="rltscan-copy",
            daemon=True,
        )
        self.bytes = 0
        self.copy_seconds = 0.0
        self.copy_bytes = os.path.getsize(src)
        self._stack = contextlib.ExitStack()
        try:  # no temp copy outlives a failed (or interrupted) start
            with deferred_signals():  # a Ctrl-C waits until the temp and its copier are owned
                self._tmp = self._stack.enter_context(atomic_path(dst, size_hint=self.copy_bytes))
                self._copier.start()
        except BaseException as err:
            self._cancelled.set()  # a copier that has not begun never will
            if self._copier.is_alive():  # one that has would write the temp again
                self._copier.join()
            self._stack.__exit__(type(err), err, err.__traceback__)
            raise

    def wait_copied(self) -> None:
        self._copier.join()

    def _copy(self, src: Path) -> None:
        t0 = time.perf_counter()
        try:
            if self._cancelled.is_set():
                return
            copy_verified(src, self._tmp)  # the very file this run reads (its identity)
            with contextlib.suppress(OSError):
                shutil.copymode(src, self._tmp)
        except BaseException as err:  # re-raised by the writer or at commit
            self._copy_error = err
        finally:
            self.copy_seconds = time.perf_counter() - t0
            self._copied.set()

    def _open(self) -> Any:
        if self._fh is None:
            if self._copy_error is not None:
                raise self._copy_error
            self._fh = hdf5.open_file(self._tmp, "r+")
            hdf5.materialize_links(self._fh, self._src, self.dst)
            self._root = self._fh[self.group]
        return self._root

    def _dataset(self, name: str, arr: np.ndarray) -> Any:
        ds = self._datasets.get(name)
        if ds is not None:
            return ds
        root = self._open()
        try:  # a damaged copy of the input fails here (its metadata), not a full disk
            like = root.get(self.template) if self.template else None
            full = (*self.shape, *arr.shape[len(self.shape) :])
            storage = hdf5.storage_like(like, full)
            ds = hdf5.output_dataset(
                root, name, full, arr.dtype, storage, where=self.dst, overwrite=self.overwrite
            )
        except RltscanError:
            raise
        except (ValueError, RuntimeError, KeyError) as err:
            raise InputFileError(
                f"{self.dst}: its HDF5 metadata cannot be written through ({err}); "
                "the file is corrupt, fetch or write it again"
            ) from None
        self._datasets[name] = ds
        return ds

    def _put(self, start: int, stop: int, name: str, arr: np.ndarray) -> None:
        index = (slice(None), slice(start, stop)) if self.time_axis == 1 else slice(start, stop)
        self._dataset(name, arr)[index] = np.ascontiguousarray(arr)

    def standardize(self, name: str, mean: float, std: float) -> None:
        """At commit, rewrite output ``name`` as ``(x − mean) / std`` (``--normalize``)."""
        self._standardize[name] = (mean, std)

    def _standardize_dataset(self, name: str, mean: float, std: float) -> None:
        ds = self._open()[name]
        steps = ds.shape[self.time_axis]
        width = max(1, (1 << 22) // max(1, ds.size // max(steps, 1)))
        for start in range(0, steps, width):
            sl = slice(start, min(start + width, steps))
            index = (slice(None), sl) if self.time_axis == 1 else sl
            ds[index] = standardized(ds[index], mean, std)

    def write(self, start: int, stop: int, arrays: Mapping[str, np.ndarray]) -> None:
        for name, arr in arrays.items():
            self.bytes += int(arr.nbytes)
            if self._copied.is_set():
                self._put(start, stop, name, arr)
                continue
            if self._spill is None:
                self._spill = _unlinked(self.dst.absolute().parent, name)
            data = np.ascontiguousarray(arr)
            _pwrite_all(self._spill, memoryview(data).cast("B"), self._spill_end)
            self._spilled.append((start, stop, name, self._spill_end, data.shape, data.dtype))
            self._spill_end += data.nbytes

    def commit(self) -> int:
        try:
            self._copier.join()
            for start, stop, name, offset, shape, dtype in self._spilled:
                arr = np.empty(shape, dtype)
                _pread_all(self._spill, memoryview(arr).cast("B"), offset)
                self._put(start, stop, name, arr)
            self._open()
            for name, (mean, std) in self._standardize.items():  # the second pass
                self._standardize_dataset(name, mean, std)
            for name, ds in self._datasets.items():
                scale = self._standardize.get(name)
                extra = {} if scale is None else dict(zip(_SCALE_ATTRS, scale, strict=True))
                hdf5.put_attrs(ds, {**self.attrs, **extra})
            self._fh.flush()
            made = {ds.name: tuple(ds.shape) for ds in self._datasets.values()}
            self._fh.close()
            self._fh = None
            hdf5.verify_written(self._tmp, made, self.dst)
        except BaseException as err:
            self._release()
            # through atomic_path's handler: the temp goes, a full disk says so in one line
            self._stack.__exit__(type(err), err, err.__traceback__)
            raise
        self._close_spill()
        self._stack.close()
        return self.bytes

    def abort(self, error: BaseException | None = None) -> None:
        """Drop the temp copy. A full disk (``error``) comes back as one OutputRefusedError."""
        self._release()
        if isinstance(error, OSError):
            self._stack.__exit__(type(error), error, error.__traceback__)
            return
        with contextlib.suppress(Exception):
            self._stack.__exit__(RuntimeError, RuntimeError("aborted"), None)

    def _release(self) -> None:
        self._copier.join()
        if self._fh is not None:
            hdf5.close_after_error(self._fh)
            self._fh = None
        self._close_spill()

    def _close_spill(self) -> None:
        if self._spill is not None:
            with contextlib.suppress(OSError):
                os.close(self._spill)
            self._spill = None


_SCALE_ATTRS = ("normalized_mean", "normalized_std")  # an output written standardised


def _unlinked(directory: Path, name: str) -> int:
    """A temp file descriptor with no name: nothing is left behind, even after SIGKILL."""
    fd, path = tempfile.mkstemp(prefix=f".{name}{TMP_MARK}", suffix=".spill", dir=directory)
    os.unlink(path)
    return fd


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    while view:
        done = os.pwrite(fd, view, offset)
        view, offset = view[done:], offset + done


def _pread_all(fd: int, view: memoryview, offset: int) -> None:
    while view:
        got = os.preadv(fd, [view], offset)
        if got == 0:
            raise OSError("spill file is shorter than expected")
        view, offset = view[got:], offset + got


def standardized(values: np.ndarray, mean: float, std: float) -> np.ndarray:
    """``(x − mean) / std`` computed in float64, stored in the column's own dtype."""
    return ((values.astype(np.float64) - mean) / std).astype(values.dtype)


class SpillColumn:
    """A 1-D column kept in a temp file; ``col[a:b]`` reads rows back (``pread``)."""

    def __init__(self, directory: Path, name: str, dtype: np.dtype, length: int) -> None:
        self.dtype, self.length = np.dtype(dtype), length
        self.fd = _unlinked(directory, name)
        self.nbytes = self.dtype.itemsize * length
        self.standardize: tuple[float, float] | None = None  # (mean, std), applied on read

    def write(self, start: int, values: np.ndarray) -> None:
        data = np.ascontiguousarray(values, dtype=self.dtype).reshape(-1)
        _pwrite_all(self.fd, memoryview(data).cast("B"), start * self.dtype.itemsize)

    def __getitem__(self, index: slice) -> np.ndarray:
        start, stop, _ = index.indices(self.length)
        out = np.empty(max(stop - start, 0), self.dtype)
        _pread_all(self.fd, memoryview(out).cast("B"), start * self.dtype.itemsize)
        if self.standardize is not None:
            out = standardized(out, *self.standardize)
        return out

    def __len__(self) -> int:
        return self.length

    def close(self) -> None:
        if self.fd >= 0:  # once: a second close could hit a reused descriptor
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1


def record_normalized(metadata: Mapping[str, Any], name: str, mean: float, std: float) -> None:
    """Say in a Parquet file's rltscan metadata that ``name`` is written standardised."""
    for record in metadata.get("outputs", {}).values():
        record.setdefault("normalized", {})[name] = {"mean": mean, "std": std}


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
        minari_infos: bool = False,
        durable: bool = True,
    ) -> None:
        self.pf, self.dst, self.steps = pf, dst, steps
        self.metadata, self.overwrite, self.where = metadata, overwrite, where
        self.minari_infos = minari_infos  # a Minari episode: outputs also as infos
        # False: written straight to ``dst`` without fsync (a staged shard: the staging
        # commit makes every staged file durable in one batch, before any rename)
        self.durable = durable
        self.columns: dict[str, SpillColumn] = {}
        directory = Path(dst).absolute().parent
        if not directory.is_dir():
            raise OutputRefusedError(
                f"{directory} is not a directory; create it or pick another -o"
            )
        self.directory = directory

    def standardize(self, name: str, mean: float, std: float) -> None:
        """At commit, write output ``name`` as ``(x − mean) / std`` (``--normalize``)."""
        self.columns[name].standardize = (mean, std)
        record_normalized(self.metadata, name, mean, std)

    def write(self, start: int, stop: int, arrays: Mapping[str, np.ndarray]) -> None:
        for name, arr in arrays.items():
            col = self.columns.get(name)
            if col is None:
                check_space(self.dst, arr.dtype.itemsize * self.steps)
                col = self.columns[name] = SpillColumn(self.directory, name, arr.dtype, self.steps)
            col.write(start, arr)

    def _additions(self, outputs: Mapping[str, Any]) -> parquet.Additions:
        """``outputs`` (arrays or spilled columns) with this sink's metadata entry,
        ``--overwrite`` and input name, as :func:`rltscan.io.parquet.write_parquet` takes
        them."""
        return parquet.Additions(outputs, self.metadata, self.overwrite, self.where)

    def commit(self) -> int:
        try:
            if self.minari_infos:  # one episode: small enough to rewrite as a table
                from rltscan.io import minari

                outputs = {n: c[0 : len(c)] for n, c in self.columns.items()}
                table = minari.with_infos(
                    parquet.as_table(self.pf), outputs, overwrite=self.overwrite, where=self.where
                )
                return parquet.write_parquet(
                    table,
                    self.dst,
                    self._additions(outputs),
                    atomic=self.durable,
                    form=physical.parquet_form(self.pf, self.where),
                )
            written = parquet.write_parquet(
                self.pf, self.dst, self._additions(self.columns), atomic=self.durable
            )
            if not self.durable:  # on disk before the batch fsync asks for it
                start_writeback(Path(self.dst))
            return written
        finally:
            self.abort()

    def abort(self, error: BaseException | None = None) -> None:
        """Drop the spill files. A full disk (``error``) comes back as one OutputRefusedError."""
        for col in self.columns.values():
            col.close()
        if is_full_disk(error):
            raise no_space(Path(self.dst), error) from None


class NullSink:
    """``--dry-run``: outputs are computed and dropped."""

    bytes = 0

    def write(self, start: int, stop: int, arrays: Mapping[str, np.ndarray]) -> None:
        pass

    def commit(self) -> int:
        return 0

    def abort(self, error: BaseException | None = None) -> None:
        pass
