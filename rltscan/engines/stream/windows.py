"""The streaming engine: a file walked in windows, with the recurrence carried between them.

docs/CONVENTIONS.md §2.4: a chunk of a sequence is processed with the state at its
boundary, and a chunk boundary is not a cut. Backward estimators walk the time
axis from its end, forward ones from its start. Three granularities:

* a **block** (``block`` time steps, a fixed grid from step 0) is one estimator
  call; its carry goes to the next block in scan order. Blocks are the unit of
  computation, so the result depends on the block grid alone;
* a **window** (``chunk`` time steps, a whole number of blocks) is one read and
  one write: what is resident at a time. Any chunk size gives the same estimator
  calls on the same arrays, hence bit-identical results;
* a **shard** (a file of a sharded dataset) is a sequence of windows with its own
  grid; shards are joined by their carries (see :func:`run_windows`'s ``carry``).

Three threads overlap the stages: a reader prepares window k+1 (file read and
flag derivation), the caller's thread moves window k to the device and computes
it, a writer stores window k-1. Queues of depth ``depth`` bound what is in flight,
so peak memory depends on the chunk size, not on the file size.

On CUDA, the outputs come back through page-locked (pinned) buffers: each block's
output is copied asynchronously into one pinned buffer per window (one sync), which
the writer reads in place (0.02-0.03 s at 10^8 steps on the H200 against 0.25-0.5 s
pageable). torch's caching host allocator reuses the buffers once the writer drops
them, so the pinned memory follows the windows in flight, not the file.
"""

from __future__ import annotations

import contextvars
import ctypes
import ctypes.util
import functools
import queue
import sys
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from rltscan import defaults, stats
from rltscan.errors import RltscanError
from rltscan.estimators import host
from rltscan.io.ends import id_again_error

DEFAULT_CHUNK_STEPS = defaults.CHUNK_STEPS  # steps (time × sequences) per window
BLOCK_STEPS = defaults.BLOCK_STEPS  # steps per estimator call; the result depends on it
PER_ROW = ("last_value", "init")

if TYPE_CHECKING:  # torch loads with the first window computed, not with this module
    import torch


