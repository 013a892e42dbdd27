"""Scaling of the sharded engines (issue 6, item 5): ``--engine ray`` with 1, 2, 4, ... workers.

Generates a sharded Parquet dataset of ``--steps`` steps in ``--shards`` files
(rewards, values, terminals, timeouts, plus ``--extra`` float32 columns nothing
reads, so the rewrite moves realistic bytes), then times, each in a fresh run
writing to ``-o OUT_DIR`` (the input stays as generated):

* the local engine (the same shard tasks, serially, in this process), and
* the Ray engine on a local Ray cluster of ``max(workers)`` CPUs, capped at
  ``w`` concurrent shard tasks for each ``w`` of ``--workers``.

Reports wall seconds, steps/s and the efficiency against one Ray worker
(``t_1 / (w * t_w)``), the stage times (pass 1, carries, pass 2, commit), and the
per-shard task rates the model in docs/SCALING.md starts from. Writes JSON and a
markdown table, with the machine, date and versions.

    python bench/ray_scaling.py --steps 60000000 --shards 16 --workers 1,2 \\
        --out bench/results/ray-scaling-cpu-2core
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import rltscan  # noqa: E402


def generate(directory: Path, steps: int, shards: int, extra: int, seed: int = 0) -> int:
    """``shards`` Parquet files, episodes of ~1000 steps crossing file edges; bytes on disk."""
    directory.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    edges = np.linspace(0, steps, shards + 1).astype(np.int64)
    for i in range(shards):
        n = int(edges[i + 1] - edges[i])
        u = rng.random(n, dtype=np.float32)
        cols = {
            "rewards": rng.standard_normal(n, dtype=np.float32),
            "values": rng.standard_normal(n, dtype=np.float32),
            "terminals": u < 5e-4,
            "timeouts": (u >= 5e-4) & (u < 1e-3),
        }
        for j in range(extra):
            cols[f"obs_{j}"] = rng.standard_normal(n, dtype=np.float32)
        pq.write_table(pa.table(cols), directory / f"part-{i:05d}.parquet", row_group_size=1 << 20)
    return sum(p.stat().st_size for p in directory.iterdir())


def timed(estimator: str, data: Path, out: Path | None, **kw) -> dict:
    """One run to a new ``out`` (removed first, untimed), or in place with ``out=None``."""
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()[0]  # the machine may be shared: say how busy it was
    t0 = time.perf_counter()
    report = rltscan.run(
        estimator, str(data), output=None if out is None else str(out), device="cpu", **kw
    )
    wall = time.perf_counter() - t0
    stages = {s.name: s.seconds for s in report.stages if not s.skipped}
    return {
        "wall_s": wall,
        "steps": report.steps,
        "steps_per_s": report.steps / wall,
        "load_before": load,
        "load_after": os.getloadavg()[0],
        **stages,
    }


def machine() -> dict:
    import torch

    try:
        import ray

        ray_version = ray.__version__
    except ImportError:
        ray_version = None
    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        mem = None
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": None if mem is None else round(mem / 1e9, 1),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "ray": ray_version,
        "pyarrow": pa.__version__,
        "rltscan": rltscan.__version__,
        "commit": commit,
    }


def markdown(result: dict) -> str:
    m, cfg = result["machine"], result["config"]
    lines = [
        f"# Sharded engines: scaling on {m['cores']} cores ({m['cpu']})",
        "",
        f"{m['date']}; python {m['python']}, torch {m['torch']}, ray {m['ray']}, "
        f"pyarrow {m['pyarrow']}, rltscan {m['rltscan']} ({m['commit']}); "
        f"{m['memory_gb']} GB RAM.",
        "",
        f"`{cfg['estimator']}` over {cfg['steps']:,} steps in {cfg['shards']} Parquet shards "
        f"({cfg['bytes'] / 1e6:,.0f} MB, {cfg['extra']} unread float32 columns besides "
        "rewards, values, terminals, timeouts), CPU only, warm page cache, written to a new "
        "`-o OUT_DIR` (the last row: in place); "
        f"best of {cfg['repeats']} run(s) per row (in place: one run). The load average "
        "(1 min) shows whether other jobs shared the machine.",
        "",
        "| engine | workers | wall s | steps/s | efficiency vs 1 worker | pass 1 s | "
        "pass 2 s | commit s | cleanup s | load avg before/after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["runs"]:
        eff = "-" if r.get("efficiency") is None else f"{r['efficiency']:.2f}"
        lines.append(
            f"| {r['engine']} | {r['workers']} | {r['wall_s']:.2f} | "
            f"{r['steps_per_s'] / 1e6:.2f}M | {eff} | "
            f"{r.get('pass 1 (aggregates)', 0):.2f} | {r.get('pass 2 (outputs)', 0):.2f} | "
            f"{r.get('commit', 0):.3f} | {r.get('cleanup', 0):.3f} | "
            f"{r['load_before']:.1f} / {r['load_after']:.1f} |"
        )
    rates = result["per_shard"]
    lines += [
        "",
        "Per-shard task rates (local engine, one shard at a time, so a task has the "
        f"machine): pass 1 {rates['pass1_steps_per_s'] / 1e6:.2f}M steps/s, pass 2 "
        f"{rates['pass2_steps_per_s'] / 1e6:.2f}M steps/s, "
        f"{rates['seconds_per_shard']:.2f} s per shard of {rates['steps_per_shard']:,} steps.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20_000_000)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--workers", default="1,2", help="comma-separated, e.g. 1,2,4,8,16")
    ap.add_argument("--extra", type=int, default=4, help="unread float32 columns per row")
    ap.add_argument("--estimator", default="gae")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--scratch", default=None, help="where the data goes (default: a temp dir)")
    ap.add_argument("--out", default=None, help="directory for result.json / result.md")
    args = ap.parse_args()
    workers = [int(w) for w in args.workers.split(",")]

    import tempfile

    import ray

    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="rltscan-ray-scaling-"))
    data, out = scratch / "data", scratch / "out"
    shutil.rmtree(data, ignore_errors=True)
    t0 = time.perf_counter()
    size = generate(data, args.steps, args.shards, args.extra)
    print(
        f"generated {args.steps:,} steps, {size / 1e6:,.0f} MB in {time.perf_counter() - t0:.1f} s"
    )
    params = {"params": {"gamma": 0.99, "lam": 0.95}, "missing_bootstrap": "zero"}

    def best(fn) -> dict:
        runs = [fn() for _ in range(args.repeats)]
        return min(runs, key=lambda r: r["wall_s"])

    runs = []
    local = best(lambda: timed(args.estimator, data, out, engine="local", **params))
    runs.append({"engine": "local", "workers": 1, **local})
    print("local", json.dumps(local))
    ray.init(num_cpus=max(workers), include_dashboard=False, logging_level=logging.ERROR)
    try:
        small = scratch / "warm"
        shutil.rmtree(small, ignore_errors=True)
        generate(small, 20_000 * max(workers), max(workers), 0)
        # start and warm every worker process (imports) before timing anything
        timed(args.estimator, small, scratch / "warm_out", engine="ray", **params)
        for w in workers:
            r = best(
                lambda w=w: timed(args.estimator, data, out, engine="ray", workers=w, **params)
            )
            runs.append({"engine": "ray", "workers": w, **r})
            print("ray", w, json.dumps(r))
    finally:
        ray.shutdown()
    # last, as it adds the output columns to the data: in place (one rename per shard)
    inplace = timed(args.estimator, data, None, engine="local", **params)
    runs.append({"engine": "local, in place", "workers": 1, **inplace})
    print("local in place", json.dumps(inplace))
    one = next((r["wall_s"] for r in runs if r["engine"] == "ray" and r["workers"] == 1), None)
    for r in runs:
        if r["engine"] == "ray" and one is not None:
            r["efficiency"] = one / (r["workers"] * r["wall_s"])
    per_shard = args.steps / args.shards
    result = {
        "machine": machine(),
        "config": {
            "steps": args.steps,
            "shards": args.shards,
            "extra": args.extra,
            "estimator": args.estimator,
            "bytes": size,
            "repeats": args.repeats,
        },
        "runs": runs,
        "per_shard": {
            "steps_per_shard": int(per_shard),
            # the local engine runs K-1 pass-1 tasks and K pass-2 tasks one after another
            "pass1_steps_per_s": per_shard * (args.shards - 1) / local["pass 1 (aggregates)"],
            "pass2_steps_per_s": per_shard * args.shards / local["pass 2 (outputs)"],
            "seconds_per_shard": (local["pass 1 (aggregates)"] + local["pass 2 (outputs)"])
            / args.shards,
        },
    }
    text = markdown(result)
    print(text)
    if args.out:
        dest = Path(args.out)
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        (dest / "result.md").write_text(text)
    if args.scratch is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
