"""CPU seconds (this thread) of the imports and of one 4,194,304-step window of GAE on
the fused cpu backend, with the 5e7-step e2e HDF5 file under w/ (run on one core:
``taskset -c 1 python parts.py``)."""

import resource


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime + r.ru_stime


t = cpu()
import torch  # noqa: E402, F401

print("import torch cpu", round(cpu() - t, 2))
t = cpu()
import numba  # noqa: E402, F401

from rltscan.scan import cpu_fused  # noqa: E402, F401

print("import numba+cpu_fused cpu", round(cpu() - t, 2))
import h5py  # noqa: E402

import rltscan  # noqa: E402

f = h5py.File("w/e2e-n50000000-s0-c1048576-g1.h5", "r")
W = 1 << 22
t = cpu()
cols = {k: f[k][0:W] for k in f}
print("h5py read 1 window 5 cols cpu", round(cpu() - t, 3))
kw = dict(
    next_values=cols["next_values"],
    terminated=cols["terminals"],
    truncated=cols["timeouts"],
    backend="cpu",
)
t = cpu()
rltscan.gae(cols["rewards"], cols["values"], **kw)
print("gae cpu first (jit load)", round(cpu() - t, 3))
t = cpu()
for _ in range(3):
    rltscan.gae(cols["rewards"], cols["values"], **kw)
per = (cpu() - t) / 3
print("gae cpu per window", round(per, 3), "ns/step", round(per / W * 1e9, 2))
t = cpu()
for _ in range(3):
    rltscan.gae(cols["rewards"], cols["values"], **kw, validate=False)
print("gae cpu per window novalidate", round((cpu() - t) / 3, 3))
