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
   carry out of the shard is affine in the carry in: ``y_out = A * y_in + B`` (per
   sequence and setting). The task walks the shard once, solving each block in
   float64 twice (carry ``y_in = 0`` gives ``B``; ``y_in = 1`` gives ``A + B``) and
   once in the compute dtype (``y_in = 0``). A cut anywhere in the shard makes ``A``
   exactly 0, and ``B`` is then the compute-dtype chain's carry: the bits one file's
   walk holds there. The shard at the true end of the data in scan order has no carry
   in; the shard last in scan order is not needed at all.
   The block at the edge the carry leaves by is walked first, alone: a cut in it
   decides the carry, and the rest of the shard is not read (:func:`aggregate`).
3. **Carries** (driver): a sequential scan over the ``(A, B)`` pairs in scan
   order, in float64, gives every shard its ``y_in``.
4. **Pass 2** (in parallel): each shard runs the single-file streaming walk
   (:func:`rltscan.engines.stream.windows.run_windows`) with its carry (``y_in`` cast
   to the compute dtype) and stages its outputs; they are moved into place only when
   every shard succeeded (:class:`rltscan.io.shards.Staging`). With ``--normalize`` it
   runs once more before, writing nothing, for the dataset-wide statistics.

Minari Parquet datasets hold one episode per shard, so no carry crosses a shard
and pass 1 is skipped. Both engines run the same task function
(:func:`run_task`): ``local`` serially in this process, ``ray`` as Ray
tasks (:mod:`rltscan.engines.ray.engine`), so their outputs are identical bit for bit.
Against one file they are identical where the shard edges are on its block grid and
every carried shard holds a cut (docs/SHARDS.md); otherwise they agree to float
rounding.
"""

from __future__ import annotations

import copy
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

from rltscan import stats
from rltscan.devices import resolve_device
from rltscan.engines.stream import windows
from rltscan.errors import DataError, OutputRefusedError, RltscanError
from rltscan.estimators import Carry
from rltscan.estimators.functions import SettingsCarry
from rltscan.io import shards as io_shards
from rltscan.io.layout import Prepared, prepare
from rltscan.io.resolve import Reading
from rltscan.io.sinks import NullSink, ParquetSink, record_normalized
from rltscan.io.source import Source
from rltscan.options import RunOptions
from rltscan.plan import (
    bootstrap_hint,
    prepare_options,
    refuse_boolean_numbers,
)


@dataclass(frozen=True)
class Job:
    """What every shard task needs; plain data, so that it travels to Ray workers."""

    opts: RunOptions
    dataset: io_shards.Dataset
    reading: Reading  # opts.reading with the probe's decision for a dones column
    names: tuple[str, ...] = ()
    roles: dict[str, str] = field(default_factory=dict)  # role -> column, as the probe read
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
        """Whether episodes may cross shards (pass 1 needed): not where every shard is
        one episode (Minari)."""
        return not self.dataset.episode_shards

    def options(self) -> dict[str, Any]:
        """Keyword arguments of :func:`rltscan.io.layout.prepare` for every shard."""
        return {**prepare_options(self.opts), "reading": self.reading}

    def call(self, time_dim: int = -1) -> dict[str, Any]:
        """Estimator keyword arguments besides the data and the carry."""
        return {**self.call_args, "time_dim": time_dim}

    def scan_order(self) -> list[int]:
        n = len(self.dataset.shards)
        return list(range(n - 1, -1, -1)) if self.reverse else list(range(n))


def run_task(job: Job, item: Mapping[str, Any]) -> dict[str, Any]:
    """The one function both engines run per shard: ``item`` is ``{"pass": 1 | 2, "k": k,
    "y": [float] | None, "scales": {column: [mean, std]} | None, "write": bool}``; the
    result is ``{"k": k, "result": JSON}``. Errors a user can fix come back as data
    (``{"error": ...}``) so that every engine reports them alike."""
    k = int(item["k"])
    shard = job.dataset.shards[k]
    try:
        if item["pass"] == 1:
            payload = aggregate(job, k)
        else:
            scales = {n: (m, s) for n, (m, s) in (item.get("scales") or {}).items()}
            payload = outputs(job, k, item.get("y"), scales=scales, write=item.get("write", True))
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


def check_existing(job: Job, src: Source, rel: str) -> None:
    clash = [n for n in job.names if n in src.columns]
    if clash and not job.opts.overwrite:
        raise OutputRefusedError(
            f'{rel} already has column "{clash[0]}"; pass --overwrite or --prefix P'
        )


def estimate(job: Job, kwargs: Mapping[str, Any], call: Mapping[str, Any], carry: Any, **kw: Any):
    with warnings.catch_warnings():  # Arrow buffers are read-only; nothing writes them
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return job.spec.function(**kwargs, **call, carry=carry, **kw)


def _ends_data(job: Job, opened: _Opened) -> bool:
    """Whether this shard is the true end of the data in scan order (no carry enters it)."""
    return (opened.after if job.reverse else opened.before) is None


def neighbour(job: Job, opened: _Opened) -> Any:
    """The neighbouring row in scan order as a carry (its ``y`` is a placeholder; a
    :class:`SettingsCarry` with several settings), or None when this shard is the true
    end of the data in scan order."""
    if job.reverse:
        if opened.after is None:
            return None
        # only the next shard's own values are read at its first step (V, log-ratio)
        return _row_carry(job, opened.after, (0, 1))
    if opened.before is None:
        return None
    # the previous shard's last done flag, derived with this shard's first row
    n = int(opened.before.steps or 0)
    return _row_carry(job, io_shards.shard_view(opened.before, opened.src), (n - 1, n))


def _row_carry(job: Job, view: Source, window: tuple[int, int]) -> Any:
    """The carry that the one row ``window`` of ``view`` hands on in scan order, as the
    block holding it would (its ``y`` a placeholder; a :class:`SettingsCarry` with
    several settings): the estimator is called on that row alone."""
    prepared = prepare(view, window=window, **job.options())
    kwargs = {k: v for k, v in prepared.kwargs.items() if k not in windows.PER_ROW}
    kind = job.spec.name
    zero = torch.zeros(1, dtype=torch.float64)
    placeholder: Any = Carry(kind, zero, zero, zero, torch.zeros(1, dtype=torch.bool))
    settings = job.opts.settings
    if settings is not None:  # one carry per setting
        placeholder = SettingsCarry((placeholder,) * len(settings), settings)
    result = estimate(job, kwargs, job.call(prepared.time_dim), placeholder, validate=False)
    carry = result.carry
    assert carry is not None
    return carry


def _y(carry: Any) -> torch.Tensor:
    """A carry's recurrence values: ``[R]``, or ``[K, R]`` with K settings."""
    if isinstance(carry, SettingsCarry):
        return torch.stack([c.y for c in carry.carries])
    return carry.y


