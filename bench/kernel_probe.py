"""The kernel against the memory wall (issue 23): variants side by side in one run.

Every timed row is first checked against a float64 solve of the same inputs (the torch
backend in float64 on the device): ``max_rel_err`` = max |got − want| / max(1, max |want|).
Times are ``triton.testing.do_bench`` medians of the whole Python call (µs,
``validate=False`` unless the row says otherwise); the floor is the bytes of every input
read once and every output written once (sparse bootstrap columns excluded) at the
device-to-device copy bandwidth measured in the same process (1 GiB ``y.copy_(x)``,
bytes read + written).

Sections (each row names its own):

- ``default``: the five backward estimators at 2^26 flat steps (episode ends every
  ~1000 and ~10 steps), 4096×1024 and 16×131072, default tiles, also as kernel time
  (torch profiler); and ``validate=True`` at 2^26 flat;
- ``tiles``: the same flat rows across tile shapes (rows × chunk / warps), calls bound
  as with the default tiles;
- ``settings``: K = 3 (γ = 0.9, 0.99, 0.999) in one call (one launch), as three calls,
  and one setting alone; floor = inputs once + K outputs;
- ``per-step``: a per-step γ_t column against the scalar γ;
- ``set-tiles``: the K = 3 one-launch rows at 2^26 flat across tile shapes (phase
  ``settings-tiles``, not part of ``all``).

rl-triton and the torch.compile scan beside these shapes: ``bench/table.py``.

    python -m bench.kernel_probe run OUT_PREFIX LABEL [small|full] [PHASES]
    python -m bench.kernel_probe merge OUT_PREFIX RUN.json ...

PHASES (comma-separated, default all, or $PROBE): flat (default, validate and tiles at
2^26 flat), sweep (the same at 2^26 flat, 16×131072 and 2^22 flat),
default (the flat default rows alone: one kernel file against another, a
run per tree), settings, per-step, shapes (the other shapes), settings-tiles. ``bash bench/device.sh
kernel`` runs flat and shapes, ``bash bench/device.sh settings`` settings and per-step.

``$PROBE_KINDS`` (comma-separated, default every estimator above) times some
estimators alone. ``run`` measures the rltscan on ``PYTHONPATH`` (run it once per tree
to compare trees: LABEL names it) and writes OUT_PREFIX.json and .md; ``merge`` writes one table of
several runs. ``small``: tiny shapes and host timers, a check of this script under
Triton's interpreter, not a measurement.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import torch

from bench import harness
from rltscan import bench
from rltscan.scan import triton_scan

# $PROBE_KINDS (comma-separated) narrows a run to some of them
KINDS = tuple(os.environ.get("PROBE_KINDS", "gae,returns,td_lambda,vtrace,retrace").split(","))
SMALL = sys.argv[4:5] == ["small"]
DEVICE = "cpu" if SMALL else "cuda"
if SMALL:
    SHAPES = [((1001,), 1000.0, "flat"), ((1001,), 10.0, "flat-dense"), ((5, 64), 1000.0, "b")]
    FLAT = ((1001,), 1000.0)
    LONG = [FLAT]
    TILES = [(1, 64, 1), (2, 64, 1)]
    SETTING_CASES = [("gae", (1001,)), ("gae", (5, 64))]
    SET_TILES = [(1, 32, 1)]
    STEP_CASES = [("gae", (1001,))]
else:
    SHAPES = [
        ((1 << 26,), 1000.0, "flat"),
        ((1 << 26,), 10.0, "flat-dense"),
        ((4096, 1024), 1000.0, "batched"),
        ((16, 131072), 1000.0, "batched"),
        ((65536, 1024), 1000.0, "rows"),  # the flat steps in one-tile rows: no look-back
    ]
    FLAT = ((1 << 26,), 1000.0)
    # rows that join tiles by the look-back, for the ``sweep`` phase's tiles
    LONG = [FLAT, ((16, 131072), 1000.0), ((1 << 22,), 1000.0)]
    # 8, 16 and 32 steps a thread (1024/8, 2048/16, 4096/16 and 512/2 were slower:
    # kernel-probe-h200-2026-12-04-b, kernel-tiles-h100-2026-12-06)
    TILES = [(1, 1024, 4), (1, 2048, 8), (1, 2048, 4), (1, 4096, 8), (1, 4096, 4), (1, 8192, 8)]
    SETTING_CASES = [("gae", (1 << 26,)), ("vtrace", (1 << 26,)), ("gae", (4096, 1024))]
    # also for K settings: 4 steps a thread (K accumulators a step hold more registers)
    SET_TILES = [(1, 1024, 8), (1, 512, 4)]
    STEP_CASES = [("gae", (1 << 26,)), ("gae", (4096, 1024))]
GAMMAS = [0.9, 0.99, 0.999]


class Probe:
    """The rows of one run, saved to PREFIX.json after each (a run cut short by its
    time limit keeps what it measured)."""

    def __init__(self, label: str, prefix: str) -> None:
        self.label, self.prefix, self.rows = label, prefix, []
        self.bw = bench.copy_bandwidth(DEVICE)
        self.record = {**harness.run_record(),
                       "tree": label, "copy_GBps": self.bw, "rows": self.rows}  # fmt: skip
        print(f"[{label}] copy bandwidth {self.bw:.0f} GB/s", flush=True)

    def save(self) -> None:
        with open(self.prefix + ".json", "w") as fh:
            json.dump(self.record, fh, indent=1)

    def row(self, section: str, kind: str, shape: tuple[int, ...], ep: float, fn: Callable,
            want: dict[str, Any], n_bytes: int, kernel: bool = False,
            **extra: Any) -> None:  # fmt: skip
        """Check ``fn()`` against ``want``, then time it (and with ``kernel`` the scan
        kernels alone, torch profiler: what host time cannot hide)."""
        before = set(triton_scan._COMPILED)
        try:
            err = bench.max_rel_err(fn(), want)
            us = bench.timed_us(fn, rep=100)
            if kernel and not SMALL:
                extra["kernel_us"] = round(harness.kernel_us(fn), 1)
                floor = n_bytes / (self.bw * 1e9) * 1e6
                extra["kernel_pct_floor"] = round(100 * floor / extra["kernel_us"], 1)
        except Exception as e:  # a variant the compiler or the device refuses
            print(f"[{self.label}] {section} {kind} {shape}: {e!r}"[:300], flush=True)
            return
        regs = [getattr(ck, "n_regs", None) for k, ck in triton_scan._COMPILED.items()
                if k not in before]  # fmt: skip
        floor = n_bytes / (self.bw * 1e9) * 1e6
        r = {
            "tree": self.label, "section": section, "estimator": kind,
            "shape": "x".join(map(str, shape)), "ep_len": ep, "us": round(us, 1),
            "floor_us": round(floor, 1), "pct_floor": round(100 * floor / us, 1),
            "max_rel_err": float(f"{err:.2e}"), "ok": err <= 1e-4, "n_regs": regs or None,
            **extra,
        }  # fmt: skip
        self.rows.append(r)
        self.save()
        print(
            f"[{self.label}] {section:9s} {kind:9s} {r['shape']:>11s} ep{ep:<6g} "
            + " ".join(f"{k}={v}" for k, v in extra.items())
            + f"  {us:9.1f} us  floor {floor:8.1f}  {r['pct_floor']:5.1f}%  err {err:.1e}"
            + ("" if r["ok"] else "  FAILED"),
            flush=True,
        )


def inputs_for(kind: str, shape: tuple[int, ...], ep: float, seed: int = 0) -> dict[str, Any]:
    return bench.make_inputs(kind, shape, ep_len=ep, device=DEVICE, seed=seed)


@contextlib.contextmanager
def tiles_of(rows: int, chunk: int, warps: int) -> Iterator[None]:
    """Every launch planned inside takes this tile, and calls are bound as with the
    default tiles (a ``tile_override`` keeps none, so its calls pay the whole host path
    each time: the first run's tile rows measured that, not the kernel)."""
    from rltscan.estimators import _bound

    orig = triton_scan.choose_tiles
    triton_scan.choose_tiles = lambda *a, **k: triton_scan.Tiles(rows, chunk, warps)
    _bound.forget()
    try:
        yield
    finally:
        triton_scan.choose_tiles = orig
        _bound.forget()


def estimators(p: Probe, shapes: list, variants: bool) -> None:
    """``shapes`` at the default tiles (full call and kernel time); with ``variants`` also
    ``validate=True`` and the tile sweep."""
    for kind in KINDS:
        for shape, ep in shapes:
            inp = inputs_for(kind, shape, ep)
            want = bench.float64_solve(kind, inp)
            n_bytes = bench.traffic_bytes(inp, bench.call(kind, inp, validate=False))

            def call(validate: bool = False, k: str = kind, i: dict = inp) -> dict:
                return bench.call(k, i, validate=validate)

            dims = shape if len(shape) == 2 else (1, shape[0])
            tiles = triton_scan.choose_tiles(*dims, True, triton_scan.KINDS[kind])
            tile = f"{tiles.rows}x{tiles.chunk}/{tiles.num_warps}"
            p.row("default", kind, shape, ep, call, want, n_bytes, kernel=True, tile=tile)
            if variants:
                p.row("default", kind, shape, ep, lambda c=call: c(True), want, n_bytes,
                      tile=tile, validate=True)  # fmt: skip
                for r, c, w in TILES:
                    if (r, c, w) != (tiles.rows, tiles.chunk, tiles.num_warps):
                        with tiles_of(r, c, w):
                            p.row("tiles", kind, shape, ep, call, want, n_bytes,
                                  kernel=True, tile=f"{r}x{c}/{w}")  # fmt: skip
            del inp, want
            if not SMALL:
                torch.cuda.empty_cache()


def settings(p: Probe, tiles: bool = False) -> None:
    """K settings in one launch, as K calls and one setting alone; with ``tiles`` the one
    launch of the flat rows across :data:`TILES` instead."""
    fns = {"gae": bench.function("gae"), "vtrace": bench.function("vtrace")}
    for kind, shape in SETTING_CASES:
        if (tiles and len(shape) != 1) or kind not in KINDS:
            continue
        inp = inputs_for(kind, shape, 1000.0, seed=1)
        kw = bench.call_kwargs(kind, inp, validate=False)
        kw.pop("gamma", None)
        f = fns[kind]
        wants = [dict(f(**{**bench.as_float64(kw), "backend": "torch"}, gamma=g)) for g in GAMMAS]
        want = {f"{o}#{i}": w[o] for i, w in enumerate(wants) for o in w}
        in_bytes = bench.traffic_bytes(inp, {})
        out_bytes = sum(v.numel() * 4 for v in wants[0].values())
        n_bytes = in_bytes + len(GAMMAS) * out_bytes

        names = list(wants[0])

        def every(f: Callable = f, kw: dict = kw, names: list = names) -> dict[str, Any]:
            res = f(**kw, gamma=GAMMAS)
            return {f"{o}#{i}": getattr(res, o)[i] for i in range(len(GAMMAS)) for o in names}

        def one(f: Callable = f, kw: dict = kw) -> dict[str, Any]:
            return dict(f(**kw, gamma=GAMMAS[1]))

        def separate(f: Callable = f, kw: dict = kw, names: list = names) -> dict[str, Any]:
            res = [f(**kw, gamma=g) for g in GAMMAS]
            return {f"{o}#{i}": getattr(r, o) for i, r in enumerate(res) for o in names}

        if tiles:
            for r, c, w in [*TILES, *SET_TILES]:
                with tiles_of(r, c, w):
                    p.row("set-tiles", kind, shape, 1000.0, every, want, n_bytes,
                          k=len(GAMMAS), tile=f"{r}x{c}/{w}", kernel=True)  # fmt: skip
            continue
        p.row("settings", kind, shape, 1000.0, every, want, n_bytes, k=len(GAMMAS),
              how="one launch", kernel=True)  # fmt: skip
        p.row("settings", kind, shape, 1000.0, separate, want, n_bytes, k=len(GAMMAS),
              how="a call per setting", kernel=True)  # fmt: skip
        p.row("settings", kind, shape, 1000.0, one, wants[1], in_bytes + out_bytes, k=1,
              how="one setting", kernel=True)  # fmt: skip
        if not SMALL:
            torch.cuda.empty_cache()


def per_step(p: Probe) -> None:
    for kind, shape in STEP_CASES:
        inp = inputs_for(kind, shape, 1000.0, seed=2)
        g = torch.Generator(device=DEVICE).manual_seed(3)
        disc = 0.9 + 0.1 * torch.rand(shape, generator=g, device=DEVICE)
        f = bench.function(kind)
        kw = bench.call_kwargs(kind, inp, validate=False)
        scalar = dict(f(**{**bench.as_float64(kw), "backend": "torch"}))
        kw_t = {**kw, "discount": disc}
        kw_t.pop("gamma", None)
        stepped = dict(f(**{**bench.as_float64(kw_t), "backend": "torch"}))
        n_bytes = bench.traffic_bytes(inp, dict(f(**kw)))
        for how, args, want, extra in (("scalar", kw, scalar, 0),
                                       ("per step", kw_t, stepped, disc.numel() * 4)):  # fmt: skip

            def call(f: Callable = f, args: dict = args) -> dict[str, Any]:
                return dict(f(**args))

            p.row(
                "per-step", kind, shape, 1000.0, call, want, n_bytes + extra, gamma=how, kernel=True
            )
        if not SMALL:
            torch.cuda.empty_cache()


HEADER = ("tree", "section", "estimator", "shape", "ep", "variant", "µs", "floor µs",
          "% floor", "max rel err", "regs")  # fmt: skip
COMMON = {"tree", "section", "estimator", "shape", "ep_len", "us", "floor_us", "pct_floor",
          "max_rel_err", "ok", "n_regs"}  # fmt: skip


def table(rows: list[dict[str, Any]]) -> list[tuple]:
    return [
        (
            r["tree"],
            r["section"],
            r["estimator"],
            r["shape"],
            r["ep_len"],
            ", ".join(f"{k}={v}" for k, v in r.items() if k not in COMMON),
            r["us"],
            r["floor_us"],
            r["pct_floor"],
            r["max_rel_err"] if r["ok"] is not False else f"{r['max_rel_err']} FAILED",
            r.get("n_regs"),
        )
        for r in rows
    ]


def main() -> None:
    mode, prefix = sys.argv[1], sys.argv[2]
    if mode == "merge":
        runs = []
        for path in sys.argv[3:]:
            if not os.path.exists(path):  # (a run stopped before its first row)
                continue
            with open(path) as fh:
                runs.append(json.load(fh))
        rows = [r for run in runs for r in run["rows"]]
        record = {**{k: v for k, v in runs[0].items() if k != "rows"}, "runs": runs}
        harness.write_result(prefix, record, HEADER, table(rows))
        return
    p = Probe(sys.argv[3], prefix)
    phases = (sys.argv[5] if len(sys.argv) > 5 else os.environ.get("PROBE", "all")).split(",")
    # (in order of what a run cut short by its time limit must not lose)
    if {"all", "flat"} & set(phases):
        estimators(p, [FLAT], variants=True)
    elif "sweep" in phases:
        estimators(p, LONG, variants=True)
    elif "default" in phases:
        estimators(p, [FLAT], variants=False)
    if {"all", "settings"} & set(phases):
        settings(p)
    if "settings-tiles" in phases:
        settings(p, tiles=True)
    if {"all", "per-step"} & set(phases) and hasattr(triton_scan, "workspace_words"):
        per_step(p)
    if {"all", "shapes"} & set(phases):
        estimators(p, [(s, e) for s, e, _ in SHAPES if (s, e) != FLAT], variants=False)
    harness.write_result(prefix, p.record, HEADER, table(p.rows))


if __name__ == "__main__":
    main()
