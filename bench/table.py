"""The README's performance table: rltscan beside the copy floor, rl-triton 0.1.3 and a
torch.compile scan, in one run.

    python -m bench.table OUT [--quick] [--budget-s 300] [--baseline compile|eager|none]

Rows: GAE, discounted returns, V-trace and Retrace at 4096×128, 1024×1024, 4096×1024,
16×131072 (``[B, T]``, episode ends every ~200 steps) and one flat sequence of 2^22 and
2^26 steps (episode ends every ~1000; bootstrap values at truncations), then GAE with
K = 3 settings in one call (γ = 0.9, 0.99, 0.999) and GAE with a per-step γ_t column, at
2^26 flat and 4096×1024. Columns, each checked against a float64 solve of the same inputs
(``rltscan.bench.float64_solve``) before it is timed, within ``TOL`` of its largest
magnitude:

* **floor**: the bytes of every input read once and every output written once (sparse
  bootstrap columns aside) at the copy bandwidth of a 1 GiB device copy measured at the
  start of this run (bytes read + written);
* **rltscan**: the full Python call, ``validate=False`` and the default ``validate=True``;
* **rl-triton 0.1.3** where it computes the same thing (``bench/baselines.py``; K
  settings: K calls);
* **torch.compile scan**: the estimator's own coefficients around a Hillis–Steele scan,
  ``torch.compile(dynamic=False)``, compiled once per row (``rltscan.bench.baseline_fn``).
  Compiling takes seconds per row, so these run last, GAE's first, each only while the
  run's time budget (``--budget-s``) has room for it; a row left out says so.

Times: ``rltscan.bench.timed_us`` (``triton.testing.do_bench`` median, warm). Writes
``OUT/result.json`` (the machine and code record, the copy bandwidth, every cell) and
``OUT/table.md`` (:func:`render`, the block ``python -m bench.readme_table`` puts in the
README). ``--quick`` (and any run without CUDA) takes tiny shapes: a check of this script
that a test runs on the CPU, not a measurement.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from collections.abc import Callable
from typing import Any

import torch

from bench import baselines, harness
from rltscan import bench

ESTIMATORS = ("gae", "returns", "vtrace", "retrace")
SHAPES: tuple[tuple[int, ...], ...] = (
    (4096, 128), (1024, 1024), (4096, 1024), (16, 131072), (1 << 22,), (1 << 26,),
)  # fmt: skip
EXTRA_SHAPES: tuple[tuple[int, ...], ...] = ((1 << 26,), (4096, 1024))
QUICK_SHAPES: tuple[tuple[int, ...], ...] = ((8, 128), (2, 1024), (4097,))
QUICK_EXTRA_SHAPES: tuple[tuple[int, ...], ...] = ((4097,), (2, 1024))
GAMMAS = (0.9, 0.99, 0.999)
TOL = 1e-3  # max |got − want| / max(1, max |want|) for "computes the same thing"
K_CASE, STEP_CASE = f"K = {len(GAMMAS)} settings", "per-step γ_t"
COLUMNS = ("rltscan", "rltscan_validated", "rl_triton", "compile")
NAMES = {"gae": "GAE", "returns": "discounted returns", "vtrace": "V-trace", "retrace": "Retrace"}


def shape_label(shape: tuple[int, ...]) -> str:
    """``4096×128`` for ``[B, T]``, ``2^26 flat`` for a flat sequence of a power of two."""
    if len(shape) == 1:
        n = shape[0]
        return f"2^{n.bit_length() - 1} flat" if n & (n - 1) == 0 else f"{n} flat"
    return "×".join(map(str, shape))


def inputs_for(
    kind: str, shape: tuple[int, ...], case: str, device: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(inputs, kw)`` of a row: the estimator's random inputs (seeded by the shape, so
    a case's rows share them) and the call's other arguments."""
    ep = 200.0 if len(shape) == 2 else 1000.0
    inputs = bench.make_inputs(kind, shape, ep_len=ep, device=device, seed=len(shape))
    kw: dict[str, Any] = {}
    if case == K_CASE:
        kw["gamma"] = list(GAMMAS)
    elif case == STEP_CASE:
        g = torch.Generator(device=device).manual_seed(3)
        inputs["discount"] = 0.9 + 0.1 * torch.rand(shape, generator=g, device=device)
    return inputs, kw


