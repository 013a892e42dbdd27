"""Whole-file atomic replacement: write a temp file in the target's directory, fsync, rename.

A reader of ``dst`` sees either the old file or the complete new one, whatever
happens to this process (exception, Ctrl-C, SIGKILL, full disk). A SIGKILL can
leave a ``.<name>.rltscan-*.tmp`` file behind, never a half-written ``dst``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from rltscan.errors import OutputRefusedError

TMP_MARK = ".rltscan-"
_committed: list[Path] = []  # files replaced by this process since the last reset


def committed() -> list[Path]:
    """Targets replaced since :func:`reset_committed` (to report an interrupt honestly)."""
    return list(_committed)


def reset_committed() -> None:
    _committed.clear()


@contextlib.contextmanager
def _deferred_signals() -> Iterator[None]:
    """Hold SIGINT/SIGTERM until the block ends, so "replaced" and "recorded" agree."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {s: signal.signal(s, lambda n, _f: caught.append(n)) for s in _SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if caught:
            raise KeyboardInterrupt


_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def temp_name(dst: Path) -> Path:
    """A fresh temp path next to ``dst`` (same directory, so the rename is atomic)."""
    fd, name = tempfile.mkstemp(prefix=f".{dst.name}{TMP_MARK}", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    return Path(name)


def file_mode(dst: Path) -> int:
    """The mode ``dst`` has (a file replaced keeps it), or the one a new file gets."""
    try:
        return stat.S_IMODE(os.stat(dst).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    with contextlib.suppress(OSError, ValueError):  # Linux: read it without changing it
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_path(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse directory fsync
        _fsync_path(path)


def check_space(dst: Path, needed: int) -> None:
    """Refuse early when the target's filesystem cannot hold ``needed`` more bytes."""
    free = shutil.disk_usage(dst.parent).free
    if needed > free:
        raise OutputRefusedError(
            f"no space left for {dst}: need {needed / 1e6:.1f} MB, {free / 1e6:.1f} MB free; "
            "free some space or pass -o PATH on another disk"
        )


def is_full_disk(err: BaseException | None) -> bool:
    return isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)


def no_space(dst: Path) -> OutputRefusedError:
    """The one-line error for a disk that filled up while ``dst`` was being written."""
    return OutputRefusedError(
        f"no space left on device writing {dst}; nothing was changed, free some space"
    )


@contextlib.contextmanager
def atomic_path(dst: Path, *, copy_from: Path | None = None, size_hint: int = 0) -> Iterator[Path]:
    """Yield a temp path to fill; on success fsync it and move it over ``dst``.

    With ``copy_from`` the temp file starts as a byte copy of that file. On any
    exception (KeyboardInterrupt included) the temp file is removed and ``dst``
    is untouched.
    """
    dst = Path(dst).absolute()
    if not dst.parent.is_dir():
        raise OutputRefusedError(f"{dst.parent} is not a directory; create it or pick another -o")
    if copy_from is not None:
        check_space(dst, os.path.getsize(copy_from))
    elif size_hint:
        check_space(dst, size_hint)
    tmp: Path | None = None
    try:
        with _deferred_signals():  # a Ctrl-C inside mkstemp would lose the temp's name
            tmp = temp_name(dst)
        os.chmod(tmp, file_mode(dst))  # mkstemp's 0o600 would replace the file's own mode
        if copy_from is not None:
            shutil.copyfile(copy_from, tmp)
            with contextlib.suppress(OSError):
                shutil.copymode(copy_from, tmp)
        yield tmp
        _fsync_path(tmp)
        with _deferred_signals():
            os.replace(tmp, dst)
            _committed.append(dst)
        _fsync_dir(dst.parent)
    except OSError as err:
        _remove(tmp)
        if is_full_disk(err):
            raise no_space(dst) from None
        raise
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()
