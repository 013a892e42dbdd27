"""The resolver's vocabulary: the user's reading, open decisions, and which column plays
which role.

A :class:`Reading` holds every choice about a file's columns that the user may state
(``--dones-mean``, ``--ends-are``, ``--is-last-row``, column options, ...). Every choice
the data leaves open is a :class:`Decision`; the resolver goes on past one (with a
provisional reading, never used for numbers) so that a refusal lists every open decision
with its flag at once (docs/CONVENTIONS.md §1.10: :func:`decisions_error`).

:class:`Resolution` is one resolution's context: it finds each role's column once
(:func:`pick_column`: the user's override, else the role's one alias present;
:data:`rltscan.roles.ROLES`), keeps the notes and asks the open decisions.
:class:`ColumnReader` reads the columns, counting the bytes read and recording which
column each role took; :func:`as_flag` reads 0/1 data as flags.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from rltscan.errors import AmbiguousInputError, DataError, ParameterError
from rltscan.io.columns import NEXT_PREFIXES, ColumnInfo, quoted, resolve_override
from rltscan.io.source import Source
from rltscan.roles import ROLELESS_LOOK_ALIKES, ROLES, LookAlike, of_argument, option_of

DonesMean = Literal["ended", "starts"]


EndsAre = Literal["terminal", "truncated"]


ObservationGaps = Literal["error", "truncate", "ignore"]


IsLastRow = Literal["observation", "transition"]


Autoreset = Literal["same-step", "next-step"]


CHOICES: dict[str, tuple[str, ...]] = {  # Reading field -> its words (the CLI's too)
    "dones_mean": ("ended", "starts"),
    "ends_are": ("terminal", "truncated"),
    "observation_gaps": ("error", "truncate", "ignore"),
    "is_last_row": ("observation", "transition"),
    "autoreset": ("same-step", "next-step"),
}


@dataclass(frozen=True)
class Reading:
    """How a file's columns are read: every choice the resolver must not guess.

    ``columns`` maps roles to column names (``--terminals done``, ...); ``dones_mean``,
    ``ends_are`` and ``observation_gaps`` say what a ``dones`` column, unflagged episode
    ends and hidden (observation) ends mean; ``is_last_row`` whether an RLDS ``is_last``
    row holds only the final observation (``"observation"``: not a transition) or is the
    episode's last step (``"transition"``); ``autoreset="next-step"`` that the row after
    each episode end is a Gymnasium NEXT_STEP reset row, not a step (``"same-step"``,
    the default: every row is a step); ``ignore`` takes look-alike columns out of
    every role; ``layout`` and ``group`` beat detection. One value serves ``inspect``,
    ``--dry-run`` and the run (docs/CONVENTIONS.md §1).
    """

    columns: Mapping[str, str] = field(default_factory=dict)
    layout: str | None = None
    group: str | None = None
    dones_mean: DonesMean | None = None
    ends_are: EndsAre | None = None
    ignore: tuple[str, ...] = ()
    observation_gaps: ObservationGaps = "error"
    is_last_row: IsLastRow | None = None
    autoreset: Autoreset | None = None

    def check(self) -> None:
        """The choices' spelling (the CLI checks them too, with its hints)."""
        for name, allowed in CHOICES.items():
            value = getattr(self, name)
            option = "--" + name.replace("_", "-")
            if value is not None and value not in allowed:
                raise ParameterError(f'{option} must be one of {", ".join(allowed)}, got "{value}"')

    def keywords(self) -> dict[str, Any]:
        """This reading as the keyword arguments of ``rltscan.run``/``rltscan.inspect``."""
        return {
            "columns": dict(self.columns),
            "layout": self.layout,
            "group": self.group,
            "dones_mean": self.dones_mean,
            "ends_are": self.ends_are,
            "ignore": list(self.ignore),
            "observation_gaps": self.observation_gaps,
            "is_last_row": self.is_last_row,
            "autoreset": self.autoreset,
        }


@dataclass(frozen=True)
class Decision:
    """A choice the data leaves open: ``what`` is open, ``fix`` the flag(s) that settle it."""

    what: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        return {"what": self.what, "fix": self.fix}


