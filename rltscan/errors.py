"""Typed errors. Each class carries the exit code of the CLI contract (README.md, "Exit codes").

Errors are data (issue 11): an error holds what is wrong, where, which column, the
first offending index and the fix as fields, and ``str()`` formats the one line

    ``<where>: <what> at index <index>; <fix>``

(each part only when set; ``what`` may hold ``{index}`` to place the index inside
the sentence). The CLI prefixes ``error: `` and exits with ``exit_code``. Callers
read the fields (``err.fix``, ``err.column``, ``err.index``) and derive new errors
with :meth:`RltscanError.replace`; nothing parses a message. :meth:`~RltscanError.to_dict`
and :meth:`~RltscanError.from_dict` carry an error as plain JSON (shard tasks, Ray).
"""

from __future__ import annotations

import os
import sys
from typing import Any

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep

Index = int | tuple[int, ...]

# The structured fields, in the order ``to_dict`` writes them.
FIELDS = ("what", "fix", "column", "index", "time_axis", "where", "option", "decisions")


class RltscanError(Exception):
    """Base class. Anything else that escapes is a bug (exit 1, traceback).

    ``what``: what is wrong, with names and values (may hold ``{index}``); ``fix``:
    what to do; ``column``: the input column (or array argument) at fault;
    ``index``: its first offending entry in the user's layout (an int or a tuple);
    ``time_axis``: which entry of ``index`` is the time step (None: none is, e.g. a
    per-sequence value), so that a window's error can be made absolute;
    ``where``: the file or shard it happened in (formatted ``<where>: ``);
    ``option``: the CLI option that supplies what is missing (``--values KEY``);
    ``decisions``: for a refusal that several choices are open, each of them as
    ``{"what": ..., "fix": ...}`` (the message lists them all).
    """

    exit_code = 1

    def __init__(
        self,
        what: str = "",
        fix: str | None = None,
        *,
        column: str | None = None,
        index: Index | None = None,
        time_axis: int | None = None,
        where: str | None = None,
        option: str | None = None,
        decisions: list[dict[str, str]] | None = None,
    ) -> None:
        self.what = what
        self.fix = fix
        self.column = column
        self.index = _index(index)
        self.time_axis = time_axis
        self.where = where
        self.option = option
        self.decisions = [dict(d) for d in decisions] if decisions else None
        super().__init__(self.message)

    # -- formatting (the edge) -------------------------------------------------

    @property
    def at(self) -> str | None:
        """The index as the message shows it: ``5`` or ``(0, 5)``."""
        if self.index is None:
            return None
        return str(self.index[0]) if len(self.index) == 1 else str(self.index)

    @property
    def message(self) -> str:
        text = self.what
        if self.at is not None:
            if "{index}" in text:
                text = text.replace("{index}", self.at)
            else:
                text = f"{text} at index {self.at}"
        if self.where:
            text = f"{self.where}: {text}"
        if self.fix:
            text = f"{text}; {self.fix}"
        return text

    def __str__(self) -> str:
        return self.message

    # -- data ------------------------------------------------------------------

    def fields(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS}

    def replace(self, **changes: Any) -> RltscanError:
        """A copy of this error (same class) with some fields changed."""
        unknown = set(changes) - set(FIELDS)
        if unknown:
            raise TypeError(f"unknown error fields: {sorted(unknown)}")
        return type(self)(**{**self.fields(), **changes})

    def shifted(self, offset: int) -> RltscanError:
        """The same error with its time step moved by ``offset`` (a window or block
        that starts at step ``offset`` of the file reports the file's step)."""
        if offset == 0 or self.index is None or self.time_axis is None:
            return self
        index = list(self.index)
        index[self.time_axis] += offset
        return self.replace(index=tuple(index))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: the class name and the fields (``index`` as a list)."""
        out: dict[str, Any] = {"type": type(self).__name__, **self.fields()}
        if self.index is not None:
            out["index"] = list(self.index)
        return out

    @staticmethod
    def from_dict(data: dict[str, Any]) -> RltscanError:
        """Inverse of :meth:`to_dict`: an unknown class name gives a plain RltscanError."""
        cls = globals().get(str(data.get("type")))
        if not (isinstance(cls, type) and issubclass(cls, RltscanError)):
            cls = RltscanError
        return cls(**{name: data.get(name) for name in FIELDS})

    def __reduce__(self) -> tuple[Any, ...]:  # pickle by fields, whatever the class's bases
        return (_rebuild, (type(self), self.fields()))


def _rebuild(cls: type[RltscanError], fields: dict[str, Any]) -> RltscanError:
    return cls(**fields)


def _index(index: Any) -> tuple[int, ...] | None:
    if index is None:
        return None
    if isinstance(index, (list, tuple)):
        return tuple(int(i) for i in index)
    return (int(index),)


class ParameterError(RltscanError, ValueError):
    """A parameter value is out of range or inconsistent (gamma > 1, two bootstrap forms)."""

    exit_code = 2


class AmbiguousInputError(RltscanError, ValueError):
    """The input admits two readings (a bare ``dones`` column); a flag must choose."""

    exit_code = 2


class InputFileError(RltscanError, OSError):
    """The input file is missing, unreadable, not HDF5/Parquet/Arrow, corrupt or not seekable."""

    exit_code = 3


class DataError(RltscanError, ValueError):
    """Missing column, shape mismatch, NaN/Inf where read, flags not 0/1, missing bootstrap."""

    exit_code = 4


class MissingBootstrapError(DataError):
    """A truncation or the window end needs V(s_{t+1}) and no source gives it (D5).

    Built as ``MissingBootstrapError(what, fix)``; a caller (the CLI) that knows a
    better fix (column options instead of Python arguments) says
    ``err.replace(fix=...)``, keeping the rest.
    """


class DTypeError(RltscanError, TypeError):
    """An input has a dtype the estimator cannot take (strings, complex, ...)."""

    exit_code = 4


class OutputRefusedError(RltscanError):
    """An output exists without --overwrite, binary to a terminal, no space left, a
    reader that closed the pipe."""

    exit_code = 5


class BackendUnavailableError(RltscanError, RuntimeError):
    """The requested device or backend is not available (--device cuda with no GPU)."""

    exit_code = 6


class Interrupted(RltscanError):
    """Ctrl-C or SIGTERM; nothing was left half-written."""

    exit_code = 130


def outside_stacklevel() -> int:
    """The ``stacklevel`` at which a ``warnings.warn`` made by this function's caller
    names the first frame outside the rltscan package (the user's line), however many
    rltscan frames lie between."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
