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
import tempfile
from collections.abc import Iterator
from pathlib import Path

from rltscan.errors import OutputRefusedError

TMP_MARK = ".rltscan-"


def temp_name(dst: Path) -> Path:
    """A fresh temp path next to ``dst`` (same directory, so the rename is atomic)."""
    fd, name = tempfile.mkstemp(prefix=f".{dst.name}{TMP_MARK}", suffix=".tmp", dir=dst.parent)
    os.close(fd)
    return Path(name)


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


@contextlib.contextmanager
def atomic_path(dst: Path, *, copy_from: Path | None = None) -> Iterator[Path]:
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
    tmp = temp_name(dst)
    try:
        if copy_from is not None:
            shutil.copyfile(copy_from, tmp)
            with contextlib.suppress(OSError):
                shutil.copymode(copy_from, tmp)
        yield tmp
        _fsync_path(tmp)
        os.replace(tmp, dst)
        _fsync_dir(dst.parent)
    except OSError as err:
        _remove(tmp)
        if err.errno in (errno.ENOSPC, errno.EDQUOT):
            raise OutputRefusedError(
                f"no space left on device writing {dst}; nothing was changed, free some space"
            ) from None
        raise
    except BaseException:
        _remove(tmp)
        raise


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()
