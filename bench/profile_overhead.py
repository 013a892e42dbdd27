"""Where does a call's time go? Host overhead vs launch vs kernel (device profiling aid)."""

from __future__ import annotations

import functools
import sys

import triton.testing

from rltscan import bench
from rltscan.scan import triton_scan


def main() -> None:
    for kind in sys.argv[1].split(","):
        for shape in [(4096, 128), (1 << 22,), (1 << 26,)]:
            inp = bench.make_inputs(kind, shape, ep_len=200.0, device="cuda")
            full = functools.partial(bench.call, kind, inp, backend="triton", validate=False)
            t_full = 1e3 * triton.testing.do_bench(full, warmup=25, rep=100, return_mode="median")
            t_kern = bench.kernel_us(full, 50)
            t_host = bench.host_us(full, 500)
            print(
                f"{kind:10s} {'x'.join(map(str, shape)):>10s} full {t_full:8.1f} us  "
                f"kernel {t_kern:8.1f} us  host/call {t_host:8.1f} us  tiles "
                f"{triton_scan.choose_tiles(*(shape if len(shape) == 2 else (1, shape[0])), True)}",
                flush=True,
            )


if __name__ == "__main__":
    main()
