"""One planning step and one report for every engine (whole file, streaming, shards).

A :class:`Plan` is decided once from the :class:`~rltscan.options.RunOptions`, the
opened input, its target and a first resolution of its columns: output names,
clashes, the estimator's call arguments and the provenance record. Engines execute a
plan; :func:`report` turns what they did into the one
:class:`~rltscan.report.RunReport`. Torch-free (a GPU clock syncs through a lazy
import).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rltscan.errors import DataError, MissingBootstrapError, OutputRefusedError, RltscanError
from rltscan.estimators.declaration import setting_columns
from rltscan.io import writeback as wb
from rltscan.io.ends import where_is
from rltscan.io.formats import named
from rltscan.io.layout import Prepared, prepare
from rltscan.options import RunOptions
from rltscan.report import OutputInfo, RunReport, Stage, StreamInfo
from rltscan.roles import of_argument

Progress = Callable[[str, bool], None]  # (stage, started) -> None; the CLI draws it

# The choices of a reading that change numbers, recorded with the parameters
READING_CHOICES = ("dones_mean", "ends_are", "observation_gaps", "is_last_row", "autoreset")
BOOTSTRAP_FIX = (
    "pass --next-values KEY (or --last-values KEY for a [T, B] buffer), "
    "or --missing-bootstrap zero to count it as 0"
)


def terminal_rule(reading: Mapping[str, Any], by: Mapping[str, str] | None = None) -> str:
    """What this run took for a termination and a truncation, in words: the fixed rules
    (docs/CONVENTIONS.md §1.1-1.3) plus every choice in force (``Prepared.reading``)."""
    by = by or {}
    parts = [
        "terminated wins over truncated",
        "the end of the data is a truncation (it bootstraps)",
    ]
    ends_are = reading.get("ends_are")
    if ends_are is not None:
        kind = "terminations" if ends_are == "terminal" else "truncations"
        said = by.get("ends_are") or f"--ends-are {ends_are}"
        parts.append(f"episode ends that no flag explains are {kind} ({said})")
    dones = reading.get("dones_mean")
    if dones == "ended":
        parts.append('"dones" marks the end of step t')
    elif dones == "starts":
        parts.append('"dones" marks the first step of an episode (shifted to the step before)')
    gaps = reading.get("observation_gaps")
    if gaps == "truncate":
        parts.append("hidden ends (observation jumps) are truncations (--ends-from-observations)")
    elif gaps == "ignore":
        parts.append("observations are not checked for hidden ends (--ignore-observation-gaps)")
    last = reading.get("is_last_row")
    if last == "observation":
        parts.append(
            "an is_last row holds the final observation, not a transition; its is_terminal "
            "ends the step before it"
        )
    elif last == "transition":
        parts.append("an is_last row is the last step of its episode")
    if reading.get("autoreset") == "next-step":
        parts.append(
            "the row after each episode end is a Gymnasium NEXT_STEP reset row, not a step; "
            "its value bootstraps a truncated episode"
        )
    return "; ".join(parts)


def version() -> str:
    import rltscan

    return rltscan.__version__


def _sync(device: Any) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


class Clock:
    """Collects :class:`Stage` timings; synchronises the GPU before reading the clock."""

    def __init__(self, device: Any, progress: Progress | None) -> None:
        self.device = device
        self.stages: list[Stage] = []
        self.progress = progress

    @contextmanager
    def stage(self, name: str, *, bytes: int = 0, steps: int = 0) -> Any:
        box: dict[str, int] = {"bytes": bytes, "steps": steps}
        if self.progress:
            self.progress(name, True)
        _sync(self.device)
        start = time.perf_counter()
        try:
            yield box
            _sync(self.device)
        finally:
            if self.progress:
                self.progress(name, False)
        self.stages.append(Stage(name, time.perf_counter() - start, box["bytes"], box["steps"]))

    def skip(self, name: str) -> None:
        self.stages.append(Stage(name, 0.0, skipped=True))

    def advance(self, done: int, total: int) -> None:
        """Tell the progress display that ``done`` of ``total`` steps are through."""
        advance = getattr(self.progress, "advance", None)
        if advance is not None:
            advance(done, total)

    def seconds(self, name: str) -> float:
        """Time spent so far in the stages called ``name``."""
        return sum(s.seconds for s in self.stages if s.name == name)


@dataclass(frozen=True)
class Plan:
    """What a run will do, decided before any value is computed."""

    opts: RunOptions
    spec: Any  # the estimator's declaration
    target: wb.Target
    names: tuple[str, ...]  # output names, with the prefix
    call: Mapping[str, Any]  # estimator keyword arguments besides data and carry
    used: Mapping[str, Any]  # the parameters as used (defaults filled)
    metadata: Mapping[str, Any]  # provenance, written beside the outputs
    roles: Mapping[str, str] = field(default_factory=dict)  # role -> column
    # written column -> the estimator output it holds (advantages_g0.9_l0.95 -> advantages)
    output_of: Mapping[str, str] = field(default_factory=dict)

    def prepare_options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`rltscan.io.layout.prepare` for this run."""
        return dict(
            arguments=self.spec.inputs_for(self.used),
            required=self.spec.required_for(self.used),
            reading=self.opts.reading,
            bootstrap=self.used.get("missing_bootstrap"),
            ends_matter=self.spec.bootstraps,
        )


