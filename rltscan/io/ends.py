"""Where episodes end and how: the flags of every step, from whichever columns mark them.

Flags follow docs/CONVENTIONS.md §1.1: ``terminated_t``/``truncated_t`` describe the END
of step ``t``. This module decides which flag ends an episode, how a ``dones`` column is
read (and shifted by one step where it marks starts), what a flat table's episode ids,
step counters and observation jumps say about ends, and what an end that no flag
explains is (``--ends-are``): forced cuts are truncations and are never written back.
:class:`Axes` says how the steps sit in time and in the file, for these decisions and
for the messages that name a step (:func:`where_is`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rltscan.dones import contradicted, contradiction
from rltscan.errors import DataError
from rltscan.io.columns import ENDED_BY_DEFINITION, NEXT_PREFIXES, quoted
from rltscan.io.resolve import (
    ColumnReader,
    Decision,
    DonesMean,
    EndsAre,
    ObservationGaps,
    Reading,
    Resolution,
    as_flag,
    squeeze,
)
from rltscan.io.source import Source


@dataclass(frozen=True)
class Axes:
    """How the steps read sit in time and in the file, decided once for every later step:
    the ``layout``, each episode's length (episode groups), ``place`` (where the steps
    sit in the stored file: :func:`_stored_place`) and ``final`` (the data ends with
    these steps: no window, or the last one)."""

    layout: str
    lengths: list[int]
    place: int | np.ndarray
    final: bool

    @property
    def time_dim(self) -> int:
        """The time axis: 0 for ``[T, B]`` (time-major), else the last one (``[B, T]``;
        flat and episode layouts have one axis)."""
        return 0 if self.layout == "time-major" else -1

    @property
    def episodes(self) -> bool:
        """Whether the steps come in episode groups (one array per episode)."""
        return self.layout == "episodes"

    def sequences(self, ref: np.ndarray) -> int:
        """How many sequences the steps hold (``ref``: the reference column): the episode
        groups, 1 for a flat table, else the size of the axis that is not time."""
        if self.episodes:
            return len(self.lengths)
        return 1 if ref.ndim == 1 else int(ref.shape[1] if self.time_dim == 0 else ref.shape[0])


def first_steps(value: np.ndarray | float, keep: int, time_dim: int) -> np.ndarray | float:
    """The first ``keep`` steps of a per-step array (scalars and per-row values as they are)."""
    if not isinstance(value, np.ndarray) or value.ndim == 0:
        return value
    if time_dim == -1 and value.ndim >= 2:
        return value[:, :keep]
    return value[:keep]


@dataclass
class Ends:
    """Where episodes end and how, as :func:`_flags` decides it step by step.

    ``terminated``/``truncated`` per step (both None: no flag column, nothing marks
    ends, and the estimator needs none); ``unflagged`` the ends no flag explains (they
    take the meaning ``--ends-are`` gives them: forced cuts); ``marks`` why a step is a
    truncation, for messages (``column_trunc``: the truncated column; ``dones_trunc``: a
    dones end beside the flags) and the hidden ``observation_gaps``; ``dones_mean`` the
    meaning a ``dones`` column was read with (the user's where none was read).
    """

    terminated: np.ndarray | None
    truncated: np.ndarray | None
    unflagged: np.ndarray
    marks: dict[str, np.ndarray] = field(default_factory=dict)
    dones_mean: DonesMean | None = None

    def flags(self) -> tuple[np.ndarray, np.ndarray]:
        """``(terminated, truncated)``, all False where none was decided (``unflagged``
        always has the steps' shape)."""
        shape = self.unflagged.shape
        term = self.terminated if self.terminated is not None else np.zeros(shape, bool)
        trunc = self.truncated if self.truncated is not None else np.zeros(shape, bool)
        return term, trunc

    def arguments(self) -> dict[str, np.ndarray]:
        """The flags decided, as estimator arguments."""
        flags = {"terminated": self.terminated, "truncated": self.truncated}
        return {k: v for k, v in flags.items() if v is not None}

    def trimmed(self, keep: int, time_dim: int) -> Ends:
        """The ends of the first ``keep`` steps (a window's: the row after it decided
        flags only)."""

        def cut(mask: np.ndarray) -> np.ndarray:
            return first_steps(mask, keep, time_dim)  # type: ignore[return-value]

        return Ends(
            None if self.terminated is None else cut(self.terminated),
            None if self.truncated is None else cut(self.truncated),
            cut(self.unflagged),
            {k: cut(v) for k, v in self.marks.items()},
            self.dones_mean,
        )


def episode_ends(
    res: Resolution,
    reader: ColumnReader,
    reading: Reading,
    shape: tuple[int, ...],
    axes: Axes,
    in_force: dict[str, Any],
    required: tuple[str, ...],
    ends_matter: bool,
) -> Ends:
    """Where episodes end and how (:func:`_flags`; the flags are needed where the
    estimator requires ``terminated``), with what was decided put in force: the meaning
    of a ``dones`` column, and what an end no flag explains is: the user's
    ``--ends-are``, else the format's own convention (said by whom)."""
    ends_are, ends_by = reading.ends_are, "--ends-are"
    conventions = res.source.conventions
    if ends_are is None and conventions.get("ends_are"):  # the format's own rule
        ends_are = conventions["ends_are"]  # type: ignore[assignment]
        ends_by = f"{conventions.get('why', 'the format')}; --ends-are overrides"
    ends = _flags(
        res,
        reader,
        shape,
        axes,
        reading.dones_mean,
        ends_are,
        needed="terminated" in required,
        observation_gaps=reading.observation_gaps,
        ends_by=ends_by,
        ends_matter=ends_matter,
    )
    if ends.dones_mean is not None:
        in_force["dones_mean"] = ends.dones_mean
    if ends_are is not None:  # given, or the format's convention (said by whom)
        in_force["ends_are"] = ends_are
        if reading.ends_are is None:
            res.by["ends_are"] = ends_by
    return ends


def _flags(
    res: Resolution,
    reader: ColumnReader,
    shape: tuple[int, ...],
    axes: Axes,
    dones_mean: DonesMean | None,
    ends_are: EndsAre | None,
    *,
    needed: bool,
    observation_gaps: ObservationGaps,
    ends_by: str,
    ends_matter: bool,
) -> Ends:
    """Where episodes end and how, from whichever flag columns exist.

    ``unflagged`` marks episode ends that no flag explains (an episode-id change, the
    end of an episode group, a ``dones`` end beside both flag columns): they take the
    meaning ``--ends-are`` gives them, and without it the run stops (never guessed).
    A ``dones`` column beside ``terminals``/``timeouts`` is used only as the user says
    (``--dones-mean``), as its producer defines it (RLDS ``is_last``), or when it
    provably repeats them; otherwise the run stops. Open choices are asked on ``res``
    (provisional readings let the resolution go on and find the others).
    """
    evidence = axes.layout == "flat" and (
        _counter(res)
        or _counter(res, "row_index")
        or (observation_gaps != "ignore" and _observed(res))  # what _hidden_ends compares
    )
    ends = _stored_ends(res, reader, shape, axes, dones_mean, needed=needed, evidence=evidence)
    if ends.terminated is None:
        return ends  # nothing marks episode ends, and the estimator needs none
    id_ends: np.ndarray | None = None  # which evidence ends an episode where
    step_ends: np.ndarray | None = None
    if axes.layout == "flat":
        id_ends, step_ends = _flat_cuts(res, reader, shape, axes, ends)
        if observation_gaps != "ignore":
            _hidden_ends(res, reader, shape, axes, ends, observation_gaps)
        _index_gaps(res, reader, shape, axes, ends)
    elif axes.episodes:
        cut = np.zeros(shape, bool)
        cut[np.cumsum(axes.lengths) - 1] = True
        ends.unflagged = ends.unflagged | cut
    _unflagged_meaning(res, axes, ends, ends_are, ends_matter, id_ends, step_ends)
    if ends_are is not None:
        res.notes.append(f"episode ends that no flag explains are {ends_are} ({ends_by})")
    return ends


def _stored_ends(
    res: Resolution,
    reader: ColumnReader,
    shape: tuple[int, ...],
    axes: Axes,
    dones_mean: DonesMean | None,
    *,
    needed: bool,
    evidence: bool,
) -> Ends:
    """The episode ends the stored flag columns give: ``terminated``/``truncated``, and a
    dones or episode-start column read as ends (:func:`_dones_are_ends`) beside them
    (:func:`_dones_beside_flags`) or in their place (:func:`_ends_without_flags`); a
    dones column only checked against them is a copy or a decision
    (:func:`_check_dones_copy`)."""
    term, term_name = _flag_column(res, reader, "terminated", shape, axes.lengths)
    trunc, trunc_name = _flag_column(res, reader, "truncated", shape, axes.lengths)
    dones_name, starts_name = res.find("dones"), res.find("episode_starts")
    flagged = term is not None or trunc is not None
    ended, meaning = None, dones_mean
    asked = len(res.pending)
    if _dones_are_ends(flagged, dones_name, starts_name, dones_mean):
        ended, meaning = _ended_from_dones(
            res, reader, dones_name, starts_name, shape, axes, dones_mean
        )
    settled = len(res.pending) == asked  # the dones' meaning was not just asked
    if not flagged:
        return _ends_without_flags(res, ended, shape, meaning, needed=needed, evidence=evidence)
    ends = Ends(
        np.zeros(shape, bool) if term is None else term,
        np.zeros(shape, bool) if trunc is None else trunc,
        np.zeros(shape, bool),
        {} if trunc is None else {"column_trunc": trunc},
        meaning,
    )
    names = " and ".join(f'"{n}"' for n in (term_name, trunc_name) if n)
    if ended is not None:
        if settled:
            _contradictions(res, ends, ended, _ends_known(res, shape, axes, meaning), axes)
        _dones_beside_flags(res, ends, ended, names, term_name, trunc_name)
    elif dones_name is not None:
        _check_dones_copy(res, reader, dones_name, names, term_name, ends, axes)
    return ends


def _flag_column(
    res: Resolution, reader: ColumnReader, role: str, shape: tuple[int, ...], lengths: list[int]
) -> tuple[np.ndarray | None, str | None]:
    """``(flags, column)`` of ``role`` (both None where no column plays it): 0/1 data, one
    row per step, in the steps' shape."""
    name = res.find(role)
    if name is None:
        return None, None
    flag = _read_flag(reader, role, name, lengths, len(shape))
    return _steps_shaped(flag, name, shape, res.source.where), name


def _read_flag(
    reader: ColumnReader, role: str, name: str, lengths: list[int], ndim: int
) -> np.ndarray:
    data = reader.column(role, name)
    if isinstance(data, list):
        parts = [
            p[:t] if reader.source.padded and len(p) == t + 1 else p
            for p, t in zip(data, lengths, strict=True)
        ]
        for key, p, t in zip(reader.source.episode_keys, parts, lengths, strict=True):
            if len(p) != t:
                raise DataError(
                    f'{reader.source.where}: "{key}/{name}" has {len(p)} rows but the '
                    f"episode has {t} steps",
                    "flags need one row per step",
                )
        data = np.concatenate(parts)
    return as_flag(squeeze(np.asarray(data), ndim), name, reader.source.where, role)


def _steps_shaped(arr: np.ndarray, name: str, shape: tuple[int, ...], where: str) -> np.ndarray:
    """``arr`` (column ``name``'s flags) if it has the steps' shape; else a DataError."""
    if arr.shape != shape:
        raise DataError(
            f'{where}: column "{name}" has shape {arr.shape} but the rewards have {shape}',
            "every per-step column needs the same shape",
        )
    return arr


def _dones_are_ends(
    flagged: bool, dones_name: str | None, starts_name: str | None, dones_mean: DonesMean | None
) -> bool:
    """Whether a dones or episode-start column is read as episode ends: always where no
    flag column exists; beside the flag columns only as the user says
    (``--dones-mean``), as its producer defines it (RLDS ``is_last``), or as episode
    starts. Otherwise a ``dones`` there is only compared with them."""
    if dones_name is None and starts_name is None:
        return False
    compared = (
        dones_mean is None
        and dones_name is not None
        and starts_name is None
        and ENDED_BY_DEFINITION.get(dones_name) is None
    )
    return not flagged or not compared


def _ends_without_flags(
    res: Resolution,
    ended: np.ndarray | None,
    shape: tuple[int, ...],
    meaning: DonesMean | None,
    *,
    needed: bool,
    evidence: bool,
) -> Ends:
    """The ends of a file with no terminated or truncated column: every end is unflagged
    (``ended``, the dones column's; none yet where a flat table's episode ids or the
    episode groups mark them, later). With none of these nothing marks them: refused
    where the estimator needs flags, else no flags at all, unless a flat table's
    ``evidence`` (a step counter, observations beside next observations) may show ends:
    an estimator that runs without flags (prefix sums) ends episodes where it does, as
    where an id changes (summing on across a counter's restart gave other numbers with
    exit 0)."""
    source = res.source
    if ended is None and source.layout == "flat" and res.find("episode_id"):
        ended = np.zeros(shape, bool)  # the boundaries come from the ids
    elif ended is None and not needed and evidence:
        ended = np.zeros(shape, bool)  # the ends come from the evidence, later
    elif ended is None and source.layout == "episodes":
        ended = np.zeros(shape, bool)
    if ended is not None:
        return Ends(np.zeros(shape, bool), np.zeros(shape, bool), ended, {}, meaning)
    if not needed:
        return Ends(None, None, np.zeros(shape, bool), {}, meaning)
    # the decisions already open are named too, so one run says everything (§1.10)
    also = "".join(f"; and {d.what}: {d.fix}" for d in res.pending)
    raise DataError(
        f'{source.where} has no "terminals" or "timeouts" column (nor dones or episode ids)',
        f"pass --terminals KEY and/or --timeouts KEY (found: {quoted(source.columns)}){also}",
    )


def _observed(res: Resolution) -> bool:
    """Whether a flat table has both observation columns (:func:`_hidden_ends`)."""
    return res.find("observations") is not None and res.find("next_observations") is not None


def _counter(res: Resolution, role: str = "step") -> bool:
    """Whether a flat table has a ``role`` column stored as integers (:func:`_step_resets`
    and :func:`_index_gaps` read only such a column as a counter)."""
    name = res.find(role)
    info = res.source.columns.get(name) if name is not None else None
    try:
        return info is not None and np.issubdtype(np.dtype(info.dtype), np.integer)
    except TypeError:  # a type numpy does not name (Arrow's "halffloat", "string")
        return False


def _ended_from_dones(
    res: Resolution,
    reader: ColumnReader,
    dones_name: str | None,
    starts_name: str | None,
    shape: tuple[int, ...],
    axes: Axes,
    dones_mean: DonesMean | None,
) -> tuple[np.ndarray, DonesMean]:
    """``(ended_t, meaning)`` from the dones or episode-start column, read as it is meant
    (:func:`_dones_meaning`; an episode-start column alone marks starts). Starts are
    shifted by one step to ends, within each episode group; the last step of each
    ``[T, B]``/``[B, T]`` sequence takes CleanRL's ``[B]`` last dones, where given."""
    where = res.source.where
    last_name = res.find("last_dones", extra=True)
    meaning: DonesMean
    if starts_name is not None and dones_name is None:
        meaning, name = "starts", starts_name
    else:
        assert dones_name is not None
        meaning, name = _dones_meaning(res, dones_name, last_name, dones_mean), dones_name
    flag = _read_flag(reader, "dones", name, axes.lengths, len(shape))
    flag = _steps_shaped(flag, name, shape, where)
    if meaning == "ended":
        return flag, meaning
    last = None
    if last_name is not None:
        last = as_flag(
            np.asarray(reader.column("last_dones", last_name)), last_name, where, "dones"
        )
    res.notes.append(f'"{name}" marks episode starts; shifted by one step to episode ends')
    if axes.episodes:
        parts = np.split(flag, np.cumsum(axes.lengths)[:-1])
        return np.concatenate([_shift_starts(p, -1, None) for p in parts]), meaning
    return _shift_starts(flag, axes.time_dim, last), meaning


def _dones_meaning(
    res: Resolution, dones_name: str, last_name: str | None, dones_mean: DonesMean | None
) -> DonesMean:
    """What a ``dones`` column means: the user's word (``--dones-mean``); the end of the
    step where it is an outcome of the step (TorchRL's ``next``, or a flat/episode
    table's column its producer defines: RLDS ``is_last``); CleanRL's episode starts in
    a ``[T, B]``/``[B, T]`` buffer beside ``[B]`` last dones (``last_name``); otherwise
    a decision (provisionally "ended")."""
    layout = res.source.layout
    if dones_mean is not None:
        return dones_mean
    if dones_name.startswith(NEXT_PREFIXES) or (
        layout in ("flat", "episodes") and dones_name in ENDED_BY_DEFINITION
    ):
        res.by.setdefault("dones_mean", f'"{dones_name}" is an outcome of the step')
        return "ended"
    if layout in ("time-major", "batch-major") and last_name is not None:
        res.by.setdefault(
            "dones_mean", f'"{dones_name}" with "{last_name}" [B]: CleanRL episode starts'
        )
        res.notes.append(f'"{dones_name}" with "{last_name}" [B]: CleanRL episode-start dones')
        return "starts"
    res.ask(
        Decision(
            f'"{dones_name}" may mean "episode ended after this step" or "this '
            'step starts an episode"',
            "pass --dones-mean ended or --dones-mean starts",
        )
    )
    return "ended"  # provisional: never computed with


def _shift_starts(starts: np.ndarray, time_dim: int, last: np.ndarray | None) -> np.ndarray:
    """``starts[t+1]`` (obs t+1 begins an episode) → ``ended[t]``; the tail from ``last``."""
    moved = np.moveaxis(starts, time_dim, 0)
    ended = np.zeros_like(moved)
    ended[:-1] = moved[1:]
    if last is not None:
        ended[-1] = last.reshape(ended[-1].shape)
    return np.moveaxis(ended, 0, time_dim)


def _ends_known(
    res: Resolution, shape: tuple[int, ...], axes: Axes, meaning: DonesMean | None
) -> np.ndarray | None:
    """The steps whose end a dones column says (None: every step). Episode starts say
    it for every step but the last of each episode group, and the last of each
    sequence unless last dones are given; the row a window reads beyond its steps is
    such a last step, and not one of the window's."""
    if meaning != "starts":
        return None
    known = np.ones(shape, bool)
    if axes.episodes:
        known[np.cumsum(axes.lengths) - 1] = False
    elif res.find("last_dones", extra=True) is None:
        np.moveaxis(known, axes.time_dim, 0)[-1] = False
    return known


def _contradictions(
    res: Resolution, ends: Ends, ended: np.ndarray, known: np.ndarray | None, axes: Axes
) -> None:
    """A step that a terminated or truncated column ends and the dones column does not
    (:func:`rltscan.dones.contradicted`) has no reading to take: a decision naming the
    first one, whose fix is to set one of the two columns aside."""
    term, trunc = ends.flags()
    bad = contradicted(ended, term, trunc, known)
    if not bad.any():
        return
    first = tuple(np.argwhere(bad)[0])
    flag = res.find("terminated") if term[first] else res.find("truncated")  # found already
    other = res.find("dones") or res.find("episode_starts")
    at = _at(bad, res.source, axes.lengths, axes.place)
    res.ask(
        Decision(
            contradiction(str(flag), str(other), ends.dones_mean or "ended", at),
            f"pass --ignore {other} (the flag columns then mark every end) or --ignore {flag}",
        )
    )


def _dones_beside_flags(
    res: Resolution,
    ends: Ends,
    ended: np.ndarray,
    names: str,
    term_name: str | None,
    trunc_name: str | None,
) -> None:
    """A dones column's ends beside the flag columns (``names``), set on ``ends``: one that
    ends a step neither flag ends is a truncation where no truncated column exists
    (RLDS's and d3rlpy's definition; old gym's done beside terminals), a termination where no
    terminated column does (old gym beside ``TimeLimit.truncated``), and unflagged where
    the dones mark starts or both flag columns exist."""
    term, trunc = ends.flags()
    dones_name, starts_name = res.find("dones"), res.find("episode_starts")  # found already
    other = dones_name or starts_name
    producer = ENDED_BY_DEFINITION.get(dones_name or "")
    extra = ended & ~term & ~trunc
    if ends.dones_mean == "ended" and producer is not None and trunc_name is None:
        ends.truncated = trunc | extra  # RLDS: an is_last end that is not is_terminal
        ends.marks["dones_trunc"] = extra
        res.notes.append(
            f'episodes that end at "{other}" with no {names} were truncated '
            f"({producer}'s definition)"
        )
    elif ends.dones_mean == "ended" and trunc_name is None:
        ends.truncated = trunc | extra  # old gym beside terminals: ended and not terminal
        ends.marks["dones_trunc"] = extra
        res.notes.append(f'truncated = "{other}" and not {names}')
    elif ends.dones_mean == "ended" and term_name is None:
        ends.terminated = term | extra  # old gym beside TimeLimit.truncated
        res.notes.append(f'terminated = "{other}" and not {names}')
    else:
        ends.unflagged = extra


def _check_dones_copy(
    res: Resolution,
    reader: ColumnReader,
    dones_name: str,
    names: str,
    term_name: str | None,
    ends: Ends,
    axes: Axes,
) -> None:
    """A ``dones`` column beside the flag columns (``names``) with no word on what it
    means: a copy of them is checked and not used (noted), anything else reads two ways
    that give different results (a decision)."""
    term, trunc = ends.flags()
    shape = term.shape
    dones = _read_flag(reader, "dones", dones_name, axes.lengths, len(shape))
    dones = _steps_shaped(dones, dones_name, shape, res.source.where)
    # a copy only when every reading agrees: with no terminated column, a done
    # equal to "truncated" could still mean terminated (which wins) or ended
    same_as_term = term_name is not None and bool(np.array_equal(dones, term))
    same_as_ends = bool(np.array_equal(dones, term | trunc)) and (
        term_name is not None or not dones.any()
    )
    if same_as_term or same_as_ends:
        what = "terminations" if same_as_term else "terminations or truncations"
        res.notes.append(f'"{dones_name}" repeats {names} ({what}); checked, not used')
        return
    bad = dones != (term | trunc)
    at = _at(bad if bad.any() else dones, res.source, axes.lengths, axes.place)
    res.ask(
        Decision(
            f'"{dones_name}" beside {names} reads two ways that give different results ({at})',
            f"pass --terminals {dones_name} if it marks terminations, "
            "--dones-mean ended if it means terminated or truncated, "
            f"--dones-mean starts if it marks episode starts, or --ignore "
            f"{dones_name}",
        )
    )


def _flat_cuts(
    res: Resolution, reader: ColumnReader, shape: tuple[int, ...], axes: Axes, ends: Ends
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """A flat table's episode ends that no flag marks, added to ``ends.unflagged``: where
    its episode id changes (ids that may come back are cut into runs, as the format
    says) and where its step counter starts again (one that skips ahead is asked about,
    :func:`_step_jumps`). Returns each, for messages:
    ``(id_ends, step_ends)`` (None without such a column)."""
    id_ends = step_ends = None
    id_name = res.find("episode_id")
    if id_name is not None:
        ids = np.asarray(reader.column("episode_id", id_name))
        if res.source.conventions.get("id_runs") == "cut":  # ids may come back: runs are pieces
            ids = _run_numbers(ids)
        id_ends = _id_boundaries(ids, id_name, res.source.where).reshape(shape)
        ends.unflagged = ends.unflagged | id_ends
    step_name = res.find("step")
    if step_name is not None:
        step_ends, steps = _step_resets(reader, step_name, shape)
        ends.unflagged = ends.unflagged | step_ends
        _step_jumps(res, step_name, steps, axes, ends)
    return id_ends, step_ends


def _id_boundaries(ids: np.ndarray, name: str, where: str) -> np.ndarray:
    """``cut[t]`` where the episode id changes after ``t``; ids must be contiguous runs."""
    ids = ids.reshape(-1)
    cut = np.zeros(ids.shape, bool)
    if ids.size == 0:
        return cut
    change = ids[1:] != ids[:-1]
    cut[:-1] = change
    starts = ids[np.concatenate([[True], change])]
    if len(np.unique(starts)) != len(starts):
        values, counts = np.unique(starts, return_counts=True)
        again = values[counts > 1][:1].tolist()[0]  # a number or a text id
        raise id_again_error(where, name, again)
    return cut


def id_again_error(where: str, name: str, value: Any) -> DataError:
    """The refusal of episode id ``value`` of column ``name`` coming back after other
    ids (the rows are not grouped by episode, or the column holds no episode ids)."""
    return DataError(
        f'{where}: episode id {value!r} in "{name}" appears in more than one run of rows',
        "sort the table by episode (keeping step order) first, or pass "
        f"--ignore {name} if it holds no episode ids",
    )


def _run_numbers(ids: np.ndarray) -> np.ndarray:
    """Each run of equal ids numbered in order: the same cuts, every run its own piece.

    For formats whose ids may come back after other ids (a TorchRL buffer holds one
    trajectory in the slices of several flattened collector batches; the source's
    ``conventions["id_runs"] == "cut"``): a run's end is a cut in the data, never a
    join with a later run (docs/CONVENTIONS.md §7.4)."""
    flat = ids.reshape(-1)
    change = np.concatenate([[False], flat[1:] != flat[:-1]])
    return np.cumsum(change).reshape(ids.shape)


def _step_resets(
    reader: ColumnReader, name: str, shape: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray | None]:
    """``(reset, steps)``: ``reset[t]`` where the step counter starts again after ``t``
    (it does not go up: an episode starts at ``t+1``), and the counter itself (None
    where the column is not an integer counter: it proves nothing)."""
    steps = np.asarray(reader.column("step", name)).reshape(-1)
    reset = np.zeros(shape, bool)
    if steps.size != reset.size or not np.issubdtype(steps.dtype, np.integer):
        del reader.roles["step"]
        return reset, None
    reset.reshape(-1)[:-1] = steps[1:] <= steps[:-1]
    return reset, steps


def _step_jumps(
    res: Resolution, name: str, steps: np.ndarray | None, axes: Axes, ends: Ends
) -> None:
    """A flat table's step counter that goes up by more than one where nothing ends the
    episode: a decision, whatever the estimator.

    A counter of an episode's steps goes on by one and starts again at a new episode. One
    that skips ahead counts something else (a global step over several envs, frames
    under frame skip) or rows were dropped there: nothing says whether the two rows are
    one episode's consecutive steps. Reading the skip as an episode start (as a restart
    is read) gave prefix sums and returns-to-go of one row each, with exit 0. Rows where a
    flag or the episode id ends the episode are not looked at."""
    if steps is None or steps.size < 2:
        return
    jumps = np.zeros(steps.shape, bool)
    jumps[:-1] = steps[1:] > steps[:-1]
    jumps[:-1] &= steps[1:] - steps[:-1] != 1  # (a difference: no overflow at the max)
    term, trunc = ends.flags()
    jumps &= ~(term | trunc | ends.unflagged).reshape(-1)
    if not jumps.any():
        return
    t = int(np.argmax(jumps))
    first, then = steps[t].item(), steps[t + 1].item()
    at = _at(jumps.reshape(ends.unflagged.shape), res.source, axes.lengths, axes.place)
    res.ask(
        Decision(
            f'"{name}" goes from {first} to {then} ({at}) where no flag ends an episode: '
            "a counter of an episode's steps goes on by one, so it counts something else "
            "(a global step over several envs?) or rows were dropped there",
            f"pass --ignore {name} if the rows are consecutive steps, or mark the ends",
        )
    )


def _index_gaps(
    res: Resolution, reader: ColumnReader, shape: tuple[int, ...], axes: Axes, ends: Ends
) -> None:
    """A flat table's pandas index (``__index_level_0__``) where it does not go on by one
    and nothing ends the episode there: a decision.

    pandas writes a DataFrame's index as a column only when it is not a RangeIndex:
    after rows were dropped (``dropna``, a filter), reordered (``sample``,
    ``sort_values``), concatenated or exploded. Where its labels do not go on by one,
    the two rows need not be consecutive steps, and reading them as such (rltscan reads
    rows in file order) gave other numbers with exit 0. Nothing in the table says what
    lies between them, so the run asks (whatever the estimator): ``--ignore`` the column
    where the rows are consecutive steps all the same, or mark the ends. A column read
    as the episode id (an exploded table's labels) is not looked at again."""
    name = res.find("row_index")
    if name is None or name == res.find("episode_id"):
        return
    labels = np.asarray(reader.column("row_index", name)).reshape(-1)
    if labels.size != int(np.prod(shape)) or not np.issubdtype(labels.dtype, np.integer):
        del reader.roles["row_index"]  # not pandas's integer labels: they prove nothing
        return
    term, trunc = ends.flags()
    gaps = np.zeros(labels.shape, bool)
    gaps[:-1] = labels[1:] != labels[:-1] + 1
    gaps &= ~(term | trunc | ends.unflagged).reshape(-1)
    if not gaps.any():
        return
    t = int(np.argmax(gaps))
    first, then = labels[t].item(), labels[t + 1].item()
    at = _at(gaps.reshape(shape), res.source, axes.lengths, axes.place)
    if first == then:
        what = (
            f'the pandas index "{name}" repeats its label {first} ({at}): df.explode gives '
            "each item its row's label"
        )
        fix = f"pass --episode-id {name} if each label is one episode"
    else:
        what = (
            f'the pandas index "{name}" goes from {first} to {then} ({at}) where no flag '
            "ends an episode: rows were dropped, reordered or concatenated there, so the "
            "two need not be consecutive steps"
        )
        fix = "sort the table by its index first (df.sort_index()) if it was reordered"
    res.ask(Decision(what, f"{fix}, or pass --ignore {name} if the rows are consecutive steps"))


def _hidden_ends(
    res: Resolution,
    reader: ColumnReader,
    shape: tuple[int, ...],
    axes: Axes,
    ends: Ends,
    observation_gaps: ObservationGaps,
) -> None:
    """A flat table's hidden episode ends (``ends.marks["observation_gaps"]``): rows where
    the observations jump (:func:`_observation_gaps`) and nothing else ends the episode.
    ``"error"`` asks (a decision); otherwise (``--ends-from-observations``) they are
    truncations."""
    term, trunc = ends.flags()
    gaps = _observation_gaps(res, reader, shape)
    if isinstance(gaps, list):  # Arrow lists: the check cannot run, and is not skipped
        fix = "pass --ignore-observation-gaps if the flags mark every episode end"
        if observation_gaps != "error":  # --ends-from-observations cannot be followed
            fix = "drop --ends-from-observations and " + fix
        res.ask(
            Decision(
                f"{quoted(gaps)} hold lists of different lengths, which rltscan does not "
                "compare, so episode ends that no flag marks (observation jumps) cannot be "
                "looked for",
                fix,
            )
        )
        return
    if not gaps.any():  # nothing jumps (or nothing to compare): no hidden end
        ends.marks["observation_gaps"] = gaps
        return
    hidden = gaps & ~term & ~trunc
    hidden &= ~ends.unflagged  # an id change or step restart says it already
    ends.marks["observation_gaps"] = hidden
    if hidden.any() and observation_gaps == "error":
        res.ask(
            Decision(
                f'"{reader.roles["observations"]}" jumps after '
                f"{_at(hidden, res.source, axes.lengths, axes.place)} where no flag ends the "
                f'episode ("{reader.roles["next_observations"]}" differs from the next row: '
                "a hidden episode end)",
                "pass --ends-from-observations to treat such rows as "
                "truncations, or --ignore-observation-gaps",
            )
        )
    elif hidden.any():
        ends.truncated = trunc | hidden
        res.notes.append(
            "episode ends found where observations jump (no flag set) are "
            "truncations (--ends-from-observations)"
        )


OBSERVATION_GAP = 1e-6  # the threshold D4RL-based code bases use (IQL, CORL)


def _observation_gaps(
    res: Resolution, reader: ColumnReader, shape: tuple[int, ...]
) -> np.ndarray | list[str]:
    """``gap[t]`` where ``‖observations[t+1] − next_observations[t]‖ > 1e-6`` (the step
    after ``t`` does not continue from ``t``'s successor state): an episode ends after
    ``t``. Empty (all False) unless both columns exist with one row per step; the names
    of the two columns that are Arrow lists where they cannot be compared."""
    gap = np.zeros(shape, bool)
    obs_name = res.find("observations")
    nxt_name = res.find("next_observations")
    if obs_name is None or nxt_name is None:
        return gap
    listed = [n for n in (obs_name, nxt_name) if "list" in res.source.columns[n].dtype]
    try:  # Arrow lists of one length (pandas, HF rows) are read as (N, d) and compared
        obs = np.asarray(reader.column("observations", obs_name))
        nxt = np.asarray(reader.column("next_observations", nxt_name))
    except DataError:
        if listed:  # lists of several lengths: not compared, never skipped silently
            return listed
        raise
    if obs.shape != nxt.shape or obs.shape[:1] != shape[:1] or obs.dtype.kind not in "fiub":
        del reader.roles["observations"], reader.roles["next_observations"]
        return gap
    n = len(obs)
    if n < 2:
        return gap
    # bool observations (MultiBinary) are compared too: as 0/1
    after = obs[1:].reshape(n - 1, -1).astype(np.float64)
    diff = after - nxt[:-1].reshape(n - 1, -1).astype(np.float64)
    gap[:-1] = np.sqrt(np.einsum("ij,ij->i", diff, diff)) > OBSERVATION_GAP
    return gap


def _unflagged_meaning(
    res: Resolution,
    axes: Axes,
    ends: Ends,
    ends_are: EndsAre | None,
    ends_matter: bool,
    id_ends: np.ndarray | None,
    step_ends: np.ndarray | None,
) -> None:
    """What an end that no flag explains is, set on ``ends``: what ``--ends-are`` (or the
    format's convention) says; a termination where either reading gives the same numbers
    (not ``ends_matter``); else a decision, saying what marks the first such end
    (``id_ends``, ``step_ends``, or the dones column), with a provisional truncation."""
    if not ends.unflagged.any():  # (a window of a flagged file: the common case)
        return
    term, trunc = ends.flags()
    unflagged = ends.unflagged = ends.unflagged & ~term & ~trunc
    if not unflagged.any():
        return
    if ends_are is None and not ends_matter:  # either reading: the same numbers
        ends.terminated = term | unflagged
    elif ends_are is None:
        first = tuple(np.argwhere(unflagged)[0])
        dones = res.find("dones") or res.find("episode_starts")  # found already
        by_id = id_ends is not None and bool(id_ends[first])
        by_step = step_ends is not None and bool(step_ends[first])
        why = _why_unflagged(res, dones, by_id, by_step)
        fix = "pass --ends-are terminal or --ends-are truncated"
        step = res.find("step") if by_step and res.source.layout == "flat" else None
        if step is not None and not by_id:  # a counter of something else ends no episode
            fix += f", or --ignore {step} if it does not count the steps of an episode"
        res.ask(
            Decision(
                f"{why} ({_at(unflagged, res.source, axes.lengths, axes.place)}) but no "
                "flag says whether the episode terminated or was truncated",
                fix,
            )
        )
        ends.truncated = trunc | unflagged  # provisional: never computed with
    elif ends_are == "terminal":
        ends.terminated = term | unflagged
    else:
        ends.truncated = trunc | unflagged


def _why_unflagged(res: Resolution, dones: str | None, by_id: bool, by_step: bool) -> str:
    """What marks the first unexplained episode end, for the error message: the id
    column where it changes there (``by_id``), the step column where it does not go on
    by one there (``by_step``; inside one id run, said so), else the dones column."""
    source = res.source
    if source.layout == "episodes":
        return "an episode ends with no terminated or truncated flag"
    id_name = res.find("episode_id") if source.layout == "flat" else None
    if by_id and id_name is not None:
        return f'an episode ends where "{id_name}" changes'
    step = res.find("step") if source.layout == "flat" else None
    if by_step and step is not None and id_name is not None:
        return f'"{step}" does not go on by one inside one "{id_name}" run'
    if by_step and step is not None:
        return f'an episode ends where "{step}" does not go on by one'
    return f'"{dones}" ends an episode' if dones else "an episode ends"


def _at(mask: np.ndarray, source: Source, lengths: list[int], offset: int | np.ndarray = 0) -> str:
    """Where the first set entry of ``mask`` is, in the user's terms."""
    return where_is(np.argwhere(mask)[0], source, lengths, offset)


def where_is(
    index: np.ndarray, source: Source, lengths: list[int], offset: int | np.ndarray = 0
) -> str:
    """``row 12`` / ``step 5 of env 2`` / ``step 3 of episode_7`` for a flat/2-D index.
    ``offset`` is where the data starts in the file (a window), or the stored row of each
    transition (a table whose final-observation rows are not transitions)."""
    if source.layout == "episodes" and lengths:
        i = int(index[0])
        starts = np.cumsum([0, *lengths])
        e = int(np.searchsorted(starts, i, side="right") - 1)
        key = source.episode_keys[e] if e < len(source.episode_keys) else f"episode {e}"
        return f"step {i - int(starts[e])} of {key}"
    if len(index) == 1:
        i = int(index[0])
        row = int(offset[i]) if isinstance(offset, np.ndarray) else i + offset
        return f"row {row}"
    t, b = (int(index[0]), int(index[1]))
    if source.layout == "batch-major":
        t, b = b, t
    return f"step {t + int(offset)} of env {b}"