def decisions_error(where: str, decisions: list[Decision]) -> AmbiguousInputError:
    """One refusal for every open decision, each with its flag (exit 2)."""
    if len(decisions) == 1:
        only = decisions[0]
        return AmbiguousInputError(f"{where}: {only.what}", only.fix, decisions=[only.to_dict()])
    items = "; ".join(f"({i}) {d.what}: {d.fix}" for i, d in enumerate(decisions, 1))
    return AmbiguousInputError(
        f"{where}: {len(decisions)} decisions are open, one flag each: {items}",
        decisions=[d.to_dict() for d in decisions],
    )


@dataclass
class Resolution:
    """One resolution's context: the source, the user's column choices, the notes, and
    the decisions still open (each asked once; the resolution goes on provisionally)."""

    source: Source
    overrides: Mapping[str, str | None]
    notes: list[str]
    pending: list[Decision] = field(default_factory=list)
    by: dict[str, str] = field(default_factory=dict)  # a choice -> who made it
    found: dict[tuple[str, bool], str | None] = field(default_factory=dict)

    def find(self, role: str, *, extra: bool = False) -> str | None:
        key = (role, extra)
        if key not in self.found:
            name, decision, note = pick_column(self.source, role, self.overrides, extra=extra)
            if decision is not None:
                self.ask(decision)
            if note is not None:
                self.notes.append(note)
            self.found[key] = name
        return self.found[key]

    def ask(self, decision: Decision) -> None:
        if decision not in self.pending:
            self.pending.append(decision)


def pick_column(
    source: Source, role: str, overrides: Mapping[str, str | None], *, extra: bool = False
) -> tuple[str | None, Decision | None, str | None]:
    """``(column, open decision, note)`` for ``role``: the override if given (must exist),
    else the one alias present; a root ``<k>`` beside ``next/<k>`` (``next.<k>``) is the
    state's flag, not the step's outcome, and gives way (noted). Two aliases left are two
    readings of the file: a decision (provisionally the first)."""
    pool: dict[str, ColumnInfo] = dict(source.extra if extra else source.columns)
    name = overrides.get(role)
    if name:
        everything = {**source.columns, **source.extra}
        return resolve_override(role, name, everything, source.where), None, None
    row = ROLES.get(role)
    found = [n for n in (row.aliases if row else ()) if n in pool]
    taken = {v for k, v in overrides.items() if v and k != role}
    found = [n for n in found if n not in taken]
    nested = [n for n in found if n.startswith(NEXT_PREFIXES)]
    roots = [n for n in found if any(p + n in nested for p in NEXT_PREFIXES)]
    note = None
    if roots and len(nested) == 1:
        found = [n for n in found if n not in roots]
        note = (
            f'"{nested[0]}" is the outcome of step t ("next" holds what step t led to, as '
            f"TorchRL writes it); the root {quoted(roots)} describes s_t and is not read as "
            f"{role} ({_read_instead(role, roots[0], nested[0])} to read it instead)"
        )
    if len(found) > 1:
        option = option_of(role)
        decision = Decision(
            f'both "{found[0]}" and "{found[1]}" could be the {role} column',
            f"pass {option} KEY (or --ignore the other)"
            if option
            else f"pass --ignore {found[1]} or --ignore {found[0]}",
        )
        return found[0], decision, None
    return (found[0] if found else None), None, note


def _read_instead(role: str, name: str, other: str) -> str:
    """The option that reads column ``name`` as ``role`` where the resolver took ``other``:
    the role's option, or (a role without one) ``--ignore`` of the other."""
    option = option_of(role)
    return f"{option} {name}" if option else f"--ignore {other}"


def find_column(
    source: Source, role: str, overrides: Mapping[str, str | None], *, extra: bool = False
) -> str | None:
    """The column for ``role``: the override if given (must exist), else the one alias
    present. Two aliases present are two readings of the file: refused, never guessed."""
    name, decision, _ = pick_column(source, role, overrides, extra=extra)
    if decision is not None:
        raise decisions_error(source.where, [decision])
    return name