def prepare_options(opts: RunOptions) -> dict[str, Any]:
    """:meth:`Plan.prepare_options` before a plan exists (the first resolution)."""
    spec = opts.declaration
    used = opts.call_options()[1]
    return dict(
        arguments=spec.inputs_for(used),
        required=spec.required_for(used),
        reading=opts.reading,
        bootstrap=opts.bootstrap_rule,
        ends_matter=spec.bootstraps,
    )


def make_plan(
    opts: RunOptions,
    source: Any,
    target: wb.Target,
    probe: Prepared,
    *,
    time_dim: int | None = None,
    check_clash: bool = True,
) -> Plan:
    """Names, clashes, call arguments and provenance from the first resolution."""
    spec = opts.declaration
    settings = opts.settings  # several (γ, λ): one column per setting and output
    columns = setting_columns(output_names(spec, probe), settings)
    names = tuple(opts.prefix + c for c, _, _ in columns)
    if check_clash and not opts.dry_run and not opts.overwrite:
        refuse_clash(source, target, list(names))
    refuse_reading_outputs(names, probe.roles, opts.command)
    refuse_boolean_numbers(source, spec.float_inputs, probe.roles)
    call, used = opts.call_options()
    call["time_dim"] = probe.time_dim if time_dim is None else time_dim
    call["backend"] = opts.backend
    return Plan(
        opts=opts,
        spec=spec,
        target=target,
        names=names,
        call=call,
        used=used,
        metadata=provenance(
            spec,
            opts.command,
            used,
            probe.roles,
            source.layout,
            {opts.prefix + c: settings[k] for c, _, k in columns} if settings else None,
            reading={**probe.reading, "by": dict(probe.by)},
            options=options_of(opts),
            layout_notes=layout_evidence(opts, source),
        ),
        roles=dict(probe.roles),
        output_of={opts.prefix + c: o for c, o, _ in columns},
    )


def provenance(
    spec: Any,
    command: str,
    used: Mapping[str, Any],
    roles: Mapping[str, str],
    layout: str,
    settings: Mapping[str, Mapping[str, float]] | None = None,
    *,
    reading: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
    layout_notes: list[str] | None = None,
) -> dict[str, Any]:
    """What is recorded beside the outputs (HDF5 attributes, Parquet metadata, the
    ``--json`` report; docs/CONVENTIONS.md §6): the parameters as used, the columns read
    (role -> column), the layout and how it was decided, the reading in force (every
    choice that changes numbers, with who made the ones the user did not), the terminal
    rule that follows from them, and ``options``: the ``rltscan.run`` keyword arguments
    the run was given, which recompute the outputs from the same input. With several
    settings, ``settings`` maps each output column to its (γ, λ)."""
    extra = {"settings": {k: dict(v) for k, v in settings.items()}} if settings else {}
    reading = dict(reading or {})
    by = reading.pop("by", {}) or {}
    # the reading choices are parameters of the numbers too (--ends-are, --dones-mean, ...)
    choices = {k: reading[k] for k in READING_CHOICES if reading.get(k) is not None}
    return {
        **extra,
        "estimator": spec.name,
        "command": command,
        "params": {**dict(used), **choices},
        "source_columns": dict(roles),
        "rltscan_version": version(),
        "terminal_rule": terminal_rule(reading, by),
        "layout": layout,
        "layout_evidence": list(layout_notes or []),
        "reading": {**reading, "by": dict(by)},
        "options": dict(options or {}),
    }


