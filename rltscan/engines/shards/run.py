"""The driver of a sharded run: plan once, run the shard tasks of
:mod:`rltscan.engines.shards.task` on an engine (``local`` here, ``ray`` through
:mod:`rltscan.engines.ray.engine`), join their carries, commit the staged shards and
make the one report. The protocol is in :mod:`rltscan.engines.shards.task`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rltscan import stats
from rltscan.devices import resolve_device
from rltscan.engines.shards.task import Job, check_existing, estimate, run_task
from rltscan.engines.stream import windows
from rltscan.errors import DataError, ParameterError, RltscanError
from rltscan.io import shards as io_shards
from rltscan.io import writeback as wb
from rltscan.io.layout import Prepared, prepare
from rltscan.io.source import Source
from rltscan.options import RunOptions
from rltscan.plan import (
    Clock,
    make_plan,
    normalization,
    report,
)
from rltscan.report import OutputInfo, RunReport, Stage


def carries_in(job: Job, aggregates: Mapping[int, Mapping[str, Any]]) -> dict[int, list | None]:
    """The carry entering every shard: a sequential scan over the aggregates in scan order.

    ``y = A * y + B`` in float64, starting from no carry at the true end (the first
    non-empty shard in scan order, whose aggregate was computed without one).
    """
    y: np.ndarray | None = None
    out: dict[int, list | None] = {}
    for k in job.scan_order():
        out[k] = None if y is None else y.tolist()
        agg = aggregates.get(k)
        if agg is None or agg["steps"] == 0:
            continue  # not needed (last in scan order) or the identity (empty)
        a = np.asarray(agg["a"], dtype=np.float64)
        b = np.asarray(agg["b"], dtype=np.float64)
        if agg["end"] != (y is None):
            raise RuntimeError(f"shard {k}: end={agg['end']} but carry {y!r}")  # a bug
        y = b if y is None else a * y + b
    return out


class LocalEngine:
    """Shard tasks run one after another in this process (stops at the first error)."""

    name = "local"

    def map(
        self,
        job: Job,
        items: list[dict[str, Any]],
        on_done: Callable[[dict[str, Any]], None] | None = None,
    ) -> list[dict[str, Any]]:
        out = []
        for item in items:
            row = run_task(job, item)
            out.append(row)
            if "error" in json.loads(row["result"]):
                break
            if on_done is not None:
                on_done(row)
        return out

    def close(self) -> None:
        pass


def _results(items: list[dict[str, Any]], rows: list[dict[str, Any]]) -> dict[int, dict]:
    """Results by shard; the error of the first failing item (in item order) is raised."""
    by_k = {int(r["k"]): json.loads(r["result"]) for r in rows}
    for item in items:
        payload = by_k.get(int(item["k"]))
        if payload is not None and "error" in payload:
            _raise(payload["error"])
    return by_k


def _raise(error: Mapping[str, Any]) -> None:
    """The task's error again, rebuilt from its fields (``RltscanError.to_dict``)."""
    raise RltscanError.from_dict(dict(error))


def _counter(clock: Clock, job: Job, ks: list[int]) -> Callable[[dict[str, Any]], None] | None:
    """What a pass over the shards ``ks`` calls as each one finishes: the progress display
    counts their steps (their total from the footers); None without a display."""
    if clock.progress is None:
        return None
    dataset = job.dataset
    total = sum(max(dataset.steps(dataset.shards[k]), 0) for k in ks)
    done = [0]
    clock.advance(0, total)

    def on_done(row: dict[str, Any]) -> None:
        done[0] += int(json.loads(row["result"]).get("steps", 0))
        clock.advance(done[0], total)

    return on_done


def _engine(name: str, *, ray_address: str | None, workers: int | None, device: str) -> Any:
    if name == "ray":
        from rltscan.engines.ray.engine import RayEngine

        return RayEngine(address=ray_address, workers=workers, device=device, task=run_task)
    return LocalEngine()


