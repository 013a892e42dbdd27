"""How a command fails: every error becomes one ``error:`` line and an exit code.

:func:`handled` wraps every command: a library error (:class:`RltscanError`) exits
with its class's code, Ctrl-C/SIGTERM with 130, a bug with 1 and its traceback;
:func:`fail` prints the line (and ``--json``'s error object, :func:`error_object`).
:data:`EXIT_CODES` is the list every ``--help`` ends with (README.md, "Exit codes").
"""

from __future__ import annotations

import contextlib
import importlib
import json
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from rltscan import interrupts
from rltscan.errors import RltscanError

EXIT_CODES = " ".join(
    [
        "Exit codes: 0 success (dry runs too) · 1 internal error (a bug) ·",
        "2 usage: bad option or value, ambiguous layout or dones ·",
        "3 input file: missing, unreadable, not HDF5/Parquet/Arrow, corrupt, not seekable ·",
        "4 data: missing column, shape mismatch, NaN/Inf where read, flags not 0/1,",
        "missing bootstrap · 5 output refused: exists without --overwrite, binary to a",
        "terminal, no space, a closed pipe · 6 backend unavailable · 130 interrupted.",
    ]
)

# click's exceptions, from wherever this typer takes click (typer >= 0.2x vendors a copy)
click_exceptions = importlib.import_module(typer.BadParameter.__module__)


def error_object(code: int, kind: str, message: str, hint: str | None = None) -> dict[str, Any]:
    """What ``--json`` prints on stdout for every error: usage, library (by class) or bug;
    ``hint`` only where there is one (a usage error's "did you mean")."""
    error: dict[str, Any] = {"code": code, "kind": kind, "message": message}
    if hint:
        error["hint"] = hint
    return {"error": error}


def fail(
    code: int, message: str, kind: str, json_out: bool, quiet: bool, hint: str | None = None
) -> None:
    """The error line on stderr (the only line there under ``--json`` and ``-q``; a
    ``hint:`` line follows it otherwise), the error object on stdout under ``--json``.
    A stream whose reader has gone takes nothing; the exit code still says it."""
    with contextlib.suppress(OSError):
        typer.echo(f"error: {message}", err=True)
        if hint and not (json_out or quiet):
            typer.echo(f"hint: {hint}", err=True)
    if json_out:
        with contextlib.suppress(OSError):
            typer.echo(json.dumps(error_object(code, kind, message, hint)))
    raise typer.Exit(code)


said = {"interrupted": False}  # handled() reported a Ctrl-C (main() must not again)


def interrupted_line() -> str:
    """The one line for Ctrl-C/SIGTERM: what, if anything, was already written."""
    done = written_so_far()
    if done.startswith("nothing"):
        return f"interrupted; {done}"
    return f"interrupted after {done}; re-run with --overwrite to be sure"


def no_room_line(err: BaseException) -> str | None:
    """The one line for a write that ran out of room (a full disk, a quota, ``ulimit -f``)
    that reached the CLI unnamed (:func:`rltscan.io.atomic.no_room`)."""
    from rltscan.io.atomic import no_room

    room = no_room(err)
    if room is None:
        return None
    what, fix = room
    return f"{what} while writing; {written_so_far()}; {fix}"


def written_so_far() -> str:
    """What a run that stopped early had already written in full (atomic renames only)."""
    from rltscan.io.atomic import committed

    done = committed()
    if done:
        return f"{', '.join(map(str, done))} was written in full"
    return "nothing was written and the input is unchanged"


@contextmanager
def handled(*, json_out: bool = False, quiet: bool = False, debug: bool = False) -> Iterator[None]:
    """Map :class:`RltscanError` to its exit code and Ctrl-C/SIGTERM to 130, in one place.

    From here on Ctrl-C raises ``KeyboardInterrupt`` (temp files are removed on the
    way out); before, it ends the process at once (nothing is written yet)."""
    interrupts.install_running()
    try:
        yield
    except RltscanError as err:
        if debug:
            traceback.print_exc(file=sys.stderr)
        if interrupts.seen():  # a Ctrl-C broke the step that failed: report the Ctrl-C
            said["interrupted"] = True
            fail(130, interrupted_line(), "Interrupted", json_out, quiet)
        fail(err.exit_code, str(err), type(err).__name__, json_out, quiet)
    except KeyboardInterrupt:
        said["interrupted"] = True
        fail(130, interrupted_line(), "Interrupted", json_out, quiet)
    except (typer.Exit, typer.Abort, click_exceptions.ClickException):
        raise
    except Exception as err:  # a bug: the traceback follows; --json still gets an object
        if interrupts.seen():  # e.g. a C extension's import broken by the Ctrl-C
            said["interrupted"] = True
            fail(130, interrupted_line(), "Interrupted", json_out, quiet)
        room = no_room_line(err)  # a full disk that the io layer did not name
        if room is not None:
            if debug:
                traceback.print_exc(file=sys.stderr)
            fail(5, room, "OutputRefusedError", json_out, quiet)
        if json_out:
            typer.echo(json.dumps(error_object(1, "InternalError", f"{type(err).__name__}: {err}")))
        raise
