"""The commands' options: each one's names, help and default, and what it means to the API.

The estimator parameters (``--gamma``, ...) and the column options come from the
declarations (:data:`rltscan.estimators.DECLARATIONS`) and the role table
(:mod:`rltscan.roles`); the defaults shown in the help are the API's own
(:func:`api_defaults`). The option lists shared by several commands are built here once
(:func:`reading_parameters`, :func:`run_parameters`, :func:`output_parameters`), and
:func:`reading_arguments` turns the reading options into :func:`rltscan.api.run`'s and
:func:`rltscan.api.inspect`'s keywords. (:mod:`rltscan.options` is the API's side:
``RunOptions``, checked once.)
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

import typer

from rltscan import defaults
from rltscan.errors import ParameterError
from rltscan.estimators import DECLARATIONS
from rltscan.roles import Role, with_option

P = inspect.Parameter


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# Estimator parameters: option names and help, from the declarations (one entry per
# name; a second spelling is the CLI's own). The default shown in each command's help is
# the declared one (``api_defaults``), never typed here.
PARAM_ALIASES = {"lam": ("--lambda",)}
PARAM_OPTIONS: dict[str, tuple[tuple[str, ...], str]] = {
    p.name: ((_flag(p.name), *PARAM_ALIASES.get(p.name, ())), p.help)
    for d in DECLARATIONS.values()
    for p in d.parameters
}
# Parameters that take one number or a comma-separated list (several settings, one pass).
LIST_PARAMS = {"gamma", "lam"}
# Parameters that take a word (Retrace's --trace), not a number.
WORD_PARAMS = {p.name for d in DECLARATIONS.values() for p in d.parameters if p.choices}
# What a parameter whose declared default is None falls back to, in the help's words.
NONE_DEFAULTS = {
    p.name: f"the {_flag(p.fallback)} value"
    for d in DECLARATIONS.values()
    for p in d.parameters
    if p.fallback is not None
}


def api_defaults(command: str) -> dict[str, Any]:
    """Option (Python name) → the value the API uses when the option is not given.

    Read from the estimator's declaration (parameters, ``missing_bootstrap``; they are
    its function's defaults, tests/unit/test_declarations.py) and :mod:`rltscan.defaults`
    (``api.run``'s and the streaming engine's, tests/cli/test_startup.py): the one source of
    the defaults shown in each command's help (a test checks them against real runs).
    Neither needs numpy, so every ``--help`` starts fast.
    """
    out: dict[str, Any] = DECLARATIONS[command].defaults()
    out |= {"prefix": defaults.PREFIX, "device": defaults.DEVICE, "backend": defaults.BACKEND}
    out |= {"chunk_steps": defaults.CHUNK_STEPS, "block_steps": defaults.BLOCK_STEPS}
    return out


def command_defaults(command: str) -> dict[str, Any]:
    """Option flag (``--gamma``) → this command's default, as its help shows it."""
    if command not in DECLARATIONS:
        return {}
    decls = {n: d[0] for n, (d, _) in PARAM_OPTIONS.items()}
    return {decls.get(n, _flag(n)): v for n, v in api_defaults(command).items()}


# Column options: one per role the CLI names (rltscan.roles, the role table), each under
# its option's Python name (``Role.keyword``). An estimator command shows those whose role
# fills one of its declared inputs (the flag and id columns: every command); inspect, all.
COLUMN_ROLES = with_option()

# Word options: (option name, the values it takes).
CHOICES = {
    "dones_mean": ("--dones-mean", ("ended", "starts")),
    "ends_are": ("--ends-are", ("terminal", "truncated")),
    "is_last_row": ("--is-last-row", ("observation", "transition")),
    "autoreset": ("--autoreset", ("same-step", "next-step")),
    "layout": ("--layout", ("flat", "episodes", "time-major", "batch-major")),
    "missing_bootstrap": ("--missing-bootstrap", ("error", "zero")),
    "backend": ("--backend", ("auto", "triton", "torch", "cpu", "reference")),
    "engine": ("--engine", ("local", "ray")),
}


def shown_option(*decls: str, help: str, default: Any = None, shown: str | None = None) -> Any:
    """An option. A ``default`` is shown in the help; ``shown`` is what the help says
    instead when ``default`` is None because the API derives it (``--pg-rho-clip``)."""
    if shown is None:
        return typer.Option(default, *decls, help=help)
    return typer.Option(default, *decls, help=help, show_default=str(shown))


S, B, I = Optional[str], bool, Optional[int]  # noqa: UP045 - runtime types for typer


def _parameters(spec: Sequence[tuple[str, Any, Any]]) -> list[inspect.Parameter]:
    return [P(name, P.KEYWORD_ONLY, default=d, annotation=t) for name, t, d in spec]


def column_parameters(roles: Sequence[Role]) -> list[inspect.Parameter]:
    """The column options of ``roles``."""
    return _parameters([(r.keyword, S, shown_option(*r.options, help=r.help)) for r in roles])


