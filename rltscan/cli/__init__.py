"""The ``rltscan`` command line: parse options, call :mod:`rltscan.api`, render the report.

Every command runs inside :func:`handled`, the one place where library errors
become ``error: <message>`` on stderr and an exit code (README.md, "Exit codes").

The estimator commands, their options and ``--help`` are built from the estimators'
declarations (:data:`rltscan.estimators.DECLARATIONS`), which import no torch: ``--help``,
``--version``, ``inspect`` and ``--dry-run`` start without torch or triton
(tests/cli/test_startup.py); a run loads them when it computes.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable
from typing import Any, Optional

import typer

from rltscan import interrupts
from rltscan.cli.exit_codes import EXIT_CODES, _interrupted, _said, handled
from rltscan.cli.options import (
    CHOICES,
    COLUMN_ROLES,
    LIST_PARAMS,
    NONE_DEFAULTS,
    PARAM_OPTIONS,
    WORD_PARAMS,
    P,
    _check_choice,
    _column_parameters,
    _opt,
    _output_parameters,
    _reading_parameters,
    _run_parameters,
    _signed,
    api_defaults,
    float_or_list,
    reading_arguments,
)
from rltscan.cli.parsing import _Command, _Group
from rltscan.cli.process import _flush_std, _leave, modules_loaded
from rltscan.cli.render import (
    _plot,
    _stderr_console,
    _warnings_as_notes,
    print_inspect,
    print_run,
    print_table,
)
from rltscan.errors import OutputRefusedError, ParameterError
from rltscan.estimators import DECLARATIONS

HELP = f"""Advantages and returns (GAE, V-trace, Retrace, TD(λ), discounted returns,
eligibility traces, prefix sums) over HDF5/Parquet trajectory files, written back
alongside the data.

