"""``python probe.py ARGS``: ``rltscan ARGS`` in this process, with a line (to $LOG) at
every window's read, compute and write: RssAnon, VmHWM, Arrow's allocated bytes and its
pool's high-water mark, glibc's mallinfo2 (arena, in use, free, mmapped bytes/chunks)."""

import ctypes
import os
import sys
import threading
import time

import pyarrow as pa

from rltscan.cli import main
from rltscan.engines.stream import run as stream_run
from rltscan.engines.stream import windows

NAMES = ("arena", "ordblks", "smblks", "hblks", "hblkd")
NAMES += ("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")


class MallInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in NAMES]


LIBC = ctypes.CDLL("libc.so.6")
LIBC.mallinfo2.restype = MallInfo
T0 = time.perf_counter()
LOG = open(os.environ.get("LOG", "/dev/stderr"), "w")  # noqa: SIM115 - the run's whole life


def status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("RssAnon", "VmHWM"):
                out[key] = int(value.split()[0]) // 1024
    return out


def log(what: str) -> None:
    s, m, pool = status(), LIBC.mallinfo2(), pa.default_memory_pool()
    who = threading.current_thread().name[:12]
    LOG.write(
        f"{time.perf_counter() - T0:6.2f} {who:12s} {what:22s} anon={s['RssAnon']:4d} "
        f"hwm={s['VmHWM']:4d} arrow={pa.total_allocated_bytes() >> 20:4d} "
        f"amax={pool.max_memory() >> 20:4d} glibc_arena={m.arena >> 20:4d} "
        f"inuse={m.uordblks >> 20:4d} free={m.fordblks >> 20:4d} "
        f"mmap={m.hblkd >> 20:4d}/{m.hblks} tm=-1\n"
    )
    LOG.flush()


def patch() -> None:
    prepare, release, compute = stream_run.prepare, windows.release_heap, windows._compute_window

    def prepared(source, window=None, **kw):
        out = prepare(source, window=window, **kw)
        if window is not None and window[1] - window[0] > 1:
            log(f"read {window[0] >> 20}M")
        return out

    def released():
        log("write-before-trim")
        release()
        log("written+trim")

    def computed(plan, start, *args, **kw):
        out = compute(plan, start, *args, **kw)
        log(f"computed {start >> 20}M")
        return out

    stream_run.prepare, windows.release_heap, windows._compute_window = (
        prepared,
        released,
        computed,
    )


if __name__ == "__main__":
    patch()
    sys.argv = ["rltscan", *sys.argv[1:]]
    try:
        main()
    finally:
        log("exit")
