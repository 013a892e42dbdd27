"""``run()`` and ``inspect()``: the file-level API that the CLI is a thin layer over.

``run`` builds one :class:`~rltscan.options.RunOptions`, opens the input, decides
the plan (:mod:`rltscan.plan`) and hands it to the engine for that input, all one walk
(:mod:`rltscan.engines`): a file streamed in windows (HDF5 arrays and Parquet files
written back to their own format), read whole as one window (every other input and
target) or a sharded dataset, shard by shard. Python users get the same behaviour, errors and
:class:`~rltscan.report.RunReport` as the CLI. Torch loads only where a run computes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, BinaryIO

import numpy as np

from rltscan import stats
from rltscan.devices import PlannedDevice, planned_device, resolve_device, run_device
from rltscan.errors import AmbiguousInputError, ParameterError, RltscanError
from rltscan.io import open_input
from rltscan.io import writeback as wb
from rltscan.io.final_rows import rows_may_be_excluded
from rltscan.io.layout import prepare
from rltscan.io.resolve import (
    Autoreset,
    Decision,
    IsLastRow,
    ObservationGaps,
    Reading,
    decisions_error,
)
from rltscan.options import RunOptions
from rltscan.plan import (
    Clock,
    Progress,
    assumption_notes,
    prepare_options,
    refuse_boolean_numbers,
)
from rltscan.report import RunReport
from rltscan.roles import ROLES

__all__ = ["check_params", "execute", "inspect", "resolve_device", "run"]


def check_params(params: Mapping[str, float | None]) -> None:
    """Parameter ranges (docs/CONVENTIONS.md §5), checked before any file is opened: the
    declared ranges (the one table, ``rltscan.estimators.check_params``), named as options."""
    from rltscan.estimators import check_params as declared

    declared(params, options=True)


@wb.guarded  # the write-back rules: checks, lock, identity (README "Write-back rules")
def run(
    estimator: str,
    input: str,
    *,
    output: str | None = None,
    to: str | None = None,
    prefix: str = "",
    overwrite: bool = False,
    dry_run: bool = False,
    params: Mapping[str, float | None] | None = None,
    columns: Mapping[str, str | None] | None = None,
    layout: str | None = None,
    group: str | None = None,
    dones_mean: str | None = None,
    ends_are: str | None = None,
    missing_bootstrap: str | None = None,
    device: str = "auto",
    backend: str = "auto",
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
    progress: Progress | None = None,
    chunk_steps: int | None = None,
    block_steps: int | None = None,
    engine: str | None = None,
    ray_address: str | None = None,
    workers: int | None = None,
    order_by: str | None = None,
    ignore: tuple[str, ...] | list[str] = (),
    break_links: bool = False,
    observation_gaps: ObservationGaps = "error",
    normalize: bool = False,
    is_last_row: IsLastRow | None = None,
    autoreset: Autoreset | None = None,
) -> RunReport:
    """Compute ``estimator`` (a CLI command name, e.g. ``"gae"``) over ``input``.

    Results go into the input (default), into ``output`` (a new file), or to
    ``stdout`` when ``output == "-"``. Raises :class:`~rltscan.errors.RltscanError`
    subclasses for every user-facing problem.

    HDF5 arrays and Parquet files written back to their own format are streamed:
    read, computed and written ``chunk_steps`` steps at a time with the recurrence
    carried across (:mod:`rltscan.engines.stream`), so memory does not grow with the file.
    ``block_steps`` is the size of one estimator call; for a given ``block_steps``
    the results are bit-identical whatever ``chunk_steps`` is, and for a file read
    whole (one window); shards give them too where docs/SHARDS.md says.

    A directory or glob of Parquet files (or, with ``engine``, a Minari Parquet
    dataset; a LeRobot dataset) is a sharded dataset (:mod:`rltscan.engines.shards`):
    ``engine="local"`` (the default) runs its shards in this process, ``engine="ray"``
    as Ray tasks (``ray_address``, ``workers``); both give identical outputs, written
    to each shard in place or to the directory ``output``. ``order_by`` orders the
    shards by the first value of a column instead of by file name.

    How columns are read (docs/CONVENTIONS.md §1): ``columns`` maps roles to
    columns; ``dones_mean``, ``ends_are`` and ``observation_gaps`` ("error",
    "truncate" or "ignore") say what a ``dones`` column, unflagged episode ends and
    hidden (observation-jump) ends mean; ``is_last_row`` ("observation" or
    "transition") whether an RLDS ``is_last`` row holds only the final observation or
    is the episode's last step (docs/CONVENTIONS.md §1.9); ``autoreset="next-step"`` that
    the row after each episode end is a Gymnasium NEXT_STEP reset row, not a step
    (docs/CONVENTIONS.md §1.4); ``ignore`` names columns that
    look like a role but must not be used. ``dry_run`` plans: it resolves every column, reads only
    the flag columns and the reference column, checks the rest from the file's
    metadata, and computes and writes nothing. ``normalize`` writes the advantage
    outputs standardised by their dataset-wide mean and std (streamed files: a second
    pass over the written outputs only; sharded datasets: a second compute pass).
    """
    reading = _reading(
        columns,
        layout,
        group,
        dones_mean,
        ends_are,
        ignore,
        observation_gaps,
        is_last_row,
        autoreset,
    )
    opts = RunOptions(
        command=estimator,
        input=input,
        reading=reading,
        output=output,
        to=to,
        prefix=prefix,
        overwrite=overwrite,
        dry_run=dry_run,
        params={k: v for k, v in (params or {}).items() if v is not None},
        missing_bootstrap=missing_bootstrap,
        device=device,
        backend=backend,
        chunk_steps=chunk_steps,
        block_steps=block_steps,
        engine=engine,
        ray_address=ray_address,
        workers=workers,
        order_by=order_by,
        break_links=break_links,
        normalize=normalize,
    )
    return execute(opts.check(), stdin=stdin, stdout=stdout, progress=progress)


def execute(
    opts: RunOptions,
    *,
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
    progress: Progress | None = None,
) -> RunReport:
    """Run checked options on the engine their input needs (see :func:`run`)."""
    from rltscan.io.shards import is_sharded

    if is_sharded(opts.input, opts.engine):
        from rltscan.engines.shards.run import run_sharded

        return run_sharded(opts, Clock(PlannedDevice("cpu"), progress))
    if opts.engine == "ray" or any(
        x is not None for x in (opts.workers, opts.ray_address, opts.order_by)
    ):
        raise ParameterError(
            f"{opts.input} is one file; --engine ray, --workers, --ray-address and --order-by "
            "take a directory or glob of Parquet shards (or a Minari Parquet dataset)"
        )
    dev = planned_device(opts.device) if opts.dry_run else run_device(opts.device)
    clock = Clock(dev, progress)
    reading = opts.reading
    with clock.stage("detect"):
        source = _open_deciding(opts, stdin)
    try:
        target = wb.plan_target(source, opts.output, opts.to)
        from rltscan.engines.stream.run import run_streamed, run_whole

        if wb.streamable(source, target) and not rows_may_be_excluded(source, reading):
            return run_streamed(opts, source, target, clock, dev)
        return run_whole(opts, source, target, clock, dev, stdout)
    finally:
        source.close()


def _reading(
    columns: Mapping[str, str | None] | None,
    layout: str | None,
    group: str | None,
    dones_mean: str | None,
    ends_are: str | None,
    ignore: tuple[str, ...] | list[str],
    observation_gaps: ObservationGaps,
    is_last_row: str | None = None,
    autoreset: str | None = None,
) -> Reading:
    """The :class:`Reading` that ``run``'s and ``inspect``'s keywords describe."""
    return Reading(
        columns={k: v for k, v in (columns or {}).items() if v},
        layout=layout,
        group=group,
        dones_mean=dones_mean,  # type: ignore[arg-type]
        ends_are=ends_are,  # type: ignore[arg-type]
        ignore=tuple(ignore),
        observation_gaps=observation_gaps,
        is_last_row=is_last_row,  # type: ignore[arg-type]
        autoreset=autoreset,  # type: ignore[arg-type]
    )


def _open_deciding(opts: RunOptions, stdin: BinaryIO | None) -> Any:
    """The input, opened; a layout the file does not settle is refused together with
    every other decision the data leaves open (each with its flag), not alone."""
    reading = opts.reading
    try:
        return _open(opts.input, reading, stdin)
    except AmbiguousInputError as err:
        if reading.layout is not None or err.fix is None:
            raise
        source, decision = _provisional(opts.input, reading, stdin, err)
        if source is None:
            raise
        try:
            prepared = prepare(
                source, **prepare_options(opts), strict=False, flags_only=True, provisional=True
            )
        except RltscanError:
            raise err from None
        finally:
            source.close()
        if not prepared.pending:
            raise
        where = err.where or opts.input
        raise decisions_error(where, [decision, *prepared.pending]) from None


def _open(path: str, reading: Reading, stdin: BinaryIO | None, layout: str | None = None) -> Any:
    return open_input(
        path,
        group=reading.group,
        layout=layout or reading.layout,  # type: ignore[arg-type]
        rewards=reading.columns.get("rewards"),
        stdin=stdin,
    )


def _provisional(
    path: str, reading: Reading, stdin: BinaryIO | None, err: AmbiguousInputError
) -> tuple[Any, Decision]:
    """A file whose layout is a decision, opened with the first layout it takes (only to
    find the other decisions; nothing is computed with it), and that decision."""
    decision = Decision(err.what, err.fix or "pass --layout")
    for layout in ("time-major", "batch-major", "episodes", "flat"):  # 2-D first: the axes
        try:
            return _open(path, reading, stdin, layout), decision
        except RltscanError:
            continue
    return None, decision


# --------------------------------------------------------------------------- inspect


def inspect(
    path: str,
    *,
    group: str | None = None,
    layout: str | None = None,
    columns: Mapping[str, str | None] | None = None,
    dones_mean: str | None = None,
    ends_are: str | None = None,
    stdin: BinaryIO | None = None,
    ignore: tuple[str, ...] | list[str] = (),
    missing_bootstrap: str | None = None,
    observation_gaps: ObservationGaps = "error",
    is_last_row: IsLastRow | None = None,
    autoreset: Autoreset | None = None,
    params: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """What ``path`` holds: layout, columns and their roles, flag counts, and for each
    estimator whether it can run (and if not, what it still needs).

    It takes every reading option :func:`run` takes (``columns``, ``layout``,
    ``group``, ``dones_mean``, ``ends_are``, ``ignore``, ``observation_gaps``,
    ``is_last_row``, ``autoreset``, ``missing_bootstrap``) and ``params`` (each estimator
    takes those it has: a ``trace`` changes what Retrace reads). Each estimator is planned
    exactly as ``run(command, path, <the same options>, dry_run=True)`` plans it (the same
    resolver,
    the same checks of the options, the same missing-bootstrap rule), so "ready" means
    that run goes. ``roles`` lists every column whose role was recognised, also while
    decisions are open; ``decisions`` lists each open one with the flag that settles it
    (an estimator waiting on them is not ready and names them)."""
    from rltscan.estimators import DECLARATIONS
    from rltscan.io.formats import named

    reading = _reading(
        columns,
        layout,
        group,
        dones_mean,
        ends_are,
        ignore,
        observation_gaps,
        is_last_row,
        autoreset,
    )
    reading.check()
    source, shards_note, layout_decision = _inspected_source(path, reading, stdin)
    try:
        cache: dict[str, Any] = {}
        read = source.read

        def cached(name: str) -> Any:
            if name not in cache:
                cache[name] = read(name)
            return cache[name]

        source.read = cached
        info: dict[str, Any] = {
            "input": source.where,
            "format": source.format
            if source.backend is None
            else f"{source.format}/{source.backend}",
            "layout": None if layout_decision else source.layout,
            "group": source.group if named(source.format).grouped else None,
            "steps": None,
            "episodes": None,
            "sequences": None,
            "counts": {},
            "notes": [],
            "statistics": None,  # episode lengths and returns, where episode ends are known
            "reading": None,  # the reading in force (as a run records it)
        }
        roles: dict[str, str] = {}
        estimators: dict[str, Any] = {}
        open_decisions: dict[Decision, None] = dict.fromkeys(
            [layout_decision] if layout_decision else []
        )
        for command in DECLARATIONS:
            spec = DECLARATIONS[command]
            opts = RunOptions(
                command=command,
                input=path,
                reading=reading,
                missing_bootstrap=missing_bootstrap,
                params={k: v for k, v in (params or {}).items() if k in spec.params},
            )
            try:
                opts.check()
                prepared = prepare(
                    source, **prepare_options(opts), flags_only=True, provisional=True
                )
                refuse_boolean_numbers(source, spec.float_inputs, prepared.roles)  # as the plan
            except RltscanError as err:
                estimators[command] = {"ready": False, "needs": _needs(err)}
                roles.update(_roles_found(source, opts))
                continue
            roles.update(prepared.roles)
            pending = (
                [*open_decisions.keys(), *prepared.pending]
                if layout_decision
                else list(prepared.pending)
            )
            if pending:
                open_decisions.update(dict.fromkeys(pending))
                estimators[command] = {
                    "ready": False,
                    "needs": "; ".join(dict.fromkeys(d.fix for d in pending)),
                }
                continue
            estimators[command] = {"ready": True, "needs": ""}  # bootstraps checked too
            if info["steps"] is None or command == "gae":
                used = opts.call_options()[1]
                info.update(
                    steps=prepared.steps,
                    episodes=prepared.episodes,
                    sequences=prepared.sequences,
                    counts=prepared.counts,
                    notes=[
                        *prepared.notes,
                        *assumption_notes(prepared.counts, used, source.layout, spec.bootstraps),
                    ],
                    reading={**prepared.reading, "by": dict(prepared.by)},
                )
                found = stats.episodes_from(prepared, reading.columns)
                info["statistics"] = stats.summary({}, found)
        by_column: dict[str, list[str]] = {}
        for role, name in roles.items():
            by_column.setdefault(name, []).append(role)
        info["columns"] = [
            {
                "name": c.name,
                "shape": list(c.shape),
                "dtype": c.dtype,
                "role": ", ".join(by_column.get(c.name, [])) or None,
            }
            for c in source.describe_columns()
        ]
        if shards_note:
            info["notes"] = [shards_note, *info["notes"]]
        if info["steps"] is None:  # nothing can run yet: say at least how big it is
            info["steps"] = source.steps or _column_steps(source)
            info["sequences"] = 1 if source.layout == "flat" else None
        info["roles"] = roles
        info["decisions"] = [d.to_dict() for d in open_decisions]
        info["estimators"] = estimators
        return info
    finally:
        source.close()


def _inspected_source(
    path: str, reading: Reading, stdin: BinaryIO | None
) -> tuple[Any, str, Decision | None]:
    """The source ``inspect`` resolves: the file itself, or for a sharded dataset (a
    directory or glob of Parquet files, a LeRobot dataset) its first shard, opened as
    the sharded engine opens it (with the dataset's conventions); plus a note saying so,
    and the layout decision when the file leaves its layout open (it is then opened with
    a provisional layout, to find the roles and the other decisions)."""
    from rltscan.io import shards as io_shards

    if stdin is None and io_shards.is_sharded(path, None):
        dataset = io_shards.discover(path)
        source = io_shards.open_shard(dataset.shards[0])
        note = (
            f"{dataset.where} is a sharded dataset ({dataset.kind}, {len(dataset.shards)} "
            f"shard(s)); shown: its first shard, {dataset.shards[0].rel} (a run resolves "
            "every shard the same way and carries episodes across their edges)"
        )
        return source, note, None
    try:
        return _open(path, reading, stdin), "", None
    except AmbiguousInputError as err:
        if reading.layout is not None or err.fix is None:
            raise
        source, decision = _provisional(path, reading, stdin, err)
        if source is None:
            raise
        return source, "", decision


def _column_steps(source: Any) -> int | None:
    """Steps from the first rewards-like column's shape (episodes: the lengths)."""
    if source.episode_lengths:
        return int(sum(source.episode_lengths))
    for name in ROLES["rewards"].aliases:
        info = source.columns.get(name)
        if info is not None and info.shape:
            dims = 1 if source.layout == "flat" else 2
            return int(np.prod(info.shape[:dims]))
    return None


def _roles_found(source: Any, opts: RunOptions) -> dict[str, str]:
    """The roles a command's resolution recognises before it fails (a missing bootstrap,
    an option it does not use): for ``inspect``'s columns table; empty when it fails
    before finding them (a missing column)."""
    options = {**prepare_options(opts), "bootstrap": None}
    try:
        found = prepare(source, **options, strict=False, flags_only=True, provisional=True)
    except RltscanError:
        return {}
    return found.roles


def _needs(err: RltscanError) -> str:
    """What is missing, from the error's fields: ``a "q_values" column (--q-values KEY)``,
    else every open decision's fix, else its fix, else the whole message."""
    if err.column is not None and err.option is not None:
        return f'a "{err.column}" column ({err.option})'
    if err.decisions:
        return "; ".join(dict.fromkeys(d["fix"] for d in err.decisions))
    if isinstance(err, ParameterError):  # an option this command does not take
        return f"{err.what}; {err.fix}" if err.fix else err.what
    return err.fix or str(err)
