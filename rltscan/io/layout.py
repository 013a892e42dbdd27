"""From a :class:`Source` to estimator arguments: roles → columns → arrays → flags.

This module alone decides what a column means in time: which flag ends an
episode, how ``dones`` is shifted, how a Minari ``values`` of length ``T+1``
becomes ``values``/``next_values``, and where episode ends are forced cuts.
Flags follow docs/CONVENTIONS.md §1.1: ``terminated_t``/``truncated_t`` describe the
END of step ``t``; forced cuts are truncations and are never written back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from rltscan.errors import AmbiguousInputError, DataError, MissingBootstrapError, ParameterError
from rltscan.io.columns import (
    ALIASES,
    ARGUMENT_ROLE,
    DISCOUNT_LIKE,
    OPTION,
    ColumnInfo,
    missing_column_error,
    quoted,
    resolve_override,
)
from rltscan.io.source import Source

DonesMean = Literal["ended", "starts"]
PER_ROW = ("last_value", "init")  # one value per sequence, not per step
EndsAre = Literal["terminal", "truncated"]
ObservationGaps = Literal["error", "truncate", "ignore"]


@dataclass(frozen=True)
class Reading:
    """How a file's columns are read: every choice the resolver must not guess.

    ``columns`` maps roles to column names (``--terminals done``, ...); ``dones_mean``,
    ``ends_are`` and ``observation_gaps`` say what a ``dones`` column, unflagged episode
    ends and hidden (observation) ends mean; ``ignore`` takes look-alike columns out of
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

    def check(self) -> None:
        """The choices' spelling (the CLI checks them too, with its hints)."""
        for option, value, allowed in (
            ("--dones-mean", self.dones_mean, ("ended", "starts")),
            ("--ends-are", self.ends_are, ("terminal", "truncated")),
            ("--observation-gaps", self.observation_gaps, ("error", "truncate", "ignore")),
        ):
            if value is not None and value not in allowed:
                raise ParameterError(f'{option} must be one of {", ".join(allowed)}, got "{value}"')


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

    def split(self, array: np.ndarray) -> list[np.ndarray]:
        """A concatenated output cut back into one array per episode."""
        return np.split(array, np.cumsum(self.lengths)[:-1]) if self.lengths else [array]


@dataclass
class _Reader:
    source: Source
    bytes_read: int = 0
    roles: dict[str, str] = field(default_factory=dict)
    data: dict[str, np.ndarray | list[np.ndarray]] = field(default_factory=dict)

    def column(self, role: str, name: str) -> np.ndarray | list[np.ndarray]:
        data = self.source.read(name)
        parts = data if isinstance(data, list) else [data]
        self.bytes_read += sum(int(p.nbytes) for p in parts)
        self.roles[role] = name
        self.data[role] = data
        return data


def find_column(
    source: Source, role: str, overrides: Mapping[str, str | None], *, extra: bool = False
) -> str | None:
    """The column for ``role``: the override if given (must exist), else the one alias
    present. Two aliases present are two readings of the file: refused, never guessed."""
    pool: dict[str, ColumnInfo] = dict(source.extra if extra else source.columns)
    name = overrides.get(role)
    if name:
        everything = {**source.columns, **source.extra}
        return resolve_override(role, name, everything, source.where)
    found = [n for n in ALIASES.get(role, ()) if n in pool]
    taken = {v for k, v in overrides.items() if v and k != role}
    found = [n for n in found if n not in taken]
    if len(found) > 1:
        option = OPTION.get(role, "--" + role.replace("_", "-"))
        raise AmbiguousInputError(
            f'{source.where}: both "{found[0]}" and "{found[1]}" could be the {role} column',
            f"pass {option} KEY (or --ignore the other)",
        )
    return found[0] if found else None


def _without(source: Source, ignore: tuple[str, ...]) -> Source:
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


def _squeeze(arr: np.ndarray, ndim: int) -> np.ndarray:
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
            f"pass another column with {OPTION.get(role, '--' + role)}",
        )
    bad = ~((arr == 0) | (arr == 1))
    if bad.any():
        index = np.unravel_index(int(np.argmax(bad)), arr.shape)
        at = index[0] if len(index) == 1 else index
        raise DataError(
            f'{where}: column "{name}" must hold 0/1 flags, '
            f"found {arr[index].item()!r} at index {at}",
            f"fix the column or pass another with {OPTION.get(role, '--' + role)}",
        )
    return arr != 0


