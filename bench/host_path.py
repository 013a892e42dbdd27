"""Where the host microseconds of a repeated call go, row by row (issue 12 diagnosis).

    PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3 python bench/host_path.py OUT_DIR

For each latency row: whether the second call of the shape took the bound launch (and
the compiled kernel's own launcher), the host µs per call of the whole call and of its
stages (key, lookup, ``Bound.run``, ``Launch.fire``, the output allocations, the result
object), rl-triton's host µs on the same row, and a cProfile of the whole call. Beside
them, this host's floors: one Triton launch of an empty kernel (Triton's dispatch and
its compiled launcher), one ``torch.empty``, one torch op. Host µs = host time per call
with the GPU not waited on (the best of 3 loops). Writes host_path.{json,md,txt}.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sys
from typing import Any

import torch
import triton
import triton.language as tl

import rltscan
from rltscan import bench
from rltscan.estimators import _bound
from rltscan.scan import triton_scan

ROWS = [
    ("gae", (4096, 128)),
    ("returns", (4096, 128)),
    ("vtrace", (4096, 128)),
    ("gae", (16384, 128)),
    ("gae", (1024, 1024)),
    ("gae", (4096, 1024)),
    ("gae", (256, 8192)),
    ("gae", (16, 131072)),
    ("gae", (1 << 22,)),
]


def host_us(fn: Any, n: int = 2000) -> float:
    return bench.host_us(fn, n, best_of=3)


def loop_us(fn: Any, n: int = 2000) -> float:
    """Per call of a loop of calls, the GPU waited on at the end (what a training pays)."""
    return bench.host_us(fn, n, best_of=3, waited=True)


@triton.jit
def _empty(x_ptr, n, BLOCK: tl.constexpr):
    pass


def floors() -> dict[str, float]:
    x = torch.empty(1024, device="cuda")
    f: dict[str, float] = {}
    f["triton kernel[grid](...) empty kernel"] = host_us(lambda: _empty[(1,)](x, 1024, BLOCK=1))
    ck = _empty[(1,)](x, 1024, BLOCK=1)
    stream = triton_scan._stream_id(x.device)
    p = x.data_ptr()
    from triton import knobs

    def direct() -> None:
        rt = knobs.runtime
        ck.run(1, 1, 1, stream, ck.function, ck.packed_metadata, None,
               rt.launch_enter_hook, rt.launch_exit_hook, p, 1024, 1)  # fmt: skip

    try:
        f["compiled launcher ck.run, empty kernel"] = host_us(direct)
    except Exception as e:  # another Triton's launcher signature: recorded, not fatal
        print(f"direct launch of the empty kernel failed: {type(e).__name__}: {e}")
    f["torch.empty((4096,128), cuda)"] = host_us(lambda: torch.empty((4096, 128), device="cuda"))
    f["x.add_(1) (one torch op)"] = host_us(lambda: x.add_(1))
    f["python no-op call"] = host_us(lambda: None)
    return f


def _stages(kind: str, kw: dict[str, Any], tag: str, r: dict[str, Any]) -> None:
    """Host µs of the call ``fn(**kw)`` and of its bound launch's stages, into ``r``."""
    fn, d = bench.function(kind), bench.declaration(kind)
    fn(**kw)
    fn(**kw)
    torch.cuda.synchronize()
    args = bench.arguments(kind, kw)
    key = _bound.call_key(d, args)
    b = None if key is None else _bound.lookup(d, key)
    r[f"{tag}: key"] = key is not None
    r[f"{tag}: bound"] = b is not None
    r[f"{tag}: full call"] = host_us(lambda: fn(**kw))
    r[f"{tag}: full call in a loop"] = loop_us(lambda: fn(**kw))
    if key is None or b is None:
        return
    r[f"{tag}: call_key"] = host_us(lambda: _bound.call_key(d, args))
    r[f"{tag}: lookup"] = host_us(lambda: _bound.lookup(d, key))
    launch = b.launch
    r[f"{tag}: compiled launcher cached"] = (launch.key, b.device) in triton_scan._COMPILED
    r[f"{tag}: hooks idle"] = triton_scan._hooks_idle()
    r[f"{tag}: grid, warps, look-back words"] = [launch.grid, launch.num_warps, launch.ws_words]
    r[f"{tag}: Bound.run"] = host_us(lambda: b.run(args))
    outs = [torch.empty_strided(s, st, dtype=dt, device="cuda") for _, s, st, dt in b.outputs]
    r[f"{tag}: direct launcher"] = b.direct
    r[f"{tag}: fire (pointers + launch)"] = host_us(lambda: b.firing.fire(args, outs, 0))
    r[f"{tag}: output allocations"] = host_us(
        lambda: [torch.empty_strided(s, st, dtype=dt, device="cuda") for _, s, st, dt in b.outputs]
    )
    r[f"{tag}: check_deferred"] = host_us(lambda: _bound.check_deferred(b.device))
    res = fn(**kw)
    cls = type(res)
    vals = {k: getattr(res, k) for k in d.outputs}
    r[f"{tag}: result object"] = host_us(lambda: cls(**vals))


