"""Scaling of ``--engine ray`` (issues 6 and 15): 1, 2, 4, ... CPU workers, then GPU workers.

One call does the whole experiment, so that it fits one lease of the GPU machine:

1. **Data.** ``--shards`` Parquet files of ``--shard-steps`` steps each (rewards,
   values, terminals, timeouts, plus ``--extra`` float32 columns nothing reads;
   episodes of about 1000 steps crossing every file edge), written by
   ``--gen-procs`` processes at once.
2. **CPU workers.** For each ``w`` of ``--workers``: GAE with ``--engine ray
   --workers w --device cpu`` on a local Ray cluster of ``max(workers)`` CPUs, over
   ``min(shards, --shards-per-worker * w)`` of the shards (hard links to the first
   files, so every worker count runs the same number of waves of equal tasks: the
   largest worker count reads the whole dataset), written to a new ``-o OUT_DIR``.
   ``--full W,...`` also runs those worker counts over the whole dataset.
3. **GPU workers** (if CUDA and ``--gpu-workers``): the whole dataset with
   ``--device cuda``, ``w`` tasks sharing the GPU (``1/w`` of it each); the output
   files are compared byte for byte with the CPU run's over the same data (the
   ``--full`` run, else the largest CPU run), and where they differ, the output
   columns are compared numerically and the input columns for identity.

``--process-floor W,...`` runs the same per-shard work without Ray first: ``W`` plain
processes, each running the local engine on whole shard files, over
``--shards-per-worker * W`` shards: the node's own scaling for this work (memory
bandwidth, shared cores), against which Ray's efficiency is read.

``--disk-probe W,...`` measures the disk's write
rate with ``W`` writers, each fsyncing its own file against unsynced files made durable
in one batch (the shard path's staging commit).

For every run: wall seconds, steps/s, efficiency against one worker (steps/s over
``w`` times one worker's), the bytes written and their rate over pass 2 + commit, and
where the time goes: per pass (1 = aggregates, 2 = outputs) the wall time, the tasks'
summed seconds and process CPU seconds (so cores used per task, overall and the lowest
and highest task's), the mean number of tasks running at once, the time from
the pass's start to its first task and from its last task to its end (driver and
Ray Data overhead), the driver's carry scan, the commit, and pass 2's read / scan
/ write busy times summed over shards. ``result.json`` (a ``rows`` list) and
``result.md`` are rewritten after every run, so a run cut short still leaves what
it measured.

    python bench/ray_scaling.py --shards 64 --shard-steps 16000000 --workers 1,2,4,8,16 \\
        --gpu-workers 16 --out $OUT
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import logging
import multiprocessing as mp
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
from bench import harness  # noqa: E402
from rltscan.engines.ray import engine as ray_engine  # noqa: E402

PARAMS = {"params": {"gamma": 0.99, "lam": 0.95}, "missing_bootstrap": "zero"}
OUTPUTS = ("advantages", "value_targets")


# --------------------------------------------------------------------------- data


def _write_shard(args: tuple[str, int, int, int, int]) -> int:
    path, i, n, extra, seed = args
    rng = np.random.default_rng([seed, i])
    u = rng.random(n, dtype=np.float32)
    cols = {
        "rewards": rng.standard_normal(n, dtype=np.float32),
        "values": rng.standard_normal(n, dtype=np.float32),
        "terminals": u < 5e-4,
        "timeouts": (u >= 5e-4) & (u < 1e-3),
    }
    for j in range(extra):
        cols[f"obs_{j}"] = rng.standard_normal(n, dtype=np.float32)
    pq.write_table(pa.table(cols), path, row_group_size=1 << 20)
    return os.path.getsize(path)


def generate(directory: Path, shards: int, shard_steps: int, extra: int, procs: int) -> int:
    """``shards`` files of ``shard_steps`` steps, ``procs`` at a time; bytes on disk."""
    directory.mkdir(parents=True)
    jobs = [
        (str(directory / f"part-{i:05d}.parquet"), i, shard_steps, extra, 0) for i in range(shards)
    ]
    with mp.get_context("spawn").Pool(procs) as pool:
        return sum(pool.imap_unordered(_write_shard, jobs))


def subset(data: Path, dest: Path, count: int, last: bool = False) -> Path:
    """A directory of hard links to the first (or last) ``count`` shards (no bytes copied)."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    files = sorted(data.iterdir())
    for p in files[-count:] if last else files[:count]:
        os.link(p, dest / p.name)
    return dest