def _shift_starts(starts: np.ndarray, time_dim: int, last: np.ndarray | None) -> np.ndarray:
    """``starts[t+1]`` (obs t+1 begins an episode) → ``ended[t]``; the tail from ``last``."""
    moved = np.moveaxis(starts, time_dim, 0)
    ended = np.zeros_like(moved)
    ended[:-1] = moved[1:]
    if last is not None:
        ended[-1] = last.reshape(ended[-1].shape)
    return np.moveaxis(ended, 0, time_dim)


def refuse_unnamed_discount(
    source: Source, arguments: tuple[str, ...], overrides: Mapping[str, str | None]
) -> None:
    """A column that looks like a per-step discount changes the numbers if it is one:
    an estimator that could read it (``discount`` is an argument) stops unless the user
    names it (``--discount``) or sets it aside (``--ignore``)."""
    if "discount" not in arguments or overrides.get("discount"):
        return
    for name in DISCOUNT_LIKE:
        if name in source.columns:
            raise AmbiguousInputError(
                f'column "{name}" looks like a per-step discount, which would replace --gamma',
                f"pass --discount {name} to use it, or --ignore {name} to compute with --gamma",
            )


def prepare(
    source: Source,
    *,
    arguments: tuple[str, ...],
    required: tuple[str, ...],
    reading: Reading = Reading(),
    window: tuple[int, int] | None = None,
    bootstrap: str | None = None,
    strict: bool = True,
    flags_only: bool = False,
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
    ``flags_only`` (a plan, ``--dry-run``) reads the reference column and the flag
    columns only; the other columns are checked to exist with the right shape.
    A flat file's hidden episode ends (rows where ``observations[t+1] !=
    next_observations[t]`` and no flag is set) follow ``reading.observation_gaps``:
    ``"error"`` (stop and ask), ``"truncate"`` (``--ends-from-observations``) or
    ``"ignore"`` (``--ignore-observation-gaps``; the observations are then not read).
    """
    overrides: Mapping[str, str | None] = reading.columns
    dones_mean, ends_are = reading.dones_mean, reading.ends_are
    observation_gaps = reading.observation_gaps
    if reading.ignore:
        source = _without(source, reading.ignore)
    keep: int | None = None
    final = True
    whole = source
    if window is not None:
        start, stop = window
        total = source.steps
        if total is None or source.read_range is None:
            raise TypeError(f"{source.where} cannot be read by windows")
        final = stop >= total
        keep = stop - start
        source = source.window(start, min(stop + 1, total), final=final)
    reader = _Reader(source)
    layout = source.layout
    time_dim = 0 if layout == "time-major" else -1
    episodes = layout == "episodes"

    refuse_unnamed_discount(source, arguments, overrides)
    rewards_name = find_column(source, "rewards", overrides)
    want_rewards = "rewards" in arguments or ("x" in arguments and not overrides.get("x"))
    if want_rewards and rewards_name is None:
        raise missing_column_error("rewards", source.columns, source.where)

    raw: dict[str, np.ndarray | list[np.ndarray]] = {}
    skipped: dict[str, str] = {}  # flags_only: argument -> column, not read
    for arg in arguments:
        role = ARGUMENT_ROLE.get(arg)
        if role is None or role == "last_values":
            continue
        if role == "x":
            name = overrides.get("x") or rewards_name
            if name and overrides.get("x"):
                name = find_column(source, "x", overrides)
        elif role == "rewards":
            name = rewards_name
        else:
            name = find_column(source, role, overrides)
        if name is None:
            if arg in required:
                raise missing_column_error(role, source.columns, source.where)
            continue
        if flags_only and not episodes and arg not in ("rewards", "x"):
            skipped[arg] = name  # a plan checks it exists (and its shape) without reading
            reader.roles[role] = name
            continue
        raw[arg] = reader.column(role, name)

    reference = "x" if "x" in raw and "rewards" not in raw else "rewards"
    if reference not in raw:
        raise missing_column_error("rewards", source.columns, source.where)
    ref_name = reader.roles.get(reference, rewards_name or "")
    if window is not None or skipped:
        _check_whole_shapes(whole, reader.roles, ref_name)  # before slices disagree

    lengths = _episode_lengths(raw[reference], source) if episodes else []

    kwargs: dict[str, np.ndarray | float] = {}
    notes: list[str] = list(source.notes)  # how the layout was decided
    for arg, data in raw.items():
        role = ARGUMENT_ROLE[arg]
        name = reader.roles[role]
        if episodes:
            parts = _fit_episode(arg, data, lengths, source, name, raw, kwargs, notes)
            if parts is not None:
                kwargs[arg] = parts
        else:
            kwargs[arg] = data  # type: ignore[assignment]

    if episodes and "next_values" in arguments and "next_values" not in kwargs:
        _next_from_values(source, reader, overrides, lengths, kwargs, notes)

    # normalise shapes against the reference column
    ref = kwargs[reference]
    assert isinstance(ref, np.ndarray)
    ref_ndim = 1 if layout in ("flat", "episodes") else 2
    ref = _squeeze(ref, ref_ndim)
    if ref.ndim != ref_ndim:
        raise DataError(
            f'{source.where}: column "{ref_name}" has shape {ref.shape} but the {layout} layout '
            f"needs {ref_ndim} dimension(s)",
            f"pass --layout or the right {OPTION[reference]} KEY",
        )
    kwargs[reference] = ref
    if ref.size == 0:
        raise DataError(
            f'{source.where}: column "{ref_name}" has no steps (shape {ref.shape})',
            "pass a file that holds data",
        )
    for arg, value in list(kwargs.items()):
        if arg == reference or not isinstance(value, np.ndarray):
            continue
        role = ARGUMENT_ROLE[arg]
        value = _squeeze(value, ref.ndim if arg != "x" else value.ndim)
        if value.shape[: ref.ndim] != ref.shape:
            raise DataError(
                f'{source.where}: column "{reader.roles[role]}" has shape {value.shape} but '
                f'"{ref_name}" has {ref.shape}',
                "every per-step column needs the same shape",
            )
        kwargs[arg] = value

    # bootstrap at the end of [T, B] / [B, T] buffers (and a flat file's scalar)
    has_next = "next_values" in kwargs or "next_values" in skipped
    if "last_value" in arguments and not has_next and not episodes:
        name = find_column(source, "last_values", overrides, extra=True)
        if name is not None:
            last = _squeeze(np.asarray(reader.column("last_values", name)), 1)
            if layout == "flat":
                if last.size != 1:
                    raise DataError(
                        f'{source.where}: "{name}" has shape {last.shape}',
                        "a flat file takes one scalar last value",
                    )
                kwargs["last_value"] = float(last.reshape(()))
            else:
                n_seq = ref.shape[1] if time_dim == 0 else ref.shape[0]
                if last.shape != (n_seq,):
                    raise DataError(
                        f'{source.where}: "{name}" has shape {last.shape} but there are '
                        f"{n_seq} sequences",
                        f"last values need shape ({n_seq},)",
                    )
                kwargs["last_value"] = last

    ends_by = "--ends-are"
    if ends_are is None and source.conventions.get("ends_are"):  # the format's own rule
        ends_are = source.conventions["ends_are"]  # type: ignore[assignment]
        ends_by = f"{source.conventions.get('why', 'the format')}; --ends-are overrides"
    meaning: list[DonesMean] = []
    marks: dict[str, np.ndarray] = {}  # masks counted after the window is trimmed
    terminated, truncated, forced_mask = _flags(
        source,
        reader,
        overrides,
        ref.shape,
        time_dim,
        lengths,
        dones_mean,
        ends_are,
        notes,
        needed="terminated" in required,
        meaning=meaning,
        offset=window[0] if window is not None else 0,
        observation_gaps=observation_gaps,
        marks=marks,
        ends_by=ends_by,
    )
    id_runs = None
    if keep is not None:
        _check_whole_shapes(whole, reader.roles, ref_name)  # the flag columns too
        kwargs = {k: v if k in PER_ROW else _trim(v, keep, time_dim) for k, v in kwargs.items()}
        ref = _trim(ref, keep, time_dim)
        terminated = None if terminated is None else _trim(terminated, keep, time_dim)
        truncated = None if truncated is None else _trim(truncated, keep, time_dim)
        forced_mask = _trim(forced_mask, keep, time_dim)
        marks = {k: _trim(v, keep, time_dim) for k, v in marks.items()}
        ids = reader.data.get("episode_id")
        if ids is not None:
            ids = np.asarray(ids).reshape(-1)[:keep]
            id_runs = ids[np.concatenate([[True], ids[1:] != ids[:-1]])] if ids.size else ids
    forced = int(forced_mask.sum())
    if terminated is not None:
        kwargs["terminated"] = terminated
    if truncated is not None:
        kwargs["truncated"] = truncated

    steps = int(ref.size)
    sequences = 1 if ref.ndim == 1 else int(ref.shape[1] if time_dim == 0 else ref.shape[0])
    term = terminated if terminated is not None else np.zeros(ref.shape, bool)
    trunc = truncated if truncated is not None else np.zeros(ref.shape, bool)
    forced_term = int((forced_mask & term).sum())
    counts = {
        "terminated": int(term.sum()) - forced_term,
        "truncated": int((trunc & ~term).sum()) - (forced - forced_term),
        "both": int((trunc & term).sum()),
        "forced_cuts": forced,
    }
    ends = int((term | trunc).sum())
    last_open = _open_tails(term | trunc, time_dim) if final else 0
    counts["open_ends"] = last_open
    if "observation_gaps" in marks:
        counts["observation_gaps"] = int(marks["observation_gaps"].sum())
    if bootstrap is not None:
        gaps = _bootstrap_gaps({**kwargs, **skipped}, term, trunc, time_dim, final)
        if gaps.any():
            if bootstrap == "error":
                at = _at(gaps, source, lengths, window[0] if window is not None else 0)
                end = "the data ends" if _is_last(gaps, time_dim) else "an episode is truncated"
                raise MissingBootstrapError(
                    f"{source.where}: {end} at {at} without termination but no bootstrap "
                    "value V(s_t+1) was given",
                    "pass --next-values KEY (or --last-values KEY for a [T, B] buffer), or "
                    "--missing-bootstrap zero to treat it as 0",
                )
            counts["zero_bootstraps"] = int(gaps.sum())
    if final and strict:
        _check_overrides_used(overrides, reader.roles, source.where)
    return Prepared(
        kwargs=kwargs,
        time_dim=time_dim,
        roles=dict(reader.roles),
        steps=steps,
        episodes=len(lengths) if episodes else ends + last_open,
        sequences=len(lengths) if episodes else sequences,
        lengths=lengths,
        counts=counts,
        notes=notes,
        bytes_read=reader.bytes_read,
        dtype=str(ref.dtype),
        template=rewards_name,
        dones_mean=meaning[0] if meaning else dones_mean,
        id_runs=id_runs,
    )


def _bootstrap_gaps(
    kwargs: Mapping[str, object],
    term: np.ndarray,
    trunc: np.ndarray,
    time_dim: int,
    final: bool,
) -> np.ndarray:
    """Steps whose V(s_{t+1}) is read (a truncation, or the end of the data when it does
    not terminate) but that no column gives: the estimators' missing-bootstrap rule."""
    if "next_values" in kwargs or "bootstrap_values" in kwargs:
        return np.zeros(term.shape, bool)
    gaps = trunc & ~term
    if final:
        last = np.moveaxis(gaps, time_dim, 0)  # a view: writes go to gaps
        if "last_value" in kwargs:
            last[-1] = False
        else:
            last[-1] |= ~np.moveaxis(term, time_dim, 0)[-1]
    return gaps


