"""Columns as a file holds them, and producers' column conventions (docs/CONVENTIONS.md
§1.8-1.9): which names are a step's outcome, which describe an observation, which end an
episode by definition; plus the messages for a role that no column fills.

Pure Python: no h5py or pyarrow. What a role is (its names in files, its option, what
its column becomes) is one row of :data:`rltscan.roles.ROLES`; the resolver
(``io/layout.py`` and the modules it calls: ``io/resolve.py``, ``io/ends.py``,
``io/final_rows.py``) reads the rows and these conventions and restates none of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rltscan.errors import DataError
from rltscan.roles import ROLES

# Prefixes under which a producer stores the OUTCOME of step t (TorchRL: ("next", key)):
# when a role finds both "next/<k>" (or "next.<k>") and a root "<k>", the root one
# describes s_t (TorchRL's root done/terminated/truncated are those of the observation,
# all False after an automatic reset) and is not read for that role; the report notes it
# (docs/CONVENTIONS.md §1.8).
NEXT_PREFIXES = ("next/", "next.")

# Columns that describe the OBSERVATION of their row, not the step taken from it
# (RLDS: "is_terminal" marks a terminal observation; docs/CONVENTIONS.md §1.9). With
# --is-last-row observation they are read one row later: the transition before the
# final observation ends as the final observation says.
OBSERVATION_FLAGS = ("is_terminal", "is_last")

# "dones"-like columns whose producer defines them as "the episode ended after this
# row" (never "this row starts one") and an end with no terminal flag on it as a
# truncation, with that producer. RLDS: "an episode that ends in a step where
# is_terminal = False has been truncated"; d3rlpy 1.x datasets (MDPDataset.dump):
# "episode_terminals" ends every episode, and d3rlpy's loader reads its ends that are
# not "terminals" as timeouts; TorchRL: ("next", "done") is "terminated or truncated",
# and its value functions bootstrap an end that is not ("next", "terminated"), as
# rltscan reads a TensorDict (TensorDict.to_h5 writes the key as "next/done"). (Other
# columns under NEXT_PREFIXES, such as a flattened "next.done", are step outcomes, so
# "ended" too; what their unflagged ends are stays a decision.)
ENDED_BY_DEFINITION = {"is_last": "RLDS", "episode_terminals": "d3rlpy", "next/done": "TorchRL"}


@dataclass(frozen=True)
class ColumnInfo:
    """A column the file holds: its name, shape (whole column) and dtype string."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def describe(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f'"{self.name}" ({dims}{"," if len(self.shape) == 1 else ""}) {self.dtype}'


def quoted(names: Iterable[str], limit: int = 12) -> str:
    """``"a", "b", "c"`` (at most ``limit`` names, then ``...``)."""
    names = list(names)
    text = ", ".join(f'"{n}"' for n in names[:limit])
    return text + (", ..." if len(names) > limit else "")


def resolve_override(role: str, name: str, available: Mapping[str, ColumnInfo], where: str) -> str:
    """Check that an explicit ``--<role> NAME`` exists; say what does otherwise."""
    if name not in available:
        raise DataError(
            f'{where} has no column "{name}" (given by {_named_by(role)})',
            f"pass one of: {quoted(available)}",
            column=name,
        )
    return name


def missing_column_error(
    role: str,
    available: Mapping[str, ColumnInfo],
    where: str,
    overrides: Mapping[str, str | None] | None = None,
) -> DataError:
    """The message for a required role that no column fills; where the user's own option
    gave the role's usual column to another role (``--values rewards``), it says so."""
    row = ROLES.get(role)
    default = row.aliases[0] if row is not None and row.aliases else role
    option = _named_by(role)
    for other, name in (overrides or {}).items():
        if other != role and name in available and row is not None and name in row.aliases:
            return DataError(
                f'{where}: column "{name}" is read as the {other} ({_named_by(other)} {name}), '
                f"so no column is left for the {role}",
                f"pass {option} KEY",
                column=name,
                option=f"{option} KEY",
            )
    found = quoted(available) if available else "no per-step columns"
    return DataError(
        f'{where} has no column "{default}"',
        f"pass {option} KEY (found: {found})",
        column=default,
        option=f"{option} KEY",
    )


def _named_by(role: str) -> str:
    """How a user names ``role``'s column: its CLI option, else the role (``columns=``)."""
    row = ROLES.get(role)
    return row.option if row is not None and row.option else role
