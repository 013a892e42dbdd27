"""Stored rows that are not transitions: RLDS final observations and NEXT_STEP resets.

An RLDS ``is_last`` row may hold only the final observation, not a transition
(docs/CONVENTIONS.md §1.9), and under Gymnasium's NEXT_STEP autoreset the row after each
episode end is a reset step (§1.4). Whether they are transitions is the user's word or
proven from the data, never guessed; where they are not, the resolver reads a view of the
transitions (:class:`FinalRows`) and the outputs are NaN on the rows left out.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rltscan.errors import DataError, ParameterError
from rltscan.io.columns import OBSERVATION_FLAGS, ColumnInfo
from rltscan.io.resolve import (
    ColumnReader,
    Decision,
    IsLastRow,
    Reading,
    Resolution,
    as_flag,
    pick_column,
    squeeze,
    without_ignored,
)
from rltscan.io.source import Source
from rltscan.roles import ROLES


@dataclass
class FinalRows:
    """An RLDS table whose ``is_last`` rows hold only the final observation: the view of
    its transitions, and where each transition's successor row is."""

    view: Source  # the transitions; flags that describe the next row's observation moved
    base: Source  # the stored table
    kept: np.ndarray  # stored row -> is a transition
    kept_index: np.ndarray  # transition -> its stored row
    successor: np.ndarray  # transition -> the stored row after it (may be past the end)
    known: np.ndarray  # transition -> a row follows it (its observation is s_{t+1})
    label: str  # what an excluded row is, for the notes ('an "is_last" row')


def final_rows(
    res: Resolution,
    reader: ColumnReader,
    reading: Reading,
    window: tuple[int, int] | None,
    in_force: dict[str, Any],
) -> FinalRows | None:
    """RLDS's ``is_last`` rows (docs/CONVENTIONS.md §1.9): whether they are transitions is
    the user's word (``--is-last-row``), else a decision. Nothing in the table proves it:
    RLDS calls a terminal ``is_last`` row the terminal observation, but
    rlds_dataset_builder (Open X-Embodiment) marks every demo's real last step, reward 1,
    ``is_last`` and ``is_terminal``. With ``observation``, the table's transitions are every
    other row; their flags come from the final observation's row (its ``is_terminal``)."""
    source = res.source
    name = res.find("last_row") or _last_row_named(res.overrides)
    if reading.autoreset == "next-step":
        if name is not None:
            raise ParameterError(
                f'{source.where}: --autoreset next-step on a table with an RLDS "{name}" '
                "column: RLDS marks its final-observation rows itself",
                "drop --autoreset and pass --is-last-row observation or transition",
            )
        in_force["autoreset"] = "next-step"
        return _reset_rows(res, reader, reading, window)
    if name is None or source.layout not in ("flat", "episodes"):
        return None
    term_name = res.find("terminated")
    observation_term = term_name if term_name in OBSERVATION_FLAGS else None
    last = _stored_flag(reader, "last_row", name)
    term = _stored_flag(reader, "terminated", observation_term) if observation_term else None
    choice = _is_last_row(res, reading, name)
    in_force["is_last_row"] = choice
    if choice == "transition":
        return None
    _refuse_final_rows(source, window, name)
    _check_final_rows(res, reader, name, last, term, observation_term)
    res.notes.append(
        f'{int(last.sum())} "{name}" row(s) hold only the final observation (RLDS), not a '
        "transition: they are left out of the computation and their outputs are NaN"
    )
    moved = functools.partial(_onto_steps, name, last, source.where)
    return _without_rows(source, ~last, f'an "{name}" row', moved)


def _is_last_row(res: Resolution, reading: Reading, name: str) -> IsLastRow:
    """Whether the ``name`` (``is_last``) rows are transitions: the user's word; a step
    where it is named as the dones column (it ends the step on its row); otherwise a
    decision (provisionally a transition, never computed with). Terminal ``is_last`` rows
    decide nothing: RLDS proper stores the terminal observation there, the
    rlds_dataset_builder template the demo's last step with its reward."""
    choice = reading.is_last_row
    if choice is None and res.overrides.get("dones") == name:
        choice = "transition"  # named as the dones column: it ends the step on its row
        res.by["is_last_row"] = f"--dones {name}: its rows are steps that end an episode"
    if choice is None:
        res.ask(
            Decision(
                f'"{name}" marks the last row of each episode, which may hold only the final '
                "observation (RLDS: its reward and discount are not a transition) or be the "
                "episode's last step (converters that store no final observation, such as "
                "rlds_dataset_builder's, whose last step holds the reward)",
                "pass --is-last-row observation or --is-last-row transition",
            )
        )
        choice = "transition"  # provisional: never computed with
    return choice


