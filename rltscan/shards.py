"""Sharded datasets: one table in many Parquet files, computed shard by shard with carries.

docs/CONVENTIONS.md §2.4: shards are chunks too, and a shard boundary is not a cut. A
shard's outputs depend on the rest of the data only through one value per
sequence, the recurrence's ``y`` entering it in scan order (from the next shard
for backward estimators, from the previous one for forward ones), plus one
neighbouring *row* that is data, not state. The protocol:

1. **Neighbour rows.** Each shard task reads the row it needs from its neighbour
   itself (the first row group of one file, only the needed columns): the next
   shard's first row (V and Retrace's log-ratio, and the look-ahead step that
   derives episode-start dones and episode-id changes at the shard's last step)
   or the previous shard's last row (its done flag, for forward estimators). It
   turns that row into a :class:`~rltscan.estimators.Carry` by calling the
   estimator on it, so the fields are exactly the ones chunks hand each other.
2. **Pass 1** (one task per shard, in parallel): with the neighbour row fixed, the
   carry out of the shard is affine in the carry in: ``y_out = A * y_in + B``.
   The task walks the shard once, in float64, solving each block twice (carry
   ``y_in = 0`` gives ``B``; ``y_in = 1`` gives ``A + B``). A cut anywhere in the
   shard makes ``A`` exactly 0. The shard at the true end of the data in scan
   order has no carry in; the shard last in scan order is not needed at all.
3. **Carries** (driver): a sequential scan over the ``(A, B)`` pairs in scan
   order, in float64, gives every shard its ``y_in``.
4. **Pass 2** (in parallel): each shard runs the single-file streaming walk
   (:func:`rltscan.stream.run_windows`) with its carry (``y_in`` cast to the
   compute dtype) and stages its outputs; they are moved into place only when
   every shard succeeded (:class:`rltscan.io.shards.Staging`).

Minari Parquet datasets hold one episode per shard, so no carry crosses a shard
and pass 1 is skipped. Both engines run the same task function
(:func:`run_task`): ``local`` serially in this process, ``ray`` as Ray Data
tasks (:mod:`rltscan.ray_engine`), so their outputs are identical bit for bit.
Against one concatenated file they agree to float rounding: the carry comes from
the float64 aggregate instead of the float32 chain, and blocks start at each
shard's first step.
"""

from __future__ import annotations

