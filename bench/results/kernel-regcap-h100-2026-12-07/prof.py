"""ncu target: one estimator at 2^26 flat steps (ends every ~1000), default tiles.
python prof.py KIND [N_CALLS]"""

import sys

import torch

from rltscan import bench

kind = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 4
inp = bench.make_inputs(kind, (1 << 26,), ep_len=1000.0, device="cuda")
for _ in range(n):
    out = bench.call(kind, inp, validate=False)
torch.cuda.synchronize()
print(kind, "ok", {k: tuple(v.shape) for k, v in out.items() if hasattr(v, "shape")})
