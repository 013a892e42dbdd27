"""HDF5: open, detect the layout, read columns lazily, and write results back safely.

Layouts (docs/CONVENTIONS.md §7.1): per-episode groups (``episode_<id>``, ``demo_<id>``,
``traj_<id>``; Minari ``main_data.hdf5``), time-major ``[T, B]`` and batch-major
``[B, T]`` rollout buffers, and flat D4RL-style files (``N`` rows, under a group).

Nothing in a file hangs a run. Before a file is first opened for reading, its whole
structure (every group, link, attribute, dataset header and chunk index) is walked in a
forked child (:func:`check_structure`): libhdf5 spins forever, holding the GIL and
deaf to SIGTERM, on some corrupt headers (a global heap whose object sizes make no
progress), and segfaults on others. A child that makes no progress for
``RLTSCAN_HDF5_STALL_SECONDS`` (2 s, plus 1 s per 100 MB of file; time it spends
waiting for a core on a loaded machine does not count), crashes, meets more
links than the file has bytes, or finds two datasets' storage sharing bytes is killed
(or says so) and the run ends with exit 3 and one line saying "unreadable structure".
A number type must be IEEE or full-width (:func:`check_number_type`): libhdf5 would
convert a damaged one to other numbers.
Our own walks are bounded too: link depth (:data:`MAX_DEPTH`), and a group reached
twice (a soft link to an ancestor) is listed once.

Write-back copies the file to a temporary name in the same directory, adds the
new datasets to the copy, fsyncs it and ``os.replace``s it over the target. HDF5
has no transactions: writing into the original in place (even under temporary
dataset names) can leave its superblock and metadata cache inconsistent when the
process dies mid-write, and then *every* column is lost. The copy costs one
sequential file copy and guarantees that the input is either the old file or
the complete new one.

The HDF5 registry row (detection, dispatch, the table conversions) is
:mod:`rltscan.io.formats.hdf5`; Minari's HDF5 backend composes on both.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import select
import signal
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from itertools import pairwise
from pathlib import Path
from typing import Any

import numpy as np

from rltscan.errors import (
    AmbiguousInputError,
    DataError,
    DTypeError,
    InputFileError,
    OutputRefusedError,
    ParameterError,
    RltscanError,
)
from rltscan.io.atomic import atomic_path
from rltscan.io.columns import ColumnInfo, quoted
from rltscan.io.source import Layout, Source
from rltscan.roles import ROLES, of_kind

EPISODE_GROUP = re.compile(r"^(episode|demo|traj)_(\d+)$")
SKIP_PREFIXES = ("metadata",)
MAX_DEPTH = 64  # groups within groups: deeper is a link loop or a corrupt file
STALL_ENV = "RLTSCAN_HDF5_STALL_SECONDS"
STALL_SECONDS = 2.0  # the structure walk's budget without progress, plus 1 s per 100 MB
_checked: set[tuple[int, int, int, int]] = set()  # files whose structure was walked


def _h5py() -> Any:
    import h5py

    return h5py


# Bytes of HDF5's chunk cache per dataset. None: rltscan reads and writes each chunk once,
# a window at a time, so a cache only costs: with one, every chunked read or write went
# through buffers allocated (and page-faulted) afresh per chunk, ~17-20 ms of CPU per 16
# MiB window column against ~5.5 ms without (h5py 3.16, HDF5 2.0, 4 MiB chunks, the
# 2-core machine: bench/results/cpu-stream-2core-2026-12-07-b/).
CHUNK_CACHE_BYTES = 0


def open_file(path: Path, mode: str = "r") -> Any:
    """``h5py.File`` with the failures turned into one-line InputFileErrors. A file
    opened for reading has its structure walked first (:func:`check_structure`); a file
    opened for writing is a copy of one that was. No chunk cache (:data:`CHUNK_CACHE_BYTES`)."""
    h5py = _h5py()
    if mode == "r":
        check_structure(Path(path))
    try:
        return h5py.File(path, mode, rdcc_nbytes=CHUNK_CACHE_BYTES)
    except OSError as err:
        text = str(err)
        if "truncated file" in text:
            raise InputFileError(
                f"{path} is a truncated HDF5 file (shorter than its header says); "
                "the copy is incomplete or corrupt, fetch it again"
            ) from None
        if "already open for write" in text:
            raise InputFileError(
                f"{path} is open for writing in another program, or its writer did not close "
                "it (HDF5's consistency flags are set); close that program, or clear the "
                f"flags with h5clear -s {path}"
            ) from None
        if "unable to lock" in text.lower() or "lock file" in text.lower():
            raise InputFileError(
                f"{path} is locked by another process (HDF5 file lock); close the other "
                "program or set HDF5_USE_FILE_LOCKING=FALSE if you know it is safe"
            ) from None
        raise InputFileError(
            f"{path} is not a readable HDF5 file ({_short(text)}); the file is corrupt"
        ) from None


def stall_seconds(size: int) -> float:
    """How long the structure walk of a file of ``size`` bytes may go without progress:
    ``RLTSCAN_HDF5_STALL_SECONDS`` (default 2) plus 1 s per 100 MB."""
    text = os.environ.get(STALL_ENV)
    base = STALL_SECONDS
    if text is not None:
        try:
            base = float(text)
        except ValueError:
            base = -1.0
        if not base > 0 or base == float("inf"):
            raise ParameterError(
                f'{STALL_ENV}="{text}" is not a number of seconds; set it to a positive '
                "number (the time an HDF5 file's structure walk may go without progress)"
            )
    return base + size / 100e6


def check_structure(path: Path, where: str | None = None) -> None:
    """Walk every group, link, attribute, dataset header and chunk index of ``path`` in
    a forked child, once per file (device, inode, size, mtime) and process.

    libhdf5 loops forever on some corrupt metadata, inside C and holding the GIL, where
    no Python thread, signal handler or SIGTERM can stop it; and it crashes on others.
    The child reports progress through a pipe; if none comes for :func:`stall_seconds`
    (not counting the time it waits for a core, :func:`queued_seconds`),
    or the child dies of a signal, or it counts more links than the file has bytes,
    the child is killed and this raises InputFileError (exit 3). Errors the walk meets
    are not reported here: the reader meets them again and names them.
    """
    where = where or str(path)
    try:
        st = os.stat(path)
    except OSError:
        return  # opening it says why
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key in _checked or not hasattr(os, "fork"):
        return
    budget = stall_seconds(st.st_size)
    problem = _walk_in_child(path, st.st_size, budget)
    if problem is not None:
        raise InputFileError(
            f"{where}: unreadable structure ({problem}); the file is corrupt, fetch or "
            f"write it again (for a huge file on a slow disk, raise {STALL_ENV})"
        )
    _checked.add(key)


_TOO_MANY = 3  # the child's exit statuses: more links than the file has bytes,
_OVERLAP = 4  # two datasets' contiguous storage sharing bytes (a flipped address)


def _walk_in_child(path: Path, size: int, budget: float) -> str | None:
    """None if the walk finished; else what went wrong, for the message."""
    _h5py()  # imported here: the child must not import (a lock held at fork time)
    read_end, write_end = os.pipe()
    # The child walks and leaves by os._exit, touching nothing another library's threads
    # hold: Python 3.12+'s warning about forking with threads, and JAX's (its at-fork
    # hook, in a process that imported jax), would only become a misleading report note.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.filterwarnings("ignore", r"os\.fork\(\) was called", RuntimeWarning)
        pid = os.fork()
    if pid == 0:  # the child: walk, then leave without running any exit handler
        status = 0
        try:
            os.close(read_end)
            status = _walk_structure(path, write_end, size)
        except BaseException:  # the reader reports errors, not the probe
            status = 0
        os._exit(status)
    os.close(write_end)
    try:
        mark, queued = time.monotonic(), queued_seconds(pid)
        while True:
            # time without progress, less the time the child waited for a core: a
            # loaded machine (a node of busy workers) slows the walk, it does not stall it
            left = budget - (time.monotonic() - mark - (queued_seconds(pid) - queued))
            if left <= 0:
                return f"its HDF5 metadata made no progress in {budget:.1f} s"
            ready, _, _ = select.select([read_end], [], [], left)
            if not ready:
                continue
            if not os.read(read_end, 4096):
                break  # the child closed the pipe: it is done
            mark, queued = time.monotonic(), queued_seconds(pid)
        _, status = os.waitpid(pid, 0)
        pid = 0
    finally:
        os.close(read_end)
        if pid:
            with suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"libhdf5 crashed reading its metadata (signal {os.WTERMSIG(status)})"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _TOO_MANY:
        return "more links than the file has bytes"
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == _OVERLAP:
        return "two datasets' storage shares bytes"
    return None


def queued_seconds(pid: int) -> float:
    """Seconds process ``pid`` has spent runnable but waiting for a core (Linux's
    ``/proc/<pid>/schedstat``); 0 where the kernel does not say."""
    try:
        with open(f"/proc/{pid}/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _walk_structure(path: Path, beat_fd: int, size: int) -> int:
    """The child's walk (:func:`check_structure`), through h5py's low-level ids (the
    high-level objects cost six times as much): every object reachable by a link (soft
    and external links included) once, its attributes (the values of variable-length
    ones: a global heap), a dataset's layout, chunk index and first variable-length
    element. A byte goes to ``beat_fd`` every 50 ms of progress. Returns the exit
    status. An object that fails to open is skipped (the reader names it)."""
    h5py = _h5py()
    h5a, h5d, h5g, h5o, h5t = h5py.h5a, h5py.h5d, h5py.h5g, h5py.h5o, h5py.h5t
    last, count = [0.0], [0]
    extents: set[tuple[Any, int, int]] = set()  # (file, offset, size): contiguous storage
    seen: set[int] = set()

    def beat() -> None:
        count[0] += 1
        now = time.monotonic()
        if now - last[0] >= 0.05:
            os.write(beat_fd, b".")
            last[0] = now

    def variable(kind: Any) -> bool:
        cls = kind.get_class()
        return cls == h5t.VLEN or (cls == h5t.STRING and kind.is_variable_str())

    def attributes(oid: Any, holder: Any) -> None:
        with suppress(*H5_ERRORS):
            for i in range(h5o.get_info(oid).num_attrs):
                beat()
                with suppress(*H5_ERRORS):
                    attr = h5a.open(oid, index=i)
                    if variable(attr.get_type()):
                        holder.attrs[attr.name]  # its value is in a global heap

    def dataset(oid: Any) -> None:
        dcpl = oid.get_create_plist()
        layout = dcpl.get_layout()
        if layout == h5d.CHUNKED:
            oid.get_num_chunks()  # walks the chunk index
        elif layout == h5d.CONTIGUOUS and not dcpl.get_external_count():
            offset, stored = oid.get_offset(), int(oid.get_storage_size())
            if offset is not None and stored:  # (an external link's target: its own file)
                extents.add((oid.fileno, int(offset), stored))
        if variable(oid.get_type()) and oid.shape and all(oid.shape):
            h5py.Dataset(oid)[(0,) * len(oid.shape)]  # its global heap

    def walk(oid: Any, depth: int) -> int:
        ident = hash(oid)
        if ident in seen:
            return 0
        seen.add(ident)
        beat()
        is_group = isinstance(oid, h5g.GroupID)
        with suppress(*H5_ERRORS):
            if isinstance(oid, h5d.DatasetID):
                dataset(oid)
                attributes(oid, h5py.Dataset(oid))
            elif is_group:
                attributes(oid, h5py.Group(oid))
        if not is_group or depth >= MAX_DEPTH:
            return 0
        names: list[bytes] = []
        with suppress(*H5_ERRORS):
            for name in oid:
                beat()
                names.append(name)
                if count[0] > size:
                    return _TOO_MANY
        for name in names:
            try:
                child = h5o.open(oid, name)  # follows soft and external links
            except H5_ERRORS:
                continue
            status = walk(child, depth + 1)
            if status:
                return status
        return 0

    with h5py.File(path, "r") as fh:
        status = walk(fh["/"].id, 0)
    ends = sorted(extents)  # one dataset under two names is one extent
    shared = any(f == g and a + n > b for (f, a, n), (g, b, _) in pairwise(ends))
    return _OVERLAP if not status and shared else status


def _identity(obj: Any) -> int:
    """What makes two h5py handles one object (a soft link back to an ancestor): h5py
    hashes an object id by its file and address."""
    try:
        return hash(obj.id)
    except H5_ERRORS:
        return id(obj)


def _short(text: str) -> str:
    text = text.strip().strip("'\"")
    text = text.split("(", 1)[-1].rstrip(")") if "(" in text else text
    return text.strip().splitlines()[0][:120] if text.strip() else "unknown error"


# What h5py raises for a file whose metadata (object headers, heaps, B-trees, datatypes)
# is damaged: OSError, but also KeyError ("Unable to open object"), RuntimeError ("Link
# iteration failed"), ValueError, TypeError ("No NumPy equivalent") and friends.
H5_ERRORS = (
    OSError,
    RuntimeError,
    KeyError,
    ValueError,
    TypeError,
    IndexError,
    OverflowError,
    UnicodeError,
    SystemError,
    MemoryError,
)


@contextmanager
def structure(where: str, what: str = "its HDF5 metadata") -> Iterator[None]:
    """Turn h5py's failures while walking a file into one-line InputFileErrors (exit 3)."""
    try:
        yield
    except RltscanError:
        raise
    except H5_ERRORS as err:
        text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
        raise InputFileError(
            f"{where}: {what} cannot be read ({_short(text)}); "
            "the file is corrupt, fetch or write it again"
        ) from None


