"""The ``rltscan`` command line: parse options, call :mod:`rltscan.api`, render the report.

Every command runs inside :func:`rltscan.cli.exit_codes.handled`, the one place where
library errors become ``error: <message>`` on stderr and an exit code (README.md, "Exit
codes").

The estimator commands, their options and ``--help`` are built from the estimators'
declarations (:data:`rltscan.estimators.DECLARATIONS`), which import no torch: ``--help``,
``--version``, ``inspect`` and ``--dry-run`` start without torch or triton
(tests/cli/test_startup.py); a run loads them when it computes.

This package exposes :data:`app` (the typer app) and :func:`main` (the console
script's entry point); its modules, by concern:

- ``commands``: the root command and every command on it, in help order
- ``estimate``: the estimator commands (``gae``, ``vtrace``, ...)
- ``inspect_bench``: ``inspect`` and ``bench``
- ``options``: each option's names, help and default, and its meaning to the API
- ``parsing``: typer's command, group and option classes, adjusted
- ``usage``: the wording of click's usage errors
- ``exit_codes``: errors, Ctrl-C and bugs to one ``error:`` line and an exit code
- ``render``: what a command prints (report, JSON, pictures)
- ``process``: the collector at start-up, and how a finished process ends
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys

import typer

from rltscan import interrupts
from rltscan.cli.commands import app
from rltscan.cli.exit_codes import interrupted_line, said
from rltscan.cli.process import flush_std, leave_process
from rltscan.errors import OutputRefusedError

__all__ = ["app", "main"]


def main() -> None:
    """Console entry point: SIGTERM behaves like Ctrl-C (temp files removed, exit 130)."""

    gc.disable()  # until the command's modules are loaded (modules_loaded)

    # until a command's handled() block: Ctrl-C/SIGTERM exit at once with one line;
    # an estimator command loads torch (triton, numba) on a thread (rltscan.preload)
    interrupts.install_startup()
    try:
        app()
    except KeyboardInterrupt:  # while the commands are built, before handled() runs
        typer.echo(f"error: {interrupted_line()}", err=True)
        sys.exit(130)
    except SystemExit as end:  # typer turns a Ctrl-C outside handled() into a silent 130
        if end.code == 130 or interrupts.seen():
            if not said["interrupted"]:
                typer.echo(f"error: {interrupted_line()}", err=True)
            # the run is over and cleaned up; leave without the interpreter's finalisation,
            # where a pending Ctrl-C would end the process by SIGINT instead of 130
            flush_std()
            os._exit(130)
        if end.code == 1 and _stdout_pacified():
            # click met a closed stdout (``rltscan --help | true``) and exits 1, a bug's
            # code: a reader that went away is exit 5 here as everywhere (README, Pipelines)
            with contextlib.suppress(OSError, ValueError):
                typer.echo(f"error: {_CLOSED_STDOUT}", err=True)
            leave_process(OutputRefusedError.exit_code)
        leave_process(end.code)


_CLOSED_STDOUT = (
    "the reader of stdout closed it before the output was complete (broken pipe); "
    "nothing else was done; redirect stdout to a file to keep it"
)


def _stdout_pacified() -> bool:
    """Whether click replaced stdout after a broken pipe (its ``PacifyFlushWrapper``,
    which it installs only then, before its exit 1)."""
    return type(sys.stdout).__name__.endswith("PacifyFlushWrapper")
