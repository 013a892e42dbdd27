"""From a :class:`Source` to estimator arguments: roles → columns → arrays → flags.

:func:`prepare` is the resolver (one call serves ``inspect``, ``--dry-run`` and the run)
and reads as the sequence of its decisions. Each concern has its module:
:mod:`rltscan.io.resolve` (the user's reading, open decisions, which column plays which
role), :mod:`rltscan.io.final_rows` (which rows are transitions: RLDS's final
observation row is not one), :mod:`rltscan.io.bootstrap` (where V(s_{t+1}) comes from:
how a Minari ``values`` of length ``T+1`` becomes ``values``/``next_values``, and the
missing-bootstrap rule) and :mod:`rltscan.io.ends` (which flag ends an episode, how
``dones`` is shifted, where episode ends are forced cuts). This module holds the steps
between them: the window and the row after it, the reference column and every per-step
shape, episode groups joined, and the counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rltscan.errors import DataError, ParameterError
from rltscan.io.bootstrap import (
    apply_missing_bootstrap,
    bootstrap_given,
    derived_next_values,
    one_bootstrap_source,
    read_last_value,
    refuse_no_values,
)
from rltscan.io.columns import missing_column_error
from rltscan.io.ends import Axes, Ends, episode_ends, first_steps
from rltscan.io.final_rows import FinalRows, final_rows
from rltscan.io.formats import registry
from rltscan.io.resolve import (
    ColumnReader,
    Decision,
    DonesMean,
    Reading,
    Resolution,
    decisions_error,
    role_of,
    squeeze,
    unnamed_look_alikes,
    without_ignored,
)
from rltscan.io.source import Source
from rltscan.roles import ROLES, of_argument, option_of

PER_ROW = ("last_value", "init")  # one value per sequence, not per step


@dataclass
class Prepared:
    """Estimator keyword arguments plus what is needed to put the results back."""

    kwargs: dict[str, np.ndarray | float]
    time_dim: int
    roles: dict[str, str]  # role -> source column name (provenance)
    steps: int
    episodes: int
    sequences: int
    lengths: list[int] = field(default_factory=list)  # episodes layout: T per episode
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    bytes_read: int = 0
    dtype: str = "float32"
    template: str | None = None  # the rewards column (storage settings for outputs)
    dones_mean: DonesMean | None = None  # the meaning decided for a "dones" column
    id_runs: np.ndarray | None = None  # a window's episode ids at run starts, in order
    # The reading in force (provenance): every choice with the value that was applied,
    # and ``by``: who made the ones the user did not (a format's convention, evidence).
    reading: dict[str, Any] = field(default_factory=dict)
    by: dict[str, str] = field(default_factory=dict)
    # Decisions still open (``prepare(..., provisional=True)`` only; a run raises them)
    pending: list[Decision] = field(default_factory=list)
    # Rows of the stored table that are transitions (RLDS final-observation rows are
    # not): outputs are computed on these rows and written back with NaN elsewhere.
    kept: np.ndarray | None = None

    def split(self, array: np.ndarray) -> list[np.ndarray]:
        """A concatenated output cut back into one array per episode."""
        return np.split(array, np.cumsum(self.lengths)[:-1]) if self.lengths else [array]

    def restore(self, array: np.ndarray) -> np.ndarray:
        """An output computed on the transitions, on the stored rows: rows that are not
        transitions (RLDS final observations) get NaN (docs/CONVENTIONS.md §1.9)."""
        if self.kept is None:
            return array
        out = np.full((len(self.kept), *array.shape[1:]), np.nan, dtype=array.dtype)
        out[self.kept] = array
        return out

    def stored_row(self, index: int) -> int:
        """The stored row of transition ``index`` (they differ where rows are excluded)."""
        return int(np.flatnonzero(self.kept)[index]) if self.kept is not None else int(index)


_NO_CHOICES = Reading()  # the default reading: the user states no choice


def prepare(
    source: Source,
    *,
    arguments: tuple[str, ...],
    required: tuple[str, ...],
    reading: Reading = _NO_CHOICES,
    window: tuple[int, int] | None = None,
    bootstrap: str | None = None,
    strict: bool = True,
    flags_only: bool = False,
    provisional: bool = False,
    ends_matter: bool = True,
) -> Prepared:
    """Read the columns an estimator takes (only those) and build its arguments.

    With ``window=(start, stop)`` only steps ``[start, stop)`` are read (plus the one
    after, which decides flags derived from the next row: episode-start dones and
    episode-id changes) and the arguments describe that window alone; the streaming
    engine walks a file this way. Counts and notes are the window's.

    ``reading`` holds the user's choices (:class:`Reading`). ``bootstrap``
    (``"error"``/``"zero"``, None for estimators that read no V(s_{t+1})) applies the
    missing-bootstrap rule here, before any computing, so ``inspect``, ``--dry-run``
    and the run agree. ``strict`` refuses column overrides that nothing uses.
    ``ends_matter`` (the estimator's ``bootstraps``): False where a termination and a
    truncation give the same numbers (traces, prefix sums, return-to-go), so an episode
    end no flag explains just ends its episode and ``--ends-are`` is not asked.
    ``flags_only`` (a plan, ``--dry-run``) reads the reference column and the flag
    columns only; the other columns are checked to exist with the right shape.
    A flat file's hidden episode ends (rows where ``observations[t+1] !=
    next_observations[t]`` and no flag is set) follow ``reading.observation_gaps``:
    ``"error"`` (stop and ask), ``"truncate"`` (``--ends-from-observations``) or
    ``"ignore"`` (``--ignore-observation-gaps``; the observations are then not read).

    Every choice the data leaves open is raised at once, as one AmbiguousInputError
    listing each with its flag; with ``provisional`` (``inspect``) they are returned in
    ``Prepared.pending`` instead, with the roles found so far, and the missing-bootstrap
    rule (which depends on them) is not applied.
    """
    if reading.ignore:
        source = without_ignored(source, reading.ignore)
    whole = source  # a window's column shapes are checked against the whole file's
    source, keep, final = _window_of(source, window)
    res = Resolution(
        source, reading.columns, list(source.notes)
    )  # notes: how the layout was decided
    reader = ColumnReader(source)
    in_force = _in_force(source.layout, reading)
    rows = final_rows(res, reader, reading, window, in_force)  # RLDS is_last rows
    if rows is not None:
        source = reader.source = res.source = rows.view
    columns = _read_columns(res, reader, arguments, required, flags_only)
    if window is not None or columns.skipped:
        _check_whole_shapes(whole, reader.roles, columns.ref_name)  # before slices disagree
    lengths = _episode_lengths(columns.raw[columns.reference], source)
    axes = Axes(source.layout, lengths, _stored_place(window, rows), final)
    kwargs = _per_step(columns.raw, reader, source, lengths, res.notes)
    known = derived_next_values(
        res, reader, rows, arguments, columns.skipped, kwargs, lengths, flags_only
    )
    ref = _fit_to_reference(kwargs, columns, reader, source)
    last = read_last_value(res, reader, arguments, {**kwargs, **columns.skipped}, known, ref, axes)
    if last is not None:
        kwargs["last_value"] = last
    ends = episode_ends(res, reader, reading, ref.shape, axes, in_force, required, ends_matter)
    id_runs = None
    if keep is not None:  # the row after the window decided flags only
        _check_whole_shapes(whole, reader.roles, columns.ref_name)  # the flag columns too
        kwargs = _trim_steps(kwargs, keep, axes.time_dim)
        ref, ends = first_steps(ref, keep, axes.time_dim), ends.trimmed(keep, axes.time_dim)
        id_runs = _id_runs(reader, keep)
    kwargs.update(ends.arguments())
    counts, episodes = _counts(ref, ends, axes, rows)
    if res.pending and not provisional:
        raise decisions_error(source.where, res.pending)
    if bootstrap is not None and not res.pending:
        given = {**kwargs, **columns.skipped}
        counts.update(apply_missing_bootstrap(bootstrap, given, kwargs, ends, known, res, axes))
    if final and strict:
        _check_overrides_used(reading.columns, reader.roles, source.where)
    return Prepared(
        kwargs=kwargs,
        time_dim=axes.time_dim,
        roles=dict(reader.roles),
        steps=int(ref.size),
        episodes=episodes,
        sequences=axes.sequences(ref),
        lengths=lengths,
        counts=counts,
        notes=res.notes,
        bytes_read=reader.bytes_read,
        dtype=str(ref.dtype),
        template=columns.template,
        dones_mean=ends.dones_mean,
        id_runs=id_runs,
        reading=in_force,
        by=dict(res.by),
        pending=list(res.pending),
        kept=None if rows is None else rows.kept,
    )


def _window_of(source: Source, window: tuple[int, int] | None) -> tuple[Source, int | None, bool]:
    """``(view, keep, final)``: the steps read. A window ``[start, stop)`` reads one row
    more (the next row decides flags derived from it: episode-start dones, episode-id
    changes) and keeps ``stop - start`` steps; ``final`` says whether the data ends
    with it (always without a window)."""
    if window is None:
        return source, None, True
    start, stop = window
    total = source.steps
    if total is None or source.read_range is None:
        raise TypeError(f"{source.where} cannot be read by windows")
    final = stop >= total
    return source.window(start, min(stop + 1, total), final=final), stop - start, final


def _in_force(layout: str, reading: Reading) -> dict[str, Any]:
    """The reading in force as it begins: the layout, the observation-gap rule and the
    columns set aside; each later step adds the choice it makes (and ``res.by`` says who
    made the ones the user did not)."""
    in_force: dict[str, Any] = {"layout": layout, "observation_gaps": reading.observation_gaps}
    if reading.ignore:
        in_force["ignore"] = list(reading.ignore)
    return in_force


def _stored_place(window: tuple[int, int] | None, rows: FinalRows | None) -> int | np.ndarray:
    """Where the steps read sit in the stored file, for messages: each transition's stored
    row where rows are left out (RLDS final observations, reset rows), else the first row
    of the window (0 without one)."""
    if rows is not None:
        return rows.kept_index
    return window[0] if window is not None else 0


@dataclass
class _Columns:
    """The columns read for an estimator's arguments: ``raw`` as stored (argument ->
    data), ``skipped`` (a plan's: argument -> column, checked, not read), the
    ``reference`` argument (the rewards, or ``x`` where no rewards are read) whose column
    ``ref_name`` gives every per-step shape, and ``template``: the rewards column (the
    outputs' storage settings)."""

    raw: dict[str, np.ndarray | list[np.ndarray]]
    skipped: dict[str, str]
    reference: str
    ref_name: str
    template: str | None


def _read_columns(
    res: Resolution,
    reader: ColumnReader,
    arguments: tuple[str, ...],
    required: tuple[str, ...],
    flags_only: bool,
) -> _Columns:
    """Which column plays each role an estimator argument reads (flags aside: they are
    decided from their columns later), and which is the reference: the rewards must exist
    where the estimator reads them (``x`` defaults to them); a look-alike column nobody
    named, two bootstrap columns, or neither values column where TD(λ) reads one, are
    asked or refused."""
    source = res.source
    unnamed_look_alikes(source, arguments, res)
    rewards = res.find("rewards")
    want_rewards = "rewards" in arguments or ("x" in arguments and not res.overrides.get("x"))
    if want_rewards and rewards is None:
        raise missing_column_error("rewards", source.columns, source.where, res.overrides)
    raw, skipped = _read_arguments(res, reader, arguments, required, flags_only)
    refuse_no_values(arguments, required, raw, skipped, res)
    one_bootstrap_source({**raw, **skipped}, reader, res)
    reference = "x" if "x" in raw and "rewards" not in raw else "rewards"
    if reference not in raw:
        raise missing_column_error("rewards", source.columns, source.where, res.overrides)
    ref_name = reader.roles.get(reference, rewards or "")
    return _Columns(raw, skipped, reference, ref_name, rewards)


def _read_arguments(
    res: Resolution,
    reader: ColumnReader,
    arguments: tuple[str, ...],
    required: tuple[str, ...],
    flags_only: bool,
) -> tuple[dict[str, np.ndarray | list[np.ndarray]], dict[str, str]]:
    """``(read, skipped)``: the column of each per-step argument (``--x``: the rewards
    unless named), read; a missing one stops the run only where the estimator requires
    it. A plan (``flags_only``) outside episode groups reads only the rewards/``x`` and
    records the other columns in ``skipped`` (their shapes are checked, not read)."""
    source = res.source
    raw: dict[str, np.ndarray | list[np.ndarray]] = {}
    skipped: dict[str, str] = {}
    for arg in arguments:
        row = of_argument(arg)
        if row is None or row.kind == "sequence":
            continue  # flags are decided from their columns; a [B] value after the shapes
        role = row.name
        name = res.find(role)
        if name is None and row.default_to is not None:
            name = res.find(row.default_to)  # --x: the rewards unless named
        if name is None:
            if arg in required:
                raise missing_column_error(role, source.columns, source.where, res.overrides)
            continue
        if flags_only and source.layout != "episodes" and arg not in ("rewards", "x"):
            skipped[arg] = name  # a plan checks it exists (and its shape) without reading
            reader.roles[role] = name
            continue
        raw[arg] = reader.column(role, name)
    return raw, skipped


def _per_step(
    raw: Mapping[str, np.ndarray | list[np.ndarray]],
    reader: ColumnReader,
    source: Source,
    lengths: list[int],
    notes: list[str],
) -> dict[str, np.ndarray | float]:
    """The estimator's arguments from the columns read: an episode group's parts joined
    into one array (:func:`_fit_episode`: T+1 values also give ``next_values``), the
    other layouts' arrays as read."""
    kwargs: dict[str, np.ndarray | float] = {}
    for arg, data in raw.items():
        if source.layout == "episodes":
            name = reader.roles[role_of(arg)]
            parts = _fit_episode(arg, data, lengths, source, name, raw, kwargs, notes)
            if parts is not None:
                kwargs[arg] = parts
        else:
            kwargs[arg] = data  # type: ignore[assignment]
    return kwargs


def _fit_to_reference(
    kwargs: dict[str, np.ndarray | float], columns: _Columns, reader: ColumnReader, source: Source
) -> np.ndarray:
    """The steps' shape is the reference column's (:func:`_reference_steps`): every other
    per-step column, its trailing 1s squeezed (``x`` keeps its feature axes), starts with
    it. Returns the reference array."""
    ref = _reference_steps(kwargs, columns, source)
    for arg, value in list(kwargs.items()):
        if arg == columns.reference or not isinstance(value, np.ndarray):
            continue
        value = squeeze(value, ref.ndim if arg != "x" else value.ndim)
        if value.shape[: ref.ndim] != ref.shape:
            name = reader.roles[role_of(arg)]
            raise DataError(
                f'{source.where}: column "{name}" has shape {value.shape} but '
                f'"{columns.ref_name}" has {ref.shape}',
                "every per-step column needs the same shape",
            )
        kwargs[arg] = value
    return ref


def _reference_steps(
    kwargs: dict[str, np.ndarray | float], columns: _Columns, source: Source
) -> np.ndarray:
    """The reference column as the steps: the layout's dimensions (1 for flat tables and
    episode groups, 2 for ``[T, B]``/``[B, T]``; trailing 1s squeezed) and at least one
    step. Put back in ``kwargs``."""
    reference, ref_name, layout = columns.reference, columns.ref_name, source.layout
    ref = kwargs[reference]
    assert isinstance(ref, np.ndarray)
    ref_ndim = 1 if layout in ("flat", "episodes") else 2
    ref = squeeze(ref, ref_ndim)
    if ref.ndim != ref_ndim and not registry.named(source.format).arrays:
        # a table of one row a step holding a list a row: one episode a row, most often
        raise DataError(
            f'{source.where}: column "{ref_name}" holds {int(np.prod(ref.shape[1:]))} values '
            "a row where a step has one (one episode a row?)",
            "explode the lists, keeping each row's number as an episode id column "
            f"(--episode-id), or pass the right {option_of(reference)} KEY",
        )
    if ref.ndim != ref_ndim:
        raise DataError(
            f'{source.where}: column "{ref_name}" has shape {ref.shape} but the {layout} layout '
            f"needs {ref_ndim} dimension(s)",
            f"pass --layout or the right {option_of(reference)} KEY",
        )
    kwargs[reference] = ref
    if ref.size == 0:
        raise DataError(
            f'{source.where}: column "{ref_name}" has no steps (shape {ref.shape})',
            "pass a file that holds data",
        )
    return ref


def _id_runs(reader: ColumnReader, keep: int) -> np.ndarray | None:
    """A window's episode ids at the start of each run of equal ids, in order (None
    without an id column): the sharded engine checks that no id comes back later."""
    ids = reader.data.get("episode_id")
    if ids is None:
        return None
    ids = np.asarray(ids).reshape(-1)[:keep]
    return ids[np.concatenate([[True], ids[1:] != ids[:-1]])] if ids.size else ids


def _counts(
    ref: np.ndarray, ends: Ends, axes: Axes, rows: FinalRows | None
) -> tuple[dict[str, int], int]:
    """``(counts, episodes)`` for the report. Terminations and truncations count the
    flagged ends (an end that only ``--ends-are`` gave a meaning is a forced cut),
    ``both`` the steps with both flags, ``open_ends`` the sequences whose last step has
    no flag (where the data ends), then the hidden observation-gap ends and the RLDS
    final-observation rows where there are any. Episodes: every end and open tail, or
    the number of episode groups."""
    term, trunc = ends.flags()
    forced = _count(ends.unflagged)
    forced_term = _count(ends.unflagged & term) if forced else 0
    n_term, n_trunc = _count(term), _count(trunc)
    both = _count(trunc & term) if n_term and n_trunc else 0
    counts = {
        "terminated": n_term - forced_term,
        "truncated": n_trunc - both - (forced - forced_term),
        "both": both,
        "forced_cuts": forced,
    }
    counts["open_ends"] = _open_tails(term, trunc, axes.time_dim) if axes.final else 0
    if "observation_gaps" in ends.marks:
        counts["observation_gaps"] = _count(ends.marks["observation_gaps"])
    if rows is not None:
        counts["final_observation_rows"] = rows.kept.size - _count(rows.kept)
    if axes.episodes:
        return counts, len(axes.lengths)
    return counts, n_term + n_trunc - both + counts["open_ends"]


def _check_overrides_used(
    overrides: Mapping[str, str | None], roles: Mapping[str, str], where: str
) -> None:
    """A column the user named is used, or the run stops: never silently ignored."""
    for role, name in overrides.items():
        option = option_of(role)
        if name and role not in roles and option:
            raise ParameterError(
                f'{option} "{name}" is not used by this command here',
                f"drop {option}",
                where=where,
            )


def _check_whole_shapes(source: Source, roles: Mapping[str, str], ref_name: str) -> None:
    """A window sees slices; the step shapes of the whole columns must agree."""
    dims = 1 if source.layout == "flat" else 2
    ref_shape = tuple(source.columns[ref_name].shape)
    for role, name in roles.items():
        info = source.columns.get(name)
        if info is None or ROLES[role].kind == "sequence":
            continue
        shape = tuple(info.shape)
        if shape[:dims] != ref_shape[:dims]:
            raise DataError(
                f'{source.where}: column "{name}" has shape {shape} but "{ref_name}" has '
                f"{ref_shape}",
                "every per-step column needs the same shape",
            )


def _trim_steps(
    kwargs: Mapping[str, np.ndarray | float], keep: int, time_dim: int
) -> dict[str, np.ndarray | float]:
    """The estimator's arguments for the first ``keep`` steps (per-row values whole)."""
    return {k: v if k in PER_ROW else first_steps(v, keep, time_dim) for k, v in kwargs.items()}


def _count(flags: np.ndarray) -> int:
    """Set entries of a bool array (count_nonzero: one pass, no temporaries; a bool
    ``.sum()`` casts every entry)."""
    return int(np.count_nonzero(flags))


def _open_tails(term: np.ndarray, trunc: np.ndarray, time_dim: int) -> int:
    """Sequences whose last step has no flag (the window end cuts an episode)."""
    last = np.take(term, -1, axis=time_dim) | np.take(trunc, -1, axis=time_dim)
    return int((~np.asarray(last)).sum())


def _episode_lengths(data: np.ndarray | list[np.ndarray], source: Source) -> list[int]:
    """Each episode's number of steps (``data``: the reference column's parts; a padded
    group's last row is not a step). Only episode groups have them."""
    if source.layout != "episodes":
        return []
    parts = data if isinstance(data, list) else [data]
    return [len(p) - 1 if source.padded else len(p) for p in parts]


def _fit_episode(
    arg: str,
    data: np.ndarray | list[np.ndarray],
    lengths: list[int],
    source: Source,
    name: str,
    raw: Mapping[str, object],
    kwargs: dict[str, np.ndarray | float],
    notes: list[str],
) -> np.ndarray | None:
    """Concatenate per-episode arrays; ``T+1`` values also give ``next_values``."""
    parts = data if isinstance(data, list) else [data]
    plus_one = all(len(p) == t + 1 for p, t in zip(parts, lengths, strict=True))
    if arg == "values" and plus_one and not bootstrap_given(raw):
        kwargs["next_values"] = np.concatenate([p[1:] for p in parts])
        notes.append(f'"{name}" has T+1 rows per episode: V(s_T) of each episode bootstraps it')
        return np.concatenate([p[:-1] for p in parts])
    if plus_one and source.padded:
        return np.concatenate([p[:-1] for p in parts])
    for key, part, t in zip(source.episode_keys, parts, lengths, strict=True):
        if len(part) != t:
            hint = "; every per-step column needs one row per step"
            if arg == "values" and len(part) == t + 1:  # T+1 here, not in every episode
                hint = (
                    " (T+1, one per observation) where other episodes have T; store T+1 "
                    "values in every episode, or T in every one and pass --next-values"
                )
            elif arg == "values":
                hint = "; store T+1 values (one per observation) or pass --next-values"
            raise DataError(
                f'{source.where}: "{key}/{name}" has {len(part)} rows but the episode has '
                f"{t} steps{hint}"
            )
    return np.concatenate(parts)


__all__ = ["Prepared", "prepare"]