def _with_y(carry: Any, y: torch.Tensor) -> Any:
    """``carry`` with its recurrence values replaced (``y`` shaped as :func:`_y`'s)."""
    if isinstance(carry, SettingsCarry):
        parts = tuple(_with_y(c, y[k]) for k, c in enumerate(carry.carries))
        return dataclasses.replace(carry, carries=parts)

    def wide(t: torch.Tensor | None) -> torch.Tensor | None:
        return None if t is None else t.to(torch.float64) if t.is_floating_point() else t

    if y.dtype == torch.float64:  # pass 1's affine pair: every float field in float64
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
    span: tuple[int, int] | None = None,
) -> tuple[windows.Totals, int]:
    """The single-file streaming walk over one shard; returns the totals and its steps.
    ``on_prepared(start, prepared)`` sees every window's inputs (the statistics).
    ``span``: only the steps ``[lo, hi)`` (``lo`` on the block grid, so the blocks are
    the whole walk's), entered with ``carry`` at ``hi`` (backward) or ``lo`` (forward)."""
    options = job.options()
    lo = 0
    if job.dataset.episode_shards:
        whole = prepare(opened.view, **options)
        steps = whole.steps

        def read_window(start: int, stop: int) -> Prepared:
            return _slice_prepared(whole, start, stop)
    else:
        lo, hi = span or (0, opened.steps)
        steps = hi - lo

        def read_window(start: int, stop: int) -> Prepared:
            return prepare(opened.view, window=(lo + start, lo + stop), **options)

    def prepare_window(start: int, stop: int) -> Prepared:
        prepared = read_window(start, stop)
        _same_roles(job, prepared.roles, opened.src.where)
        if on_prepared is not None:
            on_prepared(lo + start, prepared)
        return prepared

    plan = _plan(job, steps)
    with bootstrap_hint():
        totals = windows.run_windows(
            plan, prepare_window, compute, write, device=_device(job), time_dim=-1, carry=carry
        )
    if totals.id_runs:  # ids must form runs; across shards only at the edges (see docs)
        from rltscan.io.resolve import find_column

        name = find_column(opened.src, "episode_id", job.reading.columns) or "episode_id"
        windows.check_id_runs(totals.id_runs, name, opened.src.where)
    return totals, steps


