"""What a repeated call costs on the host, row by row, beside rl-triton 0.1.3 (the README's
latency table).

    python -m bench.latency OUT

For each row (GAE, returns and V-trace at 4096×128; GAE at the other batched shapes and
2^22 flat steps), with ``validate=False`` (``nv``) and ``validate=True`` (``v``): whether
the repeated call took the bound launch, host µs per call of the whole call with the GPU
not waited on (``full call``) and of a loop of calls with the GPU waited on at its end
(``full call in a loop``: what a training step pays, the larger of host and GPU time per
call), and of each stage of the bound launch (key, lookup, ``Bound.run``, ``fire``, the
output allocations, the deferred check, the result object); the scan kernel's own time
(torch profiler); ``prepared()`` again and its CUDA-graph replay; rl-triton's call
(``bench/baselines.py``, checked against the float64 solve first) host µs and in a loop.
The two loops, rltscan's and rl-triton's, alternate over ``ROUNDS`` rounds (the best of
each is kept), so that drift of a noisy host hits both alike. Beside them, this host's
floors: one launch of an empty Triton kernel (Triton's dispatch and its compiled
launcher), one ``torch.empty``, one torch op.

Host µs = ``bench.harness.host_us`` (best of 3 loops). Writes ``OUT/latency.json`` (the
machine and code record, the floors, every row) and ``OUT/latency.md``. Needs CUDA.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import triton
import triton.language as tl

import rltscan
from bench import baselines, harness
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
ROUNDS = 3
TOL = 1e-3


def host_us(fn: Any, n: int = 2000) -> float:
    return harness.host_us(fn, n, best_of=3)


def loops_us(fns: dict[str, Any], n: int) -> dict[str, float]:
    """Per call of a loop of ``n`` calls, the GPU waited on at its end, best of
    ``ROUNDS`` rounds in which the functions take turns."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(ROUNDS):
        for name, fn in fns.items():
            best[name] = min(best[name], harness.host_us(fn, n, waited=True))
    return best


@triton.jit
def _empty(x_ptr, n, BLOCK: tl.constexpr):
    pass


def floors() -> dict[str, float]:
    """This host's floors, host µs per call."""
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


def stages(kind: str, kw: dict[str, Any], tag: str, r: dict[str, Any]) -> None:
    """Host µs of the call ``fn(**kw)`` and of its bound launch's stages, into ``r``."""
    fn, d = bench.function(kind), harness.declaration(kind)
    fn(**kw)
    fn(**kw)
    torch.cuda.synchronize()
    args = harness.arguments(kind, kw)
    key = _bound.call_key(d, args)
    b = None if key is None else _bound.lookup(d, key)
    r[f"{tag}: key"] = key is not None
    r[f"{tag}: bound"] = b is not None
    r[f"{tag}: full call"] = host_us(lambda: fn(**kw))
    r[f"{tag}: kernel"] = harness.kernel_us(lambda: fn(**kw))
    if key is None or b is None:
        return
    r[f"{tag}: call_key"] = host_us(lambda: _bound.call_key(d, args))
    r[f"{tag}: lookup"] = host_us(lambda: _bound.lookup(d, key))
    launch = b.launch
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


def row(kind: str, shape: tuple[int, ...]) -> dict[str, Any]:
    """Every figure of one row."""
    inp = bench.make_inputs(kind, shape, ep_len=200.0 if len(shape) == 2 else 1000.0,
                            device="cuda")  # fmt: skip
    fn = bench.function(kind)
    r: dict[str, Any] = {"estimator": kind, "shape": "x".join(map(str, shape))}
    for tag, validate in (("nv", False), ("v", True)):
        stages(kind, bench.call_kwargs(kind, inp, validate=validate), tag, r)
    kw = bench.call_kwargs(kind, inp, validate=False)
    kw_v = bench.call_kwargs(kind, inp)
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
    loops = {"nv": lambda: fn(**kw), "v": lambda: fn(**kw_v)}
    n = 200 if shape[-1] > 8192 else 2000  # (rl-triton takes a millisecond a call there)
    if kind in baselines.KINDS and (why := baselines.missing()) is None:
        g, named = baselines.call(kind, inp)
        want = bench.float64_solve(kind, inp)
        err = bench.max_rel_err(named(g()), {k: want[k] for k in named(g())})
        r["rl-triton max rel err"] = err
        if err <= TOL:
            r["rl-triton host"] = host_us(g, n)
            loops["rl-triton"] = g
        else:
            r["rl-triton error"] = "differs from the float64 solve"
    else:
        r["rl-triton error"] = why if kind in baselines.KINDS else "n/a"
    for name, us in loops_us(loops, n).items():
        r[f"{name}: full call in a loop" if name != "rl-triton" else "rl-triton in a loop"] = us
    rltscan.synchronize()
    print(json.dumps(r), flush=True)
    return r


def markdown(res: dict[str, Any]) -> str:
    """Every figure of every row, one row a line."""
    keys = [k for k in dict.fromkeys(k for r in res["rows"] for k in r)
            if k not in ("estimator", "shape")]  # fmt: skip
    lines = [
        f"# Host path per row, {res['gpu']}, {res['date']}",
        "",
        f"torch {res['torch']}, triton {res['triton']}, Python {res['python']}, tree "
        f"{res['tree']}. Host µs per call, GPU not waited on unless in a loop. Floors on "
        "this host: " + "; ".join(f"{k} {v:.1f}" for k, v in res["floors_host_us"].items()),
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
    return "\n".join(lines) + "\n"


def main() -> None:
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    res: dict[str, Any] = {**harness.run_record(), "floors_host_us": floors(), "rows": []}
    print(json.dumps(res["floors_host_us"]), flush=True)
    for kind, shape in ROWS:
        res["rows"].append(row(kind, shape))
        with open(os.path.join(out_dir, "latency.json"), "w") as fh:  # (kept as it goes)
            json.dump(res, fh, indent=1)
    with open(os.path.join(out_dir, "latency.md"), "w") as fh:
        fh.write(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