def layout_evidence(opts: RunOptions, source: Any) -> list[str]:
    """How the layout was decided, in words: the option, the file's ``layout``
    attribute, the reader's proof (a per-sequence dataset), or the data's own form."""
    if opts.reading.layout is not None:
        return [f"--layout {opts.reading.layout}"]
    notes = list(getattr(source, "notes", ()))
    attrs = getattr(source, "attrs", {}) or {}
    if "layout" in attrs and source.layout in ("time-major", "batch-major"):
        notes.insert(0, f'the file\'s "layout" attribute ("{attrs["layout"]}")')
    if not notes:
        form = {
            "flat": "one row per step",
            "episodes": "one group or directory per episode",
        }.get(source.layout, "the file's form")
        notes.append(f"{source.layout}: {form} (--layout overrides)")
    return notes


def options_of(opts: RunOptions) -> dict[str, Any]:
    """The keyword arguments of ``rltscan.run`` (besides the command, the input and where
    the outputs go) that compute these numbers again: the reading as given, and the
    parameters and missing-bootstrap rule as used (defaults filled in, so that the same
    run from the command line or from Python records the same options)."""
    used = opts.call_options()[1]
    params = {
        k: v
        for k, v in used.items()
        if k != "missing_bootstrap" and v is not None and not str(v).startswith("column ")
    }
    return {
        **opts.reading.keywords(),
        "params": params,
        "missing_bootstrap": used.get("missing_bootstrap"),
        "prefix": opts.prefix,
    }


def refuse_reading_outputs(
    names: list[str] | tuple[str, ...], roles: Mapping[str, str], estimator: str
) -> None:
    """An output may never replace a column the estimator reads, even with --overwrite."""
    read_columns = set(roles.values())
    for name in names:
        if name in read_columns:
            raise OutputRefusedError(
                f'output "{name}" would overwrite input column "{name}" that {estimator} reads, '
                "even with --overwrite; pass --prefix P"
            )


def refuse_boolean_numbers(
    source: Any, arguments: tuple[str, ...], roles: Mapping[str, str]
) -> None:
    """A column read as numbers (rewards, values, log-probabilities: the estimator's
    float ``arguments``) that the file stores as booleans is refused by name: True is
    not a reward of 1 unless its writer says so, and the estimator's own refusal named
    neither the file nor the option."""
    for argument in arguments:
        row = of_argument(argument)
        if row is None or row.name not in roles:
            continue
        name = roles[row.name]
        info = source.columns.get(name)
        if info is not None and info.dtype.removeprefix("torch.") in ("bool", "boolean"):
            read_as = "" if name == row.name else f" (read as {row.name})"
            fix = "store it as numbers (0.0/1.0 if True means 1)"
            raise DataError(
                f'{source.where}: column "{name}"{read_as} holds booleans, not numbers',
                f"{fix} or pass another column with {row.option}" if row.option else fix,
            )


def refuse_clash(source: Any, target: wb.Target, names: list[str]) -> None:
    """Outputs that already exist at the target need --overwrite (or a --prefix)."""
    clash = wb.existing(source, target, names)
    if clash:
        raise OutputRefusedError(
            f'{target.describe()} already has "{clash[0]}"; pass --overwrite or --prefix P'
            if target.kind != "file"
            else f"{clash[0]} already exists; pass --overwrite to replace it"
        )


def normalization(
    plan: Plan, outputs: Mapping[str, Any]
) -> tuple[dict[str, tuple[float, float]], list[str]]:
    """``--normalize``: each advantage column's dataset-wide ``(mean, std)`` (population,
    finite entries) from the run's output statistics (``rltscan.stats.OutputStats`` by
    column), and the report's notes; refused where a column has no spread. Every engine
    takes its scales from here."""
    advantages = set(plan.spec.normalizable)
    scales: dict[str, tuple[float, float]] = {}
    notes = []
    for name in plan.names:
        if plan.output_of.get(name) not in advantages:
            continue
        moments = outputs[name].moments
        mean, std = moments.mean, moments.std
        if not moments.count or std is None or not std > 0:
            raise DataError(
                f"{name} has no spread to normalise by (std {std}); "
                "drop --normalize or check the inputs"
            )
        scales[name] = (float(mean), float(std))
        notes.append(
            f"--normalize: {name} written as (x − {mean:.6g}) / {std:.6g}, its mean and std over "
            "the whole dataset (the statistics above are before normalising)"
        )
    return scales, notes


