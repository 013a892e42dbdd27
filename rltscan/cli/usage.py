"""What a usage error says: click's errors worded as ``<what>; <fix>`` and a hint.

:func:`usage_message` words an unknown option (with "did you mean" or the commands that
have it), a missing value, a bad number, a missing INPUT, an unknown command or an extra
argument as every other error is worded (README.md, "Exit codes"); the root command
(:class:`rltscan.cli.parsing.Group`) prints it, exit 2. It reads the command line
(:func:`flag_requested`: was ``--json`` or ``-q`` asked for) and prints nothing itself.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Sequence
from typing import Any

from rltscan.cli.exit_codes import click_exceptions
from rltscan.cli.options import LIST_PARAMS, command_defaults


def flag_requested(argv: list[str], group: Any, flags: tuple[str, ...]) -> bool:
    """One of ``flags`` anywhere before ``--`` on a command where it is a flag (not
    bench's ``--json PATH``)."""
    words = argv[: argv.index("--")] if "--" in argv else argv
    if not any(f in words for f in flags):
        return False
    command = next((group.commands[w] for w in words if w in group.commands), None)
    if command is None:
        return "--json" in flags  # (no command to ask: the user asked for JSON)
    return any(set(flags) & set(p.opts) and getattr(p, "is_flag", False) for p in command.params)


def _given(argv: list[str], opts: Sequence[str]) -> tuple[str, str | None]:
    """``(the spelling used, the value)`` last given to one of ``opts`` on the command line."""
    used, value = opts[0], None
    for i, word in enumerate(argv):
        for opt in opts:
            if word == opt and i + 1 < len(argv):
                used, value = opt, argv[i + 1]
            elif word.startswith(opt + "="):
                used, value = opt, word[len(opt) + 1 :]
    return used, value


def _example(command: str | None, option: str, spelled: str | None = None) -> str:
    """``--gamma 0.99``: the option with this command's default, or a placeholder."""
    default = command_defaults(command).get(option) if command else None
    spelled = spelled or option
    return f"{spelled} {default}" if default not in (None, "") else f"{spelled} VALUE"


def usage_message(err: Any, argv: list[str], group: Any) -> tuple[str, str | None]:
    """``(error line without "error: ", hint or None)`` for a click usage error."""
    ctx = getattr(err, "ctx", None)
    if ctx is not None:
        command = ctx.info_name if ctx.parent is not None else None
        params = ctx.command.params
    else:  # some parser errors carry no context: the command is the first command word
        command = next((w for w in argv if w in group.commands), None)
        params = group.commands[command].params if command else group.params
    where = "rltscan" if command is None else f"rltscan {command}"
    options = [o for p in params for o in p.opts if o[:1] == "-"]
    text = " ".join(err.format_message().split()).rstrip(".")
    if isinstance(err, click_exceptions.NoSuchOption):
        opt = err.option_name
        path = next((w for w in argv if w.startswith(opt) and os.path.lexists(w)), None)
        if path is not None:  # a file whose name starts with '-': click read it as options
            return (
                f'{where} has no option "{opt}" and "{path}" is a file; pass it as '
                f'"./{path}" or after "--"',
                None,
            )
        message = f'{where} has no option "{opt}"; see "{where} --help" for its options'
        close = difflib.get_close_matches(opt, options, n=1, cutoff=0.6)
        elsewhere = sorted(
            name
            for name, cmd in group.commands.items()
            if name != command and any(opt in p.opts for p in cmd.params)
        )
        if elsewhere:
            return message, f"{opt} is an option of {', '.join(elsewhere)}"
        return message, (f"did you mean {close[0]}?" if close else None)
    if isinstance(err, click_exceptions.BadOptionUsage) and "requires an argument" in text:
        opt = err.option_name
        return f"{opt} needs a value; pass it as {_example(command, opt)}", None
    param = getattr(err, "param", None)
    if (
        isinstance(err, click_exceptions.MissingParameter)
        and param is not None
        and param.opts[0][:1] != "-"
    ):
        return (
            f"{where} needs an INPUT (a file, a directory or '-'); "
            f'pass one, e.g. "{where} rollouts.h5"',
            None,
        )
    if isinstance(err, click_exceptions.BadParameter) and param is not None and param.opts:
        # click names the type (param.type.name); typer's own coercion only says it in words
        kind = getattr(getattr(param, "type", None), "name", "") or text.lower()
        wanted = (
            "a whole number"
            if "int" in kind
            else "a number"
            if "float" in kind or ("number" in kind)
            else None
        )
        opt, value = _given(argv, param.opts)
        if param.name in LIST_PARAMS and value is not None and "," in value:  # --gamma 0.9,x
            wanted = "a number or a comma-separated list of numbers"
        if wanted is None:
            return f'{opt}: {text[:1].lower()}{text[1:]}; see "{where} --help"', None
        got = f', got "{value}"' if value is not None else ""
        return (
            f"{opt} must be {wanted}{got}; pass e.g. {_example(command, param.opts[0], opt)}",
            None,
        )
    if command is None and text.startswith("No such command"):
        words = [w for w in argv if not w.startswith("-")]
        name = words[0] if words else ""
        close = difflib.get_close_matches(name, list(group.commands), n=1, cutoff=0.5)
        message = f'rltscan has no command "{name}"; see "rltscan --help" for the commands'
        return message, (f"did you mean {close[0]}?" if close else None)
    if text.startswith("Got unexpected extra argument"):
        extra = text[text.rfind("(") + 1 : text.rfind(")")]
        return (
            f'{where} takes one INPUT, got more ("{extra}" too); '
            "pass one input per run, quoted if it has spaces",
            None,
        )
    return f'{text[:1].lower()}{text[1:]}; see "{where} --help"', None