def rltscan_call(
    kind: str, inputs: dict[str, Any], kw: dict[str, Any], validate: bool
) -> tuple[Callable[[], Any], Callable[[Any], dict[str, Any]]]:
    """``(fn, named)``: ``fn()`` is the timed call, the public function on ready arguments
    (as a training step holds them), and ``named(fn())`` its outputs by name (with K
    settings ``"name#i"``, the i-th γ)."""
    function = bench.function(kind)
    args = bench.call_kwargs(kind, inputs, validate=validate, **kw)
    names = harness.declaration(kind).outputs
    k = len(kw.get("gamma", ()))

    def named(res: Any) -> dict[str, Any]:
        if not k:
            return dict(res)
        return {f"{o}#{i}": getattr(res, o)[i] for i in range(k) for o in names}

    return lambda: function(**args), named


def want_for(kind: str, inputs: dict[str, Any], kw: dict[str, Any]) -> dict[str, Any]:
    """The float64 solve; K settings one call per γ (not the K-settings path itself)."""
    if "gamma" not in kw:
        return bench.float64_solve(kind, inputs, **kw)
    want = {}
    for i, g in enumerate(kw["gamma"]):
        for o, t in bench.float64_solve(kind, inputs, gamma=g).items():
            want[f"{o}#{i}"] = t
    return want


def measured(
    fn: Callable[[], Any],
    want: dict[str, Any],
    check: Callable[[Any], dict[str, Any]] = dict,
    **extra: Any,
) -> dict[str, Any]:
    """A cell: ``check(fn())`` compared with ``want``, then ``fn`` timed; or why it has
    no time."""
    err = bench.max_rel_err(check(fn()), want)
    if not err <= TOL:
        return {"us": None, "max_rel_err": err, "why": "differs from the float64 solve"}
    return {"us": bench.timed_us(fn), "max_rel_err": err, **extra}


def measure_row(
    kind: str, shape: tuple[int, ...], case: str, device: str, bw: float
) -> dict[str, Any]:
    """One row's floor, rltscan and rl-triton cells (the compile cell comes later)."""
    inputs, kw = inputs_for(kind, shape, case, device)
    want = want_for(kind, inputs, kw)
    plain, named = rltscan_call(kind, inputs, kw, validate=False)
    validated, _ = rltscan_call(kind, inputs, kw, validate=True)
    t0 = time.perf_counter()
    out = named(plain())
    if device == "cuda":
        torch.cuda.synchronize()
    first_s = time.perf_counter() - t0
    nbytes = bench.traffic_bytes(inputs, out)
    del out
    row: dict[str, Any] = {
        "estimator": kind,
        "shape": list(shape),
        "case": case,
        "steps": math.prod(shape),
        "bytes": nbytes,
        "floor_us": bench.floor_us(nbytes, bw),
        "rltscan": measured(plain, want, named, first_call_s=first_s),
        "rltscan_validated": measured(validated, want, named),
    }
    if kind not in baselines.KINDS or case == STEP_CASE:
        why = "n/a: no per-step γ_t" if case == STEP_CASE else "n/a: other inputs"
        row["rl_triton"] = {"us": None, "why": why}
    elif (reason := baselines.missing()) is not None:
        row["rl_triton"] = {"us": None, "why": reason}
    else:
        fn, named = baselines.call(kind, inputs, tuple(kw.get("gamma", (0.99,))))
        subset = {k: v for k, v in want.items() if k in named(fn())}
        row["rl_triton"] = measured(fn, subset, named)
    row["compile"] = {"us": None, "why": "n/a: one compile per setting"} if case == K_CASE else None
    return row


