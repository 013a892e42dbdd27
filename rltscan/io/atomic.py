"""Whole-file atomic replacement: write a temp file in the target's directory, fsync, rename.

A reader of ``dst`` sees either the old file or the complete new one, whatever
happens to this process (exception, Ctrl-C, SIGKILL, full disk). A SIGKILL can
leave a ``.<name>.rltscan-*.tmp`` file behind, never a half-written ``dst``.

The write-back rules of a careful Unix tool live here too (README "Write-back
rules"): a symlinked ``dst`` is written through (the link stays); a ``dst`` that
is not a regular file (device, FIFO, socket) or that has other hard links (unless
``--break-links``) is never replaced; a write-protected file is not replaced; an
input registered with :func:`expect` must still be the same file (device, inode,
size, mtime) when it is copied and right before the rename; the replaced file's
owner, group and extended attributes are kept where the process may set them;
:func:`lock` serialises writers of one file. What a run registers and commits is
its :class:`WriteRun`, never a module global.
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import os
import re
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rltscan import interrupts
from rltscan.errors import InputFileError, OutputRefusedError

TMP_MARK = ".rltscan-"


@dataclass
class WriteRun:
    """The write path's state of one run: the inputs' identities registered with
    :func:`expect`, the targets replaced so far (:func:`committed`) and ``--break-links``.

    :func:`begin_run` makes one per ``rltscan.run`` and makes it current for the
    calling thread's context (a :class:`contextvars.ContextVar`, not a module global):
    two runs in two threads each see their own, and the engine's worker threads run in
    a copy of their run's context, so they see its run. It stays current after the run
    (the CLI's interrupt message reads what it committed) until the next begins."""

    break_links: bool = False
    committed: list[Path] = field(default_factory=list)
    expected: dict[str, Identity] = field(default_factory=dict)

    def finish(self) -> None:
        """The run is over: forget its inputs and its --break-links (keep what it wrote)."""
        self.expected.clear()
        self.break_links = False


_RUN: contextvars.ContextVar[WriteRun] = contextvars.ContextVar("rltscan_write_run")


def begin_run(*, break_links: bool = False) -> WriteRun:
    """A new :class:`WriteRun`, current in this context from now on."""
    run = WriteRun(break_links=break_links)
    _RUN.set(run)
    return run


def current() -> WriteRun:
    """This context's :class:`WriteRun` (an empty one where no run began: a Ray worker,
    a direct call of a writer)."""
    run = _RUN.get(None)
    return run if run is not None else begin_run()


def committed() -> list[Path]:
    """Targets replaced by the current run (to report an interrupt honestly)."""
    return list(current().committed)


def mark_committed(path: Path) -> None:
    """Record a target replaced by another writer of this run (a sharded commit)."""
    current().committed.append(path)


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
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


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems refuse directory fsync
        _fsync_path(path)


_WRITEBACK: list = []  # the one thread pool of start_writeback, made on first use
_WRITEBACK_LOCK = threading.Lock()


def start_writeback(path: Path) -> None:
    """Have the kernel start writing ``path``'s dirty pages to disk now, on a thread,
    without waiting for them: a file staged without fsync is then mostly on disk by the
    time :func:`fsync_all` makes the batch durable, instead of every byte waiting for it
    (Linux keeps up to ``vm.dirty_background_ratio`` of memory unwritten, 10%: 13 GB on a
    135 GB machine). Linux's ``POSIX_FADV_DONTNEED`` starts the writeback and drops the
    file's clean pages from the page cache; it blocks while it queues the pages (0.3-0.7
    s for 512 MiB on the 2-core dev VM), hence the thread. On the same VM an fsync of
    such a file 1.5 s after the write took 0.9-1.2 s without it and 0.001-0.47 s with
    it. Best effort: where ``posix_fadvise`` is missing or fails, nothing happens and
    the batch fsync alone makes the file durable."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return

    def kick() -> None:
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_RDONLY)
            try:
                advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)

    from concurrent.futures import ThreadPoolExecutor

    with _WRITEBACK_LOCK:
        if not _WRITEBACK:
            _WRITEBACK.append(ThreadPoolExecutor(1, thread_name_prefix="rltscan-writeback"))
        _WRITEBACK[0].submit(kick)


def wait_writebacks() -> None:
    """Wait for this process's :func:`start_writeback` kicks and end their thread (the
    staging commit and abort call it: a run leaves no thread behind; a Ray worker's kicks
    run out on their own)."""
    with _WRITEBACK_LOCK:
        pool = _WRITEBACK.pop() if _WRITEBACK else None
    if pool is not None:
        pool.shutdown(wait=True)


def fsync_all(paths: list[Path], *, threads: int = 16) -> None:
    """Make every file in ``paths`` durable, as one batch: their fsyncs are issued
    together from a pool of threads (the device queues them at once instead of one
    writer after another), then their directories are synced once each."""
    from concurrent.futures import ThreadPoolExecutor

    if not paths:
        return
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(paths)))) as pool:
        list(pool.map(_fsync_path, paths))  # an OSError is raised here
    for parent in sorted({p.parent for p in paths}):
        fsync_dir(parent)


def check_space(dst: Path, needed: int) -> None:
    """Refuse early when the target's filesystem cannot hold ``needed`` more bytes, or the
    file would outgrow this process's file size limit (``ulimit -f``)."""
    free = shutil.disk_usage(dst.parent).free
    if needed > free:
        need, have = _sizes(needed, free)
        raise OutputRefusedError(
            f"no space left for {dst}: need {need}, {have} free; "
            "free some space or pass -o PATH on another disk"
        )
    limit = _file_size_limit()
    if limit is not None and needed > limit:
        need, cap = _sizes(needed, limit)
        raise OutputRefusedError(
            f"{dst} needs {need}, past this process's file size limit (ulimit -f) of {cap}; "
            "raise the limit (ulimit -f unlimited) and run again"
        )


