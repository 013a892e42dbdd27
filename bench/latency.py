"""Issue 12's side-by-side table: the full Python call of GAE / returns / V-trace on CUDA
tensors, beside the copy floor, a torch.compile scan and rl-triton 0.1.3, in one run.

    PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3 python bench/latency.py OUT_DIR

LATENCY_NO_COMPILE=1 leaves out the torch.compile baseline (a shorter run).
Writes OUT_DIR/latency.json (GPU, versions, date, copy bandwidth, every timing) and
OUT_DIR/latency.md (the table). Each case is checked against a float64 solve first.
Times: ``triton.testing.do_bench`` medians of the whole call (µs); ``host_us`` is the
host time per call with the GPU not waited on (what a training step pays when the
kernel is shorter than the call).
"""

from __future__ import annotations

import json
import math
import os
import sys
from typing import Any

import torch
import triton
import triton.testing

import rltscan
from rltscan import bench

SHAPES = [(4096, 128), (16384, 128), (1024, 1024), (4096, 1024), (256, 8192), (16, 131072)]
FLAT = [1 << 22, 1 << 26]
KINDS = ("gae", "returns", "vtrace")
EXTRA_KINDS_AT = [(4096, 128), (1 << 22,)]  # returns and V-trace: where the issue quotes them


def do_bench(fn: Any) -> float:
    return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def rl_triton_fn(kind: str, inp: dict[str, Any]) -> Any:
    import rl_triton

    r, d = inp["rewards"], inp["terminated"].float()
    if r.ndim == 1:
        r, d = r[None], d[None]
    if kind == "gae":
        v = inp["values"].reshape(r.shape)
        lv = torch.zeros(r.shape[0], device="cuda")
        return lambda: rl_triton.compute_gae(r, v, d, gamma=0.99, lambda_=0.95, last_value=lv)
    if kind == "returns":
        return lambda: rl_triton.compute_discounted_returns(r, d, gamma=0.99)
    v = inp["values"].reshape(r.shape)
    lt, lb = inp["logp_target"].reshape(r.shape), inp["logp_behavior"].reshape(r.shape)
    lv = torch.zeros(r.shape[0], device="cuda")
    return lambda: rl_triton.compute_vtrace(lt, lb, v, r, d, gamma=0.99, last_value=lv)