def reading_parameters(missing_default: str | None, *, missing: bool) -> list[P]:
    """How columns are read, beside the column options: the same on every estimator
    command and on inspect (:func:`reading_arguments` turns them into API keywords).
    ``missing``: the command takes ``--missing-bootstrap`` (default ``missing_default``)."""
    spec: list[tuple[str, Any, Any]] = [
        (
            "dones_mean",
            S,
            shown_option(
                "--dones-mean", help="What dones means: ended (after t) or starts (episode)."
            ),
        ),
        (
            "ends_are",
            S,
            shown_option(
                "--ends-are",
                help="Episode ends known only from dones/ids are: terminal or truncated.",
            ),
        ),
        (
            "is_last_row",
            S,
            shown_option(
                "--is-last-row",
                help="RLDS is_last rows: observation (the final observation alone, not a "
                "step; its value bootstraps a truncated episode) or transition (a real step).",
            ),
        ),
        (
            "autoreset",
            S,
            shown_option(
                "--autoreset",
                help="How the buffer's env reset: next-step (Gymnasium >= 1.0 vector envs' "
                "default: the row after each episode end is the reset, not a step; its value "
                "bootstraps a truncation) or same-step (every row is a step, the default).",
            ),
        ),
        (
            "ignore",
            Optional[list[str]],  # noqa: UP045 - runtime type for typer
            shown_option(
                "--ignore",
                help="A column that looks like a role (flag, id, value) but must not be "
                "used; repeat for several.",
            ),
        ),
        (
            "ends_from_observations",
            B,
            shown_option(
                "--ends-from-observations",
                help="Where observations[t+1] differs from next_observations[t] and no flag "
                "is set (a hidden episode end), treat the step as a truncation.",
                default=False,
            ),
        ),
        (
            "ignore_observation_gaps",
            B,
            shown_option(
                "--ignore-observation-gaps",
                help="Do not check observations against next_observations for hidden ends.",
                default=False,
            ),
        ),
    ]
    if missing:
        shown = None if missing_default is not None else "each command's own"
        spec += [
            (
                "missing_bootstrap",
                S,
                shown_option(
                    "--missing-bootstrap",
                    help="Where a truncation or the end of the data has no bootstrap value: "
                    "error, or zero (count V(s_{t+1}) as 0; the report notes it).",
                    default=missing_default,
                    shown=shown,
                ),
            ),
            (
                "no_bootstrap",
                B,
                shown_option(
                    "--no-bootstrap", help="Same as --missing-bootstrap zero.", default=False
                ),
            ),
        ]
    spec += [
        (
            "layout",
            S,
            shown_option(
                "--layout", help="flat, episodes, time-major or batch-major (beats detection)."
            ),
        ),
        ("group", S, shown_option("--group", help="HDF5 group holding the data.")),
    ]
    return _parameters(spec)


def reading_arguments(kw: dict[str, Any]) -> dict[str, Any]:
    """Take the column and reading options out of a command's keywords ``kw``; return
    them as the keywords :func:`rltscan.api.run` and :func:`rltscan.api.inspect` both
    take (``columns``, ``layout``, ``group``, ``dones_mean``, ``ends_are``, ``is_last_row``,
    ``autoreset``, ``ignore``,
    ``observation_gaps``, ``missing_bootstrap``): one function, so ``inspect`` reads a
    file exactly as the run with the same options does.

    Raises:
        ParameterError: a word option has a value it does not take.
    """
    words = ("dones_mean", "ends_are", "is_last_row", "autoreset", "layout", "missing_bootstrap")
    for name in words:
        check_choice(*CHOICES[name], kw.get(name))
    columns = {r.name: kw.pop(r.keyword) for r in COLUMN_ROLES if r.keyword in kw}
    missing = kw.pop("missing_bootstrap", None)
    if kw.pop("no_bootstrap", False):
        missing = "zero"
    return {
        "columns": {role: name for role, name in columns.items() if name},
        "layout": kw.pop("layout"),
        "group": kw.pop("group"),
        "dones_mean": kw.pop("dones_mean"),
        "ends_are": kw.pop("ends_are"),
        "is_last_row": kw.pop("is_last_row"),
        "autoreset": kw.pop("autoreset"),
        "ignore": tuple(kw.pop("ignore") or ()),
        "observation_gaps": _observation_gaps(
            kw.pop("ends_from_observations"), kw.pop("ignore_observation_gaps")
        ),
        "missing_bootstrap": missing,
    }


def output_parameters(*, plot: str) -> list[inspect.Parameter]:
    """``--json``, ``-q``, ``--plot`` and ``--debug``: what every command prints."""
    return _parameters(
        [
            (
                "json_out",
                B,
                shown_option(
                    "--json",
                    help="Print the report as JSON on stdout, nothing else (errors: an "
                    "object on stdout and one line on stderr).",
                    default=False,
                ),
            ),
            (
                "quiet",
                B,
                shown_option(
                    "-q", "--quiet", help="Print nothing but errors (one line).", default=False
                ),
            ),
            ("plot", S, shown_option("--plot", help=plot)),
            (
                "debug",
                B,
                shown_option("--debug", help="Show tracebacks for errors.", default=False),
            ),
        ]
    )