# --------------------------------------------------------------------------- runs

PASSES: list[dict] = []  # (start, end, rows) of every RayEngine.map call, in order
_map = ray_engine.RayEngine.map


def _logged_map(self, job, items, on_done=None):
    t0 = time.time()
    rows = _map(self, job, items, on_done)
    PASSES.append({"t0": t0, "t1": time.time(), "rows": rows})
    return rows


ray_engine.RayEngine.map = _logged_map


def _pass_summary(p: dict) -> dict:
    rows = p["rows"]
    if not rows:
        return {}
    starts = [r["t0"] for r in rows]
    ends = [r["t1"] for r in rows]
    task_s = [r["t1"] - r["t0"] for r in rows]
    cores = [r["cpu"] / max(t, 1e-9) for r, t in zip(rows, task_s, strict=True)]
    inner = [json.loads(r["result"]).get("seconds", 0.0) for r in rows]
    steps = sum(json.loads(r["result"]).get("steps", 0) for r in rows)
    span = max(ends) - min(starts)
    # the most tasks running at one moment
    events = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends])
    running = peak = 0
    for _, d in events:
        running += d
        peak = max(peak, running)
    return {
        "timeline": [
            [
                int(r["k"]),
                r["pid"],
                round(r["t0"] - p["t0"], 3),
                round(r["t1"] - p["t0"], 3),
                round(r["cpu"], 3),
            ]
            for r in sorted(rows, key=lambda r: r["t0"])
        ],
        "tasks": len(rows),
        "steps": steps,
        "wall_s": p["t1"] - p["t0"],
        "to_first_task_s": min(starts) - p["t0"],
        "after_last_task_s": p["t1"] - max(ends),
        "span_s": span,
        "task_s_sum": sum(task_s),
        "task_s_mean": sum(task_s) / len(rows),
        "task_s_max": max(task_s),
        "task_inner_s_sum": sum(inner),
        "task_cpu_s_sum": sum(r["cpu"] for r in rows),
        "cores_per_task": sum(r["cpu"] for r in rows) / max(sum(task_s), 1e-9),
        # each task's own core use (process CPU s over its wall s): the spread
        "cores_per_task_min": min(cores),
        "cores_per_task_max": max(cores),
        "mean_running": sum(task_s) / max(span, 1e-9),
        "peak_running": peak,
        "processes": len({r["pid"] for r in rows}),
        "steps_per_task_s": steps / max(sum(task_s), 1e-9),
    }


def timed(data: Path, out: Path, **kw) -> dict:
    """One run of GAE over ``data`` to a new ``out`` (removed first, untimed)."""
    shutil.rmtree(out, ignore_errors=True)
    before = len(PASSES)
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    report = rltscan.run("gae", str(data), output=str(out), **PARAMS, **kw)
    wall = time.perf_counter() - t0
    stages = {s.name: s.seconds for s in report.stages if not s.skipped}
    passes = [_pass_summary(p) for p in PASSES[before:]]
    for p in PASSES[before:]:
        p["rows"] = []  # keep memory flat
    written = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    # what pass 2 wrote (staged without fsync) and the commit made durable (one batch)
    writing = stages.get("pass 2 (outputs)", 0.0) + stages.get("commit", 0.0)
    return {
        "bytes_written": written,
        "write_gb_per_s": written / max(writing, 1e-9) / 1e9,
        "seconds": wall,
        "steps": report.steps,
        "steps_per_s": report.steps / wall,
        "report_device": report.device,
        "backend": report.backend,
        "load_before": load,
        "load_after": os.getloadavg()[0],
        "stages": stages,
        "pass1": passes[0] if len(passes) == 2 else None,
        "pass2": passes[-1] if passes else None,
    }


# --------------------------------------------------------------------------- machine probes


def _write(args: tuple[str, int, bool]) -> float:
    """Seconds to write ``mb`` MiB to ``path`` and close it; with ``fsync`` the file is
    durable before the clock stops (``fsync_each``), else left staged for one batch."""
    path, mb, fsync = args
    block = np.random.default_rng(0).bytes(1 << 20)
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(mb):
            f.write(block)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    return time.perf_counter() - t0


