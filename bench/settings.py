"""Issue 13 part 1: K (γ, λ) settings in one launch against K separate calls and against
their own floor (inputs read once + K outputs written), in one run.

    PYTHONPATH=. python bench/settings.py OUT_DIR

Cases: GAE and V-trace at 2^26 flat steps (episode ends every ~1000 steps) and GAE at
4096×1024 batch-major, K = 3 (γ = 0.9, 0.99, 0.999). Each case is first checked
against a float64 solve (the torch backend in float64, one call per setting). Times:
``triton.testing.do_bench`` medians of the whole Python call (µs, ``validate=False``):
``one_launch`` is ``gae(..., gamma=[...])``, ``separate`` three calls with one γ each,
``one_setting`` one of them. The floor: (bytes of every input read once + bytes of K
outputs written) / the device-to-device copy bandwidth measured in this run. A small
tile sweep of the one-launch kernel (``tile_override``) follows, each checked against
the default tile's result. Writes OUT_DIR/settings.json and OUT_DIR/settings.md.

Without CUDA (SETTINGS_SMALL=1, Triton's interpreter) it runs tiny shapes with host
timers: a check of this script only, not a measurement.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import sys
import time
from typing import Any

import torch

import rltscan
from rltscan import bench
from rltscan.scan import triton_scan

CUDA = torch.cuda.is_available()
SMALL = os.environ.get("SETTINGS_SMALL") == "1" or not CUDA
DEVICE = "cuda" if CUDA else "cpu"
GAMMAS = [0.9, 0.99, 0.999]
FN = {"gae": rltscan.gae, "vtrace": rltscan.vtrace}
OUTPUTS = {"gae": 2, "vtrace": 2}
if SMALL:
    CASES = [("gae", (1001,), "flat"), ("vtrace", (1001,), "flat"), ("gae", (5, 64), "batch")]
    SWEEP = [(4, 16, 1), (8, 8, 1)]
else:
    CASES = [
        ("gae", (1 << 26,), "flat"),
        ("vtrace", (1 << 26,), "flat"),
        ("gae", (4096, 1024), "batch"),
    ]
    # (rows, chunk, warps): a program solves every setting of its tile's rows
    SWEEP = [(1, 1024, 4), (1, 1024, 8), (1, 512, 4), (1, 2048, 8)]


def timed_us(fn: Any) -> float:
    if CUDA:
        import triton.testing

        return 1e3 * triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
    fn()
    t0 = time.perf_counter()
    for _ in range(3):
        fn()
    return (time.perf_counter() - t0) / 3 * 1e6


def copy_bw() -> float:
    if CUDA:
        return bench.copy_bandwidth()
    x = torch.rand(1 << 22)
    y = torch.empty_like(x)
    return 2 * x.numel() * 4 / (timed_us(lambda: y.copy_(x)) * 1e-6) / 1e9


def kwargs_of(kind: str) -> dict[str, Any]:
    return {"lam": 0.95} if kind == "gae" else {"lam": 1.0, "rho_clip": 1.0, "c_clip": 1.0}


def rel_err(got: torch.Tensor, want: torch.Tensor) -> float:
    scale = max(1.0, float(want.abs().max()))
    return float((got.double() - want).abs().max()) / scale


def case(kind: str, shape: tuple[int, ...], layout: str, bw: float) -> dict[str, Any]:
    inp = bench.make_inputs(kind, shape, ep_len=1000.0, device=DEVICE, seed=1)
    f, kw = FN[kind], kwargs_of(kind)
    one = lambda: f(**inp, gamma=GAMMAS, **kw, validate=False)  # noqa: E731
    res = one()
    # float64 check of every setting (the torch backend, itself tested against the loop)
    inp64 = {
        k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in inp.items()
    }
    err = 0.0
    for k, g in enumerate(GAMMAS):
        want = f(**inp64, gamma=g, **kw, backend="torch", validate=False)
        for name, w in want.items():
            err = max(err, rel_err(getattr(res, name)[k], w))
        del want
    del inp64
    assert err < 1e-4, f"{kind} {shape}: one launch differs from float64 by {err:.2e}"
    ref = {name: getattr(res, name).clone() for name in ("advantages", "vs") if hasattr(res, name)}

    def separate() -> None:
        for g in GAMMAS:
            f(**inp, gamma=g, **kw, validate=False)

    in_bytes = bench.traffic_bytes(inp, {})
    steps = inp["rewards"].numel()
    out_bytes = len(GAMMAS) * OUTPUTS[kind] * 4 * steps
    floor = (in_bytes + out_bytes) / (bw * 1e9) * 1e6
    one_setting_floor = (in_bytes + out_bytes // len(GAMMAS)) / (bw * 1e9) * 1e6
    row: dict[str, Any] = {
        "estimator": kind,
        "shape": "x".join(map(str, shape)),
        "layout": layout,
        "K": len(GAMMAS),
        "bytes_in": in_bytes,
        "bytes_out": out_bytes,
        "floor_us": floor,
        "separate_floor_us": len(GAMMAS) * one_setting_floor,
        "max_rel_err_vs_float64": err,
        "one_launch_us": timed_us(one),
        "separate_us": timed_us(separate),
        "one_setting_us": timed_us(lambda: f(**inp, gamma=GAMMAS[1], **kw, validate=False)),
        "one_launch_validated_us": timed_us(lambda: f(**inp, gamma=GAMMAS, **kw)),
    }
    row["one_launch_over_floor"] = row["one_launch_us"] / floor
    row["separate_over_one_launch"] = row["separate_us"] / row["one_launch_us"]
    row["meets_1.3x"] = row["one_launch_over_floor"] <= 1.3
    # tile sweep of the one-launch kernel
    sweep = []
    for rows, chunk, warps in SWEEP:
        with triton_scan.tile_override(rows=rows, chunk=chunk, num_warps=warps):
            got = one()
            diff = max(rel_err(getattr(got, n), r.double()) for n, r in ref.items())
            us = timed_us(one)
        sweep.append({"tile": f"{rows}x{chunk}/{warps}w", "us": us, "over_floor": us / floor,
                      "rel_diff_vs_default": diff})  # fmt: skip
    row["tile_sweep"] = sweep
    row["default_tile"] = str(triton_scan.choose_tiles(
        shape[0] if len(shape) > 1 else 1, shape[-1], True))  # fmt: skip
    if CUDA:
        torch.cuda.empty_cache()
    return row


def table(result: dict[str, Any]) -> str:
    lines = [
        f"# K = {len(GAMMAS)} settings in one launch ({result['gpu']}, {result['date']})",
        "",
        f"torch {result['torch']}, Triton {result['triton']}, Python {result['python']}; "
        f"copy bandwidth (same run) {result['copy_bandwidth_GBps']:.0f} GB/s. "
        f"γ = {GAMMAS}; full-call medians, µs, validate=False.",
        "",
        "| estimator | shape | floor (in once + K out) | one launch | ×floor | 3 separate calls "
        "| one setting | separate / one launch | validated | max rel err (fp64) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        lines.append(
            f"| {r['estimator']} | {r['shape']} {r['layout']} | {r['floor_us']:.1f} | "
            f"{r['one_launch_us']:.1f} | {r['one_launch_over_floor']:.2f} | "
            f"{r['separate_us']:.1f} | {r['one_setting_us']:.1f} | "
            f"{r['separate_over_one_launch']:.2f} | {r['one_launch_validated_us']:.1f} | "
            f"{r['max_rel_err_vs_float64']:.1e} |"
        )
    lines += ["", "Tile sweep of the one-launch kernel (µs, ×floor; default tile in brackets):", ""]
    for r in result["rows"]:
        cells = ", ".join(
            f"{s['tile']} {s['us']:.1f} ({s['over_floor']:.2f})" for s in r["tile_sweep"]
        )
        lines.append(f"* {r['estimator']} {r['shape']} [{r['default_tile']}]: {cells}")
    return "\n".join(lines) + "\n"


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else "bench/results/settings-local"
    os.makedirs(out, exist_ok=True)
    import triton

    bw = copy_bw()
    print(f"copy bandwidth {bw:.0f} GB/s", flush=True)
    rows = []
    for kind, shape, layout in CASES:
        rows.append(case(kind, shape, layout, bw))
        r = rows[-1]
        print(
            f"{kind} {r['shape']}: one launch {r['one_launch_us']:.1f} us, floor "
            f"{r['floor_us']:.1f} ({r['one_launch_over_floor']:.2f}x), separate "
            f"{r['separate_us']:.1f}, sweep "
            + ", ".join(f"{s['tile']} {s['us']:.1f}" for s in r["tile_sweep"]),
            flush=True,
        )
    result = {
        "gpu": torch.cuda.get_device_name() if CUDA else f"CPU interpreter ({platform.machine()})",
        "date": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "copy_bandwidth_GBps": bw,
        "gammas": GAMMAS,
        "rows": rows,
    }
    with open(os.path.join(out, "settings.json"), "w") as fh:
        json.dump(result, fh, indent=1)
    md = table(result)
    with open(os.path.join(out, "settings.md"), "w") as fh:
        fh.write(md)
    print(md)


if __name__ == "__main__":
    main()
