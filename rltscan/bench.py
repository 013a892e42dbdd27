"""``rltscan bench``: every estimator, every backend, beside a torch.compile baseline
and the copy floor measured in the same run, on this machine.

On a GPU: the benchmark shapes (batched ``[B, T]`` in both layouts, flat sequences
with sparse and dense episode ends), timed with ``triton.testing.do_bench``
(median of the full Python call, warm), each checked against a float64 solve
first. On a CPU: GAE and V-trace on flat 1M/10M steps and 4096×128 with the
torch backend, the float64 reference and a per-step NumPy loop (ns/step).

Only what the command runs is here (its cases, inputs and calls, the float64 check,
``timed_us``, the copy floor, the torch.compile baseline, the table and the plot); the
scripts under ``bench/`` measure with the same code, and what only they use (the run
record, result files, kernel and host timers, an estimator's declaration and bound
arguments by name) is ``bench/harness.py`` in the repository (``bench/README.md``).
"""

from __future__ import annotations

import datetime
import json
import math
import platform
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

import rltscan
from rltscan.estimators import DECLARATIONS, MODULES

BATCHED = [(4096, 128), (16384, 128), (1024, 1024), (4096, 1024), (256, 8192), (16, 131072)]
FLAT = [1 << 22, 1 << 26, 1 << 28]
QUICK_BATCHED = [(4096, 128), (256, 8192)]
QUICK_FLAT = [1 << 22]
# every declared estimator (a new module is timed too), the CLI's order
ESTIMATOR_ORDER = [d.name for d in DECLARATIONS.values()]
_BY_KIND = {d.name: d for d in DECLARATIONS.values()}


# ---------------------------------------------------------------------------
# Inputs


def make_inputs(
    kind: str, shape: tuple[int, ...], *, ep_len: float, device: str, seed: int = 0
) -> dict[str, Any]:
    """Random inputs (never zeros) for one estimator call; flags as bool."""
    g = torch.Generator(device=device).manual_seed(seed)

    def randn() -> Tensor:
        return torch.randn(shape, generator=g, device=device)

    u = torch.rand(shape, generator=g, device=device)
    terminated = u < 0.7 / ep_len
    truncated = (u >= 0.7 / ep_len) & (u < 1.0 / ep_len)
    lp = lambda: torch.log(torch.rand(shape, generator=g, device=device) * 0.9 + 0.1)  # noqa: E731
    rows = shape[:-1] if len(shape) > 1 else ()
    known = ("gae", "returns", "td_lambda", "vtrace", "retrace", "traces", "prefix_sum")
    if kind not in known:  # from the declaration: its required arrays and the flags
        d = _BY_KIND[kind]
        out: dict[str, Any] = {n: randn() for n in d.float_inputs if n in d.required}
        flags = {"terminated": terminated, "truncated": truncated}
        out.update({k: v for k, v in flags.items() if k in d.inputs})
        if d.missing_bootstrap is not None:
            out["missing_bootstrap"] = "zero"
        return out
    if kind in ("traces", "prefix_sum"):
        return {"x": randn(), "terminated": terminated}
    base = {"rewards": randn(), "terminated": terminated, "truncated": truncated}
    if kind == "returns":
        return base
    if kind == "retrace":
        return {
            **base,
            "q_values": randn(),
            "next_expected_q": randn(),
            "logp_target": lp(),
            "logp_behavior": lp(),
        }
    base["values"] = randn()
    if rows:
        base["last_value"] = torch.randn(rows, generator=g, device=device)
        base["missing_bootstrap"] = "zero"  # interior truncations of random data
    else:
        base["bootstrap_values"] = randn()
    if kind == "vtrace":
        base["logp_target"], base["logp_behavior"] = lp(), lp()
    return base


def to_layout(inputs: dict[str, Any], time_major: bool) -> dict[str, Any]:
    """[B, T] -> a genuinely time-major [T, B] buffer (contiguous), time_dim=0."""
    if not time_major:
        return inputs
    out = {}
    for k, v in inputs.items():
        out[k] = v.t().contiguous() if isinstance(v, Tensor) and v.ndim == 2 else v
    out["time_dim"] = 0
    return out


def function(kind: str) -> Callable[..., Any]:
    """The public function of the estimator ``kind`` (e.g. ``rltscan.gae``)."""
    return rltscan.ESTIMATORS[_command(kind)].function