def _close_quietly(fh: Any) -> None:
    """Close ``fh``; a damaged file may fail even that, which must not hide the real error."""
    with suppress(Exception):  # nothing more can be done with a broken handle
        fh.close()


def _datasets(
    group: Any, prefix: str = "", *, where: str = "", depth: int = 0, seen: set | None = None
) -> dict[str, Any]:
    """All datasets below ``group`` by slash path, following links, skipping metadata/.

    Bounded: groups nest at most :data:`MAX_DEPTH` deep and a group reached twice (a
    soft link back to an ancestor) is listed once. A role's name (``terminations``)
    that holds something other than a dataset or group (a committed datatype, as a
    flipped object header makes it) is an InputFileError, never a column that is
    silently not there.
    """
    h5py = _h5py()
    seen = {_identity(group)} if seen is None else seen
    found: dict[str, Any] = {}
    for key in group:
        if not prefix and key in SKIP_PREFIXES:
            continue
        try:
            item = group[key]
        except KeyError:
            if _is_link(group, key):  # a dangling soft or external link: nothing there
                continue
            raise
        name = f"{prefix}{key}"
        if isinstance(item, h5py.Dataset):
            if item.shape is not None:  # (a null dataspace holds no values: not a column)
                found[name] = item
        elif isinstance(item, h5py.Group) and not EPISODE_GROUP.match(key):
            ident = _identity(item)
            if ident in seen:
                continue
            if depth >= MAX_DEPTH:
                raise InputFileError(
                    f"{where or group.file.filename}: groups nest deeper than {MAX_DEPTH} at "
                    f'"{name}"; the file is corrupt or its links loop, pass --group PATH'
                )
            seen.add(ident)
            found.update(_datasets(item, f"{name}/", where=where, depth=depth + 1, seen=seen))
        elif not isinstance(item, h5py.Group) and name in _ROLE_NAMES:
            kind = "a named datatype" if isinstance(item, h5py.Datatype) else "not a dataset"
            raise InputFileError(
                f'{where or group.file.filename}: "{name}" is {kind}, not a dataset; the file '
                "is corrupt (fetch or write it again), or rename that object"
            )
    return found


