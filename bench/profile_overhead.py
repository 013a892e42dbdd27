"""Where does a call's time go? Host overhead vs launch vs kernel (device profiling aid)."""

from __future__ import annotations

import functools
import sys
import time

import torch
import triton.testing

from rltscan.scan import bench, triton_scan


def kernel_us(fn, n=50) -> float:
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    tot = sum(e.device_time_total for e in prof.key_averages() if "_scan_kernel" in e.key)
    return tot / n


def host_us(fn, n=2000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t = time.perf_counter() - t0
    torch.cuda.synchronize()
    return t / n * 1e6


def main() -> None:
    for kind in sys.argv[1].split(","):
        for shape in [(4096, 128), (1 << 22,), (1 << 26,)]:
            inp = bench.make_inputs(kind, shape, ep_len=200.0, device="cuda")
            full = functools.partial(bench.call, kind, inp, backend="triton", validate=False)
            t_full = 1e3 * triton.testing.do_bench(full, warmup=25, rep=100, return_mode="median")
            t_kern = kernel_us(full)
            t_host = host_us(full, 500)
            print(
                f"{kind:10s} {'x'.join(map(str, shape)):>10s} full {t_full:8.1f} us  "
                f"kernel {t_kern:8.1f} us  host/call {t_host:8.1f} us  tiles "
                f"{triton_scan.choose_tiles(*(shape if len(shape) == 2 else (1, shape[0])), True)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