def call_kwargs(kind: str, inputs: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """The keyword arguments of a benchmark call: ``inputs`` and ``kw``, with λ = 0.95
    where it applies unless given, on-policy V-trace (λ = 1, both clips 1), and time on
    the last axis unless ``to_layout`` made the buffer time-major."""
    kwargs = {**inputs, **kw}
    kwargs.setdefault("time_dim", -1)  # [B, T] said: 1024 x 1024 is square (time_dim=0: to_layout)
    if kind in ("gae", "td_lambda", "vtrace"):
        kwargs.setdefault("lam", 0.95)
    if kind == "vtrace":
        kwargs.update(lam=1.0, rho_clip=1.0, c_clip=1.0)
    return kwargs


def call(kind: str, inputs: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return dict(function(kind)(**call_kwargs(kind, inputs, **kw)))


def _command(kind: str) -> str:
    return _BY_KIND[kind].command


def traffic_bytes(inputs: dict[str, Any], outputs: dict[str, Any]) -> int:
    """Bytes each input read once + each output written once (sparse bootstraps excluded)."""
    n = 0
    for k, v in inputs.items():
        if isinstance(v, Tensor) and k not in ("bootstrap_values", "last_value"):
            n += v.numel() * v.element_size()
    for v in outputs.values():
        n += v.numel() * v.element_size()
    return n


# ---------------------------------------------------------------------------
# torch.compile baseline: the same coefficients, a log-depth Hillis–Steele scan


def hillis_steele(a: Tensor, b: Tensor, reverse: bool) -> Tensor:
    steps = a.shape[-1]
    d = 1
    while d < steps:
        if reverse:  # compose with step t+d: (a_t a_{t+d}, b_t + a_t b_{t+d})
            a_sh = torch.nn.functional.pad(a[..., d:], (0, d), value=1.0)
            b_sh = torch.nn.functional.pad(b[..., d:], (0, d), value=0.0)
        else:  # compose with step t-d: (a_{t-d} a_t, b_t + a_t b_{t-d})
            a_sh = torch.nn.functional.pad(a[..., :-d], (d, 0), value=1.0)
            b_sh = torch.nn.functional.pad(b[..., :-d], (d, 0), value=0.0)
        b = b + a * b_sh
        a = a * a_sh
        d *= 2
    return b


def baseline_fn(kind: str, *, compiled: bool = True) -> Callable[..., dict[str, Tensor]]:
    """The torch.compile baseline for ``kind``: the estimator's own coefficients and outputs
    around :func:`hillis_steele`, called on a :func:`problem_of`; compiled with
    ``torch.compile(dynamic=False)`` after a reset of dynamo's caches (each shape and
    estimator compiles afresh, never past dynamo's recompile limit into eager code), or
    with ``compiled=False`` the same function run eagerly (a CPU check of the code)."""
    mod = MODULES[kind]

    def run(p: Any) -> dict[str, Tensor]:
        a, b = mod.coefficients(p)
        if p.init is not None:
            raise NotImplementedError  # the bench passes no init
        return mod.finalize(p, hillis_steele(a, b, p.reverse))

    if not compiled:
        return run
    torch._dynamo.reset()
    return torch.compile(run, dynamic=False)


def problem_of(kind: str, inputs: dict[str, Any]) -> Any:
    """Capture the normalised Problem an estimator call builds (for the baseline)."""
    from rltscan.estimators import _driver as est  # the module whose _run calls solve

    captured: dict[str, Any] = {}
    orig = est.solve

    def grab(p: Any, backend: str, **kw: Any) -> dict[str, Tensor]:
        captured["p"] = p
        return orig(p, backend, **kw)

    est.solve = grab
    try:
        call(kind, inputs, validate=False, backend="torch" if not _cuda() else "triton")
    finally:
        est.solve = orig
    return captured["p"]


def _cuda() -> bool:
    return torch.cuda.is_available()


# ---------------------------------------------------------------------------
# GPU bench


def copy_bytes(device: str = "cuda") -> int:
    """The bytes :func:`copy_bandwidth` copies: 1 GiB on a GPU, 64 MiB on the CPU (a
    check of the code paths that use it, not a GPU's copy floor)."""
    return 1 << 30 if device != "cpu" else 1 << 26


def copy_bandwidth(device: str = "cuda") -> float:
    """A device-to-device copy of :func:`copy_bytes` (``y.copy_(x)``), bytes read +
    written per second (GB/s), timed by :func:`timed_us`."""
    n = copy_bytes(device) // 4
    x = torch.empty(n, dtype=torch.float32, device=device).uniform_()
    y = torch.empty_like(x)
    us = timed_us(lambda: y.copy_(x))
    return 2 * n * 4 / (us * 1e-6) / 1e9


def timed_us(fn: Callable[[], Any], *, warmup: int = 25, rep: int = 200) -> float:
    """Median µs of ``fn()`` warm: ``triton.testing.do_bench(fn, warmup, rep,
    return_mode="median")`` where CUDA is, else the median of 5 host-timed calls after
    one warm-up call (the CPU runs of the bench scripts: checks of the code, tiny
    shapes)."""
    if _cuda():
        import triton.testing

        return 1e3 * triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median")
    fn()
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2] * 1e6


def floor_us(nbytes: int, copy_GBps: float) -> float:
    """The copy floor of a call moving ``nbytes``: µs at the copy bandwidth."""
    return nbytes / (copy_GBps * 1e9) * 1e6


def max_rel_err(got: dict[str, Any], want: dict[str, Any]) -> float:
    """max |got − want| / max(1, max |want|) over the outputs ``want`` names; inf where
    ``got`` has a non-finite entry or a different shape."""
    worst = 0.0
    for k, w in want.items():
        g, w = torch.as_tensor(got[k]).double(), torch.as_tensor(w).double()
        if g.shape != w.shape or not bool(torch.isfinite(g).all()):
            return math.inf
        scale = max(1.0, float(w.abs().max()) if w.numel() else 1.0)
        worst = max(worst, float((g - w).abs().max()) / scale if w.numel() else 0.0)
    return worst


def as_float64(inputs: dict[str, Any]) -> dict[str, Any]:
    """``inputs`` with every floating-point tensor in float64 (flags and scalars kept)."""
    return {
        k: (v.double() if isinstance(v, Tensor) and v.is_floating_point() else v)
        for k, v in inputs.items()
    }


def float64_solve(kind: str, inputs: dict[str, Any], **kw: Any) -> dict[str, Tensor]:
    """The float64 solve every timed output is checked against: the torch backend in
    float64 on the inputs' device (itself tested against the float64 loop)."""
    return call(kind, as_float64(inputs), backend="torch", validate=False, **kw)


def bench_case(
    kind: str,
    shape: tuple[int, ...],
    layout: str,
    ep_len: float,
    *,
    bw: float,
    with_baseline: bool,
    with_torch: bool,
) -> dict[str, Any]:
    inputs = to_layout(
        make_inputs(kind, shape, ep_len=ep_len, device="cuda"), layout == "time-major"
    )
    t0 = time.perf_counter()
    out = call(kind, inputs, backend="triton", validate=False)
    torch.cuda.synchronize()
    first_call_s = time.perf_counter() - t0
    want = float64_solve(kind, inputs)
    err = max_rel_err(out, want)
    del want
    nbytes = traffic_bytes(inputs, out)
    timed = timed_us

    row: dict[str, Any] = {
        "estimator": kind,
        "shape": "x".join(map(str, shape)),
        "layout": layout,
        "episode_len": ep_len,
        "steps": math.prod(shape),
        "bytes": nbytes,
        "floor_us": floor_us(nbytes, bw),
        "first_call_s": first_call_s,
        "max_rel_err": err,
    }
    row["triton_us"] = timed(lambda: call(kind, inputs, backend="triton", validate=False))
    row["triton_validated_us"] = timed(lambda: call(kind, inputs, backend="triton"))
    row["pct_of_floor"] = 100.0 * row["floor_us"] / row["triton_us"]
    row["GBps"] = nbytes / (row["triton_us"] * 1e-6) / 1e9
    if with_torch:
        row["torch_us"] = timed(lambda: call(kind, inputs, backend="torch", validate=False))
    if with_baseline:
        try:
            p = problem_of(kind, inputs)
            fn = baseline_fn(kind)
            fn(p)
            torch.cuda.synchronize()
            row["compile_baseline_us"] = timed(lambda: fn(p))
            row["speedup_vs_baseline"] = row["compile_baseline_us"] / row["triton_us"]
        except Exception as e:  # a failed baseline is recorded, not fatal
            row["compile_baseline_error"] = f"{type(e).__name__}: {e}"[:300]
    torch.cuda.empty_cache()
    return row


def gpu_cases(quick: bool) -> list[tuple[tuple[int, ...], str, float]]:
    cases: list[tuple[tuple[int, ...], str, float]] = []
    for b, t in QUICK_BATCHED if quick else BATCHED:
        for layout in ("batch-major", "time-major"):
            cases.append(((b, t), layout, 200.0))
    for n in QUICK_FLAT if quick else FLAT:
        for ep in (1000.0, 10.0):
            cases.append(((n,), "flat", ep))
    return cases


def run_gpu(*, quick: bool, backends: list[str]) -> dict[str, Any]:
    import triton

    bw = copy_bandwidth()
    rows = []
    for shape, layout, ep in gpu_cases(quick):
        for kind in ESTIMATOR_ORDER:
            # the compile baseline for GAE on every shape, for the others on two
            base = "compile" in backends and (kind == "gae" or shape in ((4096, 128), (1 << 22,)))
            if base and layout == "time-major" and kind != "gae":
                base = False
            with_torch = "torch" in backends and kind == "gae" and math.prod(shape) <= 1 << 26
            row = bench_case(
                kind, shape, layout, ep, bw=bw, with_baseline=base, with_torch=with_torch
            )
            rows.append(row)
    return {
        "kind": "gpu",
        "device": torch.cuda.get_device_name(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "copy_bandwidth_GBps": bw,
        "results": rows,
    }


# ---------------------------------------------------------------------------
# CPU bench (the 2-core development machine)


def numpy_gae_loop(r, v, nv, term, cut, gamma: float, lam: float) -> np.ndarray:
    """The per-step NumPy loop people write (the CPU baseline the README quotes)."""
    adv = np.empty_like(r)
    last = 0.0
    for t in range(len(r) - 1, -1, -1):
        nvt = 0.0 if term[t] else nv[t]
        delta = r[t] + gamma * nvt - v[t]
        last = delta + (0.0 if cut[t] else gamma * lam * last)
        adv[t] = last
    return adv


def run_cpu(*, quick: bool) -> dict[str, Any]:
    shapes: list[tuple[int, ...]] = [(1_000_000,), (4096, 128)]
    if not quick:
        shapes.append((10_000_000,))
    rows = []
    for kind in ("gae", "vtrace"):
        for shape in shapes:
            inputs = make_inputs(kind, shape, ep_len=1000.0, device="cpu")
            n = math.prod(shape)
            row: dict[str, Any] = {"estimator": kind, "shape": "x".join(map(str, shape))}
            call(kind, inputs, backend="torch")  # warm
            reps = 5
            t0 = time.perf_counter()
            for _ in range(reps):
                call(kind, inputs, backend="torch")
            row["torch_ns_per_step"] = (time.perf_counter() - t0) / reps / n * 1e9
            t0 = time.perf_counter()
            call(kind, inputs, backend="torch", validate=False)
            row["torch_unvalidated_ns_per_step"] = (time.perf_counter() - t0) / n * 1e9
            if n <= 1_000_000 or not quick:
                t0 = time.perf_counter()
                call(kind, inputs, backend="reference")
                row["reference_ns_per_step"] = (time.perf_counter() - t0) / n * 1e9
            if kind == "gae" and len(shape) == 1:
                r = inputs["rewards"].numpy()
                v = inputs["values"].numpy()
                term = inputs["terminated"].numpy()
                cut = term | inputs["truncated"].numpy()
                cut[-1] = True
                nv = np.where(cut, inputs["bootstrap_values"].numpy(), np.roll(v, -1))
                t0 = time.perf_counter()
                numpy_gae_loop(r, v, nv, term, cut, 0.99, 0.95)
                row["numpy_loop_ns_per_step"] = (time.perf_counter() - t0) / n * 1e9
            rows.append(row)
    return {
        "kind": "cpu",
        "device": platform.processor() or platform.machine(),
        "cpu_count": torch.get_num_threads(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "results": rows,
    }


# ---------------------------------------------------------------------------
# Entry points used by the CLI


def run_bench(
    *,
    quick: bool = False,
    json_path: str | None = None,
    backends: list[str] | None = None,
) -> dict[str, Any]:
    if _cuda():
        result = run_gpu(quick=quick, backends=backends or ["triton", "torch", "compile"])
    else:
        result = run_cpu(quick=quick)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    return result


def markdown(result: dict[str, Any]) -> str:
    """The markdown table committed next to the JSON."""
    head = (
        f"Device: {result['device']} · torch {result['torch']}"
        + (f" · triton {result['triton']}" if "triton" in result else "")
        + f" · {result['date']}"
    )
    lines = [head, ""]
    if result["kind"] == "gpu":
        lines.append(f"Copy bandwidth (same run): {result['copy_bandwidth_GBps']:.0f} GB/s")
        lines.append("")
        columns = (
            "estimator", "shape", "layout", "ep len", "floor µs", "triton µs", "% floor",
            "GB/s", "validated µs", "torch.compile µs", "speedup", "max rel err",
        )  # fmt: skip
        lines += _table(columns, [_gpu_cells(r) for r in result["results"]])
    else:
        columns = (
            "estimator", "shape", "torch ns/step", "torch (no validation)",
            "reference ns/step", "NumPy loop ns/step",
        )  # fmt: skip
        lines += _table(columns, [_cpu_cells(r) for r in result["results"]])
    return "\n".join(lines) + "\n"


def _table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A markdown table's lines: the header, its rule, then one line a row (one
    formatting for both tables :func:`markdown` writes)."""
    return [_md_row(columns), "|" + "---|" * len(columns), *(_md_row(r) for r in rows)]


def _md_row(cells: Sequence[str]) -> str:
    """One line of a markdown table."""
    return "| " + " | ".join(cells) + " |"


def _gpu_cells(r: dict[str, Any]) -> list[str]:
    """One GPU result as table cells (empty where there was no torch.compile baseline)."""
    base = r.get("compile_baseline_us")
    return [
        f"{r['estimator']}",
        f"{r['shape']}",
        f"{r['layout']}",
        f"{r['episode_len']:g}",
        f"{r['floor_us']:.1f}",
        f"{r['triton_us']:.1f}",
        f"{r['pct_of_floor']:.0f}%",
        f"{r['GBps']:.0f}",
        f"{r['triton_validated_us']:.1f}",
        "" if base is None else f"{base:.1f}",
        "" if base is None else format(r["speedup_vs_baseline"], ".1f") + "x",
        f"{r['max_rel_err']:.1e}",
    ]


def _cpu_cells(r: dict[str, Any]) -> list[str]:
    """One CPU result as table cells (empty where a baseline was not timed)."""
    ref = r.get("reference_ns_per_step")
    npl = r.get("numpy_loop_ns_per_step")
    return [
        f"{r['estimator']}",
        f"{r['shape']}",
        f"{r['torch_ns_per_step']:.1f}",
        f"{r['torch_unvalidated_ns_per_step']:.1f}",
        "" if ref is None else f"{ref:.0f}",
        "" if npl is None else f"{npl:.0f}",
    ]


def throughput(
    result: dict[str, Any],
) -> tuple[dict[str, list[tuple[float, float]]], list[tuple[float, float]]]:
    """``(series, floor)``: steps/s against steps per estimator (and layout), and the
    copy floor's steps/s (the same bytes copied at the copy bandwidth of the same run;
    the fastest floor at each size, GPU results only)."""
    series: dict[str, list[tuple[float, float]]] = {}
    floor: dict[float, float] = {}
    for r in result["results"]:
        steps = float(math.prod(int(d) for d in str(r["shape"]).split("x")))
        if result["kind"] == "gpu":
            rate = steps / (r["triton_us"] * 1e-6)
            floor[steps] = max(floor.get(steps, 0.0), steps / (r["floor_us"] * 1e-6))
        else:
            rate = 1e9 / r["torch_ns_per_step"]
        label = f"{r['estimator']} {r.get('layout', '')}".strip()
        series.setdefault(label, []).append((steps, rate))
    return series, sorted(floor.items())


def plot(result: dict[str, Any], path: str) -> None:
    """``rltscan bench --plot PATH.png``: throughput against size, copy floor drawn in."""
    from rltscan import pictures

    series, floor = throughput(result)
    backend = "triton" if result["kind"] == "gpu" else "torch (CPU)"
    pictures.plot_series(
        path,
        series,
        floor=floor,
        title=f"rltscan bench · {result['device']} · {backend}",
        xlabel="steps",
        ylabel="steps / s",
    )


def render_table(result: dict[str, Any]) -> Any:
    """A rich table of the result (for the CLI)."""
    from rich.table import Table

    table = Table(title=f"rltscan bench · {result['device']}")
    md = markdown(result).splitlines()
    header = next(line for line in md if line.startswith("| estimator"))
    for col in header.strip("|").split("|"):
        table.add_column(col.strip())
    for line in md:
        if line.startswith("| ") and not line.startswith("| estimator"):
            table.add_row(*[c.strip() for c in line.strip("|").split("|")])
    return table
