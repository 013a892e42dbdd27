"""A Ray shard task held to the CPUs it asked for (issue 25).

Ray counts CPUs but does not place them: a task that asks for one CPU is told
``get_assigned_resources() == {"CPU": 1.0}``, a number, not a core, and its process
may run on every core of the node. A shard task is several threads: the streaming
walk's reader, compute and writer threads (decoding, the scan and encoding overlap),
Arrow's CPU and IO pools, torch's intra- and inter-op pools and the fused kernels' row
pool (sized by torch's). On the 16-core H200 node one task kept 1.2-1.6 cores busy
(bench/results/ray-scaling-h200-2026-12-03/), so 8-16 tasks that asked for one CPU
each asked the node for 10-25.

:func:`pinned` gives the task what it asked for: it claims that many logical CPUs of
the node (one physical core each before any hyperthread sibling), sets the affinity of
every thread of the worker process to them (threads started later inherit it, so every
pool above is covered, BLAS included, without knowing its size), and sizes torch's
intra-op pool and Arrow's CPU pool to their count (Ray sets ``OMP_NUM_THREADS`` to the
task's CPUs only where the user's environment did not set it). Arrow's IO pool keeps its
size: its threads wait on reads and, confined to the task's cores, cannot take more. At
the end of the task every change is undone (the worker process runs other tasks after),
and the claim is released.

The claim is a lock file per CPU (``flock``) in ``<tmp>/rltscan-cpus-<uid>/``: tasks of
every rltscan job of this user on the node take distinct CPUs, and a claim dies with its
process. Where every CPU is claimed (a cluster that declares more CPUs than the node has),
the claim directory cannot be written or the platform has no thread affinity, the task
runs unpinned and its row says so (``cores: []``). Nothing here runs in the driver
process: the engine calls it only in a Ray worker. Outputs do not depend on it (every
thread count gives the same bits: rows are independent chains, statistics fold per
block).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

_TOPOLOGY = "/sys/devices/system/cpu/cpu{}/topology/thread_siblings_list"


def _parse_list(text: str) -> list[int]:
    """``0-3,8,10-11`` as ``[0, 1, 2, 3, 8, 10, 11]`` (the kernel's CPU list format)."""
    out: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def cpu_order(allowed: Iterable[int]) -> list[int]:
    """``allowed`` in claiming order: every physical core's first logical CPU, then the
    second hyperthreads, ... (sibling tasks share a core's caches and units only once the
    node's cores are taken); plain order where the topology cannot be read."""

    def rank(cpu: int) -> tuple[int, int]:
        try:
            siblings = _parse_list(Path(_TOPOLOGY.format(cpu)).read_text())
        except (OSError, ValueError):
            return (0, cpu)
        return (sorted(siblings).index(cpu) if cpu in siblings else 0, cpu)

    return sorted(set(allowed), key=rank)


def claim_dir() -> Path:
    return Path(tempfile.gettempdir()) / f"rltscan-cpus-{os.getuid()}"


def claim(n: int, allowed: Iterable[int], directory: Path) -> list[tuple[int, int]]:
    """``n`` CPUs of ``allowed`` that no other task holds, as ``(cpu, locked fd)`` pairs
    in claiming order; ``[]`` (nothing held) where fewer than ``n`` are free."""
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    held: list[tuple[int, int]] = []
    for cpu in cpu_order(allowed):
        fd = os.open(directory / f"cpu{cpu}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another task holds it
            os.close(fd)
            continue
        held.append((cpu, fd))
        if len(held) == n:
            return held
    release(held)
    return []


def release(held: list[tuple[int, int]]) -> None:
    for _, fd in held:
        with contextlib.suppress(OSError):
            os.close(fd)  # (closing the only descriptor drops the flock)


def _threads() -> list[int]:
    return [int(t) for t in os.listdir("/proc/self/task")]


def _set_affinity(cpus: set[int]) -> dict[int, set[int]]:
    """Every thread of this process on ``cpus``; returns each one's mask before."""
    before: dict[int, set[int]] = {}
    for tid in _threads():
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            mask = os.sched_getaffinity(tid)
            os.sched_setaffinity(tid, cpus)
            before[tid] = mask
    return before


def _restore_affinity(before: dict[int, set[int]], default: set[int]) -> None:
    """Threads back to their masks; those started meanwhile (pools that stay) to
    ``default``, the process's mask before the task."""
    for tid in _threads():
        with contextlib.suppress(OSError):
            os.sched_setaffinity(tid, before.get(tid, default))


@contextlib.contextmanager
def pinned(cpus: float, directory: Path | None = None) -> Iterator[list[int]]:
    """This process held to ``cpus`` CPUs (at least one) of the node for the block;
    yields the CPUs (``[]``: unpinned, see the module docstring)."""
    if not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"):
        yield []
        return
    import torch

    from rltscan.io.parquet import cpu_threads

    n = max(1, int(cpus))
    default = os.sched_getaffinity(0)
    try:
        held = claim(n, default, directory or claim_dir()) if n < len(default) else []
    except OSError:  # no claim directory (read-only or foreign temp dir): unpinned
        held = []
    if not held:
        yield []
        return
    mine = {cpu for cpu, _ in held}
    threads = torch.get_num_threads()
    before: dict[int, set[int]] = {}
    try:
        before = _set_affinity(mine)
        torch.set_num_threads(n)
        with cpu_threads(n):
            yield sorted(mine)
    finally:
        torch.set_num_threads(threads)
        _restore_affinity(before, default)
        release(held)