def _is_last(gaps: np.ndarray, time_dim: int) -> bool:
    """Whether the first gap is at the end of the data (the last step of its sequence)."""
    index = np.argwhere(gaps)[0]
    axis = time_dim % gaps.ndim
    return int(index[axis]) == gaps.shape[axis] - 1


def _check_overrides_used(
    overrides: Mapping[str, str | None], roles: Mapping[str, str], where: str
) -> None:
    """A column the user named is used, or the run stops: never silently ignored."""
    for role, name in overrides.items():
        if name and role not in roles and role in OPTION:
            raise ParameterError(
                f'{where}: {OPTION[role]} "{name}" is not used by this command here',
                f"drop {OPTION[role]}",
            )


def _check_whole_shapes(source: Source, roles: Mapping[str, str], ref_name: str) -> None:
    """A window sees slices; the step shapes of the whole columns must agree."""
    dims = 1 if source.layout == "flat" else 2
    ref_shape = tuple(source.columns[ref_name].shape)
    for role, name in roles.items():
        info = source.columns.get(name)
        if info is None or role in ("last_values", "last_dones"):
            continue
        shape = tuple(info.shape)
        if shape[:dims] != ref_shape[:dims]:
            raise DataError(
                f'{source.where}: column "{name}" has shape {shape} but "{ref_name}" has '
                f"{ref_shape}",
                "every per-step column needs the same shape",
            )