_ROLE_NAMES = frozenset(name for role in ROLES.values() for name in role.aliases)


def _is_link(group: Any, key: str) -> bool:
    h5py = _h5py()
    try:
        link = group.get(key, getlink=True)
    except H5_ERRORS:
        return False
    return isinstance(link, (h5py.SoftLink, h5py.ExternalLink))


def _info(name: str, ds: Any) -> ColumnInfo:
    return ColumnInfo(name, tuple(int(d) for d in ds.shape), str(ds.dtype))


def _episode_groups(group: Any) -> list[tuple[int, str]]:
    h5py = _h5py()
    found = []
    for key in group:
        match = EPISODE_GROUP.match(key)
        if match and isinstance(group.get(key), h5py.Group):
            found.append((int(match.group(2)), key))
    return sorted(found)  # numeric order: episode_2 before episode_10


def _rewards_name(datasets: Mapping[str, Any], override: str | None) -> str | None:
    if override is not None:
        return override if override in datasets else None
    for name in ROLES["rewards"].aliases:
        if name in datasets:
            return name
    return None


def _layout_attr(group: Any) -> str | None:
    for holder in (group, group.file):
        value = holder.attrs.get("layout")
        if value is not None:
            text = value.decode() if isinstance(value, bytes) else str(value)
            return text.replace("_", "-")
    return None


def open_source(
    path: Path,
    *,
    group: str | None = None,
    layout: Layout | None = None,
    rewards: str | None = None,
    display: str | None = None,
) -> Source:
    """Open ``path`` read-only and detect its layout (``layout`` overrides detection)."""
    fh = open_file(path)
    try:
        with structure(display or str(path)):
            source = _open(fh, path, group=group, layout=layout, rewards=rewards, display=display)
    except BaseException:
        _close_quietly(fh)
        raise
    source.close = lambda: _close_quietly(fh)
    return source


def _open(
    fh: Any,
    path: Path,
    *,
    group: str | None,
    layout: Layout | None,
    rewards: str | None,
    display: str | None,
) -> Source:
    h5py = _h5py()
    name = display or str(path)
    gpath = group or "/"
    if gpath not in fh:
        groups = [k for k in fh if isinstance(fh.get(k), h5py.Group)]
        raise DataError(
            f'{name} has no group "{gpath}"; pass --group with one of: {quoted(groups)}'
        )
    _refuse_slot_order(fh, name)
    _refuse_unwritten_trajectories(fh, name)
    _refuse_d3rlpy2(fh, name)
    root = fh[gpath]
    if not isinstance(root, h5py.Group):
        raise DataError(f'{name}: "{gpath}" is a dataset, not a group; pass --group PATH')
    where = name if gpath == "/" else f"{name}:{gpath}"
    _refuse_cursor(root, where)

    episodes = _episode_groups(root)
    nested = group is None and isinstance(root.get("data"), h5py.Group)
    if not episodes and nested and _episode_groups(root["data"]):  # robomimic: data/demo_<i>
        root, gpath, where = root["data"], "/data", f"{name}:/data"
        episodes = _episode_groups(root)
    datasets = _datasets(root, where=where)
    rewards_name = _rewards_name(datasets, rewards)
    notes: list[str] = []

    if layout is None:
        declared = _layout_attr(root)
        if declared in ("time-major", "batch-major", "flat", "episodes"):
            layout = declared  # type: ignore[assignment]
        elif episodes and rewards_name is not None:
            raise AmbiguousInputError(
                f'it has both episode groups and a root "{rewards_name}" dataset',
                "pass --layout episodes or --layout flat",
                where=where,
            )
        elif episodes:
            layout = "episodes"
        elif rewards_name is not None:
            shape = _steps_shape(datasets[rewards_name].shape)
            if len(shape) == 2 and shape[1] != 1:  # (N, 1) is an old D4RL flat column
                layout, note = _derive_axes(datasets, rewards_name, shape, where, declared)
                notes.append(note)
            else:
                layout = "flat"
        else:
            layout = "flat"

    if layout == "episodes":
        source = _episodes_source(fh, root, path, where, gpath, episodes)
    else:
        source = _array_source(fh, path, where, gpath, datasets, rewards_name, layout)
    source.notes.extend(notes)
    return source


