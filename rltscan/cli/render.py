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

import json
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:  # what a command needs loads when it runs: --help and --version start fast
    from rich.console import Console

    from rltscan.report import RunReport


def stderr_console() -> Console:
    from rich.console import Console

    return Console(file=sys.stderr, highlight=False, soft_wrap=False)


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
    if json_out:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    elif console is not None:
        from rltscan.report import render_run

        render_run(console, report)


def print_inspect(info: Mapping[str, Any], *, json_out: bool, quiet: bool) -> None:
    """``inspect``'s answer: JSON on stdout under ``--json``, else its tables on stdout
    (nothing under ``-q``)."""
    if json_out:
        typer.echo(json.dumps(info, indent=2, default=str))
    elif not quiet:
        from rich.console import Console

        from rltscan.report import render_inspect

        render_inspect(Console(file=sys.stdout, highlight=False, soft_wrap=False), info)


def print_table(table: Any) -> None:
    """``bench``'s results table on stdout."""
    from rich.console import Console

    Console(file=sys.stdout, highlight=False).print(table)
