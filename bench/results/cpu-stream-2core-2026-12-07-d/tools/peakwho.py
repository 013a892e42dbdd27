"""``python peakwho.py ARGS``: ``rltscan ARGS`` in this process; a sampler thread writes
(to $LOG), at each new RssAnon high (+2 MiB), Arrow's and glibc's figures and where each
of rltscan's threads is (its innermost rltscan/pyarrow frames)."""

import ctypes
import os
import sys
import threading
import time
import traceback

import pyarrow as pa

from rltscan.cli import main

NAMES = ("arena", "ordblks", "smblks", "hblks", "hblkd")
NAMES += ("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")


class MallInfo(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in NAMES]


LIBC = ctypes.CDLL("libc.so.6")
LIBC.mallinfo2.restype = MallInfo
T0 = time.perf_counter()
LOG = open(os.environ["LOG"], "w")  # noqa: SIM115 - the run's whole life


def anon() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon"):
                return int(line.split()[1]) // 1024
    return 0


def where(frame) -> str:
    out = []
    for fs in traceback.extract_stack(frame)[::-1]:
        if "rltscan" in fs.filename or "pyarrow" in fs.filename:
            out.append(f"{fs.filename.split('/')[-1]}:{fs.name}:{fs.lineno}")
        if len(out) == 3:
            break
    return " < ".join(out)


def sampler() -> None:
    best = 0
    while True:
        a = anon()
        if a > best + 2:
            best, m = a, LIBC.mallinfo2()
            names = {t.ident: t.name for t in threading.enumerate()}
            LOG.write(
                f"{time.perf_counter() - T0:6.3f} anon={a} "
                f"arrow={pa.total_allocated_bytes() >> 20} "
                f"mmap={m.hblkd >> 20}/{m.hblks} arena={m.arena >> 20}\n"
            )
            for ident, frame in sys._current_frames().items():
                name = names.get(ident, "?")
                if name.startswith(("rltscan", "Main")):
                    LOG.write(f"     {name[:14]:14s} {where(frame)}\n")
            LOG.flush()
        time.sleep(0.002)


if __name__ == "__main__":
    threading.Thread(target=sampler, daemon=True, name="sampler").start()
    sys.argv = ["rltscan", *sys.argv[1:]]
    main()
