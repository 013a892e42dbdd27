"""How the command line is parsed: typer's command, group and option classes, adjusted.

:class:`Command` (every command) and :class:`Group` (the root) coerce plain option
values themselves (:func:`coerce_plain`: the values typer gives, without building
pydantic's adapters at start-up, issue 12), and the root turns click's usage errors into
rltscan's error line (:mod:`rltscan.cli.usage`), exit 2, instead of click's usage box.
"""

from __future__ import annotations

import re
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Any

from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from rltscan.cli.exit_codes import click_exceptions, fail
from rltscan.cli.usage import flag_requested, usage_message

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_UNSET = object()


def coerce_plain(annotation: Any, parser: Callable[[Any], Any] | None, value: Any) -> Any:
    """The value typer would give an option of this annotation, for the plain cases only
    (``str``, ``int``, ``float``, a list of ``str``, each maybe ``Optional``; a ``parser``'s
    result); ``_UNSET`` for anything else (bad or unusual values), which then takes typer's
    own path and its error message. Same values as typer's coercion (tests/cli/test_startup.py)."""
    if value is None:
        return value
    if parser is not None:
        if annotation is not Any:
            return _UNSET
        try:
            return parser(value)
        except Exception:  # typer reports it (through its own path)
            return _UNSET
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) is typing.Union and len(args) == 2 and type(None) in args:
        annotation = args[0] if args[1] is type(None) else args[1]
    if typing.get_origin(annotation) is list and typing.get_args(annotation) == (str,):
        if isinstance(value, (list, tuple)) and all(type(v) is str for v in value):
            return list(value)
        return _UNSET
    if annotation is str and type(value) is str:
        return value
    if annotation is bool and type(value) is bool:
        return value
    if annotation is int:
        if type(value) is int:
            return value
        if type(value) is str and _INT.fullmatch(value) and len(value) < 100:
            return int(value)
    if annotation is float:
        if type(value) is float:
            return value
        if type(value) is str and _FLOAT.fullmatch(value):
            return float(value)
    return _UNSET


def _process_plain(self: Any, ctx: Any, value: Any) -> Any:
    """typer 0.29 coerces every non-bool option value through a pydantic ``TypeAdapter``,
    built on first use: importing pydantic and building ~30 of them is ~0.25 s of a run on a
    2-core machine (issue 12). The plain cases (:func:`coerce_plain`) are coerced here;
    anything else (a bad value, a missing one, a callback) goes typer's way, unchanged."""
    if self.callback is None:
        multiple = self.multiple or self.nargs == -1
        if value is None:
            out: Any = () if multiple else None
        else:
            info = self.type_descriptor.parameter_info
            out = coerce_plain(self.type_descriptor.annotation, info.parser, value)
        if out is not _UNSET and not (self.required and self.value_is_missing(out)):
            return out
    return super(type(self), self).process_value(ctx, value)


# (single inheritance: an instance of typer's class can become one of these, _plain_values)
class _PlainOption(TyperOption):
    process_value = _process_plain


class _PlainArgument(TyperArgument):
    process_value = _process_plain


def _plain_values(command: Any) -> None:
    """Give ``command``'s typer options and arguments :func:`_process_plain`'s coercion
    (a subclass of their own; a typer without ``type_descriptor`` keeps its own)."""
    for param in getattr(command, "params", ()):
        if not hasattr(param, "type_descriptor") or not hasattr(param, "value_is_missing"):
            continue
        if type(param) is TyperOption:
            param.__class__ = _PlainOption
        elif type(param) is TyperArgument:
            param.__class__ = _PlainArgument


def _help_option(option: Any) -> Any:
    if option is not None and option.default is None:
        # a flag not given is False, not None: typer then coerces nothing, and
        # `rltscan CMD --help` does not import pydantic for the root's --help (~0.1 s)
        option.default = False
    if type(option) is TyperOption:
        option.__class__ = _PlainOption
    return option


class Command(TyperCommand):
    """Every command: its ``--help`` flag and its values skip typer's pydantic coercion
    where they are plain (:func:`_process_plain`)."""

    def get_help_option(self, ctx: Any) -> Any:
        return _help_option(super().get_help_option(ctx))


class Group(TyperGroup):
    """The root command: usage errors (unknown option, bad value, missing INPUT) become
    ``error: <what>; <fix>`` first on stderr, at most one ``hint:`` line, exit 2, and
    under ``--json`` an error object on stdout, instead of click's usage box."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        super().__init__(*a, **kw)
        for command in (self, *self.commands.values()):
            _plain_values(command)

    def main(self, args: Sequence[str] | None = None, *a: Any, **kw: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        self._argv = argv
        return super().main(list(argv), *a, **kw)

    def get_help_option(self, ctx: Any) -> Any:
        return _help_option(super().get_help_option(ctx))

    def make_context(self, *a: Any, **kw: Any) -> Any:
        try:
            return super().make_context(*a, **kw)
        except click_exceptions.UsageError as err:
            self._usage_error(err)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except click_exceptions.UsageError as err:
            self._usage_error(err)

    def _usage_error(self, err: Any) -> None:
        if isinstance(err, getattr(click_exceptions, "NoArgsIsHelpError", ())):
            raise err  # bare `rltscan`: the help, as before
        argv = getattr(self, "_argv", [])
        message, hint = usage_message(err, argv, self)
        json_out = flag_requested(argv, self, ("--json",))
        quiet = flag_requested(argv, self, ("-q", "--quiet"))
        fail(2, message, "UsageError", json_out, quiet, hint=hint)