def disk_probe(directory: Path, writers: list[int], mb: int) -> list[dict]:
    """Aggregate write bandwidth, ``w`` processes writing ``mb`` MiB each, two ways:
    ``fsync_each`` (every writer fsyncs its file: the shard tasks before issue 25) and
    ``staged_batch`` (the writers do not fsync; then one batch,
    :func:`rltscan.io.atomic.fsync_all`, makes every file durable: what the shard tasks
    and the staging commit do now). Each ends with every byte on disk. The processes
    start before the clock (a pool warmed with a no-op), so both time only the writes."""
    from rltscan.io.atomic import fsync_all

    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for w in writers:
        for mode, fsync in (("fsync_each", True), ("staged_batch", False)):
            paths = [(str(directory / f"probe-{i}"), mb, fsync) for i in range(w)]
            with mp.get_context("spawn").Pool(w) as pool:
                pool.map(time.sleep, [0.0] * w)  # start the processes untimed
                t0 = time.perf_counter()
                pool.map(_write, paths)
                if not fsync:
                    fsync_all([Path(p) for p, _, _ in paths])
                wall = time.perf_counter() - t0
            out.append(
                {
                    "mode": mode,
                    "writers": w,
                    "mib_each": mb,
                    "seconds": wall,
                    "gb_per_s": w * mb * 2**20 / wall / 1e9,
                }
            )
            for p, _, _ in paths:
                os.unlink(p)
    for row in out:  # against one writer of the same mode
        one = next((r for r in out if r["mode"] == row["mode"] and r["writers"] == 1), None)
        if one is not None:
            row["x_one_writer"] = row["gb_per_s"] / one["gb_per_s"]
    return out


def _warm_task(seconds: float) -> int:
    import rltscan.engines.shards.task  # noqa: F401  (torch, pyarrow, rltscan: what a shard task imports)

    time.sleep(seconds)
    return os.getpid()


def warm_workers(n: int, gpu: float = 0.0) -> int:
    """Start ``n`` worker processes at once and import what a shard task needs in each,
    so that process start-up stays out of the timed runs; returns the processes seen."""
    import ray

    options: dict = {"num_cpus": 1}
    if gpu:
        options.update(num_gpus=gpu, max_calls=0)
    fn = ray.remote(**options)(_warm_task)
    return len(set(ray.get([fn.remote(3.0) for _ in range(n)])))


def _floor_init(warm: str, out: str) -> None:
    """A floor process: imports and one small run before the clock starts."""
    rltscan.run("gae", warm, output=out, engine="local", device="cpu", **PARAMS)


def _floor_one(job: tuple[str, str]) -> int:
    src, dst = job
    return rltscan.run("gae", src, output=dst, engine="local", device="cpu", **PARAMS).steps


def process_floor(
    data: Path, scratch: Path, workers: list[int], per_worker: int, warm: Path
) -> list[dict]:
    """The node's own scaling for the same work without Ray: ``w`` plain processes
    (spawned, imports and a small run done before the clock), each running the local
    engine on whole shard files (as ``xargs -P w rltscan gae`` would: a durable file
    per shard, no carries between files), over ``per_worker × w`` shards, one file at a
    time per process. Efficiency against one process."""
    files = sorted(data.glob("*.parquet"))
    warm_file = sorted(warm.glob("*.parquet"))[0]
    rows: list[dict] = []
    for w in workers:
        count = min(len(files), per_worker * w)
        out = scratch / "floor_out"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        jobs = [(str(f), str(out / f.name)) for f in files[:count]]
        init = (str(warm_file), str(scratch / f"floor_warm_{w}.parquet"))
        with mp.get_context("spawn").Pool(w, initializer=_floor_init, initargs=init) as pool:
            pids = set(pool.map(_warm_task, [1.0] * w, chunksize=1))  # every process up
            t0 = time.perf_counter()
            steps = sum(pool.map(_floor_one, jobs, chunksize=1))
            wall = time.perf_counter() - t0
        rows.append(
            {"workers": w, "processes": len(pids), "shards": count, "steps": steps,
             "seconds": wall, "steps_per_s": steps / wall}
        )  # fmt: skip
        rows[-1]["efficiency"] = rows[-1]["steps_per_s"] / (w * rows[0]["steps_per_s"])
        print("floor", json.dumps(rows[-1]), flush=True)
    shutil.rmtree(scratch / "floor_out", ignore_errors=True)
    return rows


# --------------------------------------------------------------------------- identity


def _digest(path: str) -> str:
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    return h.hexdigest()


