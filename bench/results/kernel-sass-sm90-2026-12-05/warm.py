"""Compile ahead into Triton's cache every launch that bench/kernel_probe.py's default
rows (``default``) or its tile sweep (``tiles``) make at 2^26 flat steps, so that the
timed processes compile nothing (run from the tree whose kernel is to be timed).

    PYTHONPATH=. python .../warm.py default|tiles
"""

import sys

import torch

from bench import kernel_probe as kp
from rltscan import bench

for kind in kp.KINDS:
    inp = bench.make_inputs(kind, (1 << 26,), ep_len=1000.0, device="cuda")
    bench.call(kind, inp, validate=False)
    if sys.argv[1] == "tiles":
        bench.call(kind, inp, validate=True)
        for r, c, w in kp.TILES:
            with kp.tiles_of(r, c, w):
                bench.call(kind, inp, validate=False)
    torch.cuda.synchronize()
    print(kind, "warm", flush=True)
    del inp
    torch.cuda.empty_cache()
