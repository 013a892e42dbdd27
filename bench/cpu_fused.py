#!/usr/bin/env python3
"""The fused CPU backend against the torch CPU backend, and streamed runs against their floor.

    python bench/cpu_fused.py --out DIR [--steps 1e6,1e7,1e8] [--threads 1,2]
        [--stream-steps 1e7,5e7] [--repeat N] [--workdir DIR] [--budget-s 190]
        [--before-tree CHECKOUT] [--skip-torch]

Run it pinned to the cores to measure (``taskset -c 0,1`` for the 2-core figures).

1. Kernel: ns per step of ``rltscan.gae`` / ``discounted_returns`` / ``vtrace`` on one flat
   float32 sequence (episode ends ~1/500 steps, both flags), ``validate=False``, with
   ``backend="cpu"`` and ``backend="torch"``, at ``torch.set_num_threads(n)`` for each n
   of ``--threads`` (the cpu backend splits rows over that many threads; numba's own
   thread pool is not used), best of 5 / 3 / 1 calls at 1e6 / 1e7 / 1e8 steps, after a
   warm-up call. Each cpu output is checked against the torch one first. A [64, T/64]
   row at the middle length shows the row split over threads.
2. Stream: the CLI (``python -m rltscan gae FILE --backend B``) on bench/e2e.py's flat
   HDF5 and Parquet files, in place (into a copy made before timing) and with ``-o`` to
   a new file, against e2e's I/O floors (``io-floor-inplace``: the file copied and the
   outputs written into it / every column rewritten; ``io-floor``: the needed columns
   read and as many outputs written, no compute; ``-o`` is also put against
   ``io-floor-inplace``, the least a new file carrying every input key can cost), each
   in a fresh process timed from
   fork to reap with its own peak RSS (bench/e2e.py's launcher). Files are read once
   before timing (page cache warm); the CLI's cpu kernels are compiled by untimed runs on a
   small file of each format first (numba's cache, as a second run of a user's finds it).
   With ``--repeat N`` the cases run in N interleaved rounds and each keeps its fastest
   (a shared machine's load is uneven); the ratio is best against best. With
   ``--before-tree`` the CLI cases also run from that checkout (``before-cpu-*``) in
   the same rounds, so before and after meet the same load.

Writes DIR/result.json (rows as they come, rewritten after each) and DIR/table.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import e2e  # noqa: E402 - the repository root goes on the path first

WINDOW = 1 << 22  # the CLI's default window; the floors read in the same chunks
REPS = {1_000_000: 5, 10_000_000: 3}


def _inputs(steps: int, rows: int = 1) -> dict[str, Any]:
    import torch

    rng = np.random.default_rng(steps + rows)
    shape = (rows, steps // rows) if rows > 1 else (steps,)

    def f() -> Any:
        return torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))

    u = rng.random(shape, dtype=np.float32)
    lp = np.log(rng.uniform(0.1, 1.0, shape)).astype(np.float32)
    return {
        "rewards": f(),
        "values": f(),
        "terminated": torch.from_numpy(u < 0.001),
        "truncated": torch.from_numpy((u >= 0.001) & (u < 0.002)),
        "logp_target": torch.from_numpy(lp),
        "logp_behavior": torch.from_numpy(lp[..., ::-1].copy()),
    }


def _call(kind: str, x: dict[str, Any], backend: str) -> dict[str, Any]:
    import rltscan

    flags = {"terminated": x["terminated"], "truncated": x["truncated"]}
    # truncations inside the window bootstrap 0 (no NaN reaches the outputs to compare)
    kw = {"backend": backend, "validate": False, "gamma": 0.99, **flags}
    kw["missing_bootstrap"] = "zero"
    if kind == "gae":
        return dict(rltscan.gae(x["rewards"], x["values"], lam=0.95, last_value=0.0, **kw))
    if kind == "returns":
        return dict(rltscan.discounted_returns(x["rewards"], **kw))
    lp = {"logp_target": x["logp_target"], "logp_behavior": x["logp_behavior"]}
    return dict(rltscan.vtrace(x["rewards"], x["values"], last_value=0.0, **lp, **kw))


def kernel_rows(steps_list: list[int], threads: list[int], deadline: float) -> list[dict]:
    import torch

    rows: list[dict] = []
    middle = steps_list[len(steps_list) // 2]
    shapes = [(n, 1) for n in steps_list] + [(middle, 64)]
    for steps, nrows in shapes:
        if time.monotonic() > deadline:
            rows.append({"part": "kernel", "steps": steps, "status": "skipped (budget)"})
            continue
        x = _inputs(steps, nrows)
        for kind in ("gae", "returns", "vtrace"):
            checked = False
            for n in threads:
                torch.set_num_threads(n)
                for backend in ("cpu", "torch"):
                    out = _call(kind, x, backend)  # warm-up (JIT load, allocator)
                    if backend == "torch" and not checked:
                        ref = out
                        got = _call(kind, x, "cpu")
                        err = max(
                            float((got[k] - ref[k]).abs().max() / max(1.0, ref[k].abs().max()))
                            for k in ref
                        )
                        checked = True
                    del out
                    best = float("inf")
                    for _ in range(REPS.get(steps, 1)):
                        t0 = time.perf_counter()
                        _call(kind, x, backend)
                        best = min(best, time.perf_counter() - t0)
                    rows.append(
                        {
                            "part": "kernel",
                            "kind": kind,
                            "steps": steps,
                            "rows": nrows,
                            "threads": n,
                            "backend": backend,
                            "seconds": best,
                            "ns_per_step": best / steps * 1e9,
                        }
                    )
            for r in rows:
                if r.get("kind") == kind and r["steps"] == steps and r.get("rows") == nrows:
                    r["max_rel_diff_vs_torch"] = err
        del x
    return rows


def _cmd_rltscan(path: Path, backend: str, out: Path | None) -> list[str]:
    cmd = [sys.executable, "-m", "rltscan", "gae", str(path), "--device", "cpu", "--json", "-q"]
    cmd += ["--gamma", "0.99", "--lam", "0.95", "--backend", backend]
    return cmd + (["-o", str(out)] if out is not None else [])


def _cmd_floor(kind: str, fmt: str, path: Path, out: Path) -> list[str]:
    cmd = [sys.executable, str(REPO / "bench" / "e2e.py"), "--floor-case", kind]
    cmd += ["--format", fmt, "--estimator", "gae", "--input", str(path), "--output", str(out)]
    return [*cmd, "--chunk", str(WINDOW)]


def stream_rows(
    lengths: list[int],
    workdir: Path,
    deadline: float,
    repeat: int = 1,
    before: Path | None = None,
    torch_case: bool = True,
) -> list[dict]:
    rows: list[dict] = []
    runs = Path(tempfile.mkdtemp(prefix="runs-", dir=workdir))
    longest = max(lengths)
    trees = [REPO] if before is None else [REPO, before]
    # untimed: the CLI's first cpu run of each format compiles (or loads) its kernels
    for fmt, path in e2e.generate(workdir, 100_000, 0, 1 << 20).items():
        target = runs / ("warm" + e2e.SUFFIX[fmt])
        for tree in trees:
            shutil.copyfile(path, target)
            e2e.spawn(_cmd_rltscan(target, "cpu", None), runs, 120.0, tree)
            new = runs / ("new" + e2e.SUFFIX[fmt])
            e2e.spawn(_cmd_rltscan(path, "cpu", new), runs, 120.0, tree)
            new.unlink(missing_ok=True)
    for steps in sorted(lengths, reverse=True):
        t0 = time.perf_counter()
        paths = e2e.generate(workdir, steps, 0, 1 << 20)
        gen_s = time.perf_counter() - t0
        # the floors and the torch backend at the longest length; the shorter ones are
        # for the peak RSS of the same runs
        # before-*: the same CLI cases from the --before-tree checkout, in the same rounds
        cases = ["cpu-inplace", "cpu-new"]
        if before is not None:
            cases += ["before-cpu-inplace", "before-cpu-new"]
        if steps == longest:
            cases += ["io-floor-inplace", "io-floor"] + (["torch-inplace"] if torch_case else [])
        # rounds interleave the cases (a shared machine's load hits them alike); the
        # torch backend, a reference only, runs in the first round
        rounds = [
            (k, case) for k in range(repeat) for case in cases if k == 0 or case != "torch-inplace"
        ]
        for fmt, path in paths.items():
            e2e.warm(path)
            for k, case in rounds:
                row = {"part": "stream", "format": fmt, "steps": steps, "case": case, "round": k}
                row["generate_s"] = round(gen_s, 2)
                if time.monotonic() > deadline:
                    rows.append({**row, "status": "skipped (budget)"})
                    continue
                d = Path(tempfile.mkdtemp(prefix=case + "-", dir=runs))
                suffix = e2e.SUFFIX[fmt]
                inplace = case.endswith("inplace")
                target = d / (("data" if inplace else "out") + suffix)
                if inplace:
                    shutil.copyfile(path, target)
                if case.startswith("io-floor"):
                    cmd = _cmd_floor(case, fmt, path, target)
                else:
                    backend = case.removeprefix("before-").split("-")[0]
                    cmd = _cmd_rltscan(
                        target if inplace else path, backend, None if inplace else target
                    )
                tree = before if case.startswith("before-") and before is not None else REPO
                res = e2e.spawn(cmd, d, max(deadline - time.monotonic(), 5.0), tree)
                row.update(
                    rc=res["rc"],
                    wall_s=res["wall_s"],
                    peak_rss_mib=res["peak_rss_bytes"] / 2**20,
                    error=e2e.last_line(res["stderr"]) if res["rc"] else "",
                )
                rows.append(row)
                shutil.rmtree(d, ignore_errors=True)
    shutil.rmtree(runs, ignore_errors=True)
    return best_of(rows)


def best_of(rows: list[dict]) -> list[dict]:
    """One row per (format, steps, case): the round with the least wall clock (its peak
    RSS beside it; every round's wall in ``walls_s``), and its ratio to the best round of
    its floor."""
    best: dict[tuple, dict] = {}
    for r in rows:
        key = (r["format"], r["steps"], r["case"])
        if r.get("rc") != 0:
            best.setdefault(key, r)
            continue
        walls = best[key].get("walls_s", []) if key in best else []
        if key not in best or best[key].get("rc") != 0 or r["wall_s"] < best[key]["wall_s"]:
            best[key] = {k: v for k, v in r.items() if k != "round"}
        best[key]["walls_s"] = [*walls, r["wall_s"]]
    out = list(best.values())
    for r in out:
        if r.get("rc") != 0 or r["case"].startswith("io-floor"):
            continue
        inplace = r["case"].endswith("inplace")
        floor = _wall(best, r, "io-floor-inplace" if inplace else "io-floor")
        if floor is not None:
            r["ratio_to_floor"] = r["wall_s"] / floor
        # -o carries every key of the input into the new file (README: -o to the input's
        # own format keeps everything), so its least work is the in-place floor's: the
        # file copied and the outputs written into it; ``io-floor`` (the needed columns
        # read, the outputs written alone) is below what -o can do
        every_key = None if inplace else _wall(best, r, "io-floor-inplace")
        if every_key is not None:
            r["ratio_to_carry_floor"] = r["wall_s"] / every_key
    return out


def _wall(best: dict[tuple, dict], row: dict, floor_kind: str) -> float | None:
    """The best wall clock of ``row``'s floor of that kind, if it ran."""
    floor = best.get((row["format"], row["steps"], floor_kind))
    return floor["wall_s"] if floor is not None and floor.get("rc") == 0 else None


def machine() -> dict[str, Any]:
    import numba
    import torch

    info: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": e2e._cpu_model(),
        "affinity": sorted(os.sched_getaffinity(0)),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "torch": torch.__version__,
        "torch_threads_default": torch.get_num_threads(),
    }
    try:
        info["git"] = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO
        ).stdout.strip()
    except OSError:
        info["git"] = None
    return info


