"""When the parts of an in-place HDF5 GAE run on the cpu backend start and end (seconds
from the interpreter's start of this script): ``taskset -c 0,1 python timeline.py`` in a
folder holding ip.h5 (a copy of the 5e7-step e2e HDF5 file)."""

import atexit
import sys
import time

T0 = time.perf_counter()
marks: list[tuple[float, str]] = []


def mark(s: str) -> None:
    marks.append((time.perf_counter() - T0, s))


atexit.register(lambda: sys.stderr.write("".join(f"{t:7.3f} {s}\n" for t, s in marks)))

import rltscan.estimators.host as H  # noqa: E402
import rltscan.io.sinks as SK  # noqa: E402
import rltscan.preload as P  # noqa: E402


def around(owner, name, label, only=None):
    f = getattr(owner, name)
    n = [0]

    def g(*a, **k):
        n[0] += 1
        on = only is None or n[0] in only
        if on:
            mark(f"{label} {n[0]} start" if only else f"{label} start")
        try:
            return f(*a, **k)
        finally:
            if on:
                mark(f"{label} {n[0]} end" if only else f"{label} end")

    setattr(owner, name, g)


around(P.Loading, "_load", "loading thread (numba)")
around(H, "solve", "block", only=(1, 2, 12))
around(SK.HDF5Sink, "_copy", "safety copy")
around(SK.HDF5Sink, "commit", "commit")
mark("imports done")
sys.argv = ["rltscan", "gae", "ip.h5", "--backend", "cpu", "--device", "cpu", "-q"]
from rltscan.cli import main  # noqa: E402

try:
    main()
finally:
    mark("main end")