def run_parameters(defaults: Mapping[str, Any]) -> list[inspect.Parameter]:
    """The options every estimator command takes about where results go and how it runs.

    ``defaults`` is :func:`api_defaults` of the command: an option the API has a default
    for takes ``default=defaults[name]`` (so its help shows the API's value); add that
    default to ``api_defaults``, never a literal here. Add a new option here, once.
    """
    spec: list[tuple[str, Any, Any]] = [
        (
            "output",
            S,
            shown_option(
                "-o",
                "--output",
                help="Write to a new file, or '-' for stdout (sharded input: a new directory).",
            ),
        ),
        (
            "to",
            S,
            shown_option(
                "--to",
                help="Format for -o -: parquet (default) or arrow (IPC stream); "
                "for -o PATH it beats the suffix.",
            ),
        ),
        (
            "prefix",
            str,
            shown_option("--prefix", help="Prefix for output names.", default=defaults["prefix"]),
        ),
        (
            "overwrite",
            B,
            shown_option(
                "--overwrite", help="Replace existing outputs (never inputs).", default=False
            ),
        ),
        (
            "break_links",
            B,
            shown_option(
                "--break-links",
                help="Write back into a hard-linked file: only this name gets the outputs.",
                default=False,
            ),
        ),
        (
            "dry_run",
            B,
            shown_option("--dry-run", help="Detect and plan; write nothing.", default=False),
        ),
        (
            "normalize",
            B,
            shown_option(
                "--normalize",
                help="Write advantages as (x - mean) / std over the whole dataset "
                "(a second pass over the written outputs).",
                default=False,
            ),
        ),
        (
            "device",
            str,
            shown_option("--device", help="auto, cpu or cuda.", default=defaults["device"]),
        ),
        (
            "backend",
            str,
            shown_option(
                "--backend",
                help="auto, triton, torch, cpu (fused numba kernels) or reference.",
                default=defaults["backend"],
            ),
        ),
        (
            "chunk_steps",
            I,
            shown_option(
                "--chunk-steps",
                help="Steps read, computed and written at a time (HDF5/Parquet streaming; "
                "memory grows with it, not with the file).",
                default=defaults["chunk_steps"],
            ),
        ),
        (
            "block_steps",
            I,
            shown_option(
                "--block-steps",
                help="Steps per estimator call; results are bit-identical for any "
                "--chunk-steps at a given block size. Lower both to cap memory.",
                default=defaults["block_steps"],
            ),
        ),
        (
            "engine",
            S,
            shown_option(
                "--engine",
                help="Sharded datasets (a directory or glob of Parquet files, or a Minari "
                "Parquet dataset): local (default, this process) or ray (Ray tasks; "
                "pip install 'rltscan[ray]'). Both give identical outputs.",
            ),
        ),
        (
            "ray_address",
            S,
            shown_option("--ray-address", help="Ray cluster to join (default: start a local one)."),
        ),
        (
            "workers",
            I,
            shown_option("--workers", help="Shard tasks running at once on --engine ray."),
        ),
        (
            "order_by",
            S,
            shown_option(
                "--order-by",
                help="Order shards by the first value of this column (default: file names, "
                "numbers sorted as numbers).",
            ),
        ),
    ]
    return _parameters(spec)


def check_choice(option: str, choices: tuple[str, ...], value: str | None) -> None:
    if value is not None and value not in choices:
        close = difflib.get_close_matches(value, choices, n=1, cutoff=0.6)
        fix = f"; pass {option} {close[0]}" if close else ""
        raise ParameterError(f'{option} must be one of {", ".join(choices)}, got "{value}"{fix}')


def _observation_gaps(ends_from: bool, ignore: bool) -> str:
    """``--ends-from-observations`` / ``--ignore-observation-gaps`` as the API's choice."""
    if ends_from and ignore:
        raise ParameterError(
            "--ends-from-observations and --ignore-observation-gaps contradict each other; "
            "pass one of them"
        )
    return "truncate" if ends_from else "ignore" if ignore else "error"


def float_or_list(text: str) -> float | tuple[float, ...]:
    """``--gamma 0.99`` -> 0.99; ``--gamma 0.9,0.99`` -> (0.9, 0.99): several settings.
    (Named for click: a ``ValueError`` here is reported as "must be a number".)"""
    if not isinstance(text, str):
        return text
    values = tuple(float(p.strip()) for p in text.split(","))
    return values[0] if len(values) == 1 else values


def signed(fn: Callable[..., None], name: str, params: list[P], doc: str) -> Callable[..., None]:
    """``fn`` with the signature typer builds the command's options from."""
    fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    fn.__annotations__ = {p.name: p.annotation for p in params} | {"return": None}
    fn.__name__ = name.replace("-", "_")
    fn.__doc__ = doc
    return fn
