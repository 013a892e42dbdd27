"""The K = 3 one-launch plans of V-trace and GAE at 65536 flat steps (the tiles a 2^26 row
takes), at the default tile and four others, captured from the host path under Triton's
interpreter: ``python capture.py > plans.json`` from the repository's root."""

import contextlib
import json
import os
import sys

os.environ["TRITON_INTERPRET"] = "1"
from rltscan import bench
from rltscan.estimators import _bound
from rltscan.scan import triton_scan

plans, cur = {}, None
TILES = (None, (1, 1024, 8), (1, 512, 4), (1, 2048, 4), (1, 2048, 8))


class Stop(Exception):
    pass


def fire(self, tensors, device, check_id=0):
    consts = [[n, v if isinstance(v, (bool, int)) else str(v)] for n, v in self.consts]
    plans[cur] = {
        "consts": consts,
        "num_warps": self.num_warps,
        "ints": list(self.ints),
        "ptr_dtypes": [str(t.dtype) for t in tensors],
        "maxnreg": getattr(self, "max_registers", None),
    }
    raise Stop


triton_scan.Launch.fire = fire
default = triton_scan.choose_tiles
for kind in ("vtrace", "gae"):
    for tile in TILES:
        cur = f"{kind} K=3 " + ("default" if tile is None else "{}x{}/{}".format(*tile))
        if tile is None:
            triton_scan.choose_tiles = default
        else:
            triton_scan.choose_tiles = lambda *a, t=tile, **k: triton_scan.Tiles(*t)
        _bound.forget()
        inp = bench.make_inputs(kind, (65536,), ep_len=1000.0, device="cpu")
        kw = bench.call_kwargs(kind, inp, validate=False)
        kw.pop("gamma", None)
        with contextlib.suppress(Stop):
            bench.function(kind)(**kw, gamma=[0.9, 0.99, 0.999], backend="triton")
json.dump(plans, sys.stdout)