def _column_diff(args: tuple[str, str]) -> dict:
    a, b = pq.read_table(args[0]), pq.read_table(args[1])
    out: dict = {"inputs_equal": True, "max_abs": 0.0, "max_rel": 0.0, "differing": 0}
    for name in a.column_names:
        x, y = a.column(name).to_numpy(), b.column(name).to_numpy()
        if name not in OUTPUTS:
            out["inputs_equal"] &= bool(np.array_equal(x, y))
            continue
        d = np.abs(x.astype(np.float64) - y.astype(np.float64))
        out["differing"] += int(np.count_nonzero(d))
        out["max_abs"] = max(out["max_abs"], float(d.max()))
        scale = np.maximum(1.0, np.abs(x.astype(np.float64)))
        out["max_rel"] = max(out["max_rel"], float((d / scale).max()))
    out["metadata_equal"] = a.schema.metadata == b.schema.metadata
    return out


def compare(ref: Path, other: Path, procs: int) -> dict:
    """``ref``'s files against the files of the same names in ``other``."""
    names = sorted(p.name for p in ref.iterdir())
    if not all((other / n).exists() for n in names):
        return {"same_files": False}
    t0 = time.perf_counter()
    with mp.get_context("spawn").Pool(procs) as pool:
        da = pool.map(_digest, [str(ref / n) for n in names])
        db = pool.map(_digest, [str(other / n) for n in names])
        same = [n for n, x, y in zip(names, da, db, strict=True) if x == y]
        result: dict = {
            "files": len(names),
            "byte_identical_files": len(same),
            "byte_identical": len(same) == len(names),
        }
        differ = [n for n in names if n not in same]
        if differ:
            diffs = pool.map(_column_diff, [(str(ref / n), str(other / n)) for n in differ])
            result.update(
                {
                    "differing_files": len(differ),
                    "input_columns_equal": all(d["inputs_equal"] for d in diffs),
                    "metadata_equal": all(d["metadata_equal"] for d in diffs),
                    "output_values_differing": sum(d["differing"] for d in diffs),
                    "output_max_abs_diff": max(d["max_abs"] for d in diffs),
                    "output_max_diff_over_max1_abs": max(d["max_rel"] for d in diffs),
                }
            )
    result["seconds"] = time.perf_counter() - t0
    return result


# --------------------------------------------------------------------------- record