def run_sharded(opts: RunOptions, clock: Clock) -> RunReport:
    """``rltscan.run`` on a sharded dataset (a directory or glob of Parquet files, a
    Minari Parquet dataset or a LeRobot dataset): the protocol of this module on the
    chosen engine, executing the same plan as the single-file engines."""
    engine = opts.engine or "local"
    wall0 = time.perf_counter()
    output, workers = opts.output, opts.workers
    if engine != "ray" and (workers is not None or opts.ray_address is not None):
        raise ParameterError("--workers and --ray-address apply to --engine ray; add --engine ray")
    if workers is not None and workers < 1:
        raise ParameterError(f"--workers must be a positive number, got {workers}")
    if output == "-":
        raise ParameterError(
            f"{opts.input} is a sharded dataset; -o - (stdout) takes one file, pass -o OUT_DIR"
        )
    if opts.to is not None:
        raise ParameterError("--to applies to single files; a sharded dataset stays Parquet")
    if engine == "local":
        dev_name = str(resolve_device(opts.device))
    else:
        dev_name = opts.device if opts.device != "auto" else "auto (ray workers)"

    with clock.stage("detect"):
        dataset = io_shards.discover(opts.input, order_by=opts.order_by)
        if not opts.dry_run:
            io_shards.Staging.check(dataset, output, overwrite=opts.overwrite)
    where = output or dataset.where
    target = wb.Target("inplace" if output is None else "file", Path(where), dataset.format)
    job = Job(opts=opts, dataset=dataset, reading=opts.reading)
    with clock.stage("plan"):
        probe, probe_src = _probe(job)
        view = _DatasetView(dataset.where, dataset.format, dataset.layout, probe_src.columns)
        plan = make_plan(opts, view, target, probe, time_dim=-1, check_clash=False)
        reading = dataclasses.replace(opts.reading, dones_mean=probe.dones_mean)
        call_args = {k: v for k, v in plan.call.items() if k != "time_dim"}
        job = dataclasses.replace(
            job, names=plan.names, roles=plan.roles, reading=reading, call_args=call_args
        )
        if not opts.dry_run:
            check_existing(job, probe_src, probe_src.where)
        dtypes = _output_dtypes(job, probe)
        job = dataclasses.replace(
            job, dtypes=dtypes, entry=wb.parquet_entry(list(plan.names), plan.metadata)
        )

    count = len(dataset.shards)
    order = dataset.order(opts.order_by)
    skipped = "" if job.crosses else " (one episode per shard: no carries, pass 1 skipped)"
    notes = [*probe.notes, f"{count} shard(s) in {order} order on the {engine} engine{skipped}"]
    # what the plan's report and the run's say alike: the run's device and dtype
    reported = functools.partial(
        report, plan, view, clock, device=_NamedDevice(dev_name), dtype=probe.dtype
    )
    if opts.dry_run:
        steps = sum(dataset.steps(s) for s in dataset.shards)
        return reported(
            steps=steps,
            episodes=0,
            sequences=1,
            outputs=_shard_outputs(plan.names, steps, dtypes, where),
            counts={},
            notes=notes,
            written=False,
        )

    staging = io_shards.Staging(dataset, output, overwrite=opts.overwrite)
    job = dataclasses.replace(job, stage_dir=str(staging.dir))
    runner = None
    try:
        if engine == "ray":
            with clock.stage("start ray"):
                runner = _engine(
                    engine, ray_address=opts.ray_address, workers=workers, device=opts.device
                )
            dev_name = f"{'cuda' if runner.num_gpus else 'cpu'} (ray workers)"
        else:
            runner = LocalEngine()
        aggregates: dict[int, dict] = {}
        if job.crosses:
            first = job.scan_order()[:-1]  # the last shard in scan order feeds nobody
            items = [{"pass": 1, "k": k} for k in first]
            with clock.stage("pass 1 (aggregates)") as box:
                rows = runner.map(job, items, _counter(clock, job, first)) if items else []
                aggregates = _results(items, rows)
                box["steps"] = sum(a["steps"] for a in aggregates.values())
        with clock.stage("carries"):
            carries = carries_in(job, aggregates) if job.crosses else {}
        items = [{"pass": 2, "k": k, "y": carries.get(k)} for k in job.scan_order()]
        if opts.normalize:  # the dataset-wide statistics first: the outputs, not written
            measure = [{**item, "write": False} for item in items]
            with clock.stage("pass 2 (statistics for --normalize)") as box:
                counter = _counter(clock, job, job.scan_order())
                measured = _results(measure, runner.map(job, measure, counter))
                box["steps"] = sum(d["steps"] for d in measured.values())
            scales, normalized = normalization(plan, _output_stats(job, measured))
            notes += normalized
            items = [{**item, "scales": scales} for item in items]
        with clock.stage("pass 2 (outputs)") as box:
            done = _results(items, runner.map(job, items, _counter(clock, job, job.scan_order())))
            box["steps"] = sum(d["steps"] for d in done.values())
        with clock.stage("commit", steps=box["steps"]):
            staging.commit()
        notes += staging.notes
        with clock.stage("cleanup"):
            staging.cleanup()
    except BaseException:
        if runner is not None:  # stop the tasks first: none may write after the abort
            runner.close()
            runner = None
        staging.abort()
        raise
    finally:
        if runner is not None:
            runner.close()

    steps = sum(d["steps"] for d in done.values())
    counts: dict[str, int] = {}
    busy: dict[str, float] = {}
    moved: dict[str, int] = {}
    for d in done.values():
        for key, value in d["counts"].items():
            counts[key] = counts.get(key, 0) + value
        for key, value in d["busy"].items():
            busy[key] = busy.get(key, 0.0) + value
        for key, value in d["bytes"].items():
            moved[key] = moved.get(key, 0) + value
    stages = clock.stages  # the report lists the clock's stages; these are added
    for stage in ("read", "to device", "scan", "from device", "write"):
        if stage in busy:
            stages.append(
                Stage(f"{stage} (pass 2, sum over shards)", busy[stage], moved.get(stage, 0), steps)
            )
    where = str(staging.final) if staging.final is not None else dataset.where
    statistics = merged_statistics(job, done)
    return reported(
        steps=steps,
        episodes=sum(d["episodes"] for d in done.values()),
        sequences=dataset.sequences,
        outputs=_shard_outputs(plan.names, steps, dtypes, where),
        counts=counts,
        notes=notes,
        written=True,
        wall_seconds=time.perf_counter() - wall0,
        statistics=statistics,
    )


