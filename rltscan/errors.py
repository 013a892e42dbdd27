"""Typed errors. Each class carries the exit code of the CLI contract (README.md, "Exit codes").

Messages are one line: ``<what is wrong, with names and values>; <what to do>``.
The CLI prefixes ``error: `` and exits with ``exit_code``.
"""

from __future__ import annotations


class RltscanError(Exception):
    """Base class. Anything else that escapes is a bug (exit 1, traceback)."""

    exit_code = 1


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

    ``where`` is the first half of the message (what and where), so a caller (the
    CLI) can replace the Python-level fix with its own options.
    """

    def __init__(self, where: str, fix: str) -> None:
        super().__init__(f"{where}; {fix}")
        self.where = where


class DTypeError(RltscanError, TypeError):
    """An input has a dtype the estimator cannot take (strings, complex, ...)."""

    exit_code = 4


class OutputRefusedError(RltscanError):
    """An output exists without --overwrite, binary to a terminal, no space left."""

    exit_code = 5


class BackendUnavailableError(RltscanError, RuntimeError):
    """The requested device or backend is not available (--device cuda with no GPU)."""

    exit_code = 6


class Interrupted(RltscanError):
    """Ctrl-C or SIGTERM; nothing was left half-written."""

    exit_code = 130