def compile_cell(row: dict[str, Any], device: str, compiled: bool) -> dict[str, Any]:
    """The torch.compile scan of ``row``'s call, compiled here, checked, timed."""
    kind, shape = row["estimator"], tuple(row["shape"])
    inputs, kw = inputs_for(kind, shape, row["case"], device)
    want = want_for(kind, inputs, kw)
    p = bench.problem_of(kind, inputs)
    fn = bench.baseline_fn(kind, compiled=compiled)
    t0 = time.perf_counter()
    fn(p)
    if device == "cuda":
        torch.cuda.synchronize()
    compile_s = time.perf_counter() - t0

    def shaped(out: dict[str, Any]) -> dict[str, Any]:  # (the problem's rows are 2-D)
        return {k: v.reshape(want[k].shape) for k, v in out.items()}

    cell = measured(lambda: fn(p), want, shaped, compile_s=compile_s)
    if not compiled:
        cell["eager"] = True  # (a check of the code: not the compiled baseline)
    return cell


def compile_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows whose compile cell is still open, GAE's first (the numbers to beat
    are GAE's), then the other estimators by shape, per-step γ_t last."""

    def key(r: dict[str, Any]) -> tuple[int, int]:
        return (r["case"] == STEP_CASE, r["estimator"] != "gae")

    return sorted((r for r in rows if r["compile"] is None), key=key)


def run(
    *,
    quick: bool,
    budget_s: float,
    baseline: str,
    log: Callable[[str], None] = print,
    save: Callable[[dict[str, Any]], None] = lambda result: None,
) -> dict[str, Any]:
    """Every row, then the compile cells within the budget: the result, handed to
    ``save`` after each row and cell too (a run cut short keeps what it measured)."""
    t_start = time.perf_counter()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    quick = quick or not cuda
    bw = bench.copy_bandwidth(device)
    log(f"copy bandwidth {bw:.0f} GB/s ({bench.copy_bytes(device) >> 20} MiB copied)")
    record: dict[str, Any] = {
        **harness.run_record(),
        "copy_GBps": bw,
        "copy_MiB": bench.copy_bytes(device) >> 20,
        "tolerance": TOL,
        "gammas": list(GAMMAS),
        "baseline": baseline,
        "budget_s": budget_s,
        "note": "A check of bench/table.py on tiny shapes, not a measurement." if quick else None,
    }
    shapes, extra = (QUICK_SHAPES, QUICK_EXTRA_SHAPES) if quick else (SHAPES, EXTRA_SHAPES)
    cases = [(k, s, "") for s in shapes for k in ESTIMATORS]
    cases += [("gae", s, c) for c in (K_CASE, STEP_CASE) for s in extra]
    rows: list[dict[str, Any]] = []
    result = {"record": record, "rows": rows}
    for kind, shape, case in cases:
        rows.append(measure_row(kind, shape, case, device, bw))
        free(device)
        log(line(rows[-1]))
        save(result)
    per_level: list[float] = []  # seconds per scan level each compile cell took
    for row in compile_order(rows):
        levels = max(1, (row["shape"][-1] - 1).bit_length())  # Hillis–Steele's unrolled steps
        estimate = max(per_level, default=3.0) * levels + 5.0  # + checking and timing
        left = budget_s - (time.perf_counter() - t_start)
        if baseline == "none":
            row["compile"] = {"us": None, "why": "not run (--baseline none)"}
        elif left < estimate:
            row["compile"] = {"us": None, "why": f"not run: {left:.0f} s of the budget left"}
        else:
            t0 = time.perf_counter()
            row["compile"] = compile_cell(row, device, compiled=baseline == "compile")
            free(device)
            per_level.append((time.perf_counter() - t0) / levels)
            log(line(row))
        save(result)
    record["elapsed_s"] = time.perf_counter() - t_start
    save(result)
    return result


