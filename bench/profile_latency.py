"""Where the microseconds of one ``rltscan.gae(...)`` call on CUDA tensors go (issue 12).

Device profiling aid: host timers per stage of the call path (the public function,
the front end ``_run``, ``triton_scan.solve``, ``_launch``, Triton's ``JITFunction.run``,
the bare launcher of the compiled kernel, the output allocations, the validation
sync), a cProfile of the whole call, the torch profiler's view, and the kernel's
device time with and without the validation screen. Writes JSON + text to argv[1].

    PYTHONPATH=. python bench/profile_latency.py $OUT/profile
"""

from __future__ import annotations

import cProfile
import datetime
import io
import json
import os
import pstats
import sys
from typing import Any

import torch
import triton
import triton.testing

import rltscan
from rltscan import bench
from rltscan.scan import triton_scan


def host_us(fn: Any, n: int = 2000) -> float:
    """Host time per call, the device not waited on (what a training loop pays)."""
    return bench.host_us(fn, n, best_of=3)


def bench_us(fn: Any) -> float:
    return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")


def main() -> None:
    out_dir = sys.argv[1] if len(sys.argv) > 1 else "profile-out"
    os.makedirs(out_dir, exist_ok=True)
    rec: dict[str, Any] = {
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "date": datetime.date.today().isoformat(),
        "stages_us": {},
    }
    st = rec["stages_us"]
    text = io.StringIO()
    inp = bench.make_inputs("gae", (4096, 128), ep_len=200.0, device="cuda")
    full = lambda: rltscan.gae(**inp, lam=0.95, validate=False)  # noqa: E731
    r0 = inp["rewards"]
    full_v = lambda: rltscan.gae(**inp, lam=0.95)  # noqa: E731
    st["full_call_validate_false_do_bench"] = bench_us(full)
    st["full_call_validate_false_host"] = host_us(full)
    st["full_call_validate_true_do_bench"] = bench_us(full_v)
    st["full_call_validate_true_host"] = host_us(full_v)

    # the Problem the front end builds, then the layers below it one by one
    from rltscan.estimators import DECLARATIONS, _bound

    d = next(x for x in DECLARATIONS.values() if x.name == "gae")
    import inspect as _inspect

    ba = _inspect.signature(rltscan.gae).bind(**inp, lam=0.95, validate=False)
    ba.apply_defaults()
    a = dict(ba.arguments)
    st["bound: call_key"] = host_us(lambda: _bound.call_key(d, a))
    key = _bound.call_key(d, a)
    b = _bound.lookup(d, key)
    st["bound: found"] = b is not None
    if b is not None:
        st["bound: Bound.run (alloc + launch)"] = host_us(lambda: b.run(a))
    st["bound: locals() + Result"] = host_us(
        lambda: rltscan.estimators.functions.RESULTS["gae"](advantages=r0, value_targets=r0)
    )
    p = bench.problem_of("gae", inp)
    outs = ("advantages", "value_targets")
    st["triton_scan.solve(check=False)"] = host_us(lambda: triton_scan.solve(p, outs))
    st["triton_scan.solve(check=True) incl .item() sync"] = host_us(
        lambda: triton_scan.solve(p, outs, check=True)
    )
    r = torch.empty(4096, 128, device="cuda")
    st["torch.empty_strided x2"] = host_us(
        lambda: (
            torch.empty_strided(r.shape, r.stride(), device="cuda"),
            torch.empty_strided(r.shape, r.stride(), device="cuda"),
        )
    )
    st["torch.empty x1"] = host_us(lambda: torch.empty((4096, 128), device="cuda"))
    w = torch.zeros(1, dtype=torch.int32, device="cuda")
    st["err word .item() (sync, idle GPU)"] = host_us(lambda: w.item(), 500)

    # Triton's own dispatch vs the bare launcher of the compiled kernel
    captured: dict[str, Any] = {}
    orig_getitem = triton_scan._scan_kernel.__class__.__getitem__

    def spy(self: Any, grid: Any) -> Any:
        run = orig_getitem(self, grid)

        def wrapped(*args: Any, **kw: Any) -> Any:
            captured.update(grid=grid, args=args, kw=kw)
            ck = run(*args, **kw)
            captured["ck"] = ck
            return ck

        return wrapped

    triton_scan._scan_kernel.__class__.__getitem__ = spy
    triton_scan.DIRECT = False  # Triton's own dispatch, to capture its arguments
    try:
        triton_scan.solve(p, outs)
    finally:
        triton_scan._scan_kernel.__class__.__getitem__ = orig_getitem
        triton_scan.DIRECT = True
    grid, args, kw = captured["grid"], captured["args"], captured["kw"]
    st["JITFunction kernel[grid](...) (bind ~45 args)"] = host_us(
        lambda: triton_scan._scan_kernel[grid](*args, **kw)
    )
    ck = captured["ck"]
    names = ck.src.fn.arg_names
    consts = {k: v for k, v in kw.items() if k in names}
    allargs = list(args) + [consts[n] for n in names[len(args) :]]
    stream = torch.cuda.current_stream().cuda_stream
    from triton import knobs

    def direct() -> None:
        ck.run(
            grid[0], 1, 1, stream, ck.function, ck.packed_metadata, None,
            knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook, *allargs,
        )  # fmt: skip

    st["CompiledKernel.run direct (all args)"] = host_us(direct)
    ptrs = [a.data_ptr() if isinstance(a, torch.Tensor) else a for a in allargs]

    def direct_ints() -> None:
        ck.run(grid[0], 1, 1, stream, ck.function, ck.packed_metadata, None, None, None, *ptrs)

    st["CompiledKernel.run direct (int pointers)"] = host_us(direct_ints)
    st["torch.cuda.current_stream().cuda_stream"] = host_us(
        lambda: torch.cuda.current_stream().cuda_stream
    )
    st["torch._C._cuda_getCurrentRawStream(0)"] = host_us(
        lambda: torch._C._cuda_getCurrentRawStream(0)
    )
    st["8 x tensor.data_ptr()"] = host_us(lambda: [r.data_ptr() for _ in range(8)])
    st["6 x (shape, stride, dtype)"] = host_us(
        lambda: [(r.shape, r.stride(), r.dtype) for _ in range(6)]
    )

    # front end alone: the public function with the solve step replaced by a no-op
    from rltscan.estimators import functions as est

    orig_solve = est.solve
    fake = {k: torch.empty(1, device="cuda") for k in outs}
    est.solve = lambda p, b, **kw: {k: p.cols["rewards"] for k in outs}  # type: ignore[assignment]
    try:
        from rltscan.estimators import _bound as _b2

        _b2.forget()
        st["front end only (no solve, nothing bound)"] = host_us(full)
    finally:
        est.solve = orig_solve
    del fake

    # cProfile of the whole call
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        full()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
    text.write("== cProfile, 2000 calls of rltscan.gae(validate=False), by tottime ==\n")
    text.write(s.getvalue())
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(2000):
        full()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("cumulative").print_stats(40)
    text.write("== same, by cumulative ==\n")
    text.write(s.getvalue())

    # torch profiler: CPU ops and the kernel
    with torch.profiler.profile(
        activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    ) as prof:
        for _ in range(50):
            full_v()
        torch.cuda.synchronize()
    text.write("== torch profiler, 50 calls validate=True ==\n")
    text.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))

    # kernel device time with and without the screen, and the full call, flat shapes
    for shape in [(4096, 128), (1 << 22,), (1 << 26,)]:
        x = bench.make_inputs("gae", shape, ep_len=1000.0, device="cuda")
        key = "x".join(map(str, shape))
        for v in (False, True):
            f = lambda x=x, v=v: rltscan.gae(**x, lam=0.95, validate=v)  # noqa: E731
            rec[f"kernel_us {key} validate={v}"] = bench.kernel_us(f, 30)
            rec[f"full_us {key} validate={v}"] = bench_us(f)

    # can a kernel write to pinned host memory (mapped, UVA) with atomics and stores?
    try:
        import triton.language as tl

        @triton.jit
        def _poke(ptr, n, BLOCK: tl.constexpr):
            pid = tl.program_id(0)
            tl.atomic_add(ptr, 1, sem="relaxed")
            tl.store(ptr + 1, pid + 1)

        h = torch.zeros(4, dtype=torch.int32, pin_memory=True)
        _poke[(1000,)](h, 4, BLOCK=1)
        torch.cuda.synchronize()
        rec["pinned_mapped_atomic_count_of_1000"] = int(h[0])
        rec["pinned_mapped_store_nonzero"] = int(h[1]) > 0
    except Exception as e:  # recorded, not fatal
        rec["pinned_mapped_error"] = f"{type(e).__name__}: {e}"[:300]

    # the seed library at the same shape
    try:
        from rl_triton import compute_gae

        rr, vv = inp["rewards"], inp["values"]
        dd = inp["terminated"].float()
        lv = inp["last_value"]
        g = lambda: compute_gae(rr, vv, dd, gamma=0.99, lambda_=0.95, last_value=lv)  # noqa: E731
        g()
        rec["rl_triton_gae_4096x128_us"] = bench_us(g)
        rec["rl_triton_gae_4096x128_host_us"] = host_us(g)
    except Exception as e:
        rec["rl_triton_error"] = f"{type(e).__name__}: {e}"[:300]

    with open(os.path.join(out_dir, "profile.json"), "w") as f:
        json.dump(rec, f, indent=1)
    with open(os.path.join(out_dir, "profile.txt"), "w") as f:
        f.write(text.getvalue())
    print(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main()