def _refuse_slot_order(fh: Any, name: str) -> None:
    """A tianshou replay buffer (``ReplayBuffer.save_hdf5``: its ``__dict__``, the
    transitions under ``_meta/``, ``maxsize``/``_size``/``_insertion_idx`` as root
    attributes; ``_index`` before tianshou 1.0) holds its rows in slot order: rows past
    ``_size`` were never written, a full buffer wraps at ``_insertion_idx`` (its oldest
    row), and a ``VectorReplayBuffer`` keeps ``buffer_num`` envs' buffers side by side.
    Read as a table, steps of different times and envs would run into each other, so it
    is refused (any ``--group`` too), unless it is one env's buffer, full, with its cursor
    back at row 0: its slots then hold the steps in time order (as a Stable-Baselines3
    buffer full at ``pos`` 0, :func:`_refuse_cursor`)."""
    attrs = fh.attrs
    cursor = attrs.get("_insertion_idx", attrs.get("_index"))
    if "_meta" not in fh or "maxsize" not in attrs or "_size" not in attrs or cursor is None:
        return
    size, capacity = int(attrs["_size"]), int(attrs["maxsize"])
    if "buffer_num" not in attrs and size == capacity and int(cursor) == 0:
        return
    loader = "VectorReplayBuffer" if "buffer_num" in attrs else "ReplayBuffer"
    if "buffer_num" in attrs:
        kind = (
            f"a tianshou VectorReplayBuffer ({int(attrs['buffer_num'])} envs' buffers side by side)"
        )
    elif size == capacity and int(cursor):
        kind = f"a tianshou ReplayBuffer, wrapped (its oldest row is row {int(cursor)})"
    else:
        kind = f"a tianshou ReplayBuffer ({size} of {capacity} rows written)"
    raise InputFileError(
        f"{name} is {kind}: its rows are buffer slots, not steps in time order",
        f"load it with {loader}.load_hdf5 and save each env's steps in time order "
        "(buf[buf.sample_indices(0)] of a one-env ReplayBuffer) as a flat file",
    )


def _refuse_d3rlpy2(fh: Any, name: str) -> None:
    """A d3rlpy 2.x dump (``ReplayBuffer.dump``: ``columns``, ``num_episodes`` and
    ``version`` beside one dataset per episode and key, ``rewards_<i>``, and a single
    ``terminated_<i>`` flag per episode; a non-terminated episode's last row is its final
    observation, not a step) has no per-step column a role could take: refused with how
    to write it as a flat file (its ``rewards_<i>`` are not offered as the rewards)."""
    if not all(isinstance(fh.get(k), _h5py().Dataset) for k in ("columns", "num_episodes")):
        return
    if "version" not in fh or "rewards_0" not in fh:
        return
    raise InputFileError(
        f"{name} is a d3rlpy 2.x dump (one dataset per episode and key: rewards_0, "
        "terminated_0, ...), which rltscan does not read",
        "write it as a flat file: for each episode of ReplayBuffer.load(path, "
        "InfiniteBuffer()).episodes, its first transition_count steps, with terminals on "
        "its last step where episode.terminated, else timeouts",
    )


def _refuse_cursor(group: Any, where: str) -> None:
    """A Stable-Baselines3 ``ReplayBuffer``'s arrays saved with its state (``pos``,
    ``full`` and ``buffer_size``, as datasets or attributes of ``group``) are
    ``[buffer_size, n_envs]`` slots written round-robin: rows from ``pos`` on were never
    written (not ``full``), or the oldest row is row ``pos`` (``full``). Only a full
    buffer whose cursor is back at row 0 holds its rows in time order; any other is
    refused, with how to put its rows in order. A ``RolloutBuffer`` saved the same way
    is full with ``pos`` at ``buffer_size`` (it never wraps): its rows are in time order."""
    state = {}
    for key in ("pos", "full", "buffer_size"):
        item = group.get(key)
        if isinstance(item, _h5py().Dataset) and item.shape == ():
            state[key] = item[()]
        elif key in group.attrs:
            state[key] = group.attrs[key]
    if len(state) < 3:
        return
    pos, full = int(state["pos"]), bool(state["full"])
    if full and pos in (0, int(state["buffer_size"])):  # (RolloutBuffer: at buffer_size)
        return
    what = f"its oldest row is row {pos}" if full else f"rows {pos} on were never written"
    keep = f"np.roll(a, -{pos}, axis=0)" if full else f"a[:{pos}]"
    raise InputFileError(
        f"{where} holds a Stable-Baselines3 ReplayBuffer (pos {pos}, full {full}): its rows "
        f"are buffer slots and {what}",
        f"save each array a in time order ({keep}) and pass that file",
    )


def _refuse_unwritten_trajectories(fh: Any, name: str) -> None:
    """A TorchRL ``H5StorageCheckpointer`` file (``rb.dumps`` with it: the filled rows in
    insertion order as ``traj_<i>`` groups, with the datasets ``_len``,
    ``_storage_shape``, ``is_full`` and ``shift``) is read as episode groups. A buffer
    that was not full also stores its never-written rows, as the last groups, and the
    groups of a storage of several dimensions (``ndim=2``) cut across its envs: both
    refused."""
    if not all(isinstance(fh.get(k), _h5py().Dataset) for k in TORCHRL_H5_CHECKPOINT):
        return
    shape = tuple(int(d) for d in np.atleast_1d(fh["_storage_shape"][()]))
    if len(shape) > 1:
        raise InputFileError(
            f"{name} is a TorchRL H5StorageCheckpointer file of a storage of shape {shape}: "
            "its traj_<i> groups are not each one env's steps",
            REDUMP,
        )
    if bool(fh["is_full"][()]):
        return
    capacity = shape[0]
    raise InputFileError(
        f"{name} is a TorchRL H5StorageCheckpointer file of a buffer not full "
        f"({int(fh['_len'][()])} of {capacity} rows written): its last traj_<i> groups hold "
        "rows never written",
        REDUMP,
    )


TORCHRL_H5_CHECKPOINT = ("_len", "_storage_shape", "is_full", "shift")
# a dump rltscan reads in insertion order, unwritten rows aside (docs/CONVENTIONS.md §7.4)
REDUMP = (
    "load it with rb.loads, set rb.storage.checkpointer = None (the default) and "
    "rb.dumps(DIR), then pass DIR"
)


# Datasets of one value per sequence ([B] or [B, 1]) that a [T, B] / [B, T] buffer
# carries: the bootstrap values and final dones (CleanRL ``next_value``/``next_done``,
# SB3 ``last_values``, IMPALA ``bootstrap_value``). Their length names the batch axis.
PER_SEQUENCE = tuple(dict.fromkeys(a for r in of_kind("sequence") for a in r.aliases))


def _steps_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """A rewards shape without TorchRL's trailing feature dimension of 1 (``[B, T, 1]``)."""
    dims = tuple(int(d) for d in shape)
    return dims[:2] if len(dims) == 3 and dims[2] == 1 else dims