import dataclasses
import json
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rltscan import stats, stream
from rltscan.devices import resolve_device
from rltscan.errors import DataError, OutputRefusedError, ParameterError, RltscanError
from rltscan.estimators import Carry
from rltscan.io import shards as io_shards
from rltscan.io import writeback as wb
from rltscan.io.layout import Prepared, Reading, prepare
from rltscan.io.sinks import NullSink, ParquetSink
from rltscan.io.source import Source
from rltscan.options import RunOptions
from rltscan.plan import Clock, backend_name, bootstrap_hint, make_plan, prepare_options, report
from rltscan.report import OutputInfo, RunReport, Stage

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class Job:
    """What every shard task needs; plain data, so that it travels to Ray workers."""

    opts: RunOptions
    dataset: io_shards.Dataset
    reading: Reading  # opts.reading with the probe's decision for a dones column
    names: tuple[str, ...] = ()
    call_args: dict[str, Any] = field(default_factory=dict)  # besides data, carry, time_dim
    dtypes: dict[str, str] = field(default_factory=dict)
    entry: dict[str, Any] = field(default_factory=dict)  # Parquet key-value metadata
    stage_dir: str | None = None

    @property
    def spec(self) -> Any:
        from rltscan.estimators import ESTIMATORS

        return ESTIMATORS[self.opts.command]

    @property
    def reverse(self) -> bool:
        return bool(self.opts.declaration.reverse)

    @property
    def crosses(self) -> bool:
        """Whether episodes may cross shards (pass 1 needed): not for Minari."""
        return self.dataset.kind != "minari"

    def options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`rltscan.io.layout.prepare` for every shard."""
        return {**prepare_options(self.opts), "reading": self.reading}

    def call(self, time_dim: int = -1) -> dict[str, Any]:
        """Estimator keyword arguments besides the data and the carry."""
        return {**self.call_args, "time_dim": time_dim}

    def scan_order(self) -> list[int]:
        n = len(self.dataset.shards)
        return list(range(n - 1, -1, -1)) if self.reverse else list(range(n))


# --------------------------------------------------------------------------- shard tasks


def run_task(job: Job, item: Mapping[str, Any]) -> dict[str, Any]:
    """The one function both engines run per shard: ``item`` is ``{"pass": 1 | 2, "k": k,
    "y": [float] | None}``; the result is ``{"k": k, "result": JSON}``. Errors a user can
    fix come back as data (``{"error": ...}``) so that every engine reports them alike."""
    k = int(item["k"])
    shard = job.dataset.shards[k]
    try:
        payload = aggregate(job, k) if item["pass"] == 1 else outputs(job, k, item.get("y"))
    except RltscanError as err:
        if not str(err).startswith(shard.rel):  # name the shard unless the error does
            err = err.replace(where=shard.rel if not err.where else f"{shard.rel}: {err.where}")
        payload = {"error": err.to_dict()}  # the class and the fields, plain JSON
    return {"k": k, "result": json.dumps(payload)}


@dataclass
class _Opened:
    src: Source  # the shard itself
    view: Source  # plus the next non-empty shard's first row as a look-ahead step
    after: Source | None  # the next non-empty shard (None: this one ends the data)
    before: Source | None  # the previous non-empty shard (None: this one starts it)

    @property
    def steps(self) -> int:
        return int(self.src.steps or 0)


def _first_rows(shards: tuple[io_shards.Shard, ...], order: range) -> Source | None:
    for j in order:
        src = io_shards.open_shard(shards[j])
        if src.steps:
            return src
    return None


def _open(job: Job, k: int) -> _Opened:
    shards = job.dataset.shards
    src = io_shards.open_shard(shards[k])
    if not job.crosses:  # a Minari episode: T+1 rows, read whole as one episode
        return _Opened(src, io_shards.episode_source(shards[k]), None, None)
    after = _first_rows(shards, range(k + 1, len(shards)))
    before = None if job.reverse else _first_rows(shards, range(k - 1, -1, -1))
    return _Opened(src, io_shards.shard_view(src, after), after, before)


def _check_existing(job: Job, src: Source, rel: str) -> None:
    clash = [n for n in job.names if n in src.columns]
    if clash and not job.opts.overwrite:
        raise OutputRefusedError(
            f'{rel} already has column "{clash[0]}"; pass --overwrite or --prefix P'
        )


def _estimate(job: Job, kwargs: Mapping[str, Any], call: Mapping[str, Any], carry: Any, **kw: Any):
    with warnings.catch_warnings():  # Arrow buffers are read-only; nothing writes them
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return job.spec.function(**kwargs, **call, carry=carry, **kw)


def neighbour(job: Job, opened: _Opened) -> Carry | None:
    """The neighbouring row in scan order as a carry (its ``y`` is a placeholder), or
    None when this shard is the true end of the data in scan order."""
    if job.reverse:
        if opened.after is None:
            return None
        # only the next shard's own values are read at its first step (V, log-ratio)
        view, window = opened.after, (0, 1)
    else:
        if opened.before is None:
            return None
        # the previous shard's last done flag, derived with this shard's first row
        n = int(opened.before.steps or 0)
        view, window = io_shards.shard_view(opened.before, opened.src), (n - 1, n)
    prepared = prepare(view, window=window, **job.options())
    kwargs = {k: v for k, v in prepared.kwargs.items() if k not in stream.PER_ROW}
    kind = job.spec.name
    zero = torch.zeros(1, dtype=torch.float64)
    placeholder = Carry(kind, zero, zero, zero, torch.zeros(1, dtype=torch.bool))
    result = _estimate(job, kwargs, job.call(prepared.time_dim), placeholder, validate=False)
    carry = result.carry
    assert carry is not None
    return carry


def _with_y(carry: Carry, y: torch.Tensor) -> Carry:
    def wide(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(torch.float64) if t.is_floating_point() else t

    if y.dtype == torch.float64:  # pass 1: every float field in float64
        return dataclasses.replace(
            carry,
            y=y,
            next_value=wide(carry.next_value),
            next_log_ratio=wide(carry.next_log_ratio),
        )
    return dataclasses.replace(carry, y=y)


def _device(job: Job) -> torch.device:
    return resolve_device(job.opts.device)


def _slice_prepared(prepared: Prepared, start: int, stop: int) -> Prepared:
    """Steps ``[start, stop)`` of a whole-episode :class:`Prepared` (Minari shards)."""
    if (start, stop) == (0, prepared.steps):
        return prepared
    kwargs = {
        k: v[start:stop] if isinstance(v, np.ndarray) and v.ndim and len(v) == prepared.steps else v
        for k, v in prepared.kwargs.items()
    }
    first = start == 0
    return dataclasses.replace(
        prepared,
        kwargs=kwargs,
        steps=stop - start,
        episodes=prepared.episodes if first else 0,
        counts=prepared.counts if first else {},
        bytes_read=prepared.bytes_read if first else 0,
    )


def _walk(
    job: Job,
    opened: _Opened,
    compute: Callable[[Mapping[str, Any], Any], tuple[dict[str, Any], Any]],
    write: Callable[[int, int, dict[str, np.ndarray]], None],
    carry: Any,
    on_prepared: Callable[[int, Prepared], None] | None = None,
) -> tuple[stream.Totals, int]:
    """The single-file streaming walk over one shard; returns the totals and its steps.
    ``on_prepared(start, prepared)`` sees every window's inputs (the statistics)."""
    options = job.options()
    if job.dataset.kind == "minari":
        whole = prepare(opened.view, **options)
        steps = whole.steps

        def read_window(start: int, stop: int) -> Prepared:
            return _slice_prepared(whole, start, stop)
    else:
        steps = opened.steps

        def read_window(start: int, stop: int) -> Prepared:
            return prepare(opened.view, window=(start, stop), **options)

    def prepare_window(start: int, stop: int) -> Prepared:
        prepared = read_window(start, stop)
        if on_prepared is not None:
            on_prepared(start, prepared)
        return prepared

    plan = stream.make_plan(
        steps,
        1,
        reverse=job.reverse,
        chunk_steps=job.opts.chunk_steps,
        block_steps=job.opts.block_steps,
    )
    with bootstrap_hint():
        totals = stream.run_windows(
            plan, prepare_window, compute, write, device=_device(job), time_dim=-1, carry=carry
        )
    if totals.id_runs:  # ids must form runs; across shards only at the edges (see docs)
        from rltscan.io.layout import find_column

        name = find_column(opened.src, "episode_id", job.reading.columns) or "episode_id"
        stream.check_id_runs(totals.id_runs, name, opened.src.where)
    return totals, steps