def machine() -> dict:
    import ray
    import torch

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
    code = harness.code_record(ROOT)  # (a copy without git: no commit, the tree's hash)
    gpu = driver = None
    if torch.cuda.is_available():
        gpu = torch.cuda.get_device_name(0)
        q = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
        )
        driver = q.stdout.strip() or None
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": None if mem is None else round(mem / 1e9, 1),
        "gpu": gpu,
        "driver": driver,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "ray": ray.__version__,
        "pyarrow": pa.__version__,
        "numpy": np.__version__,
        "rltscan": rltscan.__version__,
        "commit": os.environ.get("RLTSCAN_COMMIT") or (code["commit"] or "")[:7] or None,
        "tree": code["tree"],
    }


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def markdown(result: dict) -> str:
    m, cfg = result["machine"], result["config"]
    lines = [
        f"# `--engine ray` scaling on {m['cores']} cores ({m['cpu']}), GPU {m['gpu']}",
        "",
        f"{m['date']}; python {m['python']}, torch {m['torch']}, triton {m['triton']}, "
        f"ray {m['ray']}, pyarrow {m['pyarrow']}, numpy {m['numpy']}, rltscan {m['rltscan']} "
        f"({m['commit']}); {m['memory_gb']} GB RAM; driver {m['driver']}.",
        "",
        f"GAE over a Parquet dataset of {cfg['shards']} shards x {cfg['shard_steps']:,} steps "
        f"= {cfg['shards'] * cfg['shard_steps']:,} steps ({cfg['bytes'] / 1e9:.1f} GB; "
        f"rewards, values, terminals, timeouts + {cfg['extra']} unread float32 columns; "
        f"generated in {cfg['generate_s']:.0f} s by {cfg['gen_procs']} processes), warm page "
        "cache, written to a new `-o OUT_DIR`. Each CPU row runs over "
        f"min({cfg['shards']}, {cfg['shards_per_worker']} x workers) shards (the same "
        "number of waves of equal tasks per worker); `full` rows run over all of them. "
        "Efficiency = steps/s / (workers x steps/s of 1 worker). Pass columns: wall s / "
        "tasks' mean s / cores per task (process CPU s over task s; in brackets the "
        "lowest and highest task's) / mean tasks running. Written: the output "
        "directory's GB over pass 2 + commit s (staged without fsync, one batched fsync "
        "in the commit).",
        "",
        "| run | scheduler | device | workers | shards | steps | seconds | steps/s | efficiency | "
        "pass 1 | driver carries s | pass 2 | commit s | written GB, GB/s "
        "| pass 2 read / scan / write s (sum) | to first task / after last task s (p1, p2) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def pas(p: dict | None) -> str:
        if not p:
            return "-"
        spread = ""
        if "cores_per_task_min" in p:
            spread = f" [{p['cores_per_task_min']:.2f}-{p['cores_per_task_max']:.2f}]"
        return (
            f"{p['wall_s']:.1f} / {p['task_s_mean']:.2f} / {p['cores_per_task']:.2f}{spread} / "
            f"{p['mean_running']:.1f}"
        )

    def lat(r: dict) -> str:
        out = []
        for p in (r.get("pass1"), r.get("pass2")):
            out.append("-" if not p else f"{p['to_first_task_s']:.2f}/{p['after_last_task_s']:.2f}")
        return ", ".join(out)

    for r in result["rows"]:
        s = r["stages"]
        lines.append(
            f"| {r['run']} | {r['scheduler']} | {r['device']} | {r['workers']} | "
            f"{r['shards']} | {r['steps']:,} | "
            f"{r['seconds']:.1f} | {r['steps_per_s'] / 1e6:.1f}M | {_f(r.get('efficiency'))} | "
            f"{pas(r.get('pass1'))} | {s.get('carries', 0):.4f} | {pas(r.get('pass2'))} | "
            f"{s.get('commit', 0):.3f} | "
            f"{r.get('bytes_written', 0) / 1e9:.2f}, {_f(r.get('write_gb_per_s'))} | "
            f"{s.get('read (pass 2, sum over shards)', 0):.1f} / "
            f"{s.get('scan (pass 2, sum over shards)', 0):.1f} / "
            f"{s.get('write (pass 2, sum over shards)', 0):.1f} | {lat(r)} |"
        )
    if result.get("identity"):
        lines += ["", "GPU vs CPU outputs: `" + json.dumps(result["identity"]) + "`"]
    if result.get("identity_local_gpu"):
        lines += [
            "",
            "GPU Ray tasks vs the local engine on the same GPU (last shards): `"
            + json.dumps(result["identity_local_gpu"])
            + "`",
        ]
    if result.get("disk"):
        lines += [
            "",
            "Disk, every byte on disk at the end (`bench/ray_scaling.py` disk_probe): "
            "writers, MiB each, GB/s and x one writer, each writer fsyncing its own file "
            "(`fsync_each`, the shard tasks before) and unsynced files made durable in one "
            "batch (`staged_batch`, the shard path now):",
            "",
            "| mode | writers | MiB each | seconds | GB/s | x one writer |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {d.get('mode', 'fsync_each')} | {d['writers']} | {d['mib_each']} | "
            f"{d['seconds']:.2f} | {d['gb_per_s']:.3f} | {_f(d.get('x_one_writer'))} |"
            for d in result["disk"]
        ]
    if result.get("floor"):
        lines += [
            "",
            "Without Ray (`process_floor`): `w` plain processes, each running the local "
            "engine on whole shard files (a durable file each, no carries), over "
            f"{cfg['shards_per_worker']} × w shards; efficiency against one process:",
            "",
            "| processes | shards | steps | seconds | steps/s | efficiency |",
            "|---|---|---|---|---|---|",
        ]
        lines += [
            f"| {f['workers']} | {f['shards']} | {f['steps']:,} | {f['seconds']:.1f} | "
            f"{f['steps_per_s'] / 1e6:.1f}M | {f['efficiency']:.2f} |"
            for f in result["floor"]
        ]
    for wu in result.get("warm_up", []):
        lines += [
            "",
            f"Warm-up (untimed): {wu['workers']} {wu['device']} worker processes "
            f"({wu['processes']} seen) in {wu['seconds']:.1f} s.",
        ]
    if result.get("per_task"):
        t = result["per_task"]
        lines += [
            "",
            f"Per-task rates at 1 worker (steps over task seconds): pass 1 "
            f"{t['pass1_steps_per_s'] / 1e6:.1f}M steps/s, pass 2 "
            f"{t['pass2_steps_per_s'] / 1e6:.1f}M steps/s; at {t['workers_max']} workers: "
            f"pass 1 {t['pass1_steps_per_s_max'] / 1e6:.1f}M, pass 2 "
            f"{t['pass2_steps_per_s_max'] / 1e6:.1f}M.",
        ]
    for note in result.get("notes", []):
        lines += ["", note]
    lines.append("")
    return "\n".join(lines)


def save(result: dict, dest: Path | None) -> None:
    one = next((r for r in result["rows"] if r["run"] == "cpu" and r["workers"] == 1), None)
    for r in result["rows"]:
        base = next(
            (x for x in result["rows"] if x["workers"] == 1 and x["device"] == "cpu"),
            one,
        )
        if base is not None:
            r["efficiency"] = r["steps_per_s"] / (r["workers"] * base["steps_per_s"])
    cpu = [r for r in result["rows"] if r["run"] == "cpu" and r.get("pass2")]
    if one is not None and one.get("pass1") and cpu:
        top = max(cpu, key=lambda r: r["workers"])
        result["per_task"] = {
            "pass1_steps_per_s": one["pass1"]["steps_per_task_s"],
            "pass2_steps_per_s": one["pass2"]["steps_per_task_s"],
            "workers_max": top["workers"],
            "pass1_steps_per_s_max": top["pass1"]["steps_per_task_s"],
            "pass2_steps_per_s_max": top["pass2"]["steps_per_task_s"],
        }
    if dest is not None:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "result.json").write_text(json.dumps(result, indent=2) + "\n")
        (dest / "result.md").write_text(markdown(result))


