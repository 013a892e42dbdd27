"""``python tmprobe.py ARGS``: ``rltscan ARGS`` in this process under tracemalloc (30
frames); after every window read, numpy's live blocks of 1 MiB or more (tracemalloc
domain 389047) grouped by their innermost 7 frames, to $LOG. Slow (minutes at 5e7)."""

import os
import sys
import threading
import time
import tracemalloc

from rltscan.cli import main
from rltscan.engines.stream import run as stream_run

NUMPY_DOMAIN = 389047
T0 = time.perf_counter()
LOG = open(os.environ["LOG"], "w")  # noqa: SIM115 - the run's whole life


def anon() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon"):
                return int(line.split()[1]) // 1024
    return 0


def snap(what: str) -> None:
    snapshot = tracemalloc.take_snapshot()
    traces = snapshot.filter_traces([tracemalloc.DomainFilter(True, NUMPY_DOMAIN)]).traces
    big = [t for t in traces if t.size >= 1 << 20]
    groups: dict[str, tuple[int, int]] = {}
    for t in big:
        frames = list(t.traceback)[-7:][::-1]
        key = " <- ".join(f"{f.filename.split('/')[-1]}:{f.lineno}" for f in frames)
        n, b = groups.get(key, (0, 0))
        groups[key] = (n + 1, b + t.size)
    total = sum(t.size for t in big) >> 20
    LOG.write(
        f"{time.perf_counter() - T0:6.2f} {threading.current_thread().name} {what} "
        f"anon={anon()} big numpy={total} MiB in {len(big)}\n"
    )
    for key, (n, b) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        LOG.write(f"    {b >> 20:4d} MiB x{n}: {key}\n")
    LOG.flush()


def patch() -> None:
    prepare = stream_run.prepare

    def prepared(source, window=None, **kw):
        out = prepare(source, window=window, **kw)
        if window is not None and window[1] - window[0] > 1:
            snap(f"read {window[0] >> 20}M")
        return out

    stream_run.prepare = prepared


if __name__ == "__main__":
    tracemalloc.start(30)
    patch()
    sys.argv = ["rltscan", *sys.argv[1:]]
    main()
