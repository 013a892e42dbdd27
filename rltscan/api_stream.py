"""``run()`` on the streaming engine: the file walked in windows, outputs written as they come.

Used by :func:`rltscan.api.run` for HDF5 arrays and Parquet files written back
to their own format. The timing report lists each stage's busy time (the stages
overlap, so they add up to more than the wall time, which is reported apart).
"""

from __future__ import annotations

import dataclasses
import resource
import sys
import time
import warnings
from typing import TYPE_CHECKING, Any

from rltscan import stream
from rltscan.api import (
    _backend_name,
    _cli_bootstrap_hint,
    _Clock,
    _location,
    _output_names,
    _version,
    assumption_notes,
    call_options,
    plan_report,
    provenance,
    refuse_clash,
    refuse_reading_outputs,
)
from rltscan.errors import OutputRefusedError
from rltscan.io import writeback as wb
from rltscan.io.layout import prepare
from rltscan.io.sinks import HDF5Sink, NullSink, ParquetSink
from rltscan.report import OutputInfo, RunReport, Stage, StreamInfo

if TYPE_CHECKING:  # torch loads when a run computes (a dry run never does)
    import torch


def run_streamed(
    estimator: str,
    spec: Any,
    source: Any,
    clock: _Clock,
    dev: torch.device,
    *,
    target: wb.Target,
    prefix: str,
    overwrite: bool,
    dry_run: bool,
    params: dict[str, float],
    overrides: dict[str, str | None],
    dones_mean: str | None,
    ends_are: str | None,
    missing_bootstrap: str | None,
    backend: str,
    chunk_steps: int | None,
    block_steps: int | None,
    ignore: tuple[str, ...] = (),
) -> RunReport:
    wall0 = time.perf_counter()
    steps = int(source.steps)
    call, used = call_options(spec, params, missing_bootstrap)
    options = dict(
        arguments=spec.inputs,
        required=spec.required,
        overrides=overrides,
        ends_are=ends_are,
        ignore=ignore,
        bootstrap=used.get("missing_bootstrap"),
    )
    with clock.stage("plan"):
        # the last step alone: roles, flag meanings and errors before any real work
        probe = prepare(source, dones_mean=dones_mean, window=(steps - 1, steps), **options)
    decided = probe.dones_mean
    names = [prefix + n for n in _output_names(spec, probe)]
    if not dry_run and not overwrite:
        refuse_clash(source, target, names)
    refuse_reading_outputs(names, probe.roles, estimator)
    if dry_run:
        return _plan_streamed(
            estimator, spec, source, target, names, used, clock, dev, options, decided, steps
        )
    call["time_dim"] = probe.time_dim
    call["backend"] = backend
    metadata = provenance(spec, estimator, used, probe.roles, source.layout)

    ref = next(v for v in probe.kwargs.values() if hasattr(v, "ndim") and v.ndim > 0)
    rows = 1 if ref.ndim == 1 or source.layout == "flat" else int(ref.size)
    plan = stream.make_plan(
        steps, rows, reverse=spec.reverse, chunk_steps=chunk_steps, block_steps=block_steps
    )
    full_shape = (steps,) if source.layout == "flat" else _full_shape(source, steps, rows)
    notes = list(probe.notes)
    if chunk_steps is not None and plan.chunk * plan.rows > max(chunk_steps, plan.rows):
        notes.append(
            f"--chunk-steps {chunk_steps:,} is below one estimator call; raised to "
            f"{plan.chunk * plan.rows:,} (lower --block-steps too for smaller windows)"
        )

    def prepare_window(start: int, stop: int) -> Any:
        return prepare(source, dones_mean=decided, window=(start, stop), **options)

    dtypes: dict[str, str] = {}

    def compute(block: dict[str, Any], carry: Any) -> tuple[dict[str, Any], Any]:
        with warnings.catch_warnings():  # Arrow buffers are read-only; nothing writes them
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            result = spec.function(**block, **call, carry=carry)
        outputs = {prefix + k: v for k, v in dict(result).items() if v is not None}
        if not dtypes:
            dtypes.update({k: str(v.dtype).removeprefix("torch.") for k, v in outputs.items()})
        return outputs, result.carry

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
            sink = _sink(source, target, dry_run, full_shape, metadata, names, probe, overwrite)
        if progress is not None:
            progress("stream", True)
            if advance is not None:
                advance(0, steps * rows)
        t0 = time.perf_counter()
        try:
            with _cli_bootstrap_hint():
                totals = stream.run_windows(
                    plan,
                    prepare_window,
                    compute,
                    sink.write,
                    device=dev,
                    time_dim=probe.time_dim,
                    on_window=on_window,
                )
            if totals.id_runs and "episode_id" in probe.roles:
                stream.check_id_runs(totals.id_runs, probe.roles["episode_id"], source.where)
        finally:
            if progress is not None:
                progress("stream", False)
        walk = time.perf_counter() - t0
        for stage in ("read", "to device", "scan", "from device", "write"):
            if stage not in totals.busy or (dry_run and stage == "write"):
                clock.skip(stage)
                continue
            nbytes = totals.bytes.get(stage, 0)
            clock.stages.append(Stage(stage, totals.busy[stage], nbytes, totals.steps))
        if isinstance(sink, HDF5Sink):  # the safety copy of the file, beside the stream
            sink.wait_copied()
            clock.stages.append(Stage("copy", sink.copy_seconds, sink.copy_bytes))
        clock.stages.append(Stage("stream (wall)", walk, 0, totals.steps))
        written = False
        if dry_run:
            sink.commit()
            clock.skip("commit")
        else:
            with clock.stage("commit", steps=totals.steps) as box:
                box["bytes"] = sink.commit()
            written = True
    except BaseException as err:
        if sink is not None:
            sink.abort(err)
        raise

    outputs = [
        OutputInfo(name, tuple(full_shape), dtypes.get(name, ""), _location(source, target, name))
        for name in names
    ]
    info = StreamInfo(
        chunk_steps=plan.chunk * plan.rows,
        block_steps=plan.block * plan.rows,
        windows=totals.windows,
        peak_rss_bytes=_peak_rss(),
        peak_device_bytes=totals.peak_device_bytes if dev.type == "cuda" else None,
    )
    return RunReport(
        command=estimator,
        input=source.where,
        output=target.describe(),
        format=source.format,
        layout=source.layout,
        device=str(dev),
        backend=_backend_name(backend, dev),
        dtype=probe.dtype,
        steps=totals.steps,
        episodes=totals.episodes,
        sequences=rows if source.layout != "flat" else 1,
        params=used,
        columns=dict(probe.roles),
        outputs=outputs,
        stages=clock.stages,
        counts=totals.counts,
        notes=[*notes, *assumption_notes(totals.counts, used, source.layout)],
        dry_run=dry_run,
        written=written,
        rltscan_version=_version(),
        wall_seconds=time.perf_counter() - wall0 + _before(clock),
        streaming=info,
    )