def _trim(value: np.ndarray | float, keep: int, time_dim: int) -> np.ndarray | float:
    """The first ``keep`` steps of a per-step array (scalars and per-row values as they are)."""
    if not isinstance(value, np.ndarray) or value.ndim == 0:
        return value
    if time_dim == -1 and value.ndim >= 2:
        return value[:, :keep]
    return value[:keep]


def _next_from_values(
    source: Source,
    reader: _Reader,
    overrides: Mapping[str, str | None],
    lengths: list[int],
    kwargs: dict[str, np.ndarray | float],
    notes: list[str],
) -> None:
    """Bootstraps for estimators that take no values: V(s_{t+1}) from T+1 episode values."""
    name = find_column(source, "values", overrides)
    if name is None:
        return
    parts = reader.column("values", name)
    parts = parts if isinstance(parts, list) else [parts]
    if all(len(p) == t + 1 for p, t in zip(parts, lengths, strict=True)):
        kwargs["next_values"] = np.concatenate([p[1:] for p in parts])
        notes.append(f'"{name}" has T+1 rows per episode: its rows 1..T are the next values')
    else:
        del reader.roles["values"]


def _open_tails(done: np.ndarray, time_dim: int) -> int:
    """Sequences whose last step has no flag (the window end cuts an episode)."""
    last = np.take(done, -1, axis=time_dim)
    return int((~np.asarray(last)).sum())


