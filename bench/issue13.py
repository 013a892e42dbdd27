"""Issue 13 on the GPU: the off-policy trace family and per-step γ_t / λ_t, beside the
copy floor, in one run.

    PYTHONPATH=. python bench/issue13.py OUT_DIR

Rows: ``retrace(trace=...)`` for each member (fused kernel), and GAE with a scalar γ,
with a per-step ``discount`` column, and with ``discount`` + ``lam_per_step`` (read by
the fused kernel as two more columns). Every case is checked
against a float64 solve of the same call first. Times: ``triton.testing.do_bench``
medians of the whole Python call (µs), ``validate=False``. The floor counts the bytes
the call must move: every input it reads once plus every output written once.
Writes OUT_DIR/issue13.json and OUT_DIR/issue13.md.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import triton
import triton.testing

import rltscan
from rltscan import bench

SMOKE = not torch.cuda.is_available()  # a CPU smoke run of this script (tiny shapes)
SHAPES = [(4097,), (4, 64)] if SMOKE else [(1 << 26,), (4096, 1024)]
DEVICE, BACKEND = ("cpu", "torch") if SMOKE else ("cuda", "triton")


def do_bench(fn: Any) -> float:
    if SMOKE:
        import time

        t0 = time.perf_counter()
        fn()
        return (time.perf_counter() - t0) * 1e6
    return 1e3 * triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median")


def nbytes(tensors: Any) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def case(name: str, fn: Any, reads: dict[str, Any], copy_gbps: float) -> dict[str, Any]:
    res = fn(backend=BACKEND, validate=False)
    want = fn(backend="torch", validate=False, as_float64=True)
    err = max(
        float(((res[k].double() - want[k]).abs() / want[k].abs().clamp_min(1.0)).max())
        for k in want
    )
    moved = nbytes(reads.values()) + nbytes(res.values())
    us = do_bench(lambda: fn(backend=BACKEND, validate=False))
    floor = moved / (copy_gbps * 1e3)
    return {"case": name, "us": us, "floor_us": floor, "of_floor": floor / us, "max_rel_err": err}


def main() -> None:
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    copy_gbps = 10.0 if SMOKE else bench.copy_bandwidth()
    rows = []
    for shape in SHAPES:
        label = "x".join(map(str, shape))
        base = bench.make_inputs("retrace", shape, ep_len=1000.0, device=DEVICE)
        reads_of = {
            "retrace": ("logp_target", "logp_behavior"),
            "tree-backup": ("logp_target",),
            "q-lambda": (),
            "is": ("logp_target", "logp_behavior"),
        }
        for trace, lps in reads_of.items():
            inp = {k: v for k, v in base.items() if not k.startswith("logp_") or k in lps}

            def run(inp=inp, trace=trace, as_float64=False, **kw):
                x = {k: v.double() if as_float64 and v.is_floating_point() else v
                     for k, v in inp.items()}  # fmt: skip
                return dict(rltscan.retrace(**x, trace=trace, lam=0.95, **kw))

            rows.append({"shape": label, **case(f"retrace --trace {trace}", run, inp, copy_gbps)})
        g = bench.make_inputs("gae", shape, ep_len=1000.0, device=DEVICE)
        gen = torch.Generator(device=DEVICE).manual_seed(1)
        disc = torch.rand(shape, generator=gen, device=DEVICE) * 0.1 + 0.9
        lam = torch.rand(shape, generator=gen, device=DEVICE)
        for name, extra in (
            ("gae (scalar γ, λ)", {}),
            ("gae --discount", {"discount": disc}),
            ("gae --discount --lam-column", {"discount": disc, "lam_per_step": lam}),
        ):
            inp = {**{k: v for k, v in g.items() if isinstance(v, torch.Tensor)}, **extra}
            kw_other = {k: v for k, v in g.items() if not isinstance(v, torch.Tensor)}

            def run(inp=inp, kw_other=kw_other, as_float64=False, **kw):
                x = {k: v.double() if as_float64 and v.is_floating_point() else v
                     for k, v in inp.items()}  # fmt: skip
                return dict(rltscan.gae(**x, **kw_other, **kw))

            rows.append({"shape": label, **case(name, run, inp, copy_gbps)})
    res = {
        **bench.run_record("cpu smoke" if SMOKE else None),
        "copy_GBps": copy_gbps,
        "rows": rows,
    }
    lines = [
        f"# Issue 13 rows, {res['gpu']}, {res['date']}",
        "",
        f"torch {res['torch']}, triton {res['triton']}; copy bandwidth {copy_gbps:.0f} GB/s. "
        "Full Python call, median µs, validate=False.",
        "",
        "| shape | case | µs | floor µs | % of floor | max rel err |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['shape']} | {r['case']} | {r['us']:.1f} | {r['floor_us']:.1f} "
            f"| {100 * r['of_floor']:.0f}% | {r['max_rel_err']:.1e} |"
        )
    md = "\n".join(lines) + "\n"
    with open(os.path.join(out_dir, "issue13.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    with open(os.path.join(out_dir, "issue13.md"), "w") as fh:
        fh.write(md)
    print(md)


if __name__ == "__main__":
    main()
