"""The streaming engine: a file walked in windows, outputs written as they come.

Used by :func:`rltscan.api.execute` for HDF5 arrays and Parquet files written back
to their own format; it executes a :class:`~rltscan.plan.Plan`. The timing report
lists each stage's busy time (the stages overlap, so they add up to more than the
wall time, which is reported apart).
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import time
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from rltscan import stats
from rltscan.engines.stream import windows
from rltscan.errors import MissingBootstrapError, OutputRefusedError, ParameterError
from rltscan.io import formats
from rltscan.io import writeback as wb
from rltscan.io.layout import prepare
from rltscan.io.sinks import HDF5Sink
from rltscan.options import RunOptions
from rltscan.plan import (
    Clock,
    Plan,
    bootstrap_hint,
    dry_run_report,
    first_missing_bootstrap,
    location,
    make_plan,
    normalization,
    prepare_options,
    report,
)
from rltscan.report import OutputInfo, Stage, StreamInfo

if TYPE_CHECKING:  # torch loads when a run computes (a dry run never does)
    from rltscan.report import RunReport


def run_streamed(
    opts: RunOptions, source: Any, target: wb.Target, clock: Clock, dev: Any
) -> RunReport:
    """Plan from the last step alone, then stream every window through the plan."""
    wall0 = time.perf_counter()
    steps = int(source.steps)
    with clock.stage("plan"):
        # the last step alone: roles, flag meanings and errors before any real work
        try:
            probe = prepare(source, window=(steps - 1, steps), **prepare_options(opts))
        except MissingBootstrapError as err:  # name the first such step, not the last
            raise first_missing_bootstrap(err, source, prepare_options(opts), steps) from None
    plan = make_plan(opts, source, target, probe)
    # what the probe decided for a dones column holds for every window
    decided = dataclasses.replace(opts.reading, dones_mean=probe.dones_mean)
    options = {**plan.prepare_options(), "reading": decided}
    if opts.dry_run:
        return _plan_streamed(plan, source, clock, dev, options, steps)
    spec = plan.spec

    ref = next(v for v in probe.kwargs.values() if hasattr(v, "ndim") and v.ndim > 0)
    rows = 1 if ref.ndim == 1 or source.layout == "flat" else int(ref.size)
    grid = windows.make_plan(
        steps,
        rows,
        reverse=spec.reverse,
        chunk_steps=opts.chunk_steps,
        block_steps=opts.block_steps,
    )
    full_shape = (steps,) if source.layout == "flat" else _full_shape(source, steps, rows)
    notes = list(probe.notes)
    chunk_steps = opts.chunk_steps
    if chunk_steps is not None and grid.chunk * grid.rows > max(chunk_steps, grid.rows):
        notes.append(
            f"--chunk-steps {chunk_steps:,} is below one estimator call; raised to "
            f"{grid.chunk * grid.rows:,} (lower --block-steps too for smaller windows)"
        )

    # statistics as the windows go: episodes from the inputs read (any window order),
    # the outputs' moments and buckets on the device where they are made. The episodes
    # of a window are cut on the writer thread, after its write: the reader, the busiest
    # thread of a cpu run, only keeps their inputs (0.18-0.25 s of the writer's CPU at
    # 5e7 steps, bench/results/cpu-stream-2core-2026-12-07-b/profile.txt)
    episodes = stats.EpisodeCollector()
    ends: dict[int, Any] = {}  # window start -> (ends, rewards) of its episodes

    def prepare_window(start: int, stop: int) -> Any:
        prepared = prepare(source, window=(start, stop), **options)
        ends[start] = stats.prepared_episode_inputs(prepared, opts.reading.columns)
        return prepared

    def write(start: int, stop: int, arrays: dict[str, np.ndarray]) -> None:
        sink.write(start, stop, arrays)
        episodes.add_inputs(start, ends.pop(start))

    if dev.type == "cuda":
        import torch

        torch.cuda.reset_peak_memory_stats(dev)
    progress = clock.progress
    advance = getattr(progress, "advance", None)
    done = [0]

    def on_window(steps_in_window: int) -> None:
        done[0] += steps_in_window * rows
        if advance is not None:
            advance(done[0], steps * rows)

    sink = None
    try:  # from the sink's start to its commit, any exception (Ctrl-C too) drops its temp files
        with clock.stage("open"):
            sink = _sink(source, plan, full_shape, probe)
        # the estimator's function imports torch (unless the torch-free lane takes the
        # run): after the sink has started the HDF5 safety copy, which runs meanwhile
        # (the CLI loads torch, or only numba for that lane, on a thread)
        compute = windows.BlockCall(spec, plan.call, opts.prefix, device=dev)
        if progress is not None:
            progress("stream", True)
            if advance is not None:
                advance(0, steps * rows)
        t0 = time.perf_counter()
        try:
            with bootstrap_hint(plan, source):
                try:
                    totals = windows.run_windows(
                        grid,
                        prepare_window,
                        compute,
                        write,
                        device=dev,
                        time_dim=probe.time_dim,
                        on_window=on_window,
                    )
                except MissingBootstrapError as err:  # the first such step, not the last
                    raise first_missing_bootstrap(err, source, options, steps) from None
            if totals.id_runs and "episode_id" in probe.roles:
                windows.check_id_runs(totals.id_runs, probe.roles["episode_id"], source.where)
        finally:
            if progress is not None:
                progress("stream", False)
        walk = time.perf_counter() - t0
        for stage in ("read", "to device", "scan", "from device", "write"):
            if stage not in totals.busy:
                clock.skip(stage)
                continue
            nbytes = totals.bytes.get(stage, 0)
            clock.stages.append(Stage(stage, totals.busy[stage], nbytes, totals.steps))
        if isinstance(sink, HDF5Sink):  # the safety copy of the file, beside the stream
            sink.wait_copied()
            clock.stages.append(Stage("copy", sink.copy_seconds, sink.copy_bytes))
        clock.stages.append(Stage("stream (wall)", walk, 0, totals.steps))
        if opts.normalize:
            scales, normalized = normalization(plan, compute.accumulator.result())
            for name, (mean, std) in scales.items():
                sink.standardize(name, mean, std)
            notes += normalized
        with clock.stage("commit", steps=totals.steps) as box:
            box["bytes"] = sink.commit()
    except BaseException as err:
        if sink is not None:
            sink.abort(err)
        raise

    outputs = [
        OutputInfo(
            name, tuple(full_shape), compute.dtypes.get(name, ""), location(source, target, name)
        )
        for name in plan.names
    ]
    info = StreamInfo(
        chunk_steps=grid.chunk * grid.rows,
        block_steps=grid.block * grid.rows,
        windows=totals.windows,
        peak_rss_bytes=_peak_rss(),
        peak_device_bytes=totals.peak_device_bytes if dev.type == "cuda" else None,
    )
    return report(
        plan,
        source,
        clock,
        device=dev,
        dtype=probe.dtype,
        steps=totals.steps,
        episodes=totals.episodes,
        sequences=rows if source.layout != "flat" else 1,
        outputs=outputs,
        counts=totals.counts,
        notes=notes,
        written=True,
        wall_seconds=time.perf_counter() - wall0 + clock.seconds("detect"),
        streaming=info,
        format=source.format,
        statistics=stats.summary(compute.accumulator.result(), episodes.joined()),
    )


def run_whole(
    opts: RunOptions,
    source: Any,
    target: wb.Target,
    clock: Clock,
    dev: Any,
    stdout: BinaryIO | None,
) -> RunReport:
    """A file read whole (formats that cannot be read by ranges, stdin/stdout,
    conversions between formats): the same walk as a streamed file, with one window
    (one read, one write) and the same block grid, so its outputs are the bits a
    streamed run of the same data gives."""
    if opts.normalize and not opts.dry_run:
        raise ParameterError(
            f"--normalize runs on files written back by windows (HDF5, Parquet; sharded "
            f"datasets); {source.where} takes one read and one write: not supported yet, "
            "drop --normalize"
        )
    if target.kind == "stdout" and stdout is None and not opts.dry_run:
        stdout = sys.stdout.buffer
    with clock.stage("plan" if opts.dry_run else "read") as box:
        prepared = prepare(source, **prepare_options(opts), flags_only=opts.dry_run)
        box["bytes"], box["steps"] = prepared.bytes_read, prepared.steps
    plan = make_plan(opts, source, target, prepared)
    if opts.dry_run:
        return dry_run_report(plan, source, clock, dev, prepared)
    written, compute = _one_window(plan, source, prepared, clock, dev)
    # on the stored rows: rows that are not transitions (RLDS final observations) NaN
    arrays = {k: prepared.restore(v) for k, v in written.items()}
    with clock.stage("write", steps=prepared.steps) as box:
        box["bytes"] = wb.write(
            source,
            prepared,
            target,
            arrays,
            metadata=plan.metadata,
            overwrite=opts.overwrite,
            stdout=stdout,
        )
    outputs = [
        OutputInfo(name, _whole_shape(a, prepared), str(a.dtype), location(source, target, name))
        for name, a in arrays.items()
    ]
    return report(
        plan,
        source,
        clock,
        device=dev,
        dtype=prepared.dtype,
        steps=prepared.steps,
        episodes=prepared.episodes,
        sequences=prepared.sequences,
        outputs=outputs,
        counts=prepared.counts,
        notes=prepared.notes,
        written=True,
        statistics=stats.summary(
            compute.accumulator.result(), stats.episodes_from(prepared, opts.reading.columns)
        ),
    )


def _one_window(
    plan: Plan, source: Any, prepared: Any, clock: Clock, dev: Any
) -> tuple[dict[str, np.ndarray], windows.BlockCall]:
    """The walk over a file read whole: one window (``prepared``), the run's block grid;
    its outputs by column, and the block call (statistics, dtypes)."""
    spec, opts = plan.spec, plan.opts
    ref = next(v for v in prepared.kwargs.values() if hasattr(v, "ndim") and v.ndim > 0)
    axis = -1 if (prepared.time_dim == -1 and ref.ndim >= 2) else 0
    length = int(ref.shape[axis])  # the time axis
    rows = max(int(ref.size) // max(length, 1), 1)
    grid = windows.make_plan(
        length,
        rows,
        reverse=spec.reverse,
        chunk_steps=length * rows,  # one window
        block_steps=opts.block_steps,
    )
    compute = windows.BlockCall(spec, plan.call, opts.prefix, device=dev)
    written: dict[str, np.ndarray] = {}

    def keep(start: int, stop: int, arrays: dict[str, np.ndarray]) -> None:
        written.update(arrays)

    progress = clock.progress
    if progress is not None:
        progress("scan", True)
    clock.advance(0, prepared.steps)
    try:
        with bootstrap_hint(plan, source, prepared):
            totals = windows.run_windows(
                grid,
                lambda start, stop: prepared,
                compute,
                keep,
                device=dev,
                time_dim=prepared.time_dim,
            )
    finally:
        if progress is not None:
            progress("scan", False)
    clock.advance(prepared.steps, prepared.steps)
    for stage in ("to device", "scan", "from device"):  # the read and write are the clock's
        if stage in totals.busy:
            nbytes = totals.bytes.get(stage, 0)
            clock.stages.append(Stage(stage, totals.busy[stage], nbytes, prepared.steps))
        else:
            clock.skip(stage)
    return written, compute


def _whole_shape(array: np.ndarray, prepared: Any) -> tuple[int, ...]:
    if prepared.lengths:
        return (len(prepared.lengths), -1)  # one (T_i,) dataset per episode
    return tuple(int(d) for d in array.shape)


def _plan_streamed(
    plan: Plan, source: Any, clock: Clock, dev: Any, options: dict[str, Any], steps: int
) -> RunReport:
    """``--dry-run`` of a streamed file: the same resolver over every window, reading
    only the flag columns and the reference column; nothing is computed or written."""
    counts: dict[str, int] = {}
    runs: list[tuple[int, Any]] = []
    episodes = 0
    window = windows.DEFAULT_CHUNK_STEPS  # steps of the time axis per window (flags only)
    with clock.stage("plan (flags)") as box:
        for start in range(0, steps, window):
            stop = min(start + window, steps)
            part = prepare(source, window=(start, stop), flags_only=True, **options)
            for key, value in part.counts.items():
                counts[key] = counts.get(key, 0) + value
            episodes += part.episodes
            if part.id_runs is not None:
                runs.append((start, part.id_runs))
            box["bytes"] += part.bytes_read
        if runs and "episode_id" in part.roles:
            windows.check_id_runs(runs, part.roles["episode_id"], source.where)
    total = steps * max(part.sequences, 1) if source.layout != "flat" else steps
    planned = dataclasses.replace(part, steps=total, counts=counts, episodes=episodes)
    return dry_run_report(plan, source, clock, dev, planned)


def _full_shape(source: Any, steps: int, rows: int) -> tuple[int, ...]:
    return (steps, rows) if source.layout == "time-major" else (rows, steps)


def _sink(source: Any, plan: Plan, full_shape: tuple[int, ...], probe: Any) -> Any:
    target, overwrite = plan.target, plan.opts.overwrite
    dst = target.path if target.kind == "file" else source.path
    if target.kind == "file" and target.path.exists() and not overwrite:
        raise OutputRefusedError(f"{target.path} already exists; pass --overwrite to replace it")
    return formats.named(source.format).sink(
        source,
        dst,
        shape=full_shape,
        record=wb.provenance(list(plan.names), plan.metadata),
        template=probe.template,
        overwrite=overwrite,
    )


def _peak_rss() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