def _episode_lengths(data: np.ndarray | list[np.ndarray], source: Source) -> list[int]:
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
    if arg == "values" and plus_one and "next_values" not in raw:
        kwargs["next_values"] = np.concatenate([p[1:] for p in parts])
        notes.append(f'"{name}" has T+1 rows per episode: V(s_T) of each episode bootstraps it')
        return np.concatenate([p[:-1] for p in parts])
    if plus_one and source.padded:
        return np.concatenate([p[:-1] for p in parts])
    for key, part, t in zip(source.episode_keys, parts, lengths, strict=True):
        if len(part) != t:
            hint = (
                "; store T+1 values (one per observation) or pass --next-values"
                if arg == "values"
                else "; every per-step column needs one row per step"
            )
            raise DataError(
                f'{source.where}: "{key}/{name}" has {len(part)} rows but the episode has '
                f"{t} steps{hint}"
            )
    return np.concatenate(parts)


def _read_flag(reader: _Reader, role: str, name: str, lengths: list[int], ndim: int) -> np.ndarray:
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
    return as_flag(_squeeze(np.asarray(data), ndim), name, reader.source.where, role)


def _flags(
    source: Source,
    reader: _Reader,
    overrides: Mapping[str, str | None],
    shape: tuple[int, ...],
    time_dim: int,
    lengths: list[int],
    dones_mean: DonesMean | None,
    ends_are: EndsAre | None,
    notes: list[str],
    *,
    needed: bool,
    meaning: list[DonesMean] | None = None,
    offset: int = 0,
    observation_gaps: ObservationGaps = "error",
    marks: dict[str, np.ndarray] | None = None,
    ends_by: str = "--ends-are",
) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray]:
    """``(terminated, truncated, unflagged)`` from whichever flag columns exist.

    ``unflagged`` marks episode ends that no flag explains (an episode-id change, the
    end of an episode group, a ``dones`` end beside both flag columns): they take the
    meaning ``--ends-are`` gives them, and without it the run stops (never guessed).
    A ``dones`` column beside ``terminals``/``timeouts`` is used only as the user says
    (``--dones-mean``) or when it provably repeats them; otherwise the run stops.
    """
    where = source.where
    ndim = len(shape)

    def check(arr: np.ndarray, name: str) -> np.ndarray:
        if arr.shape != shape:
            raise DataError(
                f'{where}: column "{name}" has shape {arr.shape} but the rewards have {shape}',
                "every per-step column needs the same shape",
            )
        return arr

    def load(role: str) -> tuple[np.ndarray | None, str | None]:
        name = find_column(source, role, overrides)
        if name is None:
            return None, None
        return check(_read_flag(reader, role, name, lengths, ndim), name), name

    term, term_name = load("terminated")
    trunc, trunc_name = load("truncated")
    dones_name = find_column(source, "dones", overrides)
    starts_name = find_column(source, "episode_starts", overrides)
    unflagged = np.zeros(shape, bool)

    def from_dones() -> np.ndarray:
        """``ended_t`` from the dones/episode-start column, as it is meant."""
        return _ended_from_dones(
            source,
            reader,
            overrides,
            dones_name,
            starts_name,
            shape,
            time_dim,
            lengths,
            dones_mean,
            notes,
            meaning,
        )

    if term is None and trunc is None:
        ended: np.ndarray | None = None
        if dones_name is not None or starts_name is not None:
            ended = from_dones()
        elif source.layout == "flat" and find_column(source, "episode_id", overrides):
            ended = np.zeros(shape, bool)  # the boundaries come from the ids below
        elif source.layout == "episodes":
            ended = np.zeros(shape, bool)
        if ended is None:
            if not needed:
                return None, None, unflagged
            raise DataError(
                f'{where} has no "terminals" or "timeouts" column (nor dones or episode ids)',
                f"pass --terminals KEY and/or --timeouts KEY (found: {quoted(source.columns)})",
            )
        term, trunc = np.zeros(shape, bool), np.zeros(shape, bool)
        unflagged = ended
    else:
        names = " and ".join(f'"{n}"' for n in (term_name, trunc_name) if n)
        if term is None:
            term = np.zeros(shape, bool)
        if trunc is None:
            trunc = np.zeros(shape, bool)
        other = dones_name or starts_name
        if other is not None:
            if dones_mean is None and dones_name is not None and starts_name is None:
                dones = check(_read_flag(reader, "dones", dones_name, lengths, ndim), dones_name)
                # a copy only when every reading agrees: with no terminated column, a done
                # equal to "truncated" could still mean terminated (which wins) or ended
                same_as_term = term_name is not None and bool(np.array_equal(dones, term))
                same_as_ends = bool(np.array_equal(dones, term | trunc)) and (
                    term_name is not None or not dones.any()
                )
                if not (same_as_term or same_as_ends):
                    bad = dones != (term | trunc)
                    at = _at(bad if bad.any() else dones, source, lengths, offset)
                    raise AmbiguousInputError(
                        f'{where}: "{dones_name}" beside {names} reads two ways that give '
                        f"different results ({at})",
                        f"pass --terminals {dones_name} if it marks "
                        "terminations, --dones-mean ended if it means terminated or truncated, "
                        f"--dones-mean starts if it marks episode starts, or --ignore {dones_name}",
                    )
                what = "terminations" if same_as_term else "terminations or truncations"
                notes.append(f'"{dones_name}" repeats {names} ({what}); checked, not used')
            else:
                ended = from_dones()
                extra = ended & ~term & ~trunc
                decided = meaning[-1] if meaning else dones_mean
                if decided == "ended" and trunc_name is None:
                    trunc = trunc | extra  # old gym beside terminals: ended and not terminal
                    notes.append(f'truncated = "{other}" and not {names}')
                elif decided == "ended" and term_name is None:
                    term = term | extra  # old gym beside TimeLimit.truncated
                    notes.append(f'terminated = "{other}" and not {names}')
                else:
                    unflagged = extra

    if source.layout == "flat":
        id_name = find_column(source, "episode_id", overrides)
        if id_name is not None:
            ids = np.asarray(reader.column("episode_id", id_name))
            if source.conventions.get("id_runs") == "cut":  # ids may come back: runs are pieces
                ids = _run_numbers(ids)
            unflagged = unflagged | _id_boundaries(ids, id_name, where)
        step_name = find_column(source, "step", overrides)
        if step_name is not None:
            unflagged = unflagged | _step_resets(reader, step_name, shape)
        if observation_gaps != "ignore":
            hidden = _observation_gaps(source, reader, overrides, shape) & ~term & ~trunc
            hidden &= ~unflagged  # an id change or step restart says it already
            if marks is not None:
                marks["observation_gaps"] = hidden
            if hidden.any() and observation_gaps == "error":
                raise AmbiguousInputError(
                    f'{where}: "{reader.roles["observations"]}" jumps after '
                    f"{_at(hidden, source, lengths, offset)} where no flag ends the episode "
                    f'("{reader.roles["next_observations"]}" differs from the next row: a '
                    "hidden episode end)",
                    "pass --ends-from-observations to treat such rows as "
                    "truncations, or --ignore-observation-gaps",
                )
            if hidden.any():
                trunc = trunc | hidden
                notes.append(
                    "episode ends found where observations jump (no flag set) are "
                    "truncations (--ends-from-observations)"
                )
    elif source.layout == "episodes":
        cut = np.zeros(shape, bool)
        cut[np.cumsum(lengths) - 1] = True
        unflagged = unflagged | cut
    unflagged = unflagged & ~term & ~trunc
    if unflagged.any():
        if ends_are is None:
            raise AmbiguousInputError(
                f"{where}: {_why_unflagged(source, dones_name or starts_name, overrides)} "
                f"({_at(unflagged, source, lengths, offset)}) but no flag says whether the "
                "episode terminated or was truncated",
                "pass --ends-are terminal or --ends-are truncated",
            )
        if ends_are == "terminal":
            term = term | unflagged
        else:
            trunc = trunc | unflagged
    if ends_are is not None:
        notes.append(f"episode ends that no flag explains are {ends_are} ({ends_by})")
    return term, trunc, unflagged