def _same_roles(job: Job, roles: Mapping[str, str], where: str) -> None:
    """A shard reads the columns the probe (the data's last shard) read, role for role:
    the shards are one table, and a column only some shards hold (``next_values``, say)
    would be read in those and replaced by a rule (zero bootstrap) in the others."""
    if job.roles and dict(roles) != job.roles:
        diff = sorted(set(roles.items()) ^ set(job.roles.items()))
        role = diff[0][0]
        here, there = roles.get(role), job.roles.get(role)
        raise DataError(
            f"{where} reads {role} from "
            + (f'column "{here}"' if here else "no column")
            + " where the data's last shard reads it from "
            + (f'column "{there}"' if there else "no column"),
            "every shard must hold the same columns; add the column to each shard, "
            "or drop it from each (or name the columns with --ignore and the column options)",
        )


def _plan(job: Job, steps: int) -> windows.Plan:
    return windows.make_plan(
        steps,
        1,
        reverse=job.reverse,
        chunk_steps=job.opts.chunk_steps,
        block_steps=job.opts.block_steps,
    )


def _strip(block: Mapping[str, Any], carry: Any) -> dict[str, Any]:
    """A block that continues across a shard edge takes no window-end bootstrap or init."""
    if carry is None:
        return dict(block)
    return {k: v for k, v in block.items() if k not in windows.PER_ROW}


def _wide(value: Any) -> Any:
    if isinstance(value, np.ndarray) and value.dtype != np.bool_:
        return value.astype(np.float64)
    return value


def aggregate(job: Job, k: int) -> dict[str, Any]:
    """Pass 1: the shard's affine map ``y_out = A * y_in + B`` (per sequence and setting).

    Two chains in float64 (carry in 0 and 1) give ``A`` and ``B``; a third in the
    compute dtype (carry in 0) gives ``B`` where ``A`` is exactly 0 (a cut in the shard:
    the chains merge there, and from then on only this one runs). Past a cut that chain
    holds the bits the single-file walk holds, so such a shard's carry out is exact.

    Where the shard's carry leaves it (its first block for backward estimators, its
    last for forward ones) that block alone is walked first, entered from the row
    after it: a cut there makes the rest of the shard irrelevant to the carry out, so
    the task reads one block instead of the shard (:func:`_edge_block`)."""
    t0 = time.perf_counter()
    opened = _open(job, k)
    if opened.steps == 0:  # an empty shard is the identity (the driver skips it)
        return {"steps": 0, "end": False, "a": [1.0], "b": [0.0]}
    end = _ends_data(job, opened)
    b = _edge_aggregate(job, opened)
    a, b = (np.zeros_like(b), b) if b is not None else _whole_aggregate(job, opened)
    return {
        "steps": opened.steps,
        "end": end,
        "a": a.tolist(),
        "b": b.tolist(),
        "seconds": time.perf_counter() - t0,
    }


def _edge_block(job: Job, steps: int) -> tuple[int, int] | None:
    """The block where the carry leaves a shard of ``steps`` steps in scan order (the
    first block for backward estimators, the last for forward ones), or None when the
    shard is one block."""
    block = _plan(job, steps).block
    if steps <= block:
        return None
    if job.reverse:
        return (0, block)
    start = (steps - 1) // block * block
    return (start, steps)


# The second float64 chain's carry in on the edge block, where only a cut may merge the
# chains: a carry in of 1 also merges them where A is merely below float64 rounding
# against B (a block without a cut and a large B), and the carry out would then lose
# A · y_in. A · 2^1000 vanishes against B only where A < ~1e-317 |B|.
_EDGE_PROBE = 2.0**1000


def _edge_aggregate(job: Job, opened: _Opened) -> np.ndarray | None:
    """``B`` from the shard's edge block alone where it holds a cut (``A`` is then 0),
    else None: entered with the carry of the row past it (carry in 0 and
    ``_EDGE_PROBE``), the float64 chains merge inside it when a cut there makes the
    carry out independent of every step before it in scan order. The compute-dtype
    chain then holds the bits that the walk over the whole shard holds past that cut."""
    span = _edge_block(job, opened.steps)
    if span is None:
        return None
    lo, hi = span
    row = (hi, hi + 1) if job.reverse else (lo - 1, lo)
    native, c0, _ = _chains(job, opened, _row_carry(job, opened.view, row), span, _EDGE_PROBE)
    return None if c0 is not None else _y(native).to(torch.float64).cpu().numpy()


def _whole_aggregate(job: Job, opened: _Opened) -> tuple[np.ndarray, np.ndarray]:
    """``(A, B)`` from the three chains over the whole shard, entered with the neighbour
    row (none at the true end of the data)."""
    native, c0, c1 = _chains(job, opened, neighbour(job, opened), None, 1.0)
    if c0 is None:  # merged: a cut (A = 0), or A below float64 rounding against B
        b = _y(native).to(torch.float64).cpu().numpy()
        return np.zeros_like(b), b
    b = _y(c0).cpu().numpy()
    return _y(c1).cpu().numpy() - b, b