def row(kind: str, shape: tuple[int, ...], text: io.StringIO, rl_triton_fn: Any) -> dict[str, Any]:
    inp = bench.make_inputs(kind, shape, ep_len=200.0 if len(shape) == 2 else 1000.0, device="cuda")
    fn = bench.function(kind)
    r: dict[str, Any] = {"estimator": kind, "shape": "x".join(map(str, shape))}
    for tag, validate in (("nv", False), ("v", True)):
        _stages(kind, bench.call_kwargs(kind, inp, validate=validate), tag, r)
    kw = bench.call_kwargs(kind, inp, validate=False)
    prep = rltscan.prepare_call(fn, **kw)
    prep()
    r["prepared() again"] = host_us(prep)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        prep()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        prep()
    r["prepared() in a CUDA graph, replay"] = host_us(graph.replay)
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(3000):
        fn(**kw)
    pr.disable()
    torch.cuda.synchronize()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(14)
    text.write(f"\n== {kind} {r['shape']}: cProfile of 3000 calls (validate=False), tottime ==\n")
    text.write(s.getvalue())
    if rl_triton_fn is not None and len(shape) == 2:
        try:
            g = rl_triton_fn(kind, inp)
            g()
            r["rl-triton host"] = host_us(g)
            r["rl-triton in a loop"] = loop_us(g, 200 if shape[1] > 8192 else 2000)
        except Exception as e:  # recorded, not fatal
            r["rl-triton error"] = f"{type(e).__name__}: {e}"[:200]
    rltscan.synchronize()
    print(json.dumps(r), flush=True)
    return r


def main() -> None:
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    sys.path.insert(0, os.path.dirname(__file__))
    from latency import rl_triton_fn  # the side-by-side table's rl-triton calls

    text = io.StringIO()
    res: dict[str, Any] = {
        **bench.run_record(),
        "floors_host_us": floors(),
        "rows": [],
    }
    print(json.dumps(res["floors_host_us"]), flush=True)
    for kind, shape in ROWS:
        res["rows"].append(row(kind, shape, text, rl_triton_fn))
    with open(os.path.join(out_dir, "host_path.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    with open(os.path.join(out_dir, "host_path.txt"), "w") as fh:
        fh.write(text.getvalue())
    keys = [k for k in res["rows"][0] if k not in ("estimator", "shape")]
    lines = [
        f"# Host path per row, {res['gpu']}, {res['date']}",
        "",
        f"torch {res['torch']}, triton {res['triton']}, Python {res['python']}. Host µs per "
        "call, GPU not waited on. Floors on this host: "
        + "; ".join(f"{k} {v:.1f}" for k, v in res["floors_host_us"].items()),
        "",
        "| row | " + " | ".join(keys) + " |",
        "|---|" + "---|" * len(keys),
    ]
    for r in res["rows"]:
        cells = []
        for k in keys:
            v = r.get(k)
            cells.append("–" if v is None else f"{v:.1f}" if isinstance(v, float) else str(v))
        lines.append(f"| {r['estimator']} {r['shape']} | " + " | ".join(cells) + " |")
    with open(os.path.join(out_dir, "host_path.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