def _why_unflagged(source: Source, dones: str | None, overrides: Mapping[str, str | None]) -> str:
    """What marks the unexplained episode ends, for the error message."""
    if source.layout == "episodes":
        return "an episode ends with no terminated or truncated flag"
    id_name = find_column(source, "episode_id", overrides) if source.layout == "flat" else None
    if id_name is not None:
        return f'an episode ends where "{id_name}" changes'
    step = find_column(source, "step", overrides) if source.layout == "flat" else None
    if step is not None:
        return f'an episode ends where "{step}" starts again'
    return f'"{dones}" ends an episode' if dones else "an episode ends"


def _at(mask: np.ndarray, source: Source, lengths: list[int], offset: int = 0) -> str:
    """Where the first set entry of ``mask`` is, in the user's terms."""
    return where_is(np.argwhere(mask)[0], source, lengths, offset)


def where_is(index: np.ndarray, source: Source, lengths: list[int], offset: int = 0) -> str:
    """``row 12`` / ``step 5 of env 2`` / ``step 3 of episode_7`` for a flat/2-D index."""
    if source.layout == "episodes" and lengths:
        i = int(index[0])
        starts = np.cumsum([0, *lengths])
        e = int(np.searchsorted(starts, i, side="right") - 1)
        key = source.episode_keys[e] if e < len(source.episode_keys) else f"episode {e}"
        return f"step {i - int(starts[e])} of {key}"
    if len(index) == 1:
        return f"row {int(index[0]) + offset}"
    t, b = (int(index[0]), int(index[1]))
    if source.layout == "batch-major":
        t, b = b, t
    return f"step {t + offset} of env {b}"