def _derive_axes(
    datasets: Mapping[str, Any],
    rewards_name: str,
    shape: tuple[int, ...],
    where: str,
    declared: str | None,
) -> tuple[Layout, str]:
    """Which axis of a 2-D rewards array is time, proved by the file, or refuse.

    Without a ``layout`` attribute or ``--layout`` the only proof is a per-sequence
    dataset (``last_values`` & co., shape ``(B,)`` or ``(B, 1)``) whose length is one
    of the two dimensions and not the other. A square array proves nothing.
    """
    first, second = shape
    votes: dict[str, list[str]] = {}
    square: list[str] = []
    for name in PER_SEQUENCE:
        ds = datasets.get(name)
        if ds is None:
            continue
        dims = tuple(int(d) for d in ds.shape)
        if len(dims) == 2 and dims[1] == 1:
            dims = dims[:1]
        if len(dims) != 1 or dims[0] not in shape:
            continue
        if first == second:
            square.append(name)
        elif dims[0] == second:
            votes.setdefault("time-major", []).append(name)
        else:
            votes.setdefault("batch-major", []).append(name)
    fix = "pass --layout time-major ([T, B]) or --layout batch-major ([B, T])"
    said = f'"{rewards_name}" has shape {shape}'
    if len(votes) == 1:
        layout, names = next(iter(votes.items()))
        batch = second if layout == "time-major" else first
        axis = "second" if layout == "time-major" else "first"
        shown = ", ".join(f'"{n}"' for n in names)
        kind = "[T, B]" if layout == "time-major" else "[B, T]"
        note = (
            f"layout {layout}: {shown} holds {batch} values (one per sequence), the {axis} "
            f'axis of "{rewards_name}" {shape}, so it is {kind} (no layout attribute; '
            "--layout overrides)"
        )
        return layout, note  # type: ignore[return-value]
    if len(votes) == 2:
        why = (
            f"{quoted(votes['time-major'])} say [T, B] but {quoted(votes['batch-major'])} "
            "say [B, T]"
        )
    elif square:
        why = f"it is square, so {quoted(square)} cannot tell the axes apart"
    elif declared is not None:
        why = f'its layout attribute "{declared}" is not one rltscan knows'
    else:
        why = 'no "layout" attribute and no per-sequence "last_values"/"next_done" dataset'
    raise AmbiguousInputError(
        f"{said} and the file does not say which axis is time ({why})", fix, where=where
    )


def _array_source(
    fh: Any,
    path: Path,
    where: str,
    gpath: str,
    datasets: dict[str, Any],
    rewards_name: str | None,
    layout: Layout,
) -> Source:
    columns: dict[str, ColumnInfo] = {}
    extra: dict[str, ColumnInfo] = {}
    if rewards_name is not None:
        rshape = _steps_shape(datasets[rewards_name].shape)
        if not rshape:
            raise DataError(
                f'{where}: "{rewards_name}" is a scalar, not one reward per step; '
                "pass the right --rewards KEY"
            )
        if layout == "flat":
            step_shape = rshape[:1]
        else:
            if len(rshape) != 2:
                raise DataError(
                    f'{where}: "{rewards_name}" has shape {rshape} but layout {layout} needs '
                    "2 dimensions; pass --layout flat or the right --rewards KEY"
                )
            step_shape = rshape[:2]
        n_seq = step_shape[1] if layout == "time-major" else step_shape[0]
        # Per-step columns have the rewards' shape; others of the same rank are listed
        # too, so that using one gives a shape error rather than "no column".
        for key, ds in datasets.items():
            shape = tuple(ds.shape)
            if shape[: len(step_shape)] == step_shape:
                columns[key] = _info(key, ds)
            elif (layout != "flat" and shape in ((n_seq,), (n_seq, 1))) or (
                layout == "flat" and shape == ()
            ):
                extra[key] = _info(key, ds)
            elif len(shape) >= len(step_shape):
                columns[key] = _info(key, ds)
    else:
        columns = {k: _info(k, ds) for k, ds in datasets.items() if ds.ndim >= 1}

    written: set[str] = set()  # the datasets whose chunks were checked (once each)

    def dataset(key: str) -> Any:
        if key not in written:
            check_written(datasets[key], where, key)
            written.add(key)
        return datasets[key]

    def read(key: str) -> np.ndarray:
        return _read(dataset(key), where, key)

    def read_range(key: str, start: int, stop: int) -> np.ndarray:
        index = (slice(None), slice(start, stop)) if layout == "batch-major" else slice(start, stop)
        return _read(dataset(key), where, key, index)

    steps = None
    if rewards_name is not None:
        steps = int(datasets[rewards_name].shape[1 if layout == "batch-major" else 0])
    return _group_source(
        fh,
        path,
        where,
        gpath,
        layout=layout,
        columns=columns,
        extra=extra,
        read=read,
        read_range=read_range,
        steps=steps,
        steps_column=rewards_name,
    )


def _episodes_source(
    fh: Any, root: Any, path: Path, where: str, gpath: str, episodes: list[tuple[int, str]]
) -> Source:
    if not episodes:
        raise DataError(f"{where} has no episode_<id> groups; pass --layout flat or --group PATH")
    keys = [key for _, key in episodes]
    first = _datasets(root[keys[0]], where=where)
    columns = {k: _info(k, ds) for k, ds in first.items()}

    def read(column: str) -> list[np.ndarray]:
        out = []
        for key in keys:
            with structure(where, f'episode group "{key}"'):
                group = root[key]
                found = column in group
                ds = group[column] if found else None
            if ds is not None and not isinstance(ds, _h5py().Dataset):
                raise InputFileError(
                    f'{where}: "{key}/{column}" is not a dataset although "{keys[0]}/{column}" '
                    "is one; the file is corrupt, fetch or write it again"
                )
            if ds is None:
                raise DataError(
                    f'{where}: episode group "{key}" has no dataset "{column}" although '
                    f'"{keys[0]}" has it; every episode needs the same columns'
                )
            arr = _read(ds, where, f"{key}/{column}")
            if arr.ndim == 0:
                raise DataError(
                    f'{where}: "{key}/{column}" is a scalar, not one row per step; '
                    "pass another column with its option (see rltscan inspect)"
                )
            out.append(arr)
        return out

    return _group_source(
        fh, path, where, gpath, layout="episodes", columns=columns, read=read, episode_keys=keys
    )


def _group_source(fh: Any, path: Path, where: str, gpath: str, **fields: Any) -> Source:
    """The source of group ``gpath`` of the open file ``fh`` (its attributes, closed with
    the file, ``raw`` the file); ``fields``: the rest of the :class:`Source`."""
    return Source(
        format="hdf5",
        where=where,
        path=path,
        group=gpath,
        attrs={k: _attr(v) for k, v in fh[gpath].attrs.items()},
        close=fh.close,
        raw=fh,
        **fields,
    )


def _read(ds: Any, where: str, key: str, index: Any = ()) -> np.ndarray:
    with structure(where, f'dataset "{key}"'):
        dtype = ds.dtype
        check_dtype(dtype, where, key)
        check_number_type(ds, where, key)
        return np.asarray(ds[index])


def read_raw(ds: Any, where: str, key: str) -> np.ndarray:
    """A whole dataset, whatever its dtype (format conversion carries strings too)."""
    with structure(where, f'dataset "{key}"'):
        check_number_type(ds, where, key)
        return np.asarray(ds[()])


