"""V(s_{t+1}): where it comes from, and what happens where nothing gives it.

One source at a time (docs/CONVENTIONS.md §1.2): a ``next_values`` or
``bootstrap_values`` column, a Minari ``values`` of length ``T+1`` (its rows 1..T become
``next_values``), the ``values`` of the row after each RLDS transition, or a ``[B]``
``last_values`` at the end of a buffer's sequences. The missing-bootstrap rule
(``--missing-bootstrap``) is applied before any computing: a step that reads V(s_{t+1})
where nothing gives it stops the run, saying why, or counts as 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rltscan.errors import DataError, MissingBootstrapError
from rltscan.io.columns import quoted
from rltscan.io.ends import Axes, Ends, where_is
from rltscan.io.final_rows import FinalRows
from rltscan.io.resolve import ColumnReader, Decision, Resolution, role_of, squeeze
from rltscan.roles import of_kind

# The estimator arguments that give V(s_{t+1}) per step (§1.2): one source at a time
BOOTSTRAP_ARGUMENTS = tuple(r.argument for r in of_kind("bootstrap") if r.argument)


def bootstrap_given(given: Mapping[str, object]) -> bool:
    """Whether a bootstrap column is among ``given`` (arguments read or checked)."""
    return any(a in given for a in BOOTSTRAP_ARGUMENTS)


def one_bootstrap_source(
    given: Mapping[str, object], reader: ColumnReader, res: Resolution
) -> None:
    """Two bootstrap columns are two readings of V(s_{t+1}) (§1.2): a decision."""
    found = [reader.roles[role_of(a)] for a in BOOTSTRAP_ARGUMENTS if a in given]
    if len(found) > 1:
        res.ask(
            Decision(
                f'both "{found[0]}" and "{found[1]}" give V(s_{{t+1}})',
                f"pass --ignore {found[1]} or --ignore {found[0]}",
            )
        )


def refuse_no_values(
    arguments: tuple[str, ...],
    required: tuple[str, ...],
    raw: Mapping[str, object],
    skipped: Mapping[str, str],
    res: Resolution,
) -> None:
    """An estimator that reads V(s_{t+1}) inside episodes from ``values`` or
    ``next_values`` (TD(λ)) needs one of them: name the file and the options."""
    if "values" not in arguments or "next_values" not in arguments or "values" in required:
        return
    present = set(raw) | set(skipped)
    if "values" in present or "next_values" in present:
        return
    source = res.source
    found = quoted(source.columns) if source.columns else "no per-step columns"
    raise DataError(
        f'{source.where} has no column "values" or "next_values" (V(s_t) or V(s_{{t+1}}), '
        "read inside every episode)",
        f"pass --values KEY or --next-values KEY (found: {found})",
        column="values",
        option="--values KEY",
    )


def derived_next_values(
    res: Resolution,
    reader: ColumnReader,
    rows: FinalRows | None,
    arguments: tuple[str, ...],
    skipped: Mapping[str, str],
    kwargs: dict[str, np.ndarray | float],
    lengths: list[int],
    flags_only: bool,
) -> np.ndarray | None:
    """V(s_{t+1}) derived from the values (Minari's T+1 rows, RLDS's final rows) into
    ``kwargs["next_values"]``, only while no bootstrap column gives it (§1.2: one
    source). Returns where a value derived from the next stored row exists (RLDS:
    the last stored row has none), None where nothing was derived that way."""
    wanted = "next_values" in arguments
    if res.source.layout == "episodes" and wanted and not bootstrap_given(kwargs):
        _next_from_values(res, reader, lengths, kwargs, res.notes)
    if rows is None or not wanted or bootstrap_given({**kwargs, **skipped}):
        return None
    return _next_from_final_rows(rows, res, reader, kwargs, flags_only)


def _next_from_values(
    res: Resolution,
    reader: ColumnReader,
    lengths: list[int],
    kwargs: dict[str, np.ndarray | float],
    notes: list[str],
) -> None:
    """V(s_{t+1}) from T+1 episode values (Minari): for estimators that take no values,
    and for those whose values already came in with T rows (which then bootstrap
    nothing: the missing-bootstrap rule applies)."""
    name = res.find("values")
    if name is None:
        return
    used = "values" in reader.roles  # read as the estimator's values: keep that role
    parts = reader.data["values"] if used else reader.column("values", name)
    parts = parts if isinstance(parts, list) else [parts]
    if all(len(p) == t + 1 for p, t in zip(parts, lengths, strict=True)):
        kwargs["next_values"] = np.concatenate([p[1:] for p in parts])
        notes.append(f'"{name}" has T+1 rows per episode: its rows 1..T are the next values')
    elif not used:
        del reader.roles["values"]


def _next_from_final_rows(
    rows: FinalRows,
    res: Resolution,
    reader: ColumnReader,
    kwargs: dict[str, np.ndarray | float],
    flags_only: bool,
) -> np.ndarray | None:
    """V(s_{t+1}) of each transition from the ``values`` of the row after it: the next
    step's, or the final observation's at the end of an episode (which bootstraps a
    truncated one). Returns where it exists (the last stored row has no successor)."""
    name = res.find("values")
    if name is None:
        return None
    reader.roles["values"] = name
    if not flags_only:
        stored = squeeze(np.asarray(rows.base.read(name)), 1)
        reader.bytes_read += int(stored.nbytes)
        dtype = stored.dtype if stored.dtype.kind == "f" else np.dtype(np.float64)
        nv = np.full(len(rows.kept_index), np.nan, dtype=dtype)
        nv[rows.known] = stored[rows.successor[rows.known]]
        kwargs["next_values"] = nv
    res.notes.append(
        f'V(s_{{t+1}}) is "{name}" of the next row: on {rows.label}, V of the final '
        "observation, which bootstraps a truncated episode"
    )
    return rows.known


def read_last_value(
    res: Resolution,
    reader: ColumnReader,
    arguments: tuple[str, ...],
    given: Mapping[str, object],
    known: np.ndarray | None,
    ref: np.ndarray,
    axes: Axes,
) -> float | np.ndarray | None:
    """The bootstrap at the end of each sequence (``last_value``) from a ``last_values``
    column, where there is one: only for estimators that take it, outside episode groups
    (their T+1 values give it) and where no per-step V(s_{t+1}) is given or derived
    (``given``, ``known``). A flat file takes one scalar, a ``[T, B]``/``[B, T]`` buffer
    one value per sequence."""
    has_next = bootstrap_given(given) or known is not None
    if "last_value" not in arguments or has_next or axes.episodes:
        return None
    where = res.source.where
    name = res.find("last_values", extra=True)
    if name is None:
        return None
    last = squeeze(np.asarray(reader.column("last_values", name)), 1)
    if axes.layout == "flat":
        if last.size != 1:
            raise DataError(
                f'{where}: "{name}" has shape {last.shape}',
                "a flat file takes one scalar last value",
            )
        return float(last.reshape(()))
    n_seq = axes.sequences(ref)
    if last.shape != (n_seq,):
        raise DataError(
            f'{where}: "{name}" has shape {last.shape} but there are {n_seq} sequences',
            f"last values need shape ({n_seq},)",
        )
    return last


def apply_missing_bootstrap(
    rule: str,
    given: Mapping[str, object],
    kwargs: dict[str, np.ndarray | float],
    ends: Ends,
    known: np.ndarray | None,
    res: Resolution,
    axes: Axes,
) -> dict[str, int]:
    """The missing-bootstrap rule (``rule``: ``"error"``/``"zero"``), applied before any
    computing: a step whose V(s_{t+1}) is read but that nothing gives (:func:`_bootstrap_gaps`)
    stops the run, saying why the first one needs it, or counts as 0 (then a derived
    V(s_{t+1}) is 0 there too). Returns the count to report (``zero_bootstraps``), if any."""
    term, trunc = ends.flags()
    gaps = _bootstrap_gaps(given, term, trunc, axes.time_dim, axes.final, known)
    if not gaps.any():
        return {}
    if rule == "error":
        marks = {**ends.marks, "forced": ends.unflagged}
        raise MissingBootstrapError(
            f"{res.source.where}: {_gap_reason(gaps, marks, res, axes)} "
            "and needs a bootstrap value V(s_{t+1}), but none is given",
            _bootstrap_fix(axes.layout),
        )
    if known is not None and isinstance(kwargs.get("next_values"), np.ndarray):
        nv = np.array(kwargs["next_values"])
        nv[gaps] = 0.0  # the derived V(s_{t+1}) has no entry there: 0, as asked
        kwargs["next_values"] = nv
    return {"zero_bootstraps": int(gaps.sum())}


def _bootstrap_gaps(
    kwargs: Mapping[str, object],
    term: np.ndarray,
    trunc: np.ndarray,
    time_dim: int,
    final: bool,
    known: np.ndarray | None = None,
) -> np.ndarray:
    """Steps whose V(s_{t+1}) is read (a truncation, or the end of the data when it does
    not terminate) but that no column gives: the estimators' missing-bootstrap rule.
    ``known`` marks the steps where a derived V(s_{t+1}) exists (RLDS final rows)."""
    if known is None and ("next_values" in kwargs or "bootstrap_values" in kwargs):
        return np.zeros(term.shape, bool)
    gaps = trunc & ~term
    if final:
        last = np.moveaxis(gaps, time_dim, 0)  # a view: writes go to gaps
        if "last_value" in kwargs:
            last[-1] = False
        else:
            last[-1] |= ~np.moveaxis(term, time_dim, 0)[-1]
    if known is not None:
        gaps &= ~known
    return gaps


def _bootstrap_fix(layout: str) -> str:
    """Where V(s_{t+1}) can come from in this layout (docs/CONVENTIONS.md §1.2)."""
    if layout == "episodes":
        where = (
            "pass --next-values KEY, or --values KEY with T+1 rows per episode (the last is V "
            "of the state after the last step)"
        )
    elif layout == "flat":
        where = "pass --next-values KEY"
    else:
        where = "pass --next-values KEY, or --last-values KEY (one per sequence)"
    return f"{where}, or --missing-bootstrap zero to count it as 0"


def _gap_reason(
    gaps: np.ndarray, marks: Mapping[str, np.ndarray], res: Resolution, axes: Axes
) -> str:
    """Why the FIRST step in ``gaps`` needs V(s_{t+1}), in the user's terms: a set
    truncation flag, an end that an option made a truncation, or the end of the data."""
    index = np.argwhere(gaps)[0]
    at = where_is(index, res.source, axes.lengths, axes.place)
    key = tuple(int(i) for i in index)
    axis = axes.time_dim % gaps.ndim
    if marks.get("column_trunc") is not None and marks["column_trunc"][key]:
        return f'{at} is a truncation ("{_found_name(res, "truncated")}" is set there)'
    if marks.get("forced") is not None and marks["forced"][key]:
        return f"{at} ends an episode that --ends-are truncated makes a truncation"
    if marks.get("observation_gaps") is not None and marks["observation_gaps"][key]:
        return f"{at} ends an episode where the observations jump (--ends-from-observations)"
    if marks.get("dones_trunc") is not None and marks["dones_trunc"][key]:
        return f"{at} is a truncation (its episode ends there and no terminal flag is set)"
    if int(index[axis]) == gaps.shape[axis] - 1:
        return f"the data ends at {at} with no terminal flag (a truncation)"
    return f"{at} is a truncation"


def _found_name(res: Resolution, role: str) -> str:
    """The column found for ``role`` (for messages; the role's name when none)."""
    return res.found.get((role, False)) or role