def output_names(spec: Any, prepared: Any) -> list[str]:
    """The outputs this call will produce (Retrace's advantages only with v_pi)."""
    names = list(spec.outputs)
    present = set(prepared.kwargs) | set(prepared.roles)
    if "v_pi" in spec.inputs and "v_pi" not in present and "advantages" in names:
        names.remove("advantages")
    return names


def location(source: Any, target: wb.Target, name: str) -> str:
    """Where an output lands, as the report says it."""
    if target.kind == "stdout":
        return f"stdout column {name}"
    if named(source.format).tree and (target.kind == "inplace" or named(target.format).tree):
        group = source.group.rstrip("/")
        if source.episode_keys:
            return f"{target.path}:{group}/<episode>/{name}"
        return f"{target.path}:{group}/{name}"
    return f"{target.path} column {name}"


def backend_name(backend: str, device: Any) -> str:
    """The backend that runs (a plan: would run) on ``device``: the scan's own choice,
    made without importing triton or torch (a dry run stays torch-free)."""
    from rltscan.scan import resolve_backend

    return resolve_backend(backend, device, load=False)


def _backend_note(plan: Plan, device: Any) -> list[str]:
    """A run that computed says when ``--backend auto`` fell back from triton to torch."""
    if plan.opts.dry_run:
        return []
    from rltscan.scan import fallback_note

    note = fallback_note(plan.opts.backend, device)
    return [note] if note else []


def assumption_notes(
    counts: Mapping[str, int], used: Mapping[str, Any], layout: str, bootstraps: bool = True
) -> list[str]:
    """The defaults that changed numbers in this run, as report notes (never silent).
    ``bootstraps``: the estimator reads V(s_{t+1}) (else an open end changes nothing)."""
    notes = []
    open_ends = counts.get("open_ends", 0)
    if open_ends and bootstraps:
        what = (
            "the data ends with no flag"
            if layout in ("flat", "episodes")
            else f"{open_ends} sequence(s) end with no flag"
        )
        notes.append(f"{what}: treated as a truncation (bootstrapped from V(s_{{t+1}}))")
    zero = counts.get("zero_bootstraps", 0)
    if zero:
        notes.append(
            f"{zero} truncation(s) had no bootstrap value V(s_{{t+1}}) and used 0 "
            f"(--missing-bootstrap {used.get('missing_bootstrap', 'zero')}); "
            "pass --next-values KEY to bootstrap them"
        )
    gaps = counts.get("observation_gaps", 0)
    if gaps:
        notes.append(f"{gaps} hidden episode end(s) found where the observations jump")
    return notes


def planned_outputs(
    plan: Plan, source: Any, prepared: Prepared, shape: tuple[int, ...] | None = None
) -> list[OutputInfo]:
    """The outputs as a plan sees them (a dry run, or before the dtypes are known)."""
    ref = np.dtype(prepared.dtype)
    dtype = str(ref) if ref.kind == "f" and ref.itemsize >= 4 else "float32"
    shape = shape or planned_shape(source, prepared)
    return [OutputInfo(n, shape, dtype, location(source, plan.target, n)) for n in plan.names]


def planned_shape(source: Any, prepared: Prepared) -> tuple[int, ...]:
    if prepared.lengths:
        return (len(prepared.lengths), -1)  # one (T_i,) dataset per episode
    if source.layout == "flat":
        return (prepared.steps,)
    per = prepared.steps // max(prepared.sequences, 1)
    if source.layout == "time-major":
        return (per, prepared.sequences)
    return (prepared.sequences, per)