def _plan_streamed(
    estimator: str,
    spec: Any,
    source: Any,
    target: wb.Target,
    names: list[str],
    used: dict[str, Any],
    clock: _Clock,
    dev: torch.device,
    options: dict[str, Any],
    decided: Any,
    steps: int,
) -> RunReport:
    """``--dry-run`` of a streamed file: the same resolver over every window, reading
    only the flag columns and the reference column; nothing is computed or written."""
    counts: dict[str, int] = {}
    runs: list[tuple[int, Any]] = []
    episodes = 0
    window = stream.DEFAULT_CHUNK_STEPS  # steps of the time axis per window (flags only)
    with clock.stage("plan (flags)") as box:
        for start in range(0, steps, window):
            stop = min(start + window, steps)
            part = prepare(
                source, dones_mean=decided, window=(start, stop), flags_only=True, **options
            )
            for key, value in part.counts.items():
                counts[key] = counts.get(key, 0) + value
            episodes += part.episodes
            if part.id_runs is not None:
                runs.append((start, part.id_runs))
            box["bytes"] += part.bytes_read
        if runs and "episode_id" in part.roles:
            stream.check_id_runs(runs, part.roles["episode_id"], source.where)
    total = steps * max(part.sequences, 1) if source.layout != "flat" else steps
    planned = dataclasses.replace(part, steps=total, counts=counts, episodes=episodes)
    return plan_report(estimator, spec, source, target, planned, names, used, clock, dev)


def _before(clock: _Clock) -> float:
    """Time spent before this function (detect), which the wall time includes."""
    return sum(s.seconds for s in clock.stages if s.name == "detect")


def _full_shape(source: Any, steps: int, rows: int) -> tuple[int, ...]:
    return (steps, rows) if source.layout == "time-major" else (rows, steps)


def _sink(
    source: Any,
    target: wb.Target,
    dry_run: bool,
    full_shape: tuple[int, ...],
    metadata: dict[str, Any],
    names: list[str],
    probe: Any,
    overwrite: bool,
) -> Any:
    if dry_run:
        return NullSink()
    dst = target.path if target.kind == "file" else source.path
    if target.kind == "file" and target.path.exists() and not overwrite:
        raise OutputRefusedError(f"{target.path} already exists; pass --overwrite to replace it")
    if source.format == "hdf5":
        return HDF5Sink(
            source.path,
            dst,
            group=source.group,
            shape=full_shape,
            time_axis=1 if source.layout == "batch-major" else 0,
            attrs=wb.hdf5_attrs(metadata),
            template=probe.template,
            overwrite=overwrite,
        )
    return ParquetSink(
        source.raw,
        dst,
        steps=full_shape[0],
        metadata=wb.parquet_entry(names, metadata),
        overwrite=overwrite,
        where=source.where,
    )


def _peak_rss() -> int:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)