def _strip(block: Mapping[str, Any], carry: Any) -> dict[str, Any]:
    """A block that continues across a shard edge takes no window-end bootstrap or init."""
    if carry is None:
        return dict(block)
    return {k: v for k, v in block.items() if k not in stream.PER_ROW}


def _wide(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype != np.bool_:
        return value.astype(np.float64)
    return value


def aggregate(job: Job, k: int) -> dict[str, Any]:
    """Pass 1: the shard's affine map ``y_out = A * y_in + B`` (float64, per sequence)."""
    t0 = time.perf_counter()
    opened = _open(job, k)
    if opened.steps == 0:  # an empty shard is the identity (the driver skips it)
        return {"steps": 0, "end": False, "a": [1.0], "b": [0.0]}
    template = neighbour(job, opened)
    end = template is None
    call = job.call()
    if end:
        carries: tuple[Any, Any] = (None, None)
    else:
        assert template is not None
        rows = template.rows
        carries = (
            _with_y(template, torch.zeros(rows, dtype=torch.float64)),
            _with_y(template, torch.ones(rows, dtype=torch.float64)),
        )

    def compute(block: Mapping[str, Any], carry: Any) -> tuple[dict[str, Any], Any]:
        c0, c1 = carry
        wide = {k: _wide(v) for k, v in _strip(block, c0).items()}
        n0 = _estimate(job, wide, call, c0).carry
        if end or c1 is c0:
            return {}, (n0, None if end else n0)
        n1 = _estimate(job, wide, call, c1, validate=False).carry
        # After a cut the two chains hold the same bits (the carry in is multiplied by
        # an exact 0); from then on they stay equal, so the second solve can stop.
        return {}, (n0, n0 if torch.equal(n0.y, n1.y) else n1)

    totals, steps = _walk(job, opened, compute, lambda *_: None, carries)
    y0, y1 = totals.carry
    b = y0.y.to(torch.float64).cpu().numpy()
    a = np.zeros_like(b) if end else y1.y.to(torch.float64).cpu().numpy() - b
    return {
        "steps": steps,
        "end": end,
        "a": a.tolist(),
        "b": b.tolist(),
        "seconds": time.perf_counter() - t0,
    }


def outputs(job: Job, k: int, y: list[float] | None) -> dict[str, Any]:
    """Pass 2: the shard's outputs with its carry in, staged under ``job.stage_dir``."""
    t0 = time.perf_counter()
    shard = job.dataset.shards[k]
    opened = _open(job, k)
    _check_existing(job, opened.src, shard.rel)
    staged = None if job.stage_dir is None else Path(job.stage_dir) / shard.rel
    if staged is not None:
        staged.parent.mkdir(parents=True, exist_ok=True)
    if opened.steps == 0:
        if staged is not None:
            dtypes = {n: np.dtype(d) for n, d in job.dtypes.items()}
            io_shards.write_empty(
                shard, staged, outputs=dtypes, metadata=job.entry, overwrite=job.opts.overwrite
            )
        return {
            "steps": 0,
            "episodes": 0,
            "counts": {},
            "busy": {},
            "bytes": {},
            "windows": 0,
            "outputs_stats": {},
            "episodes_stats": None,
        }
    carry = None
    if job.crosses:
        template = neighbour(job, opened)
        if (template is None) != (y is None):  # the driver and the task disagree: a bug
            raise RuntimeError(f"{shard.rel}: carry {y!r} but neighbour {template!r}")
        if template is not None and y is not None:
            carry = _with_y(template, torch.tensor(y, dtype=torch.float64).to(template.y.dtype))
    sink: Any = NullSink()
    if staged is not None:
        sink = ParquetSink(
            opened.src.raw,
            staged,
            steps=opened.steps,
            metadata=job.entry,
            overwrite=job.opts.overwrite,
            where=shard.rel,
            minari_infos=job.dataset.kind == "minari",
        )
    call = job.call()
    episodes = stats.EpisodeCollector()
    accumulator = stats.OutputAccumulator()

    def compute(block: Mapping[str, Any], carry: Any) -> tuple[dict[str, Any], Any]:
        result = _estimate(job, _strip(block, carry), call, carry)
        produced = {job.opts.prefix + n: v for n, v in dict(result).items() if v is not None}
        accumulator.add(produced)
        return produced, result.carry

    def seen(start: int, prepared: Prepared) -> None:
        episodes.add_prepared(start, prepared, job.reading.columns)

    try:
        totals, steps = _walk(job, opened, compute, sink.write, carry, seen)
        if job.dataset.kind == "minari" and staged is not None:
            # Minari's padding row: every column has T+1 rows; outputs get NaN there
            pad = {n: np.full(1, np.nan, dtype=np.dtype(job.dtypes[n])) for n in job.names}
            sink.write(steps, steps + 1, pad)
        sink.commit()
    except BaseException:
        sink.abort()
        raise
    return {
        "steps": steps,
        "episodes": totals.episodes,
        "counts": totals.counts,
        "busy": totals.busy,
        "bytes": totals.bytes,
        "windows": totals.windows,
        "seconds": time.perf_counter() - t0,
        # statistics of this shard, merged by the driver in shard order (plain JSON)
        "outputs_stats": {n: s.state() for n, s in accumulator.result().items()},
        "episodes_stats": None if (joined := episodes.joined()) is None else joined.state(),
    }


# --------------------------------------------------------------------------- the driver


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
    shards, minari = job.dataset.shards, job.dataset.kind == "minari"
    total = sum(max(io_shards.rows(shards[k]) - minari, 0) for k in ks)
    done = [0]
    clock.advance(0, total)

    def on_done(row: dict[str, Any]) -> None:
        done[0] += int(json.loads(row["result"]).get("steps", 0))
        clock.advance(done[0], total)

    return on_done


def _engine(name: str, *, ray_address: str | None, workers: int | None, device: str) -> Any:
    if name == "ray":
        from rltscan.ray_engine import RayEngine

        return RayEngine(address=ray_address, workers=workers, device=device, task=run_task)
    return LocalEngine()


def run_sharded(opts: RunOptions, clock: Clock) -> RunReport:
    """``rltscan.run`` on a sharded dataset (a directory or glob of Parquet files, a
    Minari Parquet dataset or a LeRobot dataset): the protocol of this module on the
    chosen engine, executing the same plan as the single-file engines."""
    engine = opts.engine or "local"
    wall0 = time.perf_counter()
    if opts.normalize:
        raise ParameterError(
            "--normalize is not supported on sharded datasets yet; drop --normalize"
        )
    if opts.settings is not None:
        raise ParameterError(
            "several --gamma/--lam settings in one pass are not supported on sharded datasets "
            "yet; run one setting per call (with --prefix)"
        )
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
    kind = {"minari": "minari/parquet", "lerobot": "lerobot/parquet"}.get(dataset.kind, "parquet")
    where = output or dataset.where
    view = _DatasetView(dataset.where, f"{kind} shards", dataset.layout)
    target = wb.Target("inplace" if output is None else "file", Path(where), f"{kind} shards")
    job = Job(opts=opts, dataset=dataset, reading=opts.reading)
    with clock.stage("plan"):
        probe, probe_src = _probe(job)
        plan = make_plan(opts, view, target, probe, time_dim=-1, check_clash=False)
        reading = dataclasses.replace(opts.reading, dones_mean=probe.dones_mean)
        call_args = {k: v for k, v in plan.call.items() if k != "time_dim"}
        job = dataclasses.replace(job, names=plan.names, reading=reading, call_args=call_args)
        if not opts.dry_run:
            _check_existing(job, probe_src, probe_src.where)
        dtypes = _output_dtypes(job, probe)
        job = dataclasses.replace(
            job, dtypes=dtypes, entry=wb.parquet_entry(list(plan.names), plan.metadata)
        )

    count = len(dataset.shards)
    order = {"minari": "episode", "lerobot": "episode (path)"}.get(
        dataset.kind, "--order-by" if opts.order_by else "file-name"
    )
    skipped = "" if job.crosses else " (one episode per shard: no carries, pass 1 skipped)"
    notes = [*probe.notes, f"{count} shard(s) in {order} order on the {engine} engine{skipped}"]
    device = _NamedDevice(dev_name)
    backend = backend_name(opts.backend, device)
    if opts.dry_run:
        steps = sum(
            io_shards.rows(s) - (1 if dataset.kind == "minari" else 0) for s in dataset.shards
        )
        outputs = [
            OutputInfo(n, (steps,), dtypes[n], f"{where}/<shard> column {n}") for n in plan.names
        ]
        return report(
            plan,
            view,
            clock,
            device=device,
            backend=backend,
            dtype=probe.dtype,
            steps=steps,
            episodes=0,
            sequences=1,
            outputs=outputs,
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
    device = _NamedDevice(dev_name)
    statistics = merged_statistics([done[k] for k in sorted(done)])
    return report(
        plan,
        view,
        clock,
        device=device,
        backend=backend_name(opts.backend, device),
        dtype=probe.dtype,
        steps=steps,
        episodes=sum(d["episodes"] for d in done.values()),
        sequences=count if dataset.kind == "minari" else 1,
        outputs=[
            OutputInfo(n, (steps,), dtypes[n], f"{where}/<shard> column {n}") for n in plan.names
        ],
        counts=counts,
        notes=notes,
        written=True,
        wall_seconds=time.perf_counter() - wall0,
        statistics=statistics,
    )


def merged_statistics(results: list[Mapping[str, Any]]) -> dict[str, Any]:
    """The report's statistics from the pass-2 results of every shard, in shard (time)
    order: outputs merged in any order, episodes joined across the shard edges."""
    outputs: dict[str, stats.OutputStats] = {}
    joined: stats.Episodes | None = None
    for r in results:
        part = {n: stats.OutputStats.from_state(s) for n, s in r["outputs_stats"].items()}
        outputs = stats.merge_outputs(outputs, part)
        if r["episodes_stats"] is not None:
            ep = stats.Episodes.from_state(r["episodes_stats"])
            joined = ep if joined is None else joined.then(ep)
    return stats.summary(outputs, joined)


@dataclass(frozen=True)
class _DatasetView:
    """What the plan and the report read of an input, for a sharded dataset."""

    where: str
    format: str
    layout: str
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
    if job.dataset.kind == "minari":
        return prepare(io_shards.episode_source(shards[k]), **job.options()), src
    n = int(src.steps or 0)
    return prepare(src, window=(n - 1, n), **job.options()), src


def _output_dtypes(job: Job, probe: Prepared) -> dict[str, str]:
    """The dtype of each output (what the estimator returns for these inputs)."""
    kwargs = {k: v for k, v in probe.kwargs.items() if k not in stream.PER_ROW}
    result = _estimate(job, kwargs, job.call(probe.time_dim), None, validate=False)
    out = {
        job.opts.prefix + n: str(np.asarray(v).dtype)
        for n, v in dict(result).items()
        if v is not None
    }
    return {n: out.get(n, "float32") for n in job.names}