OBSERVATION_GAP = 1e-6  # the threshold D4RL-based code bases use (IQL, CORL)


def _observation_gaps(
    source: Source, reader: _Reader, overrides: Mapping[str, str | None], shape: tuple[int, ...]
) -> np.ndarray:
    """``gap[t]`` where ``‖observations[t+1] − next_observations[t]‖ > 1e-6`` (the step
    after ``t`` does not continue from ``t``'s successor state): an episode ends after
    ``t``. Empty (all False) unless both columns exist with one row per step."""
    gap = np.zeros(shape, bool)
    obs_name = find_column(source, "observations", overrides)
    nxt_name = find_column(source, "next_observations", overrides)
    if obs_name is None or nxt_name is None:
        return gap
    obs = np.asarray(reader.column("observations", obs_name))
    nxt = np.asarray(reader.column("next_observations", nxt_name))
    if obs.shape != nxt.shape or obs.shape[:1] != shape[:1] or obs.dtype.kind not in "fiu":
        del reader.roles["observations"], reader.roles["next_observations"]
        return gap
    n = len(obs)
    if n < 2:
        return gap
    diff = obs[1:].reshape(n - 1, -1).astype(np.float64) - nxt[:-1].reshape(n - 1, -1)
    gap[:-1] = np.sqrt(np.einsum("ij,ij->i", diff, diff)) > OBSERVATION_GAP
    return gap


