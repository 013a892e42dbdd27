"""Tile-shape sweep for the fused kernel (device profiling aid): kernel µs per config."""

from __future__ import annotations

import sys

from rltscan import bench
from rltscan.scan import triton_scan


def main() -> None:
    kinds = sys.argv[1].split(",")
    shapes = [tuple(int(v) for v in s.split("x")) for s in sys.argv[2].split(",")]
    configs = [tuple(int(v) for v in c.split(":")) for c in sys.argv[3].split(",")]
    layout = sys.argv[4] if len(sys.argv) > 4 else "batch-major"
    bw = bench.copy_bandwidth()
    for kind in kinds:
        for shape in shapes:
            inp = bench.to_layout(
                bench.make_inputs(kind, shape, ep_len=1000.0, device="cuda"),
                layout == "time-major",
            )
            out = bench.call(kind, inp, backend="triton", validate=False)
            floor = bench.traffic_bytes(inp, out) / (bw * 1e9) * 1e6
            for rows, chunk, warps in configs:
                with triton_scan.tile_override(rows=rows, chunk=chunk, num_warps=warps):
                    f = lambda k=kind, i=inp: bench.call(k, i, backend="triton", validate=False)  # noqa: E731
                    us = bench.kernel_us(f)
                print(
                    f"{kind:10s} {'x'.join(map(str, shape)):>12s} {layout} rows={rows:3d} "
                    f"chunk={chunk:5d} warps={warps:2d} kernel {us:8.1f} us  floor {floor:7.1f}"
                    f"  {100 * floor / us:5.1f}%",
                    flush=True,
                )


if __name__ == "__main__":
    main()