def _chains(
    job: Job, opened: _Opened, template: Any, span: tuple[int, int] | None, probe: float
) -> tuple[Any, Any, Any]:
    """The carries out of the three chains walked over ``span`` (the shard without one):
    the compute dtype with carry in 0, float64 with 0 and with ``probe``, entered with
    ``template``'s row (None: the true end of the data, no carry in). The float64 pair
    is None once it merged."""
    call = job.call()
    state: tuple[Any, Any, Any] = (None, None, None)
    if template is not None:
        y = _y(template)
        state = (
            _with_y(template, torch.zeros_like(y)),
            _with_y(template, torch.zeros_like(y, dtype=torch.float64)),
            _with_y(template, torch.full_like(y, probe, dtype=torch.float64)),
        )

    def compute(block: Mapping[str, Any], carry: Any) -> tuple[dict[str, Any], Any]:
        native, c0, c1 = carry
        n = estimate(job, _strip(block, native), call, native).carry
        if c0 is None:
            return {}, (n, None, None)
        wide = {k: _wide(v) for k, v in _strip(block, c0).items()}
        n0 = estimate(job, wide, call, c0, validate=False).carry
        n1 = estimate(job, wide, call, c1, validate=False).carry
        # After a cut the two chains hold the same bits (the carry in is multiplied by
        # an exact 0): A is 0 from then on, and the native chain alone goes on.
        return {}, (n, None, None) if torch.equal(_y(n0), _y(n1)) else (n, n0, n1)

    totals, _ = _walk(job, opened, compute, lambda *_: None, state, span=span)
    return totals.carry


def outputs(
    job: Job,
    k: int,
    y: list[float] | None,
    *,
    scales: Mapping[str, tuple[float, float]] | None = None,
    write: bool = True,
) -> dict[str, Any]:
    """Pass 2: the shard's outputs with its carry in, staged under ``job.stage_dir``;
    ``scales`` standardise columns (``--normalize``); ``write=False`` only measures them
    (the statistics that ``--normalize`` needs before anything is written)."""
    t0 = time.perf_counter()
    shard = job.dataset.shards[k]
    opened = _open(job, k)
    check_existing(job, opened.src, shard.rel)
    refuse_boolean_numbers(opened.src, job.opts.declaration.float_inputs, job.roles)
    entry = copy.deepcopy(job.entry)  # this shard's metadata (the tasks share the job)
    for name, (mean, std) in (scales or {}).items():
        record_normalized(entry, name, mean, std)
    staged = None if job.stage_dir is None or not write else Path(job.stage_dir) / shard.rel
    if staged is not None:
        staged.parent.mkdir(parents=True, exist_ok=True)
    if opened.steps == 0:
        if staged is not None:
            dtypes = {n: np.dtype(d) for n, d in job.dtypes.items()}
            io_shards.write_empty(
                shard, staged, outputs=dtypes, metadata=entry, overwrite=job.opts.overwrite
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
            carry = _with_y(template, torch.tensor(y, dtype=torch.float64).to(_y(template).dtype))
    sink: Any = NullSink()
    if staged is not None:
        sink = ParquetSink(
            opened.src.raw,
            staged,
            steps=opened.steps,
            metadata=entry,
            overwrite=job.opts.overwrite,
            where=shard.rel,
            minari_infos=job.dataset.outputs_in_infos,
            durable=False,  # the staging commit syncs every staged shard in one batch
        )
    episodes = stats.EpisodeCollector()
    compute = windows.BlockCall(job.spec, job.call(), job.opts.prefix)

    def seen(start: int, prepared: Prepared) -> None:
        episodes.add_prepared(start, prepared, job.reading.columns)

    try:
        totals, steps = _walk(job, opened, compute, sink.write, carry, seen)
        final = job.dataset.final_rows
        if final and staged is not None:
            # the rows past the last step (Minari's final observation): outputs get NaN
            pad = {n: np.full(final, np.nan, dtype=np.dtype(job.dtypes[n])) for n in job.names}
            sink.write(steps, steps + final, pad)
        for name, (mean, std) in (scales or {}).items():
            sink.standardize(name, mean, std)  # (recorded in its entry above already)
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
        # statistics of this shard, folded by the driver in scan order (plain JSON)
        "outputs_stats": compute.accumulator.parts(),
        "episodes_stats": None if (joined := episodes.joined()) is None else joined.state(),
    }
