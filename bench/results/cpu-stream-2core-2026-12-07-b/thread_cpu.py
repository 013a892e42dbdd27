"""Thread CPU time of the parts of an in-place HDF5 GAE run on the cpu backend (the
torch-free lane), and the process's minor page faults: ``taskset -c 0,1 python
thread_cpu.py`` in a folder holding ip.h5 (a copy of the 5e7-step e2e HDF5 file)."""

import atexit
import resource
import sys
import time

import rltscan.engines.stream.run as R
import rltscan.estimators.host as HO
import rltscan.io.hdf5 as H
import rltscan.io.sinks as SK
import rltscan.stats as S

stats: dict[str, list] = {}


def wrap(owner, name, label):
    f = getattr(owner, name, None)
    if f is None:  # (a tree without it)
        return

    def g(*a, **k):
        c, w = time.thread_time(), time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            s = stats.setdefault(label, [0, 0.0, 0.0])
            s[0] += 1
            s[1] += time.thread_time() - c
            s[2] += time.perf_counter() - w

    setattr(owner, name, g)


wrap(R, "prepare", "reader: prepare (read, flags, counts)")
wrap(H, "_read", "reader:   of which h5py reads")
wrap(S.EpisodeCollector, "add_prepared", "reader: episode statistics (add_prepared)")
wrap(S.EpisodeCollector, "add_inputs", "writer: episode statistics (add_inputs)")
wrap(HO, "solve", "main: host.solve (checks, fused kernel, carry)")
wrap(S.OutputAccumulator, "add", "main: output statistics")
wrap(SK.HDF5Sink, "write", "writer: HDF5Sink.write")


def dump():
    for k, v in stats.items():
        print(f"{k}: calls {v[0]} thread-cpu {v[1]:.3f} s wall {v[2]:.3f} s", file=sys.stderr)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(
        f"process: user {ru.ru_utime:.2f} s sys {ru.ru_stime:.2f} s minor faults {ru.ru_minflt}",
        file=sys.stderr,
    )


atexit.register(dump)
sys.argv = ["rltscan", "gae", "ip.h5", "--backend", "cpu", "--device", "cpu", "-q"]
from rltscan.cli import main  # noqa: E402

main()
