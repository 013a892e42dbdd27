"""The streamed reader's thread CPU time in an in-place HDF5 GAE run (``prepare`` of each
window and its h5py reads), and a profile of the window reads:
``taskset -c 0,1 python reader_profile.py`` in a folder holding ip.h5 (a copy of the
5e7-step e2e HDF5 file)."""

import atexit
import cProfile
import io
import pstats
import sys
import time

import rltscan.engines.stream.run as R
import rltscan.io.hdf5 as H

stats: dict[str, list] = {}


def wrap(mod, name, label):
    f = getattr(mod, name)

    def g(*a, **k):
        c, w = time.thread_time(), time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            s = stats.setdefault(label, [0, 0.0, 0.0])
            s[0] += 1
            s[1] += time.thread_time() - c
            s[2] += time.perf_counter() - w

    setattr(mod, name, g)


wrap(R, "prepare", "prepare(window)")
wrap(H, "_read", "hdf5._read")
prof = cProfile.Profile()
timed = R.prepare


def profiled(*a, **k):
    start, stop = k.get("window", (0, 0))
    if stop - start <= 1000:  # the plan's one-step probe
        return timed(*a, **k)
    prof.enable()
    try:
        return timed(*a, **k)
    finally:
        prof.disable()


R.prepare = profiled


def dump():
    for k, v in stats.items():
        print(f"{k}: calls {v[0]} thread-cpu {v[1]:.3f} s wall {v[2]:.3f} s", file=sys.stderr)
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25)
    print(s.getvalue()[:6000], file=sys.stderr)


atexit.register(dump)
sys.argv = ["rltscan", "gae", "ip.h5", "--backend", "cpu", "-q"]
from rltscan.cli import main  # noqa: E402

main()