def case(kind: str, shape: tuple[int, ...], bw: float, with_rl_triton: bool) -> dict[str, Any]:
    ep = 200.0 if len(shape) == 2 else 1000.0
    inp = bench.make_inputs(kind, shape, ep_len=ep, device="cuda")
    out = bench.call(kind, inp, validate=False)
    inp64 = {
        k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
        for k, v in inp.items()
    }
    want = bench.call(kind, inp64, backend="torch", validate=False)
    row: dict[str, Any] = {
        "estimator": kind,
        "shape": "x".join(map(str, shape)),
        "steps": math.prod(shape),
        "max_rel_err": bench.max_rel_err(out, want),
    }
    del want, inp64
    nbytes = bench.traffic_bytes(inp, out)
    row["bytes"] = nbytes
    row["floor_us"] = nbytes / (bw * 1e9) * 1e6
    # the user's call as written in a training step: the function on ready kwargs
    fn = bench.function(kind)
    kw = bench.call_kwargs(kind, inp)
    kw_nv = {**kw, "validate": False}
    f_nv = lambda: fn(**kw_nv)  # noqa: E731
    f_v = lambda: fn(**kw)  # noqa: E731
    try:
        prep = rltscan.prepare_call(fn, **kw_nv)
        arrays = {k: v for k, v in kw_nv.items() if isinstance(v, torch.Tensor)}
        row["prepared_us"] = do_bench(lambda: prep(**arrays))
        row["prepared_host_us"] = bench.host_us(lambda: prep(**arrays), 1000)
        prep()  # the fixed outputs are allocated on the first call
        row["again_us"] = do_bench(prep)
        row["again_host_us"] = bench.host_us(prep, 1000)
    except Exception as e:
        row["prepared_error"] = f"{type(e).__name__}: {e}"[:200]
    row["rltscan_us"] = do_bench(f_nv)
    row["rltscan_validated_us"] = do_bench(f_v)
    row["rltscan_host_us"] = bench.host_us(f_nv, 300 if row["steps"] > 1 << 24 else 1000)
    row["rltscan_validated_host_us"] = bench.host_us(f_v, 300 if row["steps"] > 1 << 24 else 1000)
    row["kernel_us"] = bench.kernel_us(f_nv, 20)
    rltscan.synchronize()  # no deferred hit on clean data
    if (kind == "gae" or shape in EXTRA_KINDS_AT) and not os.environ.get("LATENCY_NO_COMPILE"):
        try:
            p = bench.problem_of(kind, inp)
            fn = bench.baseline_fn(kind)
            fn(p)
            torch.cuda.synchronize()
            row["compile_us"] = do_bench(lambda: fn(p))
        except Exception as e:  # recorded, not fatal
            row["compile_error"] = f"{type(e).__name__}: {e}"[:200]
    if with_rl_triton:
        try:
            g = rl_triton_fn(kind, inp)
            g()
            torch.cuda.synchronize()
            row["rl_triton_us"] = do_bench(g)
            row["rl_triton_host_us"] = bench.host_us(g, 300 if row["steps"] > 1 << 20 else 1000)
        except Exception as e:
            row["rl_triton_error"] = f"{type(e).__name__}: {e}"[:200]
    torch._dynamo.reset()
    torch.cuda.empty_cache()
    print(json.dumps(row), flush=True)
    return row


def markdown(res: dict[str, Any]) -> str:
    lines = [
        f"# Latency, {res['gpu']}, {res['date']}",
        "",
        f"torch {res['torch']}, triton {res['triton']}, Python {res['python']}; copy "
        f"bandwidth {res['copy_GBps']:.0f} GB/s. Full Python call, median µs "
        "(`triton.testing.do_bench`); host = host µs per call, GPU not waited on.",
        "",
        "| estimator | B×T | copy floor | rltscan | host | rltscan, validate=True | host "
        "| prepared call | host | prepared() again | host | kernel | torch.compile scan "
        "| rl-triton 0.1.3 | host | max rel err |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def f(x: Any) -> str:
        return "–" if x is None else f"{x:.1f}"

    for r in res["rows"]:
        lines.append(
            f"| {r['estimator']} | {r['shape']} | {f(r['floor_us'])} | {f(r['rltscan_us'])} "
            f"| {f(r['rltscan_host_us'])} | {f(r['rltscan_validated_us'])} "
            f"| {f(r['rltscan_validated_host_us'])} | {f(r.get('prepared_us'))} "
            f"| {f(r.get('prepared_host_us'))} | {f(r.get('again_us'))} "
            f"| {f(r.get('again_host_us'))} | {f(r['kernel_us'])} "
            f"| {f(r.get('compile_us'))} | {f(r.get('rl_triton_us'))} "
            f"| {f(r.get('rl_triton_host_us'))} | {r['max_rel_err']:.1e} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    res: dict[str, Any] = {
        **bench.run_record(),
        "copy_GBps": bench.copy_bandwidth(),
        "rows": [],
    }
    for shape in [*SHAPES, *((n,) for n in FLAT)]:
        for kind in KINDS:
            if kind != "gae" and shape not in EXTRA_KINDS_AT:
                continue
            rl = shape[0] != 1 << 26 and not (len(shape) == 1 and kind != "gae")
            res["rows"].append(case(kind, shape, res["copy_GBps"], rl))
    with open(os.path.join(out_dir, "latency.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    with open(os.path.join(out_dir, "latency.md"), "w") as fh:
        fh.write(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
