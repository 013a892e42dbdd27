"""The commands that run no estimator: ``rltscan inspect`` and ``rltscan bench``.

``inspect`` reads a file as a run with the same column and reading options would
(:func:`rltscan.cli.options.reading_arguments`) and prints what it found; ``bench``
times the backends on this machine (:mod:`rltscan.bench`, from a source install).
"""

from __future__ import annotations

from typing import Any, Optional

import typer

from rltscan.cli.exit_codes import handled
from rltscan.cli.options import (
    COLUMN_ROLES,
    P,
    column_parameters,
    output_parameters,
    reading_arguments,
    reading_parameters,
    signed,
)
from rltscan.cli.process import modules_loaded
from rltscan.cli.render import print_inspect, print_table, write_plot


def _inspect(input: str, **kw: Any) -> None:
    json_out, debug, quiet, plot = (kw.pop(k) for k in ("json_out", "debug", "quiet", "plot"))
    with handled(json_out=json_out, quiet=quiet, debug=debug):
        if plot is not None:
            from rltscan import pictures

            pictures.require()
        reading = reading_arguments(kw)
        from rltscan import api

        modules_loaded()
        info = api.inspect(input, **reading)
        write_plot(plot, info.get("statistics"), f"rltscan inspect · {input}")
        print_inspect(info, json_out=json_out, quiet=quiet)


INSPECT_HELP = """Show the detected layout, the column of each role, episode/terminal/truncation
counts, the distribution of episode lengths and returns, and what each estimator still
needs. Takes the column and reading options of the estimator commands."""

inspect_command = signed(
    lambda **kw: _inspect(kw.pop("input"), **kw),
    "inspect",
    [
        P(
            "input",
            P.POSITIONAL_OR_KEYWORD,
            default=typer.Argument(..., help="HDF5/Parquet/Arrow file, Minari dir, or '-'."),
            annotation=str,
        ),
        *column_parameters(COLUMN_ROLES),
        *reading_parameters(None, missing=True),
        *output_parameters(plot="Draw episode lengths and returns into PATH.png (rltscan[plot])."),
    ],
    INSPECT_HELP,
)


def bench_command(
    quick: bool = typer.Option(False, "--quick", help="Small sizes only (a few seconds)."),
    json_path: Optional[str] = typer.Option(None, "--json", help="Also write results to PATH."),  # noqa: UP045
    backend: Optional[list[str]] = typer.Option(  # noqa: UP045, B008 - typer's idiom
        None, "--backend", help="Backend to time (repeatable; default: all available)."
    ),
    plot: Optional[str] = typer.Option(  # noqa: UP045
        None, "--plot", help="Draw throughput against size, copy floor in, into PATH.png."
    ),
) -> None:
    """Time the backends against baselines and the memory floor on this machine."""
    from rltscan import preload

    # in full before anything else (Ctrl-C meanwhile ends the process at once); a
    # missing torch is reported below
    preload.Loading.start(device="auto", backend="auto").join()
    with handled():
        if plot is not None:
            from rltscan import pictures

            pictures.require()
        try:
            from rltscan import bench
        except ImportError as err:
            from rltscan.errors import BackendUnavailableError

            raise BackendUnavailableError(
                f"the benchmark module is not available ({err}); install rltscan from source"
            ) from None
        modules_loaded()
        result = bench.run_bench(quick=quick, json_path=json_path, backends=backend or None)
        print_table(bench.render_table(result))
        if plot is not None:
            bench.plot(result, plot)