def check_written(ds: Any, where: str, key: str) -> None:
    """A chunked dataset must have every chunk written: one never written reads as the
    fill value (0 by default), and a buffer allocated ahead (``create_dataset(shape=
    (capacity,), chunks=...)``) and filled in part, by a logger that stopped early, gave
    outputs over its zeros as steps, with exit 0. Refused, naming the first such rows.
    A virtual dataset's sources are checked the same way (:func:`_check_sources`)."""
    if ds.is_virtual:
        _check_sources(ds, where, key)
        return
    if ds.size == 0:
        return
    if ds.chunks is None:  # contiguous (allocated at its first write) or compact
        with structure(where, f'dataset "{key}"'):
            stored = ds.id.get_storage_size()
        if stored == 0 and ds.id.get_create_plist().get_layout() == _h5py().h5d.CONTIGUOUS:
            raise DataError(
                f'{where}: dataset "{key}" was created but never written (it has no '
                f"storage, and reads as the fill value {np.asarray(ds.fillvalue).item()!r})",
                "pass another column with its option, or write the data",
            )
        return
    with structure(where, f'dataset "{key}"'):
        dsid = ds.id
        per_axis = [-(-n // c) for n, c in zip(ds.shape, ds.chunks, strict=True)]
        try:
            count = dsid.get_num_chunks()
        except AttributeError:  # an h5py without the chunk query: nothing to check with
            return
        if count >= int(np.prod(per_axis)):
            return
        allocated = {tuple(dsid.get_chunk_info(i).chunk_offset) for i in range(count)}
    first = next(
        offset
        for offset in itertools.product(
            *(range(0, n, c) for n, c in zip(ds.shape, ds.chunks, strict=True))
        )
        if offset not in allocated
    )
    fill = np.asarray(ds.fillvalue)
    raise DataError(
        f'{where}: dataset "{key}" was never written at index {tuple(int(o) for o in first)} '
        f"(its chunk of shape {ds.chunks} there holds no data and reads as the fill value "
        f"{fill.item() if fill.size == 1 else fill!r}), and "
        f"{int(np.prod(per_axis)) - count} such chunk(s) in all: a buffer allocated ahead "
        "and filled in part",
        "pass a copy with only the rows that were written (h5py: ds.resize(n, axis=0)), "
        "or write the missing rows",
    )


def _check_sources(ds: Any, where: str, key: str) -> None:
    """Every source of virtual dataset ``ds`` must be there: libhdf5 reads a missing
    source file (moved, or not copied with the file) or dataset as the fill value,
    without an error, and such a column gave outputs over zeros with exit 0. Looked for
    where libhdf5 looks (``HDF5_VDS_PREFIX``, the virtual file's folder, the working
    folder); a name with a printf pattern (``%b``, unlimited mappings) is not checked."""
    h5py = _h5py()
    home = Path(ds.file.filename).resolve().parent
    prefixes = [p for p in os.environ.get("HDF5_VDS_PREFIX", "").split(os.pathsep) if p]
    with structure(where, f'virtual dataset "{key}"'):
        for source in ds.virtual_sources():
            name, dset = source.file_name, source.dset_name
            if "%" in name or "%" in dset:
                continue
            if name == ".":
                found = dset in ds.file
            else:
                roots = [Path(p.replace("${ORIGIN}", str(home))) for p in prefixes]
                candidates = [Path(name)] if Path(name).is_absolute() else []
                candidates += [r / name for r in (*roots, home, Path.cwd())]
                found = False
                for path in candidates:
                    if path.is_file():
                        with h5py.File(path, "r") as fh:
                            found = dset in fh
                        break
            if not found:
                raise DataError(
                    f'{where}: virtual dataset "{key}" maps rows to "{dset}" in {name!r}, '
                    "which is not there (libhdf5 would read those rows as the fill value)",
                    "put the source file back beside the virtual one (or set "
                    "HDF5_VDS_PREFIX to its folder), or pass a copy with the data in it",
                )


# IEEE 754 binary16/32/64 as HDF5 describes them: size -> ((sign, exponent position and
# size, mantissa position and size), exponent bias)
_IEEE = {2: ((15, 10, 5, 0, 10), 15), 4: ((31, 23, 8, 0, 23), 127), 8: ((63, 52, 11, 0, 52), 1023)}


def check_number_type(ds: Any, where: str, key: str) -> None:
    """A float dataset's type is IEEE binary16/32/64, an integer's uses all its bits.

    libhdf5 converts any float layout to the native one, so a flipped byte in a type's
    exponent bias or field positions would change every value with exit 0 (h5py even
    reports such a 4-byte float as float64). No writer makes other layouts for RL data.
    (A contiguous dataset's size is checked against its storage by libhdf5 itself.)
    """
    h5t = _h5py().h5t
    kind = ds.id.get_type()
    size = int(kind.get_size())
    if kind.get_class() == h5t.FLOAT:
        fields, bias = _IEEE.get(size, (None, None))
        standard = (
            tuple(kind.get_fields()) == fields
            and kind.get_ebias() == bias
            and kind.get_precision() == 8 * size
            and kind.get_offset() == 0
            and kind.get_norm() == h5t.NORM_IMPLIED
        )
    elif kind.get_class() == h5t.INTEGER:
        standard = kind.get_precision() == 8 * size and kind.get_offset() == 0
    else:
        return
    if not standard:
        raise InputFileError(
            f'{where}: dataset "{key}" has a {size}-byte number type that is not standard '
            "(IEEE float or full-width integer: its header's bit layout is damaged); the "
            "file is corrupt, fetch or write it again"
        )


def check_dtype(dtype: Any, where: str, key: str) -> None:
    """Bool, integer and float (up to 64-bit) columns only: strings, compound, complex
    and float128 would fail later as tracebacks (or be cast silently).

    An HDF5 enum other than a boolean one (h5py's ``{FALSE: 0, TRUE: 1}``, read as bool)
    is refused too: its numbers mean what its member names say (``{RUNNING: 0, DONE:
    1}``, or ``{TRUE: 0, FALSE: 1}``), and read as integers a flag column of one would be
    0/1 flags of another meaning, with exit 0."""
    mapping = _h5py().check_enum_dtype(dtype)
    if mapping is not None and not _boolean_enum(mapping):
        members = ", ".join(f"{k}: {v}" for k, v in sorted(mapping.items(), key=lambda kv: kv[1]))
        raise DTypeError(
            f'{where}: dataset "{key}" is an HDF5 enum {{{members}}}, whose numbers mean what '
            "its names say, not a number or a 0/1 flag; write the column as booleans or "
            "numbers, or pass another column with its option (see rltscan inspect)"
        )
    dtype = np.dtype(dtype)
    if dtype.kind not in "biuf" or dtype.itemsize > 8:
        raise DTypeError(
            f'{where}: dataset "{key}" has dtype {dtype}, not bool, integer or float (at most '
            "64-bit); pass another column with its option (see rltscan inspect)"
        )


def _boolean_enum(mapping: Mapping[str, int]) -> bool:
    """An enum of exactly false = 0 and true = 1 (any case): 0/1 flags as they read."""
    return {k.lower(): int(v) for k, v in mapping.items()} == {"false": 0, "true": 1}


def _attr(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return value


def existing_names(
    path: Path, group: str, names: list[str], episode_keys: list[str], *, infos: bool = False
) -> list[str]:
    """Which of ``names`` already exist where they would be written (a group is exit 2);
    with ``infos`` (a Minari dataset) also in each episode's ``infos`` group."""
    with open_file(path) as fh, structure(str(path), "its groups and links"):
        root = fh[group]
        parents = [root[k] for k in episode_keys] if episode_keys else [root]
        if infos and episode_keys:
            parents += [p["infos"] for p in parents if _link_kind(p, "infos") == "group"]
        found = []
        for name in names:
            for parent in parents:
                kind = _link_kind(parent, name)
                if kind == "group":
                    check_replaceable(parent, name, path, overwrite=True)  # raises: exit 2
                if kind is not None:
                    found.append(name)
                    break
        return found


def _link_kind(parent: Any, name: str) -> str | None:
    """``None`` (absent), "group", "dataset", "soft link" or "external link"."""
    h5py = _h5py()
    link = parent.get(name, getlink=True)
    if link is None:
        return None
    if isinstance(link, h5py.SoftLink):
        return "soft link"
    if isinstance(link, h5py.ExternalLink):
        return "external link"
    return "group" if isinstance(parent.get(name), h5py.Group) else "dataset"


def check_replaceable(parent: Any, name: str, where: Any, *, overwrite: bool) -> bool:
    """Whether ``parent[name]`` exists and may be replaced; refusals are one line.

    A group is never an output (exit 2); without ``--overwrite`` any object refuses
    (exit 5); with it, only a dataset that rltscan wrote (its provenance attribute
    ``rltscan_version``) is replaced, never a foreign dataset or a link (exit 5).
    """
    kind = _link_kind(parent, name)
    if kind is None:
        return False
    if kind == "group":
        raise ParameterError(
            f'output name "{name}" is a group in {where}; pass --prefix P so the outputs get '
            "other names"
        )
    if not overwrite:
        raise OutputRefusedError(f'{where} already has "{name}"; pass --overwrite or --prefix P')
    if kind != "dataset" or "rltscan_version" not in parent[name].attrs:
        raise OutputRefusedError(
            f'{where}: "{name}" is a {kind} that rltscan did not write (no provenance '
            "attributes); --overwrite replaces only rltscan outputs, pass --prefix P"
        )
    return True


def output_dataset(
    parent: Any,
    name: str,
    shape: tuple[int, ...],
    dtype: Any,
    storage: Mapping[str, Any],
    *,
    where: Any,
    overwrite: bool,
) -> Any:
    """The dataset output ``name`` is written into: a new one, or (``--overwrite``) the
    rltscan output already there where it has this shape, dtype and storage, so that a
    re-run rewrites its bytes where they are (its attributes are then set by
    :func:`put_attrs`). HDF5 never gives a deleted dataset's space back to the file:
    deleting and recreating it would leave the old outputs behind as dead bytes at
    every re-run. A dataset with another name too (a hard link the user made, say to
    keep a run's outputs) is unlinked from ``name`` instead: written in place, the
    other name's values would change too."""
    if check_replaceable(parent, name, where, overwrite=overwrite):
        old = parent[name]
        if _same_storage(old, shape, dtype, storage) and _h5py().h5o.get_info(old.id).rc == 1:
            return old
        del parent[name]
    return parent.create_dataset(name, shape=shape, dtype=dtype, **storage)


def put_attrs(ds: Any, values: Mapping[str, Any]) -> None:
    """Give output ``ds`` exactly the attributes ``values``. One that already holds its
    value is left alone: rewriting a text attribute leaves its old value in the file's
    global heap, which HDF5 never gives back, so a re-run would grow the file."""
    for key in list(ds.attrs):
        if key not in values:
            del ds.attrs[key]
    for key, value in values.items():
        if not _holds(ds.attrs, key, value):
            ds.attrs[key] = value


def _holds(attrs: Any, key: str, value: Any) -> bool:
    """Whether attribute ``key`` exists with ``value``, of the same type and shape."""
    try:
        old = np.asarray(attrs[key])
    except (KeyError, OSError, TypeError):
        return False
    new = np.asarray(value)
    same_type = old.dtype == new.dtype or old.dtype.kind == new.dtype.kind == "U"
    return same_type and old.shape == new.shape and bool(np.array_equal(old, new))


def _same_storage(ds: Any, shape: tuple[int, ...], dtype: Any, storage: Mapping[str, Any]) -> bool:
    """Whether ``ds`` is what ``create_dataset(shape, dtype, **storage)`` would make."""
    chunks = storage.get("chunks")
    return (
        tuple(ds.shape) == tuple(shape)
        and ds.dtype == np.dtype(dtype)
        and ds.compression == storage.get("compression")
        and ds.compression_opts == storage.get("compression_opts")
        and ds.shuffle == bool(storage.get("shuffle"))
        and ds.fletcher32 == bool(storage.get("fletcher32"))
        and (ds.chunks is not None if chunks is True else ds.chunks == chunks)
        and tuple(ds.maxshape) == tuple(storage.get("maxshape") or shape)
    )


def storage_like(template: Any, shape: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Storage of a new dataset of ``shape`` like ``template`` (the rewards dataset):
    its compression filter and level (gzip in D4RL files), shuffle and checksum, its
    chunk shape where it fits ``shape`` (else h5py's choice) and its unlimited axes (a
    resizable buffer's outputs stay appendable). A template with none of these (a
    lossy scale-offset filter alone is never copied) gives h5py's defaults
    (contiguous)."""
    if template is None or template.chunks is None:
        return {}
    unlimited = tuple(m is None for m in template.maxshape or ())
    if not (template.compression or template.shuffle or template.fletcher32 or any(unlimited)):
        return {}
    chunks = template.chunks
    fits = (
        shape is not None
        and len(chunks) == len(shape)
        and all(0 < c <= s for c, s in zip(chunks, shape, strict=True))
    )
    out = {
        "compression": template.compression,
        "compression_opts": template.compression_opts,
        "shuffle": template.shuffle,
        "fletcher32": template.fletcher32,
        "chunks": tuple(chunks) if fits else True,
    }
    if fits and any(unlimited):
        assert shape is not None
        out["maxshape"] = tuple(None if u else s for u, s in zip(unlimited, shape, strict=True))
    return out


def as_info(arr: np.ndarray) -> np.ndarray:
    """A ``T``-step output as a Minari info of ``T+1`` entries: entry 0 (the reset
    info) is NaN (0 for a non-float output), entry ``t+1`` is step ``t``."""
    arr = np.asarray(arr)
    fill = np.nan if arr.dtype.kind == "f" else 0
    head = np.full((1, *arr.shape[1:]), fill, dtype=arr.dtype)
    return np.concatenate([head, arr])


def write_outputs(
    src: Path,
    dst: Path,
    *,
    group: str,
    outputs: Mapping[str, np.ndarray | list[np.ndarray]],
    attrs: Mapping[str, Any],
    template: str | None,
    episode_keys: list[str],
    overwrite: bool,
    infos: bool = False,
) -> int:
    """Write ``outputs`` into a copy of ``src`` and atomically move it to ``dst``.

    ``outputs[name]`` is one array (flat / time-major / batch-major, written at
    ``group/name``) or one array per episode (written at ``group/<episode>/name``).
    With ``infos`` (a Minari dataset) each episode's output is also written where
    ``minari`` reads it: ``group/<episode>/infos/name``, ``T+1`` entries with entry 0
    NaN (:func:`as_info`).
    Returns the bytes of output data written. A full disk is one OutputRefusedError
    (the HDF5 file is closed before the temp file goes, so nothing crashes later).
    """
    written = 0
    made: dict[str, tuple[int, ...]] = {}
    with atomic_path(dst, copy_from=src) as tmp:
        fh = open_file(tmp, "r+")
        try:
            materialize_links(fh, src, dst)
            root = fh[group]
            like = root[template] if template and template in root else None
            if episode_keys and like is None:
                first = root[episode_keys[0]]
                like = first[template] if template and template in first else None
            attr_values = {k: attr_value(v) for k, v in attrs.items()}
            for name, value in outputs.items():
                targets = (
                    [(root[k], arr) for k, arr in zip(episode_keys, value, strict=True)]
                    if episode_keys
                    else [(root, value)]
                )
                if infos and episode_keys:
                    targets += [
                        (_infos_group(parent, dst), as_info(arr)) for parent, arr in targets
                    ]
                for parent, arr in targets:
                    data = np.ascontiguousarray(arr)
                    with _through(dst):
                        storage = storage_like(like, data.shape)
                        ds = output_dataset(
                            parent,
                            name,
                            data.shape,
                            data.dtype,
                            storage,
                            where=dst,
                            overwrite=overwrite,
                        )
                        ds[()] = data
                        made[ds.name] = data.shape
                    put_attrs(ds, attr_values)
                    written += int(np.asarray(arr).nbytes)
            fh.flush()
        except BaseException:
            close_after_error(fh)
            raise
        fh.close()
        verify_written(tmp, made, dst)
    return written


def verify_written(path: Path, made: Mapping[str, tuple[int, ...]], dst: Path) -> None:
    """Every output just written reads back by its path with its shape, before the file
    replaces ``dst``: new links go into the file's own group indexes, and a damaged
    index (a local heap whose size is wrong) takes them without error and then cannot
    find them. Such a file is refused (exit 3), never committed with outputs that no
    reader can open."""
    h5py = _h5py()
    name, why = "", ""
    try:
        with h5py.File(path, "r") as fh:
            for name, shape in made.items():
                ds = fh.get(name)
                if not isinstance(ds, h5py.Dataset) or tuple(ds.shape) != tuple(shape):
                    why = "not found"
                    break
    except H5_ERRORS as err:
        why = _short(str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err))
    if why:
        raise InputFileError(
            f'{dst}: output "{name}" does not read back from the written file ({why}); '
            "the input's group indexes are corrupt, fetch or write it again"
        )


@contextmanager
def _through(dst: Path) -> Iterator[None]:
    """A copy's metadata that libhdf5 cannot write through (a damaged group index met
    only when a new name is looked up) is an InputFileError; an OSError (a full disk)
    goes on to :func:`rltscan.io.atomic.atomic_path`, which says so."""
    try:
        yield
    except RltscanError:
        raise
    except (RuntimeError, KeyError, ValueError, TypeError) as err:
        text = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
        raise InputFileError(
            f"{dst}: its HDF5 metadata cannot be written through ({_short(text)}); "
            "the file is corrupt, fetch or write it again"
        ) from None


def _infos_group(episode: Any, where: Any) -> Any:
    """An episode's ``infos`` group (created when absent; anything else is refused)."""
    kind = _link_kind(episode, "infos")
    if kind is None:
        return episode.create_group("infos")
    if kind != "group":
        raise OutputRefusedError(
            f'{where}: "{episode.name}/infos" is a {kind}, not the group Minari keeps infos '
            "in; rltscan will not replace it"
        )
    return episode["infos"]


def close_after_error(fh: Any) -> None:
    """Close an HDF5 file whose write failed (full disk): never flush it again, never
    leave it for the interpreter's exit (where HDF5 would flush into a deleted file)."""
    with suppress(Exception):
        fh.close()
    with suppress(Exception):
        fh.id.close()


def materialize_links(fh: Any, src: Path, dst: Path) -> None:
    """In a copy of ``src`` going to another directory, virtual datasets and external
    links (whose file names are relative to ``src``'s directory) become real datasets
    holding the data they show, read through ``src``."""
    from rltscan.io.atomic import real

    if real(Path(src)).parent == real(Path(dst)).parent:
        return
    h5py = _h5py()
    found: list[str] = []

    def visit(group: Any, prefix: str) -> None:
        for key in list(group.keys()):
            link = group.get(key, getlink=True)
            path = f"{prefix}{key}"
            if isinstance(link, h5py.ExternalLink):
                found.append(path)
            elif isinstance(link, h5py.HardLink):
                obj = group.get(key)
                if isinstance(obj, h5py.Group):
                    visit(obj, path + "/")
                elif isinstance(obj, h5py.Dataset) and obj.is_virtual:
                    found.append(path)

    with structure(str(src), "its links"):
        visit(fh, "/")
    if not found:
        return
    with open_file(src) as original:
        for path in found:
            try:
                obj = original[path]
                data = obj[()] if isinstance(obj, h5py.Dataset) else None
            except (KeyError, OSError) as err:
                raise InputFileError(
                    f"{src}: {path} is a virtual dataset or external link whose data cannot be "
                    f"read ({_short(str(err))}); write in place, or fix the link"
                ) from None
            if data is None:
                raise OutputRefusedError(
                    f"{src}: {path} is an external link to a group, which a copy in another "
                    "directory cannot keep; write in place or next to the input"
                )
            attrs = {k: v for k, v in obj.attrs.items()}
            storage = _stored_like(obj)
            del fh[path]
            ds = fh.create_dataset(path, data=data, **storage)
            for key, val in attrs.items():
                ds.attrs[key] = val


def _stored_like(ds: Any) -> dict[str, Any]:
    """``create_dataset`` arguments that store a copy of ``ds`` as ``ds`` is stored: its
    creation properties (filters and their levels, chunk shape, fill value) and maximum
    shape. A virtual dataset, or one whose data lies in external raw files, has no such
    storage to copy: its copy is contiguous."""
    dcpl = ds.id.get_create_plist()
    if ds.is_virtual or dcpl.get_external_count():
        return {}
    if ds.chunks is None:  # contiguous or compact (a maximum shape would chunk it)
        return {"dcpl": dcpl}
    return {"dcpl": dcpl, "chunks": ds.chunks, "maxshape": ds.maxshape}


def attr_value(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    if value is None:
        return "none"
    return value