def unnamed_look_alikes(source: Source, arguments: tuple[str, ...], res: Resolution) -> None:
    """A column that looks like a role read only when named (a per-step discount) changes
    the numbers if it is one: an estimator that could read the role (its argument is one
    of ``arguments``) stops unless the user names it (the role's option) or sets it aside
    (``--ignore``). A look-alike of no role (``roles.ROLELESS_LOOK_ALIKES``: a step
    mask, the mark of n-step rewards) changes every estimator's numbers if it is what
    it looks like: it stops every run unless set aside."""
    asked: list[tuple[LookAlike, str | None]] = [(like, None) for like in ROLELESS_LOOK_ALIKES]
    asked += [
        (row.look_alike, row.option)
        for row in ROLES.values()
        if row.look_alike is not None
        and row.argument in arguments
        and not res.overrides.get(row.name)
    ]
    for like, option in asked:
        for name in like.names:
            if name in source.columns and source.columns[name].dtype != "null":
                use = f"{option} {name} to use it, or " if option else ""
                res.ask(
                    Decision(
                        f'column "{name}" looks like {like.what}',
                        f"pass {use}--ignore {name} {like.otherwise}",
                    )
                )


def without_ignored(source: Source, ignore: tuple[str, ...]) -> Source:
    """``source`` with the ``--ignore`` columns out of every role."""
    everything = {**source.columns, **source.extra}
    for name in ignore:
        if name not in everything:
            raise ParameterError(
                f'{source.where} has no column "{name}" (given by --ignore)',
                f"pass one of: {quoted(everything)}",
            )
    return dataclasses.replace(
        source,
        columns={k: v for k, v in source.columns.items() if k not in ignore},
        extra={k: v for k, v in source.extra.items() if k not in ignore},
    )


@dataclass
class ColumnReader:
    source: Source
    bytes_read: int = 0
    roles: dict[str, str] = field(default_factory=dict)
    data: dict[str, np.ndarray | list[np.ndarray]] = field(default_factory=dict)

    def column(self, role: str, name: str) -> np.ndarray | list[np.ndarray]:
        data = self.source.read(name)
        parts = data if isinstance(data, list) else [data]
        if role != "episode_id" and any(p.dtype == object for p in parts):
            # text (Parquet strings): an episode id compares it; no other role reads it
            option = option_of(role)
            raise DataError(
                f'{self.source.where}: column "{name}" holds text, not numbers or booleans',
                f"pass the right column with {option}, or --ignore {name}"
                if option
                else f"pass --ignore {name}",
            )
        self.bytes_read += sum(int(p.nbytes) for p in parts)
        self.roles[role] = name
        self.data[role] = data
        return data


def role_of(argument: str) -> str:
    """The role whose column was read as estimator argument ``argument``."""
    row = of_argument(argument)
    assert row is not None, argument  # only such arguments are read as columns
    return row.name


def squeeze(arr: np.ndarray, ndim: int) -> np.ndarray:
    """``(N, 1)`` → ``(N,)`` (old D4RL files, TorchRL's trailing feature dim)."""
    while arr.ndim > ndim and arr.shape[-1] == 1:
        arr = arr[..., 0]
    return arr


def as_flag(arr: np.ndarray, name: str, where: str, role: str) -> np.ndarray:
    """A boolean array from bool/int/float 0-1 data; anything else is a DataError."""
    if arr.dtype == np.bool_:
        return arr
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
        raise DataError(
            f'{where}: column "{name}" has dtype {arr.dtype}, not 0/1 flags',
            f"pass {_another_column(role, name, 'another column with')}",
        )
    bad = ~((arr == 0) | (arr == 1))
    if bad.any():
        index = tuple(int(i) for i in np.unravel_index(int(np.argmax(bad)), arr.shape))
        at = index[0] if len(index) == 1 else index
        raise DataError(
            f'{where}: column "{name}" must hold 0/1 flags, '
            f"found {arr[index].item()!r} at index {at}",
            f"fix the column or pass {_another_column(role, name, 'another with')}",
        )
    return arr != 0


def _another_column(role: str, name: str, words: str) -> str:
    """How to read another column than ``name`` as ``role``: ``words`` and the role's
    option, or (a role without one) ``--ignore`` of ``name``."""
    option = option_of(role)
    return f"{words} {option}" if option else f"--ignore {name}"


__all__ = ["Decision", "Reading", "as_flag", "decisions_error", "find_column"]