def _step_resets(reader: _Reader, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """``reset[t]`` where the step counter does not go on by one after ``t`` (an episode
    starts at ``t+1``); a column that is not an integer counter proves nothing."""
    steps = np.asarray(reader.column("step", name)).reshape(-1)
    reset = np.zeros(shape, bool)
    if steps.size != reset.size or not np.issubdtype(steps.dtype, np.integer):
        del reader.roles["step"]
        return reset
    reset.reshape(-1)[:-1] = steps[1:] != steps[:-1] + 1
    return reset


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
        again = values[counts > 1][0]
        raise DataError(
            f'{where}: episode id {again!r} in "{name}" appears in more than one run of rows',
            "sort the table by episode (keeping step order) first",
        )
    return cut


def _run_numbers(ids: np.ndarray) -> np.ndarray:
    """Each run of equal ids numbered in order: the same cuts, every run its own piece.

    For formats whose ids may come back after other ids (a TorchRL buffer holds one
    trajectory in the slices of several flattened collector batches; the source's
    ``conventions["id_runs"] == "cut"``): a run's end is a cut in the data, never a
    join with a later run (docs/CONVENTIONS.md §1.5)."""
    flat = ids.reshape(-1)
    change = np.concatenate([[False], flat[1:] != flat[:-1]])
    return np.cumsum(change).reshape(ids.shape)


def _ended_from_dones(
    source: Source,
    reader: _Reader,
    overrides: Mapping[str, str | None],
    dones_name: str | None,
    starts_name: str | None,
    shape: tuple[int, ...],
    time_dim: int,
    lengths: list[int],
    dones_mean: DonesMean | None,
    notes: list[str],
    decided: list[DonesMean] | None = None,
) -> np.ndarray:
    where = source.where
    ndim = len(shape)
    last_name = find_column(source, "last_dones", overrides, extra=True)
    if starts_name is not None and dones_name is None:
        meaning: DonesMean = "starts"
        name = starts_name
    else:
        assert dones_name is not None
        name = dones_name
        if dones_mean is not None:
            meaning = dones_mean
        elif dones_name.startswith("next.") or (
            source.layout in ("flat", "episodes") and dones_name == "is_last"
        ):
            meaning = "ended"
        elif source.layout in ("time-major", "batch-major") and last_name is not None:
            meaning = "starts"
            notes.append(f'"{dones_name}" with "{last_name}" [B]: CleanRL episode-start dones')
        else:
            raise AmbiguousInputError(
                f'{where}: "{dones_name}" may mean "episode ended after this step" or "this '
                'step starts an episode"',
                "pass --dones-mean ended or --dones-mean starts",
            )
    flag = _read_flag(reader, "dones", name, lengths, ndim)
    if flag.shape != shape:
        raise DataError(
            f'{where}: column "{name}" has shape {flag.shape} but the rewards have {shape}',
            "every per-step column needs the same shape",
        )
    if decided is not None:
        decided.append(meaning)
    if meaning == "ended":
        return flag
    last = None
    if last_name is not None:
        last = as_flag(
            np.asarray(reader.column("last_dones", last_name)), last_name, where, "dones"
        )
    notes.append(f'"{name}" marks episode starts; shifted by one step to episode ends')
    if source.layout == "episodes":
        parts = np.split(flag, np.cumsum(lengths)[:-1])
        return np.concatenate([_shift_starts(p, -1, None) for p in parts])
    return _shift_starts(flag, time_dim, last)


__all__ = ["ALIASES", "Prepared", "as_flag", "find_column", "prepare"]
