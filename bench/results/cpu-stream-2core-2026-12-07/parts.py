import time, resource
def cpu(): 
    r=resource.getrusage(resource.RUSAGE_THREAD); return r.ru_utime+r.ru_stime
t=cpu(); import torch; print("import torch cpu", round(cpu()-t,2))
t=cpu(); import numba; from rltscan.scan import cpu_fused; print("import numba+cpu_fused cpu", round(cpu()-t,2))
import rltscan
from rltscan.io import formats
import h5py, numpy as np
f=h5py.File('w/e2e-n50000000-s0-c1048576-g1.h5','r')
W=1<<22
t=cpu()
cols={k:f[k][0:W] for k in f}
print("h5py read 1 window 5 cols cpu", round(cpu()-t,3))
t=cpu()
r=rltscan.gae(cols['rewards'],cols['values'],next_values=cols['next_values'],terminated=cols['terminals'],truncated=cols['timeouts'],backend='cpu')
print("gae cpu first (jit load)", round(cpu()-t,3))
t=cpu()
for i in range(3):
    r=rltscan.gae(cols['rewards'],cols['values'],next_values=cols['next_values'],terminated=cols['terminals'],truncated=cols['timeouts'],backend='cpu')
print("gae cpu per window", round((cpu()-t)/3,3), "ns/step", round((cpu()-t)/3/W*1e9,2))
t=cpu()
for i in range(3):
    r=rltscan.gae(cols['rewards'],cols['values'],next_values=cols['next_values'],terminated=cols['terminals'],truncated=cols['timeouts'],backend='cpu', validate=False)
print("gae cpu per window novalidate", round((cpu()-t)/3,3))