def report(
    plan: Plan,
    source: Any,
    clock: Clock,
    *,
    device: Any,
    backend: str | None = None,
    dtype: str,
    steps: int,
    episodes: int,
    sequences: int,
    outputs: list[OutputInfo],
    counts: Mapping[str, int],
    notes: list[str],
    written: bool,
    wall_seconds: float | None = None,
    streaming: StreamInfo | None = None,
    format: str | None = None,
    statistics: Mapping[str, Any] | None = None,
) -> RunReport:
    """The one :class:`RunReport` builder: every engine and the dry runs end here.
    ``backend``: the one that ran; None: the one the options pick on ``device``."""
    if backend is None:
        backend = backend_name(plan.opts.backend, device)
    if format is None:
        format = source.format if source.backend is None else f"{source.format}/{source.backend}"
    return RunReport(
        command=plan.opts.command,
        input=source.where,
        output=plan.target.describe(),
        format=format,
        layout=source.layout,
        device=str(device),
        backend=backend,
        dtype=dtype,
        steps=steps,
        episodes=episodes,
        sequences=sequences,
        params=dict(plan.metadata.get("params", plan.used)),
        columns=dict(plan.roles),
        outputs=outputs,
        stages=clock.stages,
        counts=dict(counts),
        notes=[
            *notes,
            *assumption_notes(counts, plan.used, source.layout, plan.spec.bootstraps),
            *_backend_note(plan, device),
        ],
        dry_run=plan.opts.dry_run,
        written=written,
        rltscan_version=version(),
        wall_seconds=wall_seconds,
        streaming=streaming,
        statistics=None if statistics is None else dict(statistics),
        provenance=dict(plan.metadata),
    )


def dry_run_report(
    plan: Plan, source: Any, clock: Clock, device: Any, prepared: Prepared
) -> RunReport:
    """The report of a dry run: what would be computed and written, from the plan alone."""
    return report(
        plan,
        source,
        clock,
        device=device,
        backend="none (dry run)",
        dtype=prepared.dtype,
        steps=prepared.steps,
        episodes=prepared.episodes,
        sequences=prepared.sequences,
        outputs=planned_outputs(plan, source, prepared),
        counts=prepared.counts,
        notes=prepared.notes,
        written=False,
    )


@contextmanager
def bootstrap_hint(
    plan: Plan | None = None, source: Any = None, prepared: Prepared | None = None
) -> Iterator[None]:
    """Errors from the estimator in the file's terms: the missing-bootstrap fix as
    column options instead of Python argument names, and (given the plan and source)
    a bad entry named by the file, the column as stored, its row and its kind (null,
    NaN, +Inf or -Inf) instead of the argument's name."""
    try:
        yield
    except MissingBootstrapError as e:
        raise e.replace(fix=BOOTSTRAP_FIX) from None
    except DataError as e:
        if plan is None or source is None or e.column is None or e.where:
            raise
        raise in_file_terms(e, plan, source, prepared) from None


def in_file_terms(
    err: DataError, plan: Plan, source: Any, prepared: Prepared | None = None
) -> RltscanError:
    """``err`` (about an estimator argument, at an index of the arrays it was given) said
    about the stored column: its name, the row (or step of an env/episode) and the
    entry's kind as stored. Unchanged when the argument maps to no column."""
    from rltscan.io.entries import describe, entry_kind

    arg = err.column or ""
    row = of_argument(arg)
    column = plan.roles.get(row.name) if row else None
    later = ""
    if column is None and arg == "next_values" and "values" in plan.roles:
        column, later = plan.roles["values"], " (its next row's value)"  # V(s_{t+1})
    if column is None or err.index is None:
        return err
    index = tuple(err.index)
    value = None
    if prepared is not None and isinstance(prepared.kwargs.get(arg), np.ndarray):
        value = prepared.kwargs[arg][index]
    lengths = prepared.lengths if prepared is not None else []
    if len(index) == 1 and prepared is not None and prepared.kept is not None:
        index = (prepared.stored_row(index[0]) + (1 if later else 0),)
        later = ""
    if later:
        kind = describe(value) if value is not None else "a non-finite value"
    else:
        kind = entry_kind(source, column, index, value)
    if len(index) == 1 and source.layout == "flat":
        at = "row {index}"  # the index field, as the message shows it
    else:
        whole = " of the episodes back to back" if lengths else ""
        at = where_is(np.asarray(index), source, lengths) + f" (index {{index}}{whole})"
    return DataError(
        f'column "{column}" holds {kind} at {at}{later}, an entry that is read',
        "fix or mask the data (NaN is only allowed in ignored slots)",
        column=column,
        index=index,
        where=source.where,
    )


def first_missing_bootstrap(
    err: MissingBootstrapError, source: Any, options: Mapping[str, Any], steps: int
) -> RltscanError:
    """The missing-bootstrap error of the FIRST step that needs one (a backward stream
    meets the last one first): the flag columns read window by window from the start,
    on the error path only. ``err`` when no earlier window has one."""
    window = 1 << 22
    for start in range(0, steps, window):
        try:
            prepare(source, window=(start, min(start + window, steps)), flags_only=True, **options)
        except MissingBootstrapError as first:
            return first
    return err