def table(result: dict[str, Any]) -> str:
    lines = ["## Kernel: ns per step (best of calls)", ""]
    lines += [
        "| kind | steps | rows | threads | cpu (fused) | torch | speed-up |",
        "|---|---|---|---|---|---|---|",
    ]
    ks = [r for r in result["rows"] if r["part"] == "kernel" and "backend" in r]
    keys = sorted({(r["kind"], r["steps"], r["rows"], r["threads"]) for r in ks})
    for kind, steps, nrows, n in keys:
        got = {
            r["backend"]: r["ns_per_step"]
            for r in ks
            if (r["kind"], r["steps"], r["rows"], r["threads"]) == (kind, steps, nrows, n)
        }
        c, t = got.get("cpu"), got.get("torch")
        sp = f"{t / c:.2f}×" if c and t else ""
        lines.append(f"| {kind} | {steps:.0e} | {nrows} | {n} | {c:.2f} | {t:.2f} | {sp} |")
    lines += ["", "## Stream: CLI wall clock (fork to reap) and peak RSS", ""]
    lines += ["Peak RSS against the shortest file's run of the same case: "]
    st = [r for r in result["rows"] if r["part"] == "stream" and "peak_rss_mib" in r]
    for r in st:
        base = min(
            (b for b in st if (b["format"], b["case"]) == (r["format"], r["case"])),
            key=lambda b: b["steps"],
        )
        if base is not r:
            grew = r["peak_rss_mib"] / base["peak_rss_mib"] - 1
            lines.append(
                f"- {r['format']} {r['case']}: {base['peak_rss_mib']:.0f} MiB at "
                f"{base['steps']:.0e} → {r['peak_rss_mib']:.0f} MiB at {r['steps']:.0e} "
                f"({grew:+.1%})"
            )
    lines += [""]
    lines += [
        "| format | steps | case | wall s (best) | × floor | × floor carrying every key "
        "| peak RSS MiB | every round s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rows"]:
        if r["part"] != "stream":
            continue
        if "wall_s" not in r:
            lines.append(
                f"| {r['format']} | {r['steps']:.0e} | {r['case']} | {r.get('status')} | | | | |"
            )
            continue
        ratio = f"{r['ratio_to_floor']:.2f}" if "ratio_to_floor" in r else ""
        carry = f"{r['ratio_to_carry_floor']:.2f}" if "ratio_to_carry_floor" in r else ""
        rounds = " ".join(f"{w:.2f}" for w in r.get("walls_s", []))
        lines.append(
            f"| {r['format']} | {r['steps']:.0e} | {r['case']} | {r['wall_s']:.2f} | {ratio} | "
            f"{carry} | {r['peak_rss_mib']:.0f} | {rounds} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--steps", default="1e6,1e7,1e8")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--stream-steps", default="1e7,5e7")
    p.add_argument("--workdir", type=Path, default=None)
    p.add_argument("--budget-s", type=float, default=190.0)
    p.add_argument("--repeat", type=int, default=1, help="rounds of the stream cases (best kept)")
    p.add_argument("--skip-kernel", action="store_true")
    p.add_argument("--skip-stream", action="store_true")
    p.add_argument(
        "--before-tree",
        type=Path,
        default=None,
        help="a checkout whose CLI runs the before-* cases in the same rounds",
    )
    p.add_argument("--skip-torch", action="store_true", help="no torch-backend reference case")
    args = p.parse_args()
    start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cpu-fused-"))
    workdir.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"machine": machine(), "command": " ".join(sys.argv), "rows": []}

    def save() -> None:
        (args.out / "result.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.out / "table.md").write_text(table(result))

    ints = lambda s: [int(float(x)) for x in s.split(",") if x]  # noqa: E731
    if not args.skip_kernel:
        # the kernel part may use up to 40% of the budget; the streams get the rest
        result["rows"] += kernel_rows(
            ints(args.steps), ints(args.threads), start + 0.4 * args.budget_s
        )
        save()
    if not args.skip_stream:
        result["rows"] += stream_rows(
            ints(args.stream_steps),
            workdir,
            start + args.budget_s,
            args.repeat,
            args.before_tree,
            not args.skip_torch,
        )
    result["seconds"] = time.monotonic() - start
    save()
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
