"""Host-side cost of one call on the device: Python path vs Triton launch (profiling aid)."""

from __future__ import annotations

import cProfile
import io
import pstats

import torch

from rltscan import bench
from rltscan.estimators import functions as est  # the module whose _run calls solve
from rltscan.scan import triton_scan

inp = bench.make_inputs("gae", (4096, 128), ep_len=200.0, device="cuda")
full = lambda: bench.call("gae", inp, backend="triton", validate=False)  # noqa: E731
print("full call", bench.host_us(full))
captured = {}
orig = est.solve
est.solve = lambda p, b, **kw: (
    captured.setdefault("p", p)
    and {k: torch.empty(p.shape, device="cuda") for k in ("advantages", "value_targets")}
)
print("python only (no launch)", bench.host_us(full))
est.solve = orig
p = captured["p"]
print("triton_scan.solve(p)", bench.host_us(lambda: triton_scan.solve(p)))
x = torch.empty(10, device="cuda")
print("torch.empty x2", bench.host_us(lambda: (torch.empty_like(x), torch.empty_like(x))))
pr = cProfile.Profile()
pr.enable()
for _ in range(500):
    triton_scan.solve(p)
pr.disable()
s = io.StringIO()
pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(25)
print(s.getvalue())
