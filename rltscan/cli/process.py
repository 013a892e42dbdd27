"""The CLI process's own housekeeping, around whatever command runs.

At start the cyclic collector is off while the CLI imports (:func:`rltscan.cli.main`
turns it off; :func:`modules_loaded` freezes what was imported and turns it on again,
issue 12); at the end :func:`leave_process` ends a finished process as the interpreter would,
less the teardown of native libraries' static state (threads joined, ``atexit`` run,
stdout and stderr flushed, then ``os._exit``).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
import typing


def modules_loaded() -> None:
    """The modules a command needs are loaded: they stay (``gc.freeze``: no collection
    walks them again) and the collector runs again for the data work.

    :func:`rltscan.cli.main` turns the cyclic collector off while the CLI imports: the
    objects an import makes live as long as the process, and collecting them while torch
    loads cost ~0.2 s, and at exit ~0.1 s, of a run on the 2-core machine (issue 12;
    bench/results/startup-cpu-2core-2026-12-03-c/). Where triton is loaded, the
    frozen objects are released at exit (its bindings report objects still alive at
    exit as leaks, on stderr)."""
    gc.freeze()
    gc.enable()
    atexit.unregister(_unfreeze_for_triton)  # (once, however often called)
    atexit.register(_unfreeze_for_triton)


def _unfreeze_for_triton() -> None:
    if "triton" in sys.modules:
        gc.unfreeze()  # the exit's collection frees triton's objects


def flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def leave_process(code: int | str | None) -> typing.NoReturn:
    """End a finished CLI process as the interpreter would, less the teardown of native
    libraries' static state: other threads joined, ``atexit`` handlers run (temporary
    files, Ray), stdout and stderr flushed, then ``os._exit``. Arrow's and torch's
    thread pools destroyed during the interpreter's finalisation can abort a process
    that has written all its output (``terminate called without an active exception``,
    exit -6: seen once in CI on a ``-o -`` pipeline under load; apache/arrow#34314)."""
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, exit 1, as Python does
        print(code, file=sys.stderr)
        status = 1
    join_threads = getattr(threading, "_shutdown", None)  # what finalisation runs first
    if join_threads is not None:
        join_threads()
    atexit._run_exitfuncs()
    flush_std()
    os._exit(status)
