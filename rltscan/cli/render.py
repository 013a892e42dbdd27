"""What a command prints: its report on stderr or as JSON on stdout, and its pictures.

A run's report (:func:`print_run`), ``inspect``'s answer (:func:`print_inspect`) and
``bench``'s table (:func:`print_table`) are formatted by :mod:`rltscan.report` (and
:mod:`rltscan.bench`) and printed here; ``--plot`` draws with :mod:`rltscan.pictures`
(:func:`write_plot`). Python warnings raised during a run become report notes
(:func:`warnings_as_notes`), so ``--json`` carries them and ``-q`` keeps stderr quiet.
The one CLI module that imports rich, and only when it prints tables
(tests/cli/test_startup.py: ``--help``, ``-q`` and ``--json`` load none).
"""

from __future__ import annotations

import errno
import json
import os
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from typing import TYPE_CHECKING, Any, TextIO

import typer

from rltscan.errors import OutputRefusedError

if TYPE_CHECKING:  # what a command needs loads when it runs: --help and --version start fast
    from rich.console import Console

    from rltscan.report import RunReport


def console_on(file: TextIO, **kw: Any) -> Console:
    """A rich console on ``file`` that lets a closed pipe raise ``BrokenPipeError`` (rich's
    own ends the process with exit 1, the code of a bug, whichever stream broke)."""
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    return _Console(file=file, highlight=False, **kw)


def stderr_console() -> Console:
    return console_on(sys.stderr, soft_wrap=False)


@contextmanager
def closed_pipe_refused(stream: TextIO, outcome: str) -> Iterator[None]:
    """Printing to ``stream`` (stdout or stderr) whose reader went away (``| head -1``)
    is exit 5 with one line, as a closed pipe on ``-o -`` is, saying what the run
    wrote (``outcome``); the stream then points at /dev/null, so that nothing after
    it (the error line itself, the final flush) fails again."""
    try:
        yield
    except BrokenPipeError:
        name = "stdout" if stream is sys.stdout else "stderr"
        with suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, stream.fileno())
            os.close(devnull)
        raise OutputRefusedError(
            f"the reader of {name} closed it before the report was complete (broken pipe); "
            f"{outcome}; redirect {name} to a file to keep the report"
        ) from None


def write_plot(path: str | None, statistics: Mapping[str, Any] | None, title: str) -> None:
    """``--plot PATH.png``: the same distributions as a figure (matplotlib, optional)."""
    if path is None:
        return
    from rltscan import pictures

    pictures.plot(path, statistics, title=title)


@contextmanager
def warnings_as_notes(notes: list[str]) -> Iterator[None]:
    """Python warnings raised inside the block (the estimators' RuntimeWarnings) become
    report notes, so ``--json`` carries them and ``-q``/``--json`` keep stderr quiet."""
    from rltscan.scan import BackendFallbackWarning

    with warnings.catch_warnings(record=True) as caught:
        # a run says it in the report's notes (plan.report), not as a Python warning
        warnings.filterwarnings("ignore", category=BackendFallbackWarning)
        yield
    for w in caught:
        note = f"{w.category.__name__}: {w.message}"
        if note not in notes:
            notes.append(note)


def print_run(report: RunReport, *, json_out: bool, console: Console | None) -> None:
    """A run's report: JSON on stdout under ``--json``, else its tables on ``console``
    (stderr; None under ``-q``: nothing)."""
    if report.written:
        outcome = f"{', '.join(o.name for o in report.outputs)} were written to {report.output}"
    else:
        outcome = "nothing was written"
    if json_out:
        with closed_pipe_refused(sys.stdout, outcome):
            typer.echo(json.dumps(report.to_dict(), indent=2))
    elif console is not None:
        from rltscan.report import render_run

        with closed_pipe_refused(console.file, outcome):
            render_run(console, report)


def print_inspect(info: Mapping[str, Any], *, json_out: bool, quiet: bool) -> None:
    """``inspect``'s answer: JSON on stdout under ``--json``, else its tables on stdout
    (nothing under ``-q``)."""
    if json_out:
        with closed_pipe_refused(sys.stdout, "nothing was written"):
            typer.echo(json.dumps(info, indent=2, default=str))
    elif not quiet:
        from rltscan.report import render_inspect

        with closed_pipe_refused(sys.stdout, "nothing was written"):
            render_inspect(console_on(sys.stdout, soft_wrap=False), info)


def print_table(table: Any) -> None:
    """``bench``'s results table on stdout."""
    with closed_pipe_refused(sys.stdout, "nothing was written"):
        console_on(sys.stdout).print(table)