@dataclass(frozen=True)
class Plan:
    """The windows and blocks of one sequence axis of ``steps`` time steps."""

    steps: int  # length of the time axis
    rows: int  # sequences sharing it
    block: int  # time steps per estimator call
    chunk: int  # time steps per window (a multiple of ``block``)
    reverse: bool

    def windows(self) -> list[tuple[int, int]]:
        """``[start, stop)`` of each window, in scan order."""
        out = [(s, min(s + self.chunk, self.steps)) for s in range(0, self.steps, self.chunk)]
        return out[::-1] if self.reverse else out

    def blocks(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The blocks of window ``[start, stop)`` in scan order (``start`` is on the grid)."""
        out = [(s, min(s + self.block, stop)) for s in range(start, stop, self.block)]
        return out[::-1] if self.reverse else out


def make_plan(
    steps: int,
    rows: int,
    *,
    reverse: bool,
    chunk_steps: int | None = None,
    block_steps: int | None = None,
) -> Plan:
    """Blocks and windows in time steps from budgets in steps (time × sequences)."""
    rows = max(rows, 1)
    block = max(1, (block_steps or BLOCK_STEPS) // rows)
    want = max(1, (chunk_steps or DEFAULT_CHUNK_STEPS) // rows)
    chunk = max(block, want // block * block)
    return Plan(steps=steps, rows=rows, block=block, chunk=chunk, reverse=reverse)


@dataclass
class Totals:
    """What the windows add up to (for the report)."""

    busy: dict[str, float] = field(default_factory=dict)  # stage -> seconds of work
    bytes: dict[str, int] = field(default_factory=dict)
    steps: int = 0
    windows: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    episodes: int = 0
    id_runs: list[tuple[int, np.ndarray]] = field(default_factory=list)
    peak_device_bytes: int = 0
    carry: Any = None  # the carry out of the last block in scan order

    def add(self, stage: str, seconds: float, nbytes: int = 0) -> None:
        self.busy[stage] = self.busy.get(stage, 0.0) + seconds
        self.bytes[stage] = self.bytes.get(stage, 0) + nbytes


class BlockCall:
    """``compute`` for :func:`run_windows` as every engine makes it: one estimator call
    per block, its outputs named with the prefix, their statistics accumulated where
    they are made (:class:`rltscan.stats.OutputAccumulator`, in scan order), their
    dtypes kept for the report. A block entered with a carry
    takes no data-end bootstrap or initial value (a shard's first block in scan order;
    inside one file the walk has dropped them already).

    With ``device`` (an engine that keeps the carries inside :func:`run_windows`), a run
    that :func:`rltscan.estimators.host.lane` takes solves its blocks there, without
    torch; a block that lane does not take, and every block of any other run, goes to
    the estimator's public function (``spec.function``, which loads torch)."""

    def __init__(
        self, spec: Any, call: Mapping[str, Any], prefix: str, *, device: Any = None
    ) -> None:
        self.spec, self.call, self.prefix = spec, dict(call), prefix
        self.accumulator = stats.OutputAccumulator()
        self.dtypes: dict[str, str] = {}
        self.lane = device is not None and host.lane(spec.name, self.call.get("backend"), device)

    def __call__(self, block: Mapping[str, Any], carry: Any) -> tuple[dict[str, Any], Any]:
        if carry is not None:
            block = {k: v for k, v in block.items() if k not in PER_ROW}
        solved = host.solve(self.spec, {**block, **self.call}, carry) if self.lane else None
        if solved is None:
            with warnings.catch_warnings():  # Arrow buffers are read-only; nothing writes them
                warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
                result = self.spec.function(**block, **self.call, carry=carry)
            solved = dict(result), result.carry
        arrays, carry = solved
        outputs = {self.prefix + k: v for k, v in arrays.items() if v is not None}
        if not self.dtypes:
            self.dtypes = {k: str(v.dtype).removeprefix("torch.") for k, v in outputs.items()}
        self.accumulator.add(outputs)
        return outputs, carry


class _Worker(threading.Thread):
    """A daemon thread in a copy of the caller's context (its run's
    :class:`~rltscan.io.atomic.WriteRun`); an exception is kept and re-raised by the
    caller's thread."""

    def __init__(self, target: Callable[[], None], name: str) -> None:
        super().__init__(name=name, daemon=True)
        self._fn = target
        self._context = contextvars.copy_context()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._context.run(self._fn)
        except BaseException as err:  # handed to the caller's thread
            self.error = err


_DONE = object()
# Windows held at once: one read while one is computed, then written while the next is
# computed. What bounds a streamed run's memory: with 3 (read, computed and written at
# once) peak RSS rose 14-30% from 1e7 to 5e7 steps, with 2 by 7%, at the same wall
# clock on 2 cores (the compute stage is the longest: bench/results/cpu-fused-2core-*/).
WINDOWS_ALIVE = 2


def release_heap() -> None:
    """Give the freed heap back to the system after a window (glibc ``malloc_trim``):
    the windows' arrays are freed by three threads, each with its own malloc arena, and
    without it the arenas keep their high-water mark, so peak RSS crept up with the
    number of windows (a no-op where the C library has no ``malloc_trim``)."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def fix_mmap_threshold() -> None:
    """Window-sized arrays always in their own mappings, returned to the system when
    freed: glibc's threshold otherwise rises after the first free (up to 32 MiB) and
    later windows land in the per-thread arenas, which only grow. A setting of the whole
    process that cannot be undone (glibc has no way back to its moving threshold), so
    only the CLI's own process makes it (``rltscan.cli``), before its run: a library
    caller's process (a training loop calling ``rltscan.run``) keeps its allocator as
    it was."""
    libc = _libc()
    if libc is not None:
        libc.mallopt(_M_MMAP_THRESHOLD, 1 << 20)


@functools.cache
def _libc() -> Any:
    """glibc, or None where the C library has no ``malloc_trim``/``mallopt``."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 - both present, or None
    except (OSError, AttributeError):
        return None
    return libc


_M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter


def run_windows(
    plan: Plan,
    prepare_window: Callable[[int, int], Any],
    compute: Callable[[Mapping[str, Any], Any], tuple[dict[str, Any], Any]],
    write: Callable[[int, int, dict[str, np.ndarray]], None],
    *,
    device: torch.device,
    time_dim: int,
    carry: Any = None,
    depth: int = 2,
    on_window: Callable[[int], None] | None = None,
) -> Totals:
    """Walk ``plan``'s windows: read (thread) → compute (here) → write (thread).

    ``prepare_window(start, stop)`` returns a :class:`rltscan.io.Prepared`;
    ``compute(kwargs, carry)`` runs one block and returns ``(outputs, carry)``;
    ``write(start, stop, arrays)`` stores a window. ``carry`` is the state entering
    the first block in scan order (a shard's carry-in); the last one is returned in
    ``Totals.carry``.
    """
    totals = Totals()
    windows = plan.windows()
    inbox: queue.Queue = queue.Queue(maxsize=depth)
    outbox: queue.Queue = queue.Queue(maxsize=depth)
    stop_flag = threading.Event()
    # windows alive from the start of their read to the end of their write, whatever
    # the queues could hold
    alive = threading.Semaphore(WINDOWS_ALIVE)

    def put(q: queue.Queue, item: Any) -> bool:
        while not stop_flag.is_set():
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def reader() -> None:
        for start, stop in windows:
            while not alive.acquire(timeout=0.1):
                if stop_flag.is_set():
                    return
            t0 = time.perf_counter()
            prepared = prepare_window(start, stop)
            totals.add("read", time.perf_counter() - t0, prepared.bytes_read)
            if not put(inbox, (start, stop, prepared)):
                return
        put(inbox, _DONE)

    def writer() -> None:
        while not stop_flag.is_set():
            try:
                item = outbox.get(timeout=0.1)
            except queue.Empty:
                continue
            if item is _DONE:
                return
            start, stop, arrays = item
            t0 = time.perf_counter()
            write(start, stop, arrays)
            nbytes = sum(int(a.nbytes) for a in arrays.values())
            del arrays, item
            release_heap()
            alive.release()
            totals.add("write", time.perf_counter() - t0, nbytes)

    threads = [_Worker(reader, "rltscan-read"), _Worker(writer, "rltscan-write")]
    for t in threads:
        t.start()
    try:
        while True:
            item = _get(inbox, threads)
            if item is _DONE:
                break
            start, stop, prepared = item
            arrays, carry = _compute_window(
                plan, start, stop, prepared, compute, carry, device, time_dim, totals
            )
            _fold(totals, start, prepared)
            if not _put_checked(outbox, (start, stop, arrays), threads):
                break
            # the writer holds the window now: kept here, its inputs and outputs would
            # live past its write (through the wait for the next window and its compute),
            # outside the WINDOWS_ALIVE bound
            del item, prepared, arrays
            if on_window is not None:
                on_window(stop - start)
        _put_checked(outbox, _DONE, threads)
        threads[1].join()
        if threads[1].error is not None:
            raise threads[1].error
    finally:
        stop_flag.set()
        for t in threads:
            t.join(timeout=30)
    for t in threads:
        if t.error is not None:
            raise t.error
    totals.carry = carry
    return totals


def _get(q: queue.Queue, threads: list[_Worker]) -> Any:
    while True:
        try:
            return q.get(timeout=0.1)
        except queue.Empty:
            pass
        for t in threads:
            if t.error is not None:
                raise t.error
            if not t.is_alive() and t.name == "rltscan-read" and q.empty():
                raise RuntimeError("the reader thread stopped without finishing")


def _put_checked(q: queue.Queue, item: Any, threads: list[_Worker]) -> bool:
    while True:
        for t in threads:
            if t.error is not None:
                raise t.error
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue


def _fold(totals: Totals, start: int, prepared: Any) -> None:
    totals.windows += 1
    totals.steps += prepared.steps
    totals.episodes += prepared.episodes
    for key, value in prepared.counts.items():
        totals.counts[key] = totals.counts.get(key, 0) + value
    if prepared.id_runs is not None:
        totals.id_runs.append((start, prepared.id_runs))


def _compute_window(
    plan: Plan,
    start: int,
    stop: int,
    prepared: Any,
    compute: Callable[[Mapping[str, Any], Any], tuple[dict[str, Any], Any]],
    carry: Any,
    device: torch.device,
    time_dim: int,
    totals: Totals,
) -> tuple[dict[str, np.ndarray], Any]:
    kwargs = prepared.kwargs
    t0 = time.perf_counter()
    if device.type == "cuda":
        import torch

        kwargs = {k: _to_cuda(v, device) for k, v in kwargs.items()}
        torch.cuda.synchronize(device)
        moved = sum(int(v.nbytes) for v in prepared.kwargs.values() if isinstance(v, np.ndarray))
        totals.add("to device", time.perf_counter() - t0, moved)
        t0 = time.perf_counter()
    pieces: dict[str, list[tuple[int, Any]]] = {}
    for b0, b1 in plan.blocks(start, stop):
        a, b = b0 - start, b1 - start
        block = {
            k: _slice(v, a, b, time_dim) if k not in PER_ROW and _is_steps(v) else v
            for k, v in kwargs.items()
        }
        if b1 != plan.steps:  # only the block that ends the data bootstraps the window end
            block.pop("last_value", None)
        if b0 != 0:
            block.pop("init", None)
        try:
            outputs, carry = compute(block, carry)
        except RltscanError as err:
            raise _shifted(err, b0) from None
        for name, value in outputs.items():
            pieces.setdefault(name, []).append((b0, value))
    if device.type == "cuda":
        torch.cuda.synchronize(device)  # (imported above: a cuda run)
        totals.peak_device_bytes = max(
            totals.peak_device_bytes, torch.cuda.max_memory_allocated(device)
        )
    totals.add("scan", time.perf_counter() - t0)
    t0 = time.perf_counter()
    arrays = {name: _assemble(parts, time_dim) for name, parts in pieces.items()}
    if device.type == "cuda":
        nbytes = sum(int(a.nbytes) for a in arrays.values())
        totals.add("from device", time.perf_counter() - t0, nbytes)
    return arrays, carry


def _torch() -> Any:
    """torch where it is loaded, else None: then no value is a tensor (a torch-free run,
    :mod:`rltscan.estimators.host`, never imports it)."""
    return sys.modules.get("torch")


def _is_steps(value: Any) -> bool:
    torch = _torch()
    arrays = np.ndarray if torch is None else (np.ndarray, torch.Tensor)
    return isinstance(value, arrays) and value.ndim > 0


def _slice(value: Any, a: int, b: int, time_dim: int) -> Any:
    """Steps ``[a, b)`` of a window array, contiguous (so that every block is laid out
    the same whatever window it came from)."""
    piece = value[:, a:b] if (time_dim == -1 and value.ndim >= 2) else value[a:b]
    if isinstance(piece, np.ndarray):
        return np.ascontiguousarray(piece)
    return piece.contiguous()


def _to_cuda(value: Any, device: torch.device) -> Any:
    """A host array on ``device``: a pageable copy. (Staging it through a pinned buffer
    on this thread measured slower on the H200, 0.8-1.1 s against 0.22-0.27 s at 10^8
    steps: bench/results/e2e-h200-2026-12-03-c/; a pinned pool filled by the reader
    thread is the next step.)"""
    import torch

    if not isinstance(value, np.ndarray):
        return value
    with warnings.catch_warnings():  # Arrow buffers are read-only; the copy only reads them
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        host = torch.from_numpy(np.ascontiguousarray(value))
    return host.to(device)


def _assemble(parts: list[tuple[int, Any]], time_dim: int) -> np.ndarray:
    """One window's output from its blocks, in step order, as one contiguous array.
    Device blocks land in one pinned buffer (asynchronous copies, one sync); the
    returned array is a view of it, which keeps it alive while the writer reads it."""
    parts = sorted(parts, key=lambda p: p[0])
    values = [p for _, p in parts]
    axis = 1 if (time_dim == -1 and values[0].ndim >= 2) else 0
    torch = _torch()
    if torch is None:  # numpy blocks of a torch-free run
        return np.ascontiguousarray(values[0]) if len(values) == 1 else np.concatenate(values, axis)
    on_device = [isinstance(v, torch.Tensor) and v.device.type == "cuda" for v in values]
    if all(on_device):
        shape = list(values[0].shape)
        shape[axis] = sum(int(v.shape[axis]) for v in values)
        staged = torch.empty(shape, dtype=values[0].dtype, pin_memory=True)
        at = 0
        for v in values:
            staged.narrow(axis, at, int(v.shape[axis])).copy_(v.detach(), non_blocking=True)
            at += int(v.shape[axis])
        torch.cuda.synchronize(values[0].device)
        return staged.numpy()
    arrays = [v.detach().cpu().numpy() if isinstance(v, torch.Tensor) else v for v in values]
    if len(arrays) == 1:
        return np.ascontiguousarray(arrays[0])
    return np.concatenate(arrays, axis=axis)


def _shifted(err: RltscanError, offset: int) -> RltscanError:
    """An estimator's error with its step index made absolute (the block starts at
    ``offset``): index 5 in the block that starts at step 40 is step 45 of the file.
    The error says which entry of its index is the time step (``time_axis``)."""
    return err.shifted(offset)


def check_id_runs(runs: list[tuple[int, np.ndarray]], name: str, where: str) -> None:
    """Episode ids must form contiguous runs across the whole file (windows in order)."""
    seen: set[Any] = set()
    last: Any = object()
    for _, ids in sorted(runs, key=lambda r: r[0]):
        for k, value in enumerate(ids.tolist()):
            if k == 0 and value == last:
                continue  # the run goes on from the previous window
            if value in seen:
                raise id_again_error(where, name, value)
            seen.add(value)
        if len(ids):
            last = ids[-1:].tolist()[0]  # a number or a text id