def _file_size_limit() -> int | None:
    """``RLIMIT_FSIZE`` in bytes, or None where there is none (or no such limit here)."""
    try:
        import resource
    except ImportError:  # not on Windows
        return None
    soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def _sizes(a: int, b: int) -> tuple[str, str]:
    """Two byte counts, in MB from 1 MB up, in bytes below or where MB shows them equal."""

    def size(n: int) -> str:
        return f"{n:,} bytes" if n < 10**6 else f"{n / 1e6:.1f} MB"

    one, two = size(a), size(b)
    return (one, two) if one != two else (f"{a:,} bytes", f"{b:,} bytes")


# What a write that found no room means, by errno: (what happened, what to do).
NO_ROOM = {
    errno.ENOSPC: ("no space left on device", "free some space or pass -o PATH on another disk"),
    errno.EDQUOT: ("the disk quota is exceeded", "free some space or pass -o PATH on another disk"),
    errno.EFBIG: (
        "the file size limit (ulimit -f) was reached",
        "raise the limit (ulimit -f unlimited) and run again",
    ),
}


def no_room_errno(err: BaseException | None) -> int | None:
    """The errno (a key of :data:`NO_ROOM`) of a write that ran out of room (a full disk,
    a quota, ``ulimit -f``) in ``err`` or its causes, else None. h5py reports a failed
    flush as a ``RuntimeError`` whose text holds the errno (``errno = 28, ...``)."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in NO_ROOM:
            return err.errno
        if isinstance(err, (OSError, RuntimeError)):
            text = str(err)
            found = re.search(r"errno = (\d+),", text)
            if found and int(found.group(1)) in NO_ROOM:
                return int(found.group(1))
            if "No space left on device" in text:
                return errno.ENOSPC
            if "quota" in text.lower():
                return errno.EDQUOT
        err = err.__cause__ or err.__context__
    return None


def no_room(err: BaseException | None) -> tuple[str, str] | None:
    """What a write that ran out of room (:func:`no_room_errno`) means and what to do,
    else None. EFBIG with no ``ulimit -f`` in force is the filesystem's own largest file
    (FAT32's 4 GiB), which raising the limit does not change."""
    code = no_room_errno(err)
    if code is None:
        return None
    if code == errno.EFBIG and _file_size_limit() is None:
        return (
            "the filesystem's largest file size was reached",
            "pass -o PATH on another filesystem",
        )
    return NO_ROOM[code]


def is_full_disk(err: BaseException | None) -> bool:
    """Whether ``err`` is a write that ran out of room (:func:`no_room_errno`)."""
    return no_room_errno(err) is not None


def no_space(dst: Path, err: BaseException | None = None) -> OutputRefusedError:
    """The one-line error for a write of ``dst`` that ran out of room (``err``'s errno:
    a full disk unless it says a quota or ``ulimit -f``)."""
    what, fix = no_room(err) or NO_ROOM[errno.ENOSPC]
    return OutputRefusedError(f"{what} writing {dst}; nothing was changed, {fix}")


@contextlib.contextmanager
def atomic_path(dst: Path, *, copy_from: Path | None = None, size_hint: int = 0) -> Iterator[Path]:
    """Yield a temp path to fill; on success fsync it and move it over ``dst``.

    With ``copy_from`` the temp file starts as a byte copy of that file (of the very
    file registered with :func:`expect`, when it is). On any exception
    (KeyboardInterrupt included) the temp file is removed and ``dst`` is untouched.
    A symlinked ``dst`` is written through: its target is replaced, the link stays.
    """
    dst = replaceable(Path(dst))
    if copy_from is not None:
        check_space(dst, os.path.getsize(copy_from))
    elif size_hint:
        check_space(dst, size_hint)
    tmp: Path | None = None
    try:
        with deferred_signals():  # a Ctrl-C inside mkstemp would lose the temp's name
            tmp = temp_name(dst)
        os.chmod(tmp, file_mode(dst))  # mkstemp's 0o600 would replace the file's own mode
        if copy_from is not None:
            copy_verified(copy_from, tmp)
            with contextlib.suppress(OSError):
                shutil.copymode(copy_from, tmp)
        yield tmp
        keep_owner(dst, tmp)
        _fsync_path(tmp)
        with deferred_signals():
            if interrupts.seen():  # a Ctrl-C that something swallowed still stops the commit
                raise KeyboardInterrupt
            check_unchanged(dst)
            os.replace(tmp, dst)
            mark_committed(dst)
        fsync_dir(dst.parent)
    except (OSError, RuntimeError) as err:  # RuntimeError: h5py's failed flush
        _remove(tmp)
        if is_full_disk(err):
            raise no_space(dst, err) from None
        if isinstance(err, PermissionError):
            raise OutputRefusedError(
                f"cannot write {dst} ({err.strerror}); check the permissions of "
                f"{dst.parent} or pass -o PATH elsewhere"
            ) from None
        raise
    except BaseException:
        _remove(tmp)
        raise


# --------------------------------------------------------------------------- write-back rules


class Identity(NamedTuple):
    """What makes "the same file": a replaced or rewritten input differs in one of these."""

    dev: int
    ino: int
    size: int
    mtime_ns: int


def identity(st: os.stat_result) -> Identity:
    return Identity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


def real(path: Path) -> Path:
    """``path`` with symlinks resolved (the file a write-back must update)."""
    return Path(os.path.realpath(path))


def expect(path: Path, ident: Identity) -> None:
    """Register an input of this run: it must still be ``ident`` when copied or replaced."""
    current().expected[str(real(path))] = ident


def forget(path: Path) -> None:
    current().expected.pop(str(real(path)), None)


def kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def replaceable(dst: Path, *, shown: Path | None = None) -> Path:
    """The real file a write-back of ``dst`` replaces, after the write-back rules.

    Refused (exit 5, one line): a target that is not a regular file, one with other
    hard links (without --break-links), a write-protected one, a directory that
    cannot take the temp file.
    """
    shown = shown or dst
    path = real(Path(dst).absolute())
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as err:
        raise OutputRefusedError(
            f"cannot inspect {shown} ({err.strerror}); pick another -o"
        ) from None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            raise OutputRefusedError(
                f"{shown} is {kind_of(st.st_mode)}; rltscan never replaces one with a file, "
                "pass -o PATH to a regular file (or -o - for stdout)"
            )
        if st.st_nlink > 1 and not current().break_links:
            raise OutputRefusedError(
                f"{shown} has {st.st_nlink} hard links and replacing it would give only this "
                "name the outputs; pass --break-links to accept that, or -o PATH"
            )
        if not st.st_mode & 0o222:
            raise OutputRefusedError(
                f"{shown} is read-only; make it writable (chmod u+w) or pass -o PATH elsewhere"
            )
    parent = path.parent
    if not parent.is_dir():
        raise OutputRefusedError(f"{parent} is not a directory; create it or pick another -o")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputRefusedError(
            f"cannot create files in {parent} (permission denied); "
            "make it writable or pass -o PATH elsewhere"
        )
    return path


def check_unchanged(path: Path) -> None:
    """Refuse (exit 3) when a registered input is no longer the file this run read."""
    want = current().expected.get(str(real(path)))
    if want is None:
        return
    try:
        now = identity(os.stat(path))
    except OSError:
        now = None
    if now != want:
        raise InputFileError(
            f"{path} changed while rltscan ran (replaced or modified by another program); "
            "nothing was written, run again on the new file"
        )


def copy_verified(src: Path, dst: Path) -> None:
    """Byte-copy ``src`` to ``dst``, from the very file registered for ``src`` (if any)."""
    with open(src, "rb") as fin:
        want = current().expected.get(str(real(src)))
        if want is not None and identity(os.fstat(fin.fileno())) != want:
            raise InputFileError(
                f"{src} changed while rltscan ran (replaced or modified by another program); "
                "nothing was written, run again on the new file"
            )
        shutil.copyfile(src, dst)  # (sendfile); the name must still be that file after it
        if want is not None and identity(os.stat(src)) != want:
            raise InputFileError(
                f"{src} changed while rltscan ran (replaced or modified by another program); "
                "nothing was written, run again on the new file"
            )


def keep_owner(dst: Path, tmp: Path) -> None:
    """Give ``tmp`` the owner, group and extended attributes of the file it replaces."""
    try:
        st = os.stat(dst)
    except OSError:
        return
    with contextlib.suppress(OSError):
        os.chown(tmp, st.st_uid, st.st_gid)
        os.chmod(tmp, stat.S_IMODE(st.st_mode))  # chown may clear set-id bits
    if not hasattr(os, "listxattr"):
        return
    with contextlib.suppress(OSError):
        for name in os.listxattr(dst):
            with contextlib.suppress(OSError):
                os.setxattr(tmp, name, os.getxattr(dst, name))


class Lock:
    """An exclusive lock on the file (or directory) a run writes back into.

    Files: an open-file-description lock (``F_OFD_SETLKW``), which neither HDF5's own
    ``flock`` nor closing another descriptor of the file disturbs. Directories
    (Minari datasets, sharded datasets): ``flock``. A second writer waits.
    """

    def __init__(self, fd: int, ident: Identity | None) -> None:
        self.fd, self.identity = fd, ident

    def release(self) -> None:
        if self.fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = -1

    def __del__(self) -> None:
        self.release()


def _ofd_lock(fd: int) -> None:
    import struct

    cmd = getattr(fcntl, "F_OFD_SETLKW", None)
    if cmd is None:  # not Linux: flock (HDF5 on the same file may then refuse to open)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return
    # struct flock: l_type, l_whence, l_start, l_len, l_pid (0 for OFD locks), padding
    fcntl.fcntl(fd, cmd, struct.pack("hhqqi4x", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0))


def lock(path: Path) -> Lock:
    """Take the write-back lock of ``path`` (waits while another rltscan holds it).

    For a file, the lock is re-taken until the name and the locked file agree (the
    holder before us may have replaced it), and the file's identity is registered
    with :func:`expect`.
    """
    path = real(Path(path).absolute())
    if path.is_dir():
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(fd)
            raise
        return Lock(fd, None)
    while True:
        fd = os.open(path, os.O_RDWR)
        try:
            _ofd_lock(fd)
            held = identity(os.fstat(fd))
            now = identity(os.stat(path))
        except BaseException:
            os.close(fd)
            raise
        if (held.dev, held.ino) == (now.dev, now.ino):
            expect(path, held)
            return Lock(fd, held)
        os.close(fd)  # replaced while we waited: lock the new file


def _remove(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()
