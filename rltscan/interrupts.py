"""Ctrl-C and SIGTERM for the command line, honoured from the first instruction.

``python -m rltscan`` and the ``rltscan`` script install :func:`_startup` before
the heavy imports (torch): a signal then ends the process at once with the
one-line message and exit 130 (nothing has been read or written yet). The CLI's
command switches to :func:`_running` when its work begins (its native libraries,
which cannot take an exception raised inside their initialisation, load on a thread
of their own, :mod:`rltscan.preload`, and signals reach the main thread only), which
raises ``KeyboardInterrupt`` as Python does and also records the signal, so that a
Ctrl-C swallowed by a library (a bare ``except:``) still stops the commit
(:func:`rltscan.io.atomic.atomic_path` checks :func:`seen` right before the rename).
Importing rltscan as a library changes no signal handler.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

_state = {"seen": False}
_SIGNALS = (signal.SIGINT, signal.SIGTERM)
MESSAGE = b"error: interrupted; nothing was written and the input is unchanged\n"


def seen() -> bool:
    """Whether the CLI received Ctrl-C or SIGTERM (always False for library use)."""
    return _state["seen"]


def _startup(signum: int, frame: Any) -> None:
    _state["seen"] = True
    os.write(2, MESSAGE)
    os._exit(130)


def _running(signum: int, frame: Any) -> None:
    _state["seen"] = True
    raise KeyboardInterrupt


def _is_cli() -> bool:
    argv0 = sys.argv[0] if sys.argv else ""
    if argv0 == "-m":  # python -m rltscan, while the package is being imported
        orig = list(getattr(sys, "orig_argv", []))
        return "-m" in orig[:-1] and orig[orig.index("-m") + 1] == "rltscan"
    return os.path.basename(argv0) == "rltscan"


def install_early() -> None:
    """At the top of the package: the CLI's signals end the process until ``main()`` runs."""
    if _is_cli():
        install_startup()


def install_startup() -> None:
    """Ctrl-C/SIGTERM end the process at once with the one-line message (exit 130):
    right while nothing has been read or written, and the only safe answer while
    native libraries load (a ``KeyboardInterrupt`` raised inside torch's pybind11 init
    aborts the process, inside a Cython module's init it leaves it half-imported)."""
    for sig in _SIGNALS:
        signal.signal(sig, _startup)


def _unraisable(hook: Callable[[Any], None]) -> Callable[[Any], None]:
    """``sys.unraisablehook`` that drops a KeyboardInterrupt this module raised where
    Python cannot raise (a weakref or import-lock callback: it prints "Exception
    ignored in ..." and goes on). The signal is remembered (:func:`seen`): a commit
    checks it before its rename, and the CLI ends with 130 and the one-line message,
    which those lines of stderr would bury. Anything else goes to ``hook``
    (``tests/safety/test_write_safety.py`` sends SIGINT while imports run on a thread)."""

    def quiet(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, KeyboardInterrupt) and _state["seen"]:
            return
        hook(unraisable)

    quiet.__qualname__ = _QUIET
    return quiet


_QUIET = "rltscan.interrupts.quiet_unraisable"


def install_running() -> None:
    """In the CLI's ``main()``: Ctrl-C/SIGTERM raise KeyboardInterrupt and are remembered."""
    if getattr(sys.unraisablehook, "__qualname__", "") != _QUIET:  # (once per hook)
        sys.unraisablehook = _unraisable(sys.unraisablehook)
    for sig in _SIGNALS:
        signal.signal(sig, _running)