def _refuse_final_rows(source: Source, window: tuple[int, int] | None, name: str) -> None:
    """Final-observation rows are read only from one flat table, whole: episode groups
    and windows (a sharded dataset) are refused, with what to do instead."""
    where = source.where
    if source.layout == "episodes":
        raise ParameterError(
            f"{where}: --is-last-row observation is not supported for episode groups yet",
            "store the episodes as one flat table, or pass --is-last-row transition if the "
            f'"{name}" row of each episode is a step',
        )
    if window is not None:
        raise ParameterError(
            f'{where}: a table whose "{name}" rows are final observations cannot be read in '
            "pieces (a sharded dataset) yet",
            "merge the shards into one file",
        )


def _check_final_rows(
    res: Resolution,
    reader: ColumnReader,
    name: str,
    last: np.ndarray,
    term: np.ndarray | None,
    observation_term: str | None,
) -> None:
    """With ``--is-last-row observation`` every episode must end in a final observation:
    a terminal row that is not an ``is_last`` row, or an episode start not preceded by
    one, is a DataError naming the row."""
    where = res.source.where
    if term is not None:
        stray = term & ~last
        if stray.any():
            row = int(np.flatnonzero(stray)[0])
            raise DataError(
                f'{where}: "{observation_term}" is set at row {row}, which is not an "{name}" '
                "row (with --is-last-row observation only a final observation is terminal)",
                "pass --is-last-row transition if every row is a step",
                column=observation_term,
                index=row,
            )
    starts_name = res.find("episode_starts")
    if starts_name is not None:
        first = _stored_flag(reader, "episode_starts", starts_name)
        orphan = first.copy()
        orphan[0] = False
        orphan[1:] &= ~last[:-1]
        if orphan.any():
            row = int(np.flatnonzero(orphan)[0])
            raise DataError(
                f'{where}: row {row} starts an episode ("{starts_name}") but row {row - 1} is '
                f'not an "{name}" row: that episode has no final observation',
                f'pass --is-last-row transition if the "{name}" row of each episode is a step',
                column=starts_name,
                index=row,
            )


def _onto_steps(
    name: str, last: np.ndarray, where: str, column: str, data: np.ndarray, rows: FinalRows
) -> np.ndarray | None:
    """The flags that describe the next row's observation, read onto the step before it:
    the ``name`` (``is_last``) column, and an observation flag (``is_terminal``) where that
    row is a final observation. None for any other column (read at the kept rows)."""
    known, after = rows.known, rows.successor[rows.known]
    out = np.zeros(len(rows.kept_index), bool)
    if column == name:  # the row after the step holds the final observation
        out[known] = last[after]
    elif column in OBSERVATION_FLAGS:  # describes its row's observation: s_{t+1}
        flag = as_flag(squeeze(data, 1), column, where, "terminated")
        out[known] = flag[after] & last[after]
    else:
        return None
    return out


def _reset_rows(
    res: Resolution, reader: ColumnReader, reading: Reading, window: tuple[int, int] | None
) -> FinalRows:
    """Gymnasium's NEXT_STEP autoreset (docs/CONVENTIONS.md §1.4): the row after each
    episode end is the reset step (the final observation, an ignored action, reward 0,
    no flags), not a transition. Those rows are left out, and their ``values`` entry, V
    of the final observation, bootstraps the step before them when it was truncated.
    Proven, not assumed: a reset row that ends an episode or has a reward other than 0
    stops the run (then the buffer's rows after an end are real steps)."""
    source = res.source
    where = source.where
    if source.layout != "flat":
        raise ParameterError(
            f"{where}: --autoreset next-step reads a flat table of steps; this one is "
            f"{source.layout}",
            "store each env's steps as one flat table (a file per env), or drop --autoreset",
        )
    if window is not None:
        raise ParameterError(
            f"{where}: a buffer with NEXT_STEP reset rows cannot be read in pieces (a "
            "sharded dataset) yet",
            "merge the shards into one file",
        )
    flags, provisional = _reset_flags(res, reading)
    end = np.zeros(source.steps, bool)
    for role, name in flags.items():
        if name is not None:
            end |= _stored_flag(reader, role, name)
    after = np.zeros(len(end), bool)
    after[1:] = end[:-1]
    _check_reset_rows(res, reader, end, after, provisional)
    res.notes.append(
        f"{int(after.sum())} row(s) after an episode end are Gymnasium NEXT_STEP reset rows "
        "(--autoreset next-step), not transitions: they are left out of the computation and "
        "their outputs are NaN"
    )
    return _without_rows(source, ~after, "a reset row")


