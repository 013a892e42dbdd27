"""Where the fused kernel's time goes at 2^26 steps (device profiling aid, issue 12).

For each estimator, kernel time (torch profiler) of:
  - the flat sequence (2^26 steps: one row, 65536 tiles joined by the look-back) and
  - the same steps as 65536 rows of 1024 (one tile a row: no look-back),
across tile shapes and register caps (Triton's ``maxnreg``: fewer registers, more
programs resident per SM), with the compiled kernel's registers and spills. If the
flat case is much slower than the batched one the look-back is the cost; if a register
cap helps, the kernel is latency-bound (too few loads in flight per SM).

Usage: python bench/kernel_probe.py OUT_PREFIX [quick]   (writes OUT_PREFIX.json and .md;
quick: the four uncapped tile shapes that matter)
"""

from __future__ import annotations

import sys
from typing import Any

import torch

from rltscan import bench
from rltscan.scan import triton_scan

KINDS = ("gae", "returns", "vtrace", "retrace")
SHAPES = ((1 << 26,), (65536, 1024))
CONFIGS = (  # rows, chunk, warps, maxnreg
    (1, 1024, 4, None),
    (1, 1024, 2, None),
    (1, 1024, 8, None),
    (1, 512, 2, None),
    (1, 512, 4, None),
    (1, 2048, 8, None),
    (1, 2048, 4, None),
    (1, 256, 1, None),
    (1, 1024, 4, 64),
    (1, 1024, 4, 40),
    (1, 2048, 8, 64),
    (1, 512, 2, 64),
)


class _Capped:
    """Stands in for the kernel object: every launch gets ``maxnreg`` and is recorded."""

    def __init__(self, kernel: Any) -> None:
        self.kernel, self.maxnreg, self.last = kernel, None, None

    def __getitem__(self, grid: Any) -> Any:
        def launch(*args: Any, **kw: Any) -> Any:
            if self.maxnreg is not None:
                kw["maxnreg"] = self.maxnreg
            self.last = self.kernel[grid](*args, **kw)
            return self.last

        return launch

    def __getattr__(self, name: str) -> Any:  # .fn, ... as the kernel's
        return getattr(self.kernel, name)


def main() -> None:
    prefix = sys.argv[1]
    configs = CONFIGS
    if sys.argv[2:] == ["quick"]:
        configs = tuple(c for c in CONFIGS if c[3] is None and c[2] >= 4 and c[1] <= 2048)
    # (the kernel object is swapped in this process only)
    triton_scan.DIRECT = False  # every launch through the (capped) kernel object
    capped = _Capped(triton_scan._scan_kernel)
    triton_scan._scan_kernel = capped
    bw = bench.copy_bandwidth()
    rows: list[dict[str, Any]] = []
    for kind in KINDS:
        for shape in SHAPES:
            inp = bench.make_inputs(kind, shape, ep_len=1000.0, device="cuda")
            out = bench.call(kind, inp, backend="triton", validate=False)
            floor = bench.traffic_bytes(inp, out) / (bw * 1e9) * 1e6
            for r, c, w, cap in configs:
                capped.maxnreg = cap
                with triton_scan.tile_override(rows=r, chunk=c, num_warps=w):
                    f = lambda k=kind, i=inp: bench.call(k, i, backend="triton", validate=False)  # noqa: E731
                    try:
                        us = bench.kernel_us(f)
                    except Exception as e:  # a config the compiler refuses
                        print(f"{kind} {shape} {r}x{c}/{w} cap={cap}: {e!r}"[:200], flush=True)
                        continue
                    ck = capped.last
                row = {
                    "kind": kind,
                    "shape": "x".join(map(str, shape)),
                    "rows": r,
                    "chunk": c,
                    "warps": w,
                    "maxnreg": cap,
                    "kernel_us": round(us, 1),
                    "floor_us": round(floor, 1),
                    "pct_floor": round(100 * floor / us, 1),
                    "n_regs": getattr(ck, "n_regs", None),
                    "n_spills": getattr(ck, "n_spills", None),
                }
                rows.append(row)
                print(
                    f"{kind:8s} {row['shape']:>11s} {r}x{c:<5d}/{w} cap={cap!s:5s} "
                    f"{us:8.1f} us floor {floor:7.1f} {row['pct_floor']:5.1f}%  "
                    f"regs {row['n_regs']} spills {row['n_spills']}",
                    flush=True,
                )
            del inp, out
            torch.cuda.empty_cache()
    record = {**bench.run_record(), "copy_GBps": bw, "rows": rows}
    header = (
        "estimator",
        "shape",
        "tile (rows×chunk/warps)",
        "maxnreg",
        "kernel µs",
        "floor µs",
        "% floor",
        "regs",
        "spills",
    )
    table = [
        (
            x["kind"],
            x["shape"],
            f"{x['rows']}×{x['chunk']}/{x['warps']}",
            x["maxnreg"] or "-",
            x["kernel_us"],
            x["floor_us"],
            x["pct_floor"],
            x["n_regs"],
            x["n_spills"],
        )
        for x in rows
    ]
    bench.write_result(prefix, record, header, table)


if __name__ == "__main__":
    main()
