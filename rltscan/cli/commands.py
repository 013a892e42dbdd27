"""The command tree: the root ``rltscan`` (its help, ``--version``) and every command on it.

The commands are registered here, in the order ``rltscan --help`` lists them: the
estimator commands in the declarations' order (:mod:`rltscan.cli.estimate`), then
``inspect`` and ``bench`` (:mod:`rltscan.cli.inspect_bench`). Each ``--help`` ends with
the exit codes (:data:`rltscan.cli.exit_codes.EXIT_CODES`).
"""

from __future__ import annotations

import typer

from rltscan.cli.estimate import make_command
from rltscan.cli.exit_codes import EXIT_CODES
from rltscan.cli.inspect_bench import bench_command, inspect_command
from rltscan.cli.parsing import Command, Group
from rltscan.estimators import DECLARATIONS

HELP = f"""Advantages and returns (GAE, V-trace, Retrace, TD(λ), discounted returns,
eligibility traces, prefix sums) over HDF5/Parquet trajectory files, written back
alongside the data.

{EXIT_CODES}"""

app = typer.Typer(
    cls=Group,
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    # plain help (click's formatter): typer's rich panels cost ~0.2 s of imports and
    # layout on a 2-core machine, which is most of a `--help` (issue 12: <= 0.3 s)
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version_callback(value: bool) -> None:
    if value:
        import rltscan

        typer.echo(f"rltscan {rltscan.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(  # a bool flag: typer coerces nothing (no pydantic at start)
        False,
        "--version",
        "-V",
        callback=_version_callback,
        is_eager=True,
        help="Show the version.",
    ),
) -> None:
    """rltscan: advantages and returns over trajectory files."""


# in the order --help lists them
for _command, _spec in DECLARATIONS.items():
    app.command(_command, cls=Command, epilog=EXIT_CODES)(make_command(_command, _spec))
app.command("inspect", cls=Command, epilog=EXIT_CODES)(inspect_command)
app.command("bench", cls=Command, epilog=EXIT_CODES)(bench_command)
