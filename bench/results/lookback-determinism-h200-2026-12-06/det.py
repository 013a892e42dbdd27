"""Repeated calls on the GPU: how many differ from the first, bit for bit (session A/B)."""

import json
import sys

import torch

import rltscan
from rltscan import bench

FN = {"gae": "gae", "returns": "discounted_returns", "vtrace": "vtrace", "td_lambda": "td_lambda"}
out = {"rltscan": rltscan.__file__, "rows": []}
print(out["rltscan"], flush=True)
for kind, fn in FN.items():
    for sweep in (False, True):
        inputs = bench.make_inputs(kind, ((1 << 22) + 7,), ep_len=50_000.0, device="cuda", seed=29)
        g = [0.9, 0.99, 0.999] if sweep else 0.999
        params = {"gamma": g} if kind == "returns" else {"gamma": g, "lam": 0.95}
        f = getattr(rltscan, fn)
        first = f(**inputs, **params, validate=False)
        differ = 0
        for _ in range(30):
            again = f(**inputs, **params, validate=False)
            differ += any(not torch.equal(again[n], first[n]) for n in first)
        out["rows"].append({"kind": kind, "k3": sweep, "calls": 30, "differ": differ})
        print(kind, sweep, differ, flush=True)
with open(sys.argv[1], "w") as f:
    json.dump(out, f, indent=1)