def _shard_outputs(
    names: tuple[str, ...], steps: int, dtypes: Mapping[str, str], where: str
) -> list[OutputInfo]:
    """The outputs a sharded run reports (planned or written): each column ``steps`` long
    over the whole dataset, placed in every shard under ``where``."""
    return [OutputInfo(n, (steps,), dtypes[n], f"{where}/<shard> column {n}") for n in names]


def _output_stats(job: Job, results: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """The outputs' statistics from every shard's pass-2 result, folded block by block in
    scan order (as one file's walk folds them: the same bits)."""
    return stats.from_parts(results[k]["outputs_stats"] for k in job.scan_order())


def merged_statistics(job: Job, results: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """The report's statistics from the pass-2 results of every shard: the outputs as
    :func:`_output_stats` folds them, episodes joined across the shard edges in time
    order."""
    joined: stats.Episodes | None = None
    for k in sorted(results):
        state = results[k]["episodes_stats"]
        if state is not None:
            ep = stats.Episodes.from_state(state)
            joined = ep if joined is None else joined.then(ep)
    return stats.summary(_output_stats(job, results), joined)


@dataclass(frozen=True)
class _DatasetView:
    """What the plan and the report read of an input, for a sharded dataset."""

    where: str
    format: str
    layout: str
    columns: Mapping[str, Any]  # the probed shard's, whose dtypes the plan checks
    backend: None = None


class _NamedDevice:
    """A device the report names (``cuda (ray workers)``); ``type`` picks the backend."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.type = "cuda" if "cuda" in name else "cpu"

    def __str__(self) -> str:
        return self.name


def _probe(job: Job) -> tuple[Prepared, Source]:
    """Roles, output names and flag meanings from the last step of the data (as the
    single-file engine does): the last row of the last non-empty shard."""
    shards = job.dataset.shards
    for k in range(len(shards) - 1, -1, -1):
        src = io_shards.open_shard(shards[k])
        if src.steps:
            break
    else:
        raise DataError(f"{job.dataset.where}: every shard is empty; nothing to compute")
    if job.dataset.episode_shards:
        return prepare(io_shards.episode_source(shards[k]), **job.options()), src
    n = int(src.steps or 0)
    return prepare(src, window=(n - 1, n), **job.options()), src


def _output_dtypes(job: Job, probe: Prepared) -> dict[str, str]:
    """The dtype of each output (what the estimator returns for these inputs)."""
    kwargs = {k: v for k, v in probe.kwargs.items() if k not in windows.PER_ROW}
    result = estimate(job, kwargs, job.call(probe.time_dim), None, validate=False)
    out = {
        job.opts.prefix + n: str(np.asarray(v).dtype)
        for n, v in dict(result).items()
        if v is not None
    }
    return {n: out.get(n, "float32") for n in job.names}