# --------------------------------------------------------------------------- main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--shard-steps", type=int, default=1_000_000)
    ap.add_argument("--extra", type=int, default=0, help="unread float32 columns per row")
    ap.add_argument("--workers", default="1,2", help="comma-separated, e.g. 1,2,4,8,16")
    ap.add_argument("--shards-per-worker", type=int, default=4)
    ap.add_argument("--full", default="", help="worker counts to run over the whole dataset too")
    ap.add_argument("--gpu-workers", default="", help="e.g. 16,8: tasks sharing the GPU")
    ap.add_argument("--disk-probe", default="", help="writer counts, e.g. 1,8,16")
    ap.add_argument(
        "--process-floor", default="", help="the same work in plain processes: counts, e.g. 1,8"
    )
    ap.add_argument(
        "--local-gpu-shards",
        type=int,
        default=0,
        help="after a GPU run: the local engine on the GPU over this many last shards, compared",
    )
    ap.add_argument("--gen-procs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--deadline-s", type=float, default=1e9, help="start no run after this")
    ap.add_argument("--scratch", default=None, help="where the data goes (default: a temp dir)")
    ap.add_argument("--out", default=None, help="directory for result.json / result.md")
    args = ap.parse_args()
    t_start = time.perf_counter()
    workers = [int(w) for w in args.workers.split(",") if w]
    full = [int(w) for w in args.full.split(",") if w]
    gpu_workers = [int(w) for w in args.gpu_workers.split(",") if w]
    dest = Path(args.out) if args.out else None

    import tempfile

    import ray
    import torch

    scratch = Path(args.scratch or tempfile.mkdtemp(prefix="rltscan-ray-scaling-"))
    data = scratch / "data"
    shutil.rmtree(data, ignore_errors=True)
    t0 = time.perf_counter()
    size = generate(data, args.shards, args.shard_steps, args.extra, args.gen_procs)
    gen_s = time.perf_counter() - t0
    total = args.shards * args.shard_steps
    print(f"generated {total:,} steps, {size / 1e9:.2f} GB in {gen_s:.1f} s", flush=True)
    result: dict = {
        "machine": machine(),
        "config": {
            "estimator": "gae",
            "shards": args.shards,
            "shard_steps": args.shard_steps,
            "steps": total,
            "extra": args.extra,
            "bytes": size,
            "generate_s": gen_s,
            "gen_procs": args.gen_procs,
            "shards_per_worker": args.shards_per_worker,
            "ray_cpus": max(workers + gpu_workers + full),
            "scheduler": "tasks",
        },
        "rows": [],
        "notes": [],
    }
    cuda = torch.cuda.is_available() and bool(gpu_workers)
    init = dict(include_dashboard=False, logging_level=logging.ERROR)
    ray.init(num_cpus=result["config"]["ray_cpus"], num_gpus=1 if cuda else 0, **init)
    print("ray resources", ray.cluster_resources(), flush=True)

    def late() -> bool:
        if time.perf_counter() - t_start > args.deadline_s:
            result["notes"].append("stopped early: deadline reached before the next run")
            return True
        return False

    if args.disk_probe:
        probe = disk_probe(scratch / "probe", [int(w) for w in args.disk_probe.split(",")], 128)
        result["disk"] = probe
        print("disk", json.dumps(probe), flush=True)
    warm = scratch / "warm"
    shutil.rmtree(warm, ignore_errors=True)
    n_warm = max(workers + gpu_workers + full)
    generate(warm, n_warm, 50_000, 0, args.gen_procs)

    floor = [int(w) for w in args.process_floor.split(",") if w]
    if floor:
        result["floor"] = process_floor(data, scratch, floor, args.shards_per_worker, warm)
        save(result, dest)

    def warm_up(device: str, w: int) -> None:
        """Start every worker process (imports; CUDA and Triton for the GPU) untimed."""
        t0 = time.perf_counter()
        share = ray_engine.gpu_share(1.0, w) if device == "cuda" else 0.0
        procs = warm_workers(w, share)
        timed(warm, scratch / "warm_out", engine="ray", workers=w, device=device)
        result.setdefault("warm_up", []).append(
            {
                "device": device,
                "workers": w,
                "processes": procs,
                "seconds": time.perf_counter() - t0,
            }
        )
        print("warm", device, w, procs, f"{time.perf_counter() - t0:.1f} s", flush=True)

    try:
        warm_up("cpu", max(workers + full))
        out = scratch / "out"
        ref = None  # the CPU run over the whole dataset, for the GPU comparison
        plan = [("cpu", w, min(args.shards, args.shards_per_worker * w)) for w in workers]
        plan += [("cpu full", w, args.shards) for w in full]
        for run, w, count in plan:
            if late():
                break
            src = data if count == args.shards else subset(data, scratch / f"sub{count}", count)
            r = timed(src, out, engine="ray", workers=w, device="cpu")
            row = {
                "run": run,
                "scheduler": "tasks",
                "device": "cpu",
                "workers": w,
                "shards": count,
                **r,
            }
            result["rows"].append(row)
            print(run, w, json.dumps({k: v for k, v in r.items() if k != "stages"}), flush=True)
            if count == args.shards:
                shutil.rmtree(scratch / "out_cpu", ignore_errors=True)
                out.rename(scratch / "out_cpu")
                ref = scratch / "out_cpu"
            save(result, dest)
        for w in gpu_workers if cuda else []:
            if late():
                break
            warm_up("cuda", w)
            r = timed(data, out, engine="ray", workers=w, device="cuda")
            share = ray_engine.gpu_share(1.0, w)
            row = {
                "run": "gpu",
                "scheduler": "tasks",
                "device": f"cuda ({share:g} GPU per task)",
                "gpu_per_task": share,
                "workers": w,
                "shards": args.shards,
                **r,
            }
            if ref is not None:
                row["identity_vs_cpu"] = compare(ref, out, args.gen_procs)
                result["identity"] = row["identity_vs_cpu"]
            if args.local_gpu_shards:
                # the local engine on the same GPU over the last shards (GAE runs
                # backwards, so their outputs do not depend on the earlier shards)
                n = args.local_gpu_shards
                tail = subset(data, scratch / f"last{n}", n, last=True)
                loc = scratch / "out_local_gpu"
                t = timed(tail, loc, engine="local", device="cuda")
                row["local_gpu"] = {k: t[k] for k in ("seconds", "steps", "steps_per_s")}
                row["identity_vs_local_gpu"] = compare(loc, out, args.gen_procs)
                result["identity_local_gpu"] = row["identity_vs_local_gpu"]
                shutil.rmtree(loc, ignore_errors=True)
            result["rows"].append(row)
            print("gpu", w, json.dumps({k: v for k, v in row.items() if k != "stages"}), flush=True)
            save(result, dest)
    finally:
        ray.shutdown()
        save(result, dest)
        print(markdown(result), flush=True)
    if args.scratch is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
