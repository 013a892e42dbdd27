"""The estimator commands (``rltscan gae``, ``vtrace``, ...): one per declaration.

:func:`make_command` builds a command's options from its estimator's declaration
(:data:`rltscan.estimators.DECLARATIONS`: parameters, inputs, defaults) and the shared
option lists of :mod:`rltscan.cli.options`; the command checks what it was given,
starts loading torch on a thread (unless ``--dry-run``), calls :func:`rltscan.api.run`
inside :func:`rltscan.cli.exit_codes.handled` and prints the report
(:mod:`rltscan.cli.render`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Optional

import typer

from rltscan import interrupts
from rltscan.cli.exit_codes import handled
from rltscan.cli.options import (
    CHOICES,
    COLUMN_ROLES,
    LIST_PARAMS,
    NONE_DEFAULTS,
    PARAM_OPTIONS,
    WORD_PARAMS,
    P,
    api_defaults,
    check_choice,
    column_parameters,
    float_or_list,
    output_parameters,
    reading_arguments,
    reading_parameters,
    run_parameters,
    shown_option,
    signed,
)
from rltscan.cli.process import modules_loaded
from rltscan.cli.render import print_run, stderr_console, warnings_as_notes, write_plot
from rltscan.errors import OutputRefusedError, ParameterError
from rltscan.estimators import DECLARATIONS

COMMAND_HELP = {command: d.help for command, d in DECLARATIONS.items()}


def _stdout_isatty() -> bool:
    return sys.stdout.isatty()


def _given(source: Any) -> bool:
    """Whether an option's click ``ParameterSource`` says the command line (or the
    environment) gave it, not a default. By name: typer 0.29 carries its own copy of
    click (``typer._click``), so click's enum is not the one it hands over."""
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


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
            device=kw["device"],
            backend=kw["backend"],
            kind=DECLARATIONS[command].name,
            on_done=modules_loaded,
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

        check_choice("--to", TO, kw["to"])
        for name in ("backend", "engine"):
            check_choice(*CHOICES[name], kw[name])
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
        source = kw.pop("ctx").get_parameter_source
        params = {name: kw.pop(name) for name in list(kw) if name in PARAM_OPTIONS}
        # a parameter left at its default is not passed: `--discount COL` then replaces γ,
        # and `--gamma 0.99 --discount COL` (the default's value, typed) asks for both,
        # which the options check refuses
        params = {n: v for n, v in params.items() if _given(source(n))}
        from rltscan import api
        from rltscan.report import progress_bar

        if loading is None:  # (a computing run's thread says when torch has loaded)
            modules_loaded()
        console = None if json_out or quiet else stderr_console()
        notes: list[str] = []
        with progress_bar(console) as bar, warnings_as_notes(notes):
            try:
                report = api.run(command, input, params=params, progress=bar, **reading, **kw)
            except ImportError:  # torch: the one line the loading thread met first
                reason = None if loading is None else loading.reason()
                if reason is None:
                    raise
                raise reason from None
        report.notes += [n for n in notes if n not in report.notes]
        print_run(report, json_out=json_out, console=console)
        write_plot(plot, report.statistics, f"rltscan {command} · {input}")


def make_command(command: str, spec: Any) -> Callable[..., None]:
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
            option = shown_option(*decls, help=help_text, shown=NONE_DEFAULTS[name])
        else:
            option = shown_option(*decls, help=help_text, default=defaults[name])
        kind: Any = Optional[str] if name in WORD_PARAMS else Optional[float]  # noqa: UP045
        if name in LIST_PARAMS:  # one number, or a comma-separated list of settings
            option.parser, option.metavar, kind = float_or_list, "<float,…>", Any
        params.append(P(name, P.KEYWORD_ONLY, default=option, annotation=kind))
    params += column_parameters([r for r in COLUMN_ROLES if set(r.inputs) & set(spec.inputs)])
    missing = "missing_bootstrap" in defaults
    params += reading_parameters(defaults.get("missing_bootstrap"), missing=missing)
    params += run_parameters(defaults)
    params += output_parameters(
        plot="Also draw the distributions of what was written into PATH.png "
        "(pip install 'rltscan[plot]')."
    )

    # typer passes the context to a parameter of its type: which options were given
    params.append(P("ctx", P.KEYWORD_ONLY, annotation=typer.Context))

    def command_fn(**kwargs: Any) -> None:
        _estimate(command, kwargs.pop("input"), **kwargs)

    return signed(command_fn, command, params, COMMAND_HELP.get(command, command))