{EXIT_CODES}"""

COMMAND_HELP = {command: d.help for command, d in DECLARATIONS.items()}


app = typer.Typer(
    cls=_Group,
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    # plain help (click's formatter): typer's rich panels cost ~0.2 s of imports and
    # layout on a 2-core machine, which is most of a `--help` (issue 12: <= 0.3 s)
    rich_markup_mode=None,
    pretty_exceptions_show_locals=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _stdout_isatty() -> bool:
    return sys.stdout.isatty()


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


# --------------------------------------------------------------------------- estimator commands


def _estimate(command: str, input: str, **kw: Any) -> None:
    json_out, debug, quiet = kw.pop("json_out"), kw.pop("debug"), kw.pop("quiet")
    plot = kw.pop("plot", None)
    loading = None
    if not kw["dry_run"]:
        from rltscan import preload
        from rltscan.engines.stream.windows import fix_mmap_threshold

        fix_mmap_threshold()  # this process's own allocator setting, not a library caller's
        # torch (triton, numba) load on a thread while the file is opened and planned
        loading = preload.Loading.start(
            device=kw["device"], backend=kw["backend"], on_done=modules_loaded
        )
    try:
        _estimate_in(command, input, loading, json_out, quiet, debug, plot, kw)
    finally:
        # the thread is not left inside a native library's initialisation at exit (a
        # Ctrl-C leaves at once: main() ends the process without the interpreter's exit)
        if loading is not None and not interrupts.seen():
            loading.join()


def _estimate_in(
    command: str,
    input: str,
    loading: Any,
    json_out: bool,
    quiet: bool,
    debug: bool,
    plot: str | None,
    kw: dict[str, Any],
) -> None:
    with handled(json_out=json_out, quiet=quiet, debug=debug):
        reading = reading_arguments(kw)
        from rltscan.io.formats import TO

        _check_choice("--to", TO, kw["to"])
        for name in ("backend", "engine"):
            _check_choice(*CHOICES[name], kw[name])
        if plot is not None:
            if kw["dry_run"]:
                raise ParameterError(
                    "--plot draws what a run wrote and --dry-run writes nothing; drop one of them"
                )
            from rltscan import pictures

            pictures.require()  # before any work: a missing matplotlib stops here
        to_stdout = kw["output"] == "-" or (input == "-" and kw["output"] is None)
        if to_stdout and not kw["dry_run"]:
            if json_out:
                raise ParameterError(
                    "--json and -o - both write to stdout; drop --json or write to a file"
                )
            if _stdout_isatty():
                raise OutputRefusedError(
                    "refusing to write binary Parquet/Arrow to a terminal; "
                    "redirect stdout (> out.parquet) or pipe it into another command"
                )
        params = {name: kw.pop(name) for name in list(kw) if name in PARAM_OPTIONS}
        from rltscan import api
        from rltscan.report import progress_bar

        if loading is None:  # (a computing run's thread says when torch has loaded)
            modules_loaded()
        console = None if json_out or quiet else _stderr_console()
        notes: list[str] = []
        with progress_bar(console) as bar, _warnings_as_notes(notes):
            try:
                report = api.run(command, input, params=params, progress=bar, **reading, **kw)
            except ImportError:  # torch: the one line the loading thread met first
                reason = None if loading is None else loading.reason()
                if reason is None:
                    raise
                raise reason from None
        report.notes += [n for n in notes if n not in report.notes]
        print_run(report, json_out=json_out, console=console)
        _plot(plot, report.statistics, f"rltscan {command} · {input}")


def _make_command(command: str, spec: Any) -> Callable[..., None]:
    defaults = api_defaults(command)
    params = [
        P(
            "input",
            P.POSITIONAL_OR_KEYWORD,
            default=typer.Argument(
                ...,
                help="HDF5/Parquet/Arrow file, Minari dir, a directory or glob of Parquet "
                "shards, or '-'.",
            ),
            annotation=str,
        )
    ]
    for name in spec.params:
        if name not in PARAM_OPTIONS:
            continue
        decls, help_text = PARAM_OPTIONS[name]
        if defaults[name] is None:  # the function decides from other parameters
            option = _opt(*decls, help=help_text, shown=NONE_DEFAULTS[name])
        else:
            option = _opt(*decls, help=help_text, default=defaults[name])
        kind: Any = Optional[str] if name in WORD_PARAMS else Optional[float]  # noqa: UP045
        if name in LIST_PARAMS:  # one number, or a comma-separated list of settings
            option.parser, option.metavar, kind = float_or_list, "<float,…>", Any
        params.append(P(name, P.KEYWORD_ONLY, default=option, annotation=kind))
    params += _column_parameters([r for r in COLUMN_ROLES if set(r.inputs) & set(spec.inputs)])
    missing = "missing_bootstrap" in defaults
    params += _reading_parameters(defaults.get("missing_bootstrap"), missing=missing)
    params += _run_parameters(defaults)
    params += _output_parameters(
        plot="Also draw the distributions of what was written into PATH.png "
        "(pip install 'rltscan[plot]')."
    )

    def command_fn(**kwargs: Any) -> None:
        _estimate(command, kwargs.pop("input"), **kwargs)

    return _signed(command_fn, command, params, COMMAND_HELP.get(command, command))


for _command, _spec in DECLARATIONS.items():
    app.command(_command, cls=_Command, epilog=EXIT_CODES)(_make_command(_command, _spec))


# --------------------------------------------------------------------------- inspect, bench


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
        _plot(plot, info.get("statistics"), f"rltscan inspect · {input}")
        print_inspect(info, json_out=json_out, quiet=quiet)


INSPECT_HELP = """Show the detected layout, the column of each role, episode/terminal/truncation
counts, the distribution of episode lengths and returns, and what each estimator still
needs. Takes the column and reading options of the estimator commands."""

app.command("inspect", cls=_Command, epilog=EXIT_CODES)(
    _signed(
        lambda **kw: _inspect(kw.pop("input"), **kw),
        "inspect",
        [
            P(
                "input",
                P.POSITIONAL_OR_KEYWORD,
                default=typer.Argument(..., help="HDF5/Parquet/Arrow file, Minari dir, or '-'."),
                annotation=str,
            ),
            *_column_parameters(COLUMN_ROLES),
            *_reading_parameters(None, missing=True),
            *_output_parameters(
                plot="Draw episode lengths and returns into PATH.png (rltscan[plot])."
            ),
        ],
        INSPECT_HELP,
    )
)


@app.command("bench", cls=_Command, epilog=EXIT_CODES)
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


def main() -> None:
    """Console entry point: SIGTERM behaves like Ctrl-C (temp files removed, exit 130)."""

    gc.disable()  # until the command's modules are loaded (modules_loaded)

    # until a command's handled() block: Ctrl-C/SIGTERM exit at once with one line;
    # an estimator command loads torch (triton, numba) on a thread (rltscan.preload)
    interrupts.install_startup()
    try:
        app()
    except KeyboardInterrupt:  # while the commands are built, before handled() runs
        typer.echo(f"error: {_interrupted()}", err=True)
        sys.exit(130)
    except SystemExit as end:  # typer turns a Ctrl-C outside handled() into a silent 130
        if end.code == 130 or interrupts.seen():
            if not _said["interrupted"]:
                typer.echo(f"error: {_interrupted()}", err=True)
            # the run is over and cleaned up; leave without the interpreter's finalisation,
            # where a pending Ctrl-C would end the process by SIGINT instead of 130
            _flush_std()
            os._exit(130)
        _leave(end.code)