def _reset_flags(res: Resolution, reading: Reading) -> tuple[dict[str, str | None], bool]:
    """``(role -> column, provisional)``: the flags whose ends are followed by a reset row.
    ``dones`` counts only without terminated/truncated columns (they say it per step);
    none at all is a DataError. A dones column there is read as episode ends: refused if
    the user says ``starts``, provisional while its meaning is still asked."""
    where = res.source.where
    flags = {role: res.find(role) for role in ("terminated", "truncated", "dones")}
    if flags["dones"] is not None and (flags["terminated"] or flags["truncated"]):
        flags["dones"] = None  # term/trunc say it per step (the usual resolution refuses a clash)
    if not any(flags.values()):
        raise DataError(
            f"{where}: --autoreset next-step needs the episode-end flags (terminated, "
            f"truncated or dones) and {where} has none",
            "pass --terminals KEY and --timeouts KEY",
        )
    if flags["dones"] is None or reading.dones_mean == "ended":
        return flags, False
    if reading.dones_mean == "starts":
        raise ParameterError(
            f'{where}: --autoreset next-step reads "{flags["dones"]}" as the end of each '
            "step (a NEXT_STEP buffer's flags), not as episode starts",
            "pass --dones-mean ended, or drop --autoreset next-step",
        )
    return flags, True  # the resolution asks --dones-mean below; nothing is computed


def _check_reset_rows(
    res: Resolution, reader: ColumnReader, end: np.ndarray, after: np.ndarray, provisional: bool
) -> None:
    """The rows ``after`` an episode end are proven reset steps, or the run stops: a reset
    row never ends an episode itself (``end``), and its reward is 0. Nothing is refused
    while the reading is ``provisional`` (the meaning of dones is still asked)."""
    where = res.source.where
    both = np.flatnonzero(after & end)
    if len(both) and not provisional:
        row = int(both[0])
        raise DataError(
            f"{where}: row {row} follows an episode end and ends an episode itself; under "
            "NEXT_STEP autoreset that row is a reset step, which never ends one",
            "drop --autoreset next-step if every row of this buffer is a step",
            index=row,
        )
    rewards = res.find("rewards")
    if rewards is not None:  # the stored rewards, reset rows included (the view reads its own)
        stored = squeeze(np.asarray(reader.column("rewards", rewards)), 1)
        bad = np.flatnonzero(after & (stored != 0))
        if len(bad) and not provisional:
            row = int(bad[0])
            raise DataError(
                f'{where}: row {row} follows an episode end but its "{rewards}" is '
                f"{stored[row]!r}; a NEXT_STEP reset step has reward 0",
                "drop --autoreset next-step: the rows after each end here are real steps "
                "(SAME_STEP autoreset)",
                column=rewards,
                index=row,
            )


def _without_rows(
    source: Source,
    kept: np.ndarray,
    label: str,
    moved: Callable[[str, np.ndarray, FinalRows], np.ndarray | None] | None = None,
) -> FinalRows:
    """The view of ``source`` without the rows ``kept`` leaves out (RLDS final
    observations, NEXT_STEP resets): each column read at the kept rows, except where
    ``moved(column, stored, rows)`` gives the column itself (flags that describe the
    next row, read onto the step)."""
    kept_index = np.flatnonzero(kept)
    successor = kept_index + 1
    known = successor < len(kept)

    def read(column: str) -> np.ndarray | list[np.ndarray]:
        data = np.asarray(source.read(column))
        out = None if moved is None else moved(column, data, rows)
        return data[kept_index] if out is None else out

    columns = {
        k: ColumnInfo(k, (len(kept_index), *v.shape[1:]), v.dtype)
        for k, v in source.columns.items()
    }
    view = dataclasses.replace(
        source, read=read, columns=columns, read_range=None, steps=len(kept_index)
    )
    rows = FinalRows(view, source, kept, kept_index, successor, known, label)
    return rows  # (read above finds it when called)


def _stored_flag(reader: ColumnReader, role: str, name: str) -> np.ndarray:
    """A flag column of a flat table as stored (episode groups: concatenated)."""
    data = reader.column(role, name)
    flat = np.concatenate(data) if isinstance(data, list) else np.asarray(data)
    return as_flag(squeeze(flat, 1), name, reader.source.where, role)


def rows_may_be_excluded(source: Source, reading: Reading) -> bool:
    """Whether an RLDS ``is_last`` column may make some rows of ``source`` final
    observations rather than transitions (such a table is read whole, not by windows)."""
    if reading.autoreset == "next-step":
        return True
    if reading.is_last_row == "transition" or source.layout not in ("flat", "episodes"):
        return False
    if reading.ignore:
        source = without_ignored(source, reading.ignore)
    name, _, _ = pick_column(source, "last_row", reading.columns)
    return (name or _last_row_named(reading.columns)) is not None


def _last_row_named(overrides: Mapping[str, str | None]) -> str | None:
    """``--dones is_last``: RLDS's end-of-episode column is also its final-row marker."""
    named = overrides.get("dones")
    return named if named in ROLES["last_row"].aliases else None