def free(device: str) -> None:
    """Give the memory of the last row's tensors back (each row allocates afresh)."""
    if device == "cuda":
        torch.cuda.empty_cache()


def line(row: dict[str, Any]) -> str:
    """One row on the console while the run goes."""
    cells = "  ".join(f"{c} {cell_text(row, row[c])}" for c in COLUMNS if row[c] is not None)
    return f"{NAMES[row['estimator']]:18s} {shape_label(tuple(row['shape'])):>10s} " + (
        f"{row['case']:14s} floor {row['floor_us']:.1f}  {cells}"
    )


def cell_text(row: dict[str, Any], cell: dict[str, Any] | None) -> str:
    """``µs (% of floor)``, or what stands in for a time: ``n/a`` (the baseline does not
    compute this), ``differs`` (it computed something else), ``–`` (not measured)."""
    if cell is None or cell["us"] is None:
        why = "" if cell is None else cell["why"]
        if why.startswith("n/a"):
            return "n/a"
        return "differs" if why.startswith("differs") else "–"
    return f"{cell['us']:.1f} ({100 * row['floor_us'] / cell['us']:.0f}%)"


def render(result: dict[str, Any], source: str | None = None) -> str:
    """The markdown table with its caption and legend (``table.md``; the README block,
    where ``source`` names the result file)."""
    rec = result["record"]
    code = f"commit {rec['commit'][:10]}" if rec.get("commit") else f"tree {rec.get('tree')}"
    driver = f" (driver {rec['driver']})" if rec.get("driver") else ""
    mib = rec.get("copy_MiB", 1024)
    copied = f"{mib >> 10} GiB" if mib % 1024 == 0 else f"{mib} MiB"
    lines = [
        f"{rec['gpu']}{driver}, torch {rec['torch']}, Triton {rec['triton']}, Python "
        f"{rec['python']}, {rec['date']}, {code}; copy bandwidth {rec['copy_GBps']:.0f} GB/s "
        f"({copied} device copy, bytes read + written, same run)."
        + (f" Source: `{source}`." if source else "")
        + (f" {rec['note']}" if rec.get("note") else ""),
        "",
        "| estimator | B×T | floor | rltscan | rltscan, validate=True | rl-triton 0.1.3 "
        "| torch.compile scan |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        name = NAMES[r["estimator"]] + (f", {r['case']}" if r["case"] else "")
        cells = " | ".join(cell_text(r, r[c]) for c in COLUMNS)
        lines.append(
            f"| {name} | {shape_label(tuple(r['shape']))} | {r['floor_us']:.1f} | {cells} |"
        )
    lines += [
        "",
        "Full Python call, median µs (`triton.testing.do_bench`, warm), and % of the copy "
        "floor (every input read once and every output written once at that bandwidth); "
        "validate=False unless named. Every cell was checked against a float64 solve of "
        f"the same inputs first (within {rec.get('tolerance', TOL):g} of its largest "
        "magnitude). n/a: the "
        "baseline does not compute this (rl-triton's Retrace reads other inputs; no "
        "per-step γ_t); differs: it computed something else; –: not measured in this run.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="folder for result.json and table.md")
    ap.add_argument("--quick", action="store_true", help="tiny shapes (the CPU check)")
    ap.add_argument("--budget-s", type=float, default=300.0, help="start no compile after")
    ap.add_argument("--baseline", default="compile", choices=("compile", "eager", "none"))
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)

    def save(result: dict[str, Any]) -> None:
        with open(os.path.join(args.out, "result.json"), "w") as fh:
            json.dump(result, fh, indent=1)

    result = run(quick=args.quick, budget_s=args.budget_s, baseline=args.baseline,
                 log=lambda s: print(s, flush=True), save=save)  # fmt: skip
    text = render(result)
    with open(os.path.join(args.out, "table.md"), "w") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
