"""TorchRL storages (docs/CONVENTIONS.md §7.4): a ``TensorDict.memmap_`` directory, a
replay buffer's ``dumps`` directory, and a ``torch.save(td)`` file.

**Memmap directories** are plain files: each TensorDict level is a directory with a
``meta.json`` (``{key: {"shape", "dtype", "device", "is_nested"}}`` for a tensor,
``{key: {"type": "TensorDict"}}`` for a nested one, plus the level's batch ``shape``
and ``_type``) and one raw C-order ``<key>.memmap`` file per tensor (the key encoded
for the filesystem as tensordict does: ``%XX`` for ``/``, space, ``%`` and the like).
They are read here without tensordict (numpy memory maps), so reading needs no
optional dependency. Column names are slash paths, as ``TensorDict.to_h5`` writes the
same TensorDict (``next/reward``, ``next/done``, ``collector/traj_ids``), with the
stored shapes (TorchRL's trailing feature dimension of 1 included): the shared
resolver (``io/layout.py``) reads both the same way.

**Replay buffers** (``ReplayBuffer(storage=LazyMemmapStorage(n)).dumps(DIR)``, also
``LazyTensorStorage``) keep the storage TensorDict in ``DIR/storage`` (capacity ``n``
along its first dimension), its filled length in ``storage/storage_metadata.json``
and the round-robin cursor and write count in ``writer/metadata.json``. Only the
filled rows are data; a buffer written more than ``n`` times has wrapped, and its
rows are read in insertion order (from the cursor to the end, then from the start).
Buffers whose rows are not in insertion order (``TensorDictMaxValueWriter``) or
whose storage is not one TensorDict (pytrees, ``TED2Flat``) are refused by name.

**torch.save files** are pickles, and unpickling runs code named by the file. They
are read with ``torch.load(weights_only=True)``, which builds only tensors and plain
containers, plus, named here, tensordict's ``TensorDict`` and its rebuild function
``_make_td``: any other class or function in the file stops the load before it runs
(then one line says how to convert the file). The pickle records the TensorDict's dim
names, so a ``"time"`` dim proves the time axis.

**Axes** (docs/CONVENTIONS.md §7.1) are never guessed. One batch dimension is one
flat sequence. Two are ``[B, T]`` or ``[T, B]`` only when the storage proves which
is time: a dim named ``"time"`` (torch.save), or ``collector/traj_ids``, which a
collector advances exactly where an episode ends, so it changes along the time axis
exactly after each ``next/done`` step and not along the other; otherwise ``--layout``.
A flat storage with ``collector/traj_ids`` carries TorchRL's conventions
(``Source.conventions``): an id change with no ``next/done`` is a cut in the data (a
truncation; one env's slice of a flattened batch ends there), and an id that comes
back after others is the same trajectory in a later batch's slice, a piece of its own.

**Write-back** adds each output as a new leaf of the storage TensorDict (the root of
a memmap directory, ``storage/`` of a replay buffer), shaped like the rewards
(``[B, T, 1]`` as TorchRL's GAE writes ``advantage``; a replay buffer's leaf has its
full capacity, in storage order, NaN in slots never written), with its provenance in
its ``meta.json`` entry (key ``"rltscan"``). Leaves and the new ``meta.json`` are
written and fsynced in a hidden staging directory, a journal makes the renames one
decision (leaves first, ``meta.json`` last), and a run killed among the renames is
completed by the next rltscan run on that directory
(:func:`rltscan.io.shards.recover`). ``TensorDict.load_memmap`` and the replay
buffer's ``loads`` then see the new keys; no input leaf is touched. A torch.save file
is rewritten whole (temp file, fsync, rename) with the new keys. ``-o out.h5`` /
``-o out.parquet`` carry every key (refusing by name what cannot be carried).

The TorchRL registry row (detection, dispatch) is :mod:`rltscan.io.formats.torchrl`.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from rltscan import interrupts
from rltscan.errors import (
    AmbiguousInputError,
    DataError,
    DTypeError,
    InputFileError,
    OutputRefusedError,
    ParameterError,
)
from rltscan.io import atomic
from rltscan.io.columns import ColumnInfo, quoted
from rltscan.io.source import Layout, Source

MEMMAP, REPLAY, SAVED = "memmap", "replay-buffer", "torch-save"
META = "meta.json"
TD_TYPE = "<class 'tensordict._td.TensorDict'>"
PROVENANCE = "rltscan"  # the key of a leaf's meta.json entry that records how rltscan made it
TRAJ_IDS = "collector/traj_ids"
DONE_KEYS = ("next/done", "next/terminated", "next/truncated")  # what step t led to

# torch dtype names (as tensordict's meta.json writes them) -> numpy; others are listed
# as columns but cannot be read (bfloat16, float8, complex) and are not carried by -o
DTYPES: dict[str, str] = {
    "torch.bool": "bool",
    "torch.uint8": "uint8",
    "torch.int8": "int8",
    "torch.int16": "int16",
    "torch.int32": "int32",
    "torch.int64": "int64",
    "torch.uint16": "uint16",
    "torch.uint32": "uint32",
    "torch.uint64": "uint64",
    "torch.float16": "float16",
    "torch.float32": "float32",
    "torch.float64": "float64",
}
_UNSAFE = frozenset('/<>:"|?*\\ \0%') | {chr(i) for i in range(32)} | {chr(127)}


@dataclass(frozen=True)
class Leaf:
    """One tensor of the storage: its slash key, stored shape and dtype, and where it is."""

    key: str
    shape: tuple[int, ...]
    dtype: str  # the torch dtype name, "torch.float32"
    file: Path | None  # memmap file (None: empty tensor, or a torch.save tensor)
    value: np.ndarray | None = None  # torch.save: the array itself

    @property
    def numpy_dtype(self) -> np.dtype | None:
        name = DTYPES.get(self.dtype)
        return None if name is None else np.dtype(name)


@dataclass
class Storage:
    """A TorchRL storage as rltscan reads it: the TensorDict's leaves, its batch shape,
    and (replay buffers) the order of its filled rows."""

    kind: str  # MEMMAP | REPLAY | SAVED
    root: Path  # the input path
    tree: Path  # the directory holding the TensorDict's root meta.json (the file: SAVED)
    batch: tuple[int, ...]  # stored batch shape (a replay buffer: capacity first)
    leaves: dict[str, Leaf]
    others: list[str]  # keys that are not tensors rltscan can read (never computed with)
    order: np.ndarray | None = None  # replay buffer: stored rows in insertion order
    names: tuple[str | None, ...] = ()  # dim names (torch.save records them)
    root_keys: dict[str, str] = field(default_factory=dict)  # root key -> "leaf" | kind
    td: Any = None  # torch.save: the loaded TensorDict (write-back adds to it)
    # files whose identity (inode, size, mtime) at open must still hold at the commit: a
    # storage that a producer rewrote or extended meanwhile is not written into
    watched: tuple[Path, ...] = ()

    @property
    def presented(self) -> tuple[int, ...]:
        """The batch shape the reader presents (a replay buffer: its filled rows)."""
        if self.order is None:
            return self.batch
        return (len(self.order), *self.batch[1:])


# --------------------------------------------------------------------------- detection


def storage_kind(path: Path) -> str | None:
    """``"memmap"`` or ``"replay-buffer"`` for a directory that holds a TorchRL storage,
    else None (cheap: file names, and the ``_type`` of a ``meta.json``, so that another
    directory with a file of that name, Parquet shards say, stays what it is)."""
    if (path / META).is_file() and (_is_tensordict_meta(path / META) or any(path.glob("*.memmap"))):
        return MEMMAP
    if (path / "storage" / "storage_metadata.json").is_file() or (
        (path / "buffer_metadata.json").is_file() and (path / "storage").is_dir()
    ):
        return REPLAY
    return None


def _is_tensordict_meta(path: Path) -> bool:
    try:
        meta = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    kind = meta.get("_type") if isinstance(meta, dict) else None
    return isinstance(kind, str) and "tensordict" in kind


def is_zip_storage(head: bytes) -> bool:
    """A zip file's first bytes (torch.save files and tensordict ``.tdz`` archives)."""
    return head.startswith(b"PK\x03\x04")


def encode_key(key: str) -> str:
    """A TensorDict key as tensordict names its file or directory (robust encoding)."""
    if not key:
        return "%"
    if key in (".", ".."):
        return "%2E" * len(key)
    return "".join(f"%{ord(c):02X}" if c in _UNSAFE else c for c in key)


# --------------------------------------------------------------------------- reading


def open_source(path: Path, *, kind: str, layout: Layout | None, group: str | None) -> Source:
    """Open a TorchRL storage read-only as a :class:`Source` (module doc).

    Args:
        path: the memmap directory, the replay buffer's ``dumps`` directory, or the
            ``torch.save`` file.
        kind: ``"memmap"``, ``"replay-buffer"`` or ``"torch-save"`` (the sniffer's word).
        layout: ``--layout``, which beats the storage's own proof of the axes.
        group: ``--group`` (HDF5 only): refused here.

    Returns:
        The source; ``source.raw`` is the :class:`Storage` write-back needs.
    """
    where = str(path)
    if group is not None:
        raise ParameterError(
            f"{where} is a TorchRL storage; --group picks an HDF5 group, drop it "
            "(nested keys are columns such as next/reward)"
        )
    if kind == MEMMAP:
        if (path / "storage_metadata.json").is_file():
            raise InputFileError(
                f"{where} is the storage of a replay buffer dump (capacity-sized, rows in "
                "write order only with the writer's state); pass the directory above it, "
                "where rb.dumps wrote writer/ and storage/"
            )
        storage = _memmap(path, path, where)
    elif kind == REPLAY:
        storage = _replay(path, where)
    else:
        storage = _saved(path, where)
    if storage.kind != SAVED:
        storage.watched = _watch(storage)
    notes: list[str] = []
    if storage.order is not None:
        notes.append(_order_note(storage))
    layout_used, why = _layout(storage, layout, where)
    if why:
        notes.append(why)
    columns = {
        key: ColumnInfo(key, (*storage.presented, *leaf.shape[len(storage.batch) :]), _shown(leaf))
        for key, leaf in storage.leaves.items()
    }
    conventions: dict[str, str] = {}
    flagged = any(k in storage.leaves for k in DONE_KEYS)
    if layout_used == "flat" and TRAJ_IDS in storage.leaves and flagged:
        # A collector flags every episode end in next/done; an id change with no flag is
        # a cut in the data (one env's slice of a flattened batch ends), and an id that
        # comes back is the same trajectory continued in a later batch's slice.
        conventions = {
            "ends_are": "truncated",
            "id_runs": "cut",
            "why": 'TorchRL: "next/done" flags every episode end, so a "collector/traj_ids" '
            "change without it is a cut in the data",
        }

    def read(name: str) -> np.ndarray:
        leaf = storage.leaves.get(name)
        if leaf is None:
            raise DataError(f'{where} has no key "{name}"', f"pass one of: {quoted(columns)}")
        return present(storage, leaf, where)

    return Source(
        format="torchrl",
        layout=layout_used,
        where=where,
        path=path,
        columns=columns,
        read=read,
        backend=storage.kind,
        attrs={"batch_size": list(storage.batch)},
        raw=storage,
        notes=notes,
        conventions=conventions,
    )


def _watch(storage: Storage) -> tuple[Path, ...]:
    """Register the metadata and leaf files (their identity now) for the commit's check."""
    files = [storage.tree / META, *(f.file for f in storage.leaves.values() if f.file)]
    if storage.kind == REPLAY:
        files += [storage.tree / "storage_metadata.json", storage.root / "writer" / "metadata.json"]
    watched = []
    for path in files:
        with contextlib.suppress(OSError):
            atomic.expect(path, atomic.identity(os.stat(path)))
            watched.append(path)
    return tuple(watched)


def _shown(leaf: Leaf) -> str:
    dtype = leaf.numpy_dtype
    return leaf.dtype.removeprefix("torch.") if dtype is None else str(dtype)


def _json(path: Path, damaged: str, kind: str) -> dict[str, Any]:
    """The JSON object in the file ``path``.

    Args:
        path: the file.
        damaged: what the message calls damaged where the file is not readable JSON.
        kind: what the message says the JSON should be where it is not an object.

    Returns:
        The object.

    Raises:
        InputFileError: the file is not readable JSON, or holds no object.
    """
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as err:
        raise InputFileError(
            f"{path} is not readable JSON ({err.__class__.__name__}); {damaged}"
        ) from None
    if not isinstance(record, dict):
        raise InputFileError(f"{path} holds a JSON {type(record).__name__}, not {kind}")
    return record


def _read_meta(directory: Path) -> dict[str, Any]:
    """The ``meta.json`` of one level of a TensorDict memmap."""
    return _json(
        directory / META,
        "the TensorDict memmap is damaged or still being written",
        "a TensorDict's metadata",
    )


def _dump_json(path: Path) -> dict[str, Any]:
    """A JSON record of a replay buffer's dump."""
    return _json(path, "the replay buffer dump is damaged", "an object")


def _child(directory: Path, key: str) -> Path:
    """A key's directory or file stem, robust name first, the legacy (raw) name else."""
    robust = directory / encode_key(key)
    if robust.exists() or robust.with_name(robust.name + ".memmap").exists():
        return robust
    if "/" not in key and "\\" not in key and key not in ("", ".", ".."):
        legacy = directory / key
        if legacy.exists() or legacy.with_name(legacy.name + ".memmap").exists():
            return legacy
    return robust


def _memmap(root: Path, tree: Path, where: str) -> Storage:
    """Every leaf of the TensorDict memmap whose root level is ``tree``."""
    meta = _read_meta(tree)
    kind = meta.get("_type")
    if kind != TD_TYPE:
        stacked = isinstance(kind, str) and "LazyStacked" in kind
        fix = (
            "stack it first (td = td.contiguous()) and save that with td.memmap_(DIR)"
            if stacked
            else "save a TensorDict (td.to_tensordict().memmap_(DIR))"
        )
        raise InputFileError(
            f"{tree / META} describes a {kind or 'value'}, not a TensorDict; {fix}"
        )
    batch = _shape(meta.get("shape"), tree / META)
    leaves: dict[str, Leaf] = {}
    others: list[str] = []
    root_keys: dict[str, str] = {}
    _walk(tree, meta, "", batch, leaves, others, root_keys, where)
    return Storage(MEMMAP, root, tree, batch, leaves, others, root_keys=root_keys)


def _shape(value: Any, path: Path) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and d >= 0 for d in value):
        raise InputFileError(f"{path} has no valid batch shape ({json.dumps(value)[:40]})")
    return tuple(value)


def _walk(
    directory: Path,
    meta: Mapping[str, Any],
    prefix: str,
    batch: tuple[int, ...],
    leaves: dict[str, Leaf],
    others: list[str],
    root_keys: dict[str, str],
    where: str,
) -> None:
    for key, entry in meta.items():
        if not isinstance(entry, dict):
            continue  # the level's own "shape", "device", "_type"
        name = f"{prefix}{key}"
        if "type" in entry:
            if not prefix:
                root_keys[key] = str(entry["type"])
            sub = _child(directory, key)
            if entry["type"] == "TensorDict" and (sub / META).is_file():
                child = _read_meta(sub)
                if child.get("_type") == TD_TYPE:
                    _walk(sub, child, f"{name}/", batch, leaves, others, {}, where)
                    continue
            others.append(f"{name} ({entry['type']})")
            continue
        if not prefix:
            root_keys[key] = "leaf"
        shape, dtype = entry.get("shape"), entry.get("dtype")
        if entry.get("is_nested") or not isinstance(dtype, str):
            others.append(f"{name} (nested tensor)" if entry.get("is_nested") else name)
            continue
        dims = _shape(shape, directory / META)
        if dims[: len(batch)] != batch:
            raise InputFileError(
                f'{where}: key "{name}" has shape {dims} but the batch size is {batch}; '
                "the TensorDict memmap is damaged"
            )
        stem = _child(directory, key)
        file = stem.with_name(stem.name + ".memmap")
        leaf = Leaf(name, dims, dtype, file if int(np.prod(dims, dtype=np.int64)) else None)
        _check_size(leaf, where)
        leaves[name] = leaf


def _check_size(leaf: Leaf, where: str) -> None:
    """A leaf file holds exactly its shape's bytes (a short one is a damaged storage)."""
    dtype = leaf.numpy_dtype
    if leaf.file is None or dtype is None:
        return
    want = int(np.prod(leaf.shape, dtype=np.int64)) * dtype.itemsize
    try:
        size = leaf.file.stat().st_size
    except OSError:
        raise InputFileError(
            f'{where}: key "{leaf.key}" has no file {leaf.file.name}; the TensorDict memmap is '
            "incomplete"
        ) from None
    if size != want:
        raise InputFileError(
            f'{where}: key "{leaf.key}" ({leaf.shape}, {leaf.dtype}) needs {want} bytes but '
            f"{leaf.file.name} has {size}; the TensorDict memmap is damaged"
        )


def _replay(root: Path, where: str) -> Storage:
    """A replay buffer's ``dumps`` directory: its storage, filled rows in insertion order."""
    tree = root / "storage"
    saved = sorted(tree.glob("*.h5"))
    if saved and not (tree / "storage_metadata.json").is_file():
        raise InputFileError(
            f"{where} is a replay buffer saved by H5StorageCheckpointer (TorchRL's compact "
            "form: the filled rows in insertion order, one group per trajectory)",
            f"pass its file {saved[0]}, whose traj_<i> groups rltscan reads as episodes",
        )
    record = _dump_json(tree / "storage_metadata.json")
    if record.get("is_pytree"):
        raise InputFileError(
            f"{where} is a replay buffer of plain tensors (a pytree storage); rltscan reads "
            "TensorDict storages: extend the buffer with TensorDicts, or save one with "
            "td.memmap_(DIR)"
        )
    if not (tree / META).is_file():
        raise InputFileError(
            f"{where} is a replay buffer whose storage has no meta.json (not a TensorStorage); "
            "rltscan reads LazyMemmapStorage and LazyTensorStorage dumps"
        )
    storage = _memmap(root, tree, where)
    storage.kind = REPLAY
    if not storage.batch:
        flat = "shift" in storage.root_keys or "is_full" in storage.root_keys
        raise InputFileError(
            f"{where}: the storage has no batch dimension"
            + (" (saved in TorchRL's compact TED2Flat form)" if flat else "")
            + "; load it with rb.loads and dump it with the default checkpointer"
        )
    length = record.get("len")
    if not isinstance(length, int) or length < 0:
        raise InputFileError(
            f'{tree / "storage_metadata.json"} has no valid "len"; the dump is damaged'
        )
    writer = tree.parent / "writer" / "metadata.json"
    state = _dump_json(writer) if writer.is_file() else {}
    if "rank_key" in state:
        raise InputFileError(
            f"{where} is a replay buffer filled by TensorDictMaxValueWriter: its rows are "
            "ranked, not in the order they were written, so they hold no trajectory; "
            "rltscan reads buffers filled in order (RoundRobinWriter)"
        )
    storage.order = _fill_order(storage.batch, length, state, where)
    return storage


def _fill_order(
    batch: tuple[int, ...], length: int, writer: Mapping[str, Any], where: str
) -> np.ndarray:
    """The filled rows (first dimension) of a replay buffer storage in insertion order.

    The round-robin writer counts rows along the first dimension (``write_count``) and
    wraps its ``cursor`` at the capacity. The storage's ``len`` counts elements over its
    ``ndim`` dimensions, so it is the filled rows times the product of some of the
    other dimensions; a record where no ``ndim`` fits is refused.
    """
    capacity = batch[0]
    count, cursor = writer.get("write_count"), writer.get("cursor")
    if isinstance(count, int) and count >= 0:
        rows, wrapped = min(count, capacity), count > capacity
        fits = [int(np.prod(batch[1:k], dtype=np.int64)) * rows for k in range(1, len(batch) + 1)]
        if length not in fits:
            raise InputFileError(
                f"{where}: the storage's len {length} does not match the writer's write_count "
                f"{count} for a capacity of {capacity} rows; the dump is damaged or was "
                "written in a way rltscan cannot order"
            )
        expected = count % capacity if capacity else 0
    elif len(batch) == 1 and length <= capacity:
        # no write count (an immutable dataset, an older torchrl): one row per element, and
        # a full buffer's cursor is where its oldest row is
        rows, wrapped = length, length == capacity and bool(cursor)
        expected = cursor if wrapped else (length % capacity if capacity else 0)
    else:
        raise InputFileError(
            f'{where}: writer/metadata.json has no "write_count", so the filled rows of a '
            f"{list(batch)} storage are unknown; dump the buffer with a recent torchrl"
        )
    agrees = cursor == expected if wrapped else cursor in (None, expected, rows)
    if not agrees or (wrapped and not isinstance(cursor, int)):
        raise InputFileError(
            f"{where}: the writer's cursor {cursor} disagrees with its write_count {count} "
            f"for {capacity} rows; the dump is damaged"
        )
    if not wrapped:
        return np.arange(rows, dtype=np.int64)
    start = int(cursor)  # type: ignore[arg-type]
    return np.concatenate([np.arange(start, capacity), np.arange(start)]).astype(np.int64)


def _order_note(storage: Storage) -> str:
    order = storage.order
    assert order is not None
    capacity = storage.batch[0]
    if len(order) < capacity or order[0] == 0:
        return (
            f"replay buffer: {len(order)} of {capacity} rows filled, read in the order "
            "they were written"
        )
    start = int(order[0])
    return (
        f"replay buffer: {capacity} rows, wrapped (the oldest were overwritten): read in "
        f"insertion order, rows {start}..{capacity - 1} then 0..{start - 1}"
    )


def present(storage: Storage, leaf: Leaf, where: str) -> np.ndarray:
    """A leaf as the source presents it: filled rows in insertion order (replay buffers)."""
    dtype = leaf.numpy_dtype
    if dtype is None:
        raise DTypeError(
            f'{where}: key "{leaf.key}" has dtype {leaf.dtype}, which rltscan does not read; '
            "pass another column with its option, or store it as float32"
        )
    if leaf.value is not None:
        data = leaf.value
    elif leaf.file is None:
        data = np.zeros(leaf.shape, dtype)
    else:
        try:
            data = np.memmap(leaf.file, dtype=dtype, mode="r", shape=leaf.shape)
        except (OSError, ValueError) as err:
            raise InputFileError(
                f'{where}: key "{leaf.key}" cannot be read from {leaf.file.name} ({err})'
            ) from None
    order = storage.order
    if order is None:
        return np.array(data)
    if len(order) == storage.batch[0] and order[0]:
        start = int(order[0])
        return np.concatenate([data[start:], data[:start]])
    return np.array(data[: len(order)])


# --------------------------------------------------------------------------- axes


def _layout(storage: Storage, layout: Layout | None, where: str) -> tuple[Layout, str]:
    """The layout, and how it was decided (a report note); refused when nothing proves it."""
    dims = storage.presented
    if layout is not None:
        want = 1 if layout == "flat" else 2
        if layout == "episodes" or len(dims) != want:
            raise ParameterError(
                f"{where} has batch size {list(dims)}; --layout {layout} needs "
                f"{'one batch dimension' if want == 1 else 'two'} (flat: [N]; "
                "batch-major: [B, T]; time-major: [T, B]), drop it"
            )
        return layout, ""
    if len(dims) == 1:
        return "flat", ""
    if len(dims) != 2:
        raise DataError(
            f"{where} has batch size {list(dims)}; rltscan reads one sequence [N] or a batch "
            "[B, T] / [T, B]",
            "reshape the TensorDict (td.reshape(-1, T)) and save it again",
        )
    if "time" in storage.names:
        axis = storage.names.index("time")
        return _axes(axis, f'its dim names {list(storage.names)} say which is "time"')
    axis, why = _time_axis_from_ids(storage, where)
    if axis is not None:
        return _axes(axis, why)
    raise AmbiguousInputError(
        f"batch size {list(dims)} and the storage does not say which axis is time ({why})",
        "pass --layout batch-major ([B, T]: a TorchRL collector or env.rollout batch, time "
        "last) or --layout time-major ([T, B])",
        where=where,
    )


def _axes(axis: int, why: str) -> tuple[Layout, str]:
    if axis == 1:
        return "batch-major", f"layout batch-major ([B, T]): {why} (--layout overrides)"
    return "time-major", f"layout time-major ([T, B]): {why} (--layout overrides)"


def _time_axis_from_ids(storage: Storage, where: str) -> tuple[int | None, str]:
    """The axis along which ``collector/traj_ids`` changes exactly after the steps
    flagged in ``next/done``: the time axis of a collector's batch. An axis of length 1
    proves nothing; both axes or neither fitting is no proof."""
    ids_leaf = storage.leaves.get(TRAJ_IDS)
    flags = [storage.leaves[k] for k in DONE_KEYS if k in storage.leaves]
    if ids_leaf is None or not flags or ids_leaf.numpy_dtype is None:
        return None, (
            'tensordict records no dim names in meta.json and there is no "collector/traj_ids" '
            'with "next/done" to prove it'
        )
    dims = storage.presented
    ids = _squeezed(present(storage, ids_leaf, where), 2)
    flag = flags[0] if flags[0].key == "next/done" else None
    if flag is not None:
        ended = _squeezed(present(storage, flag, where), 2).astype(bool)
    else:  # terminated or truncated: the end of the step either way
        ended = np.zeros(dims, bool)
        for leaf in flags:
            ended |= _squeezed(present(storage, leaf, where), 2).astype(bool)
    if ids.shape != dims or ended.shape != dims:
        return None, f'"{TRAJ_IDS}" or the done flag does not have the batch shape {list(dims)}'
    fits = []
    for axis in (0, 1):
        if dims[axis] < 2:
            continue
        a, d = np.moveaxis(ids, axis, 0), np.moveaxis(ended, axis, 0)
        if np.array_equal(a[1:] != a[:-1], d[:-1]):
            fits.append(axis)
    name = flags[0].key if flag is not None else " | ".join(f.key for f in flags)
    if len(fits) == 1:
        which = "second" if fits[0] == 1 else "first"
        return fits[0], (
            f'"{TRAJ_IDS}" changes along the {which} axis exactly after each "{name}" step '
            "(a new trajectory starts only after an episode ends), so that axis is time"
        )
    if fits:
        return None, f'"{TRAJ_IDS}" fits both axes'
    return None, f'"{TRAJ_IDS}" does not change exactly after "{name}" along either axis'


def _squeezed(arr: np.ndarray, ndim: int) -> np.ndarray:
    while arr.ndim > ndim and arr.shape[-1] == 1:
        arr = arr[..., 0]
    return arr


# --------------------------------------------------------------------------- torch.save


def _saved(path: Path, where: str) -> Storage:
    """A ``torch.save`` file, loaded with the safe unpickler (module doc)."""
    try:
        names = zipfile.ZipFile(path).namelist()
    except (OSError, zipfile.BadZipFile) as err:
        raise InputFileError(
            f"{where} is not a readable zip file ({err}); the file is damaged"
        ) from None
    if META in names:
        raise InputFileError(
            f"{where} is a tensordict memmap archive (.tdz); unzip it into a directory "
            "(unzip FILE -d DIR) and pass the directory"
        )
    if not any(n.endswith("/data.pkl") for n in names):
        raise InputFileError(
            f"{where} is a zip file but not a torch.save file; pass an HDF5, Parquet or Arrow "
            "file, or a TensorDict memmap directory"
        )
    convert = (
        'load it where you trust it and save it as a memmap: TensorDict.memmap_("DIR") '
        '(or td.to_h5("FILE.h5")), then pass that'
    )
    try:
        import torch
        from tensordict import TensorDict
    except ImportError:
        raise InputFileError(
            f"{where} is a torch.save file; reading one needs tensordict (pip install "
            f"tensordict), or {convert}"
        ) from None
    allowed: list[Any] = [TensorDict]
    with contextlib.suppress(ImportError):  # how TensorDict pickles itself (tensordict 0.x)
        from tensordict._reductions import _make_td

        allowed.append(_make_td)
    try:
        with torch.serialization.safe_globals(allowed):
            td = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # the safe unpickler refuses with many types
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise InputFileError(
            f"{where} is a torch.save file that the safe loader (weights_only) refuses "
            f"({first[:120]}); rltscan never runs code from a file: {convert}"
        ) from None
    if isinstance(td, dict):
        td = _from_dict(td, where, convert)
    if not isinstance(td, TensorDict):
        raise InputFileError(f"{where} holds a {type(td).__name__}, not a TensorDict; {convert}")
    batch = tuple(int(d) for d in td.batch_size)
    leaves: dict[str, Leaf] = {}
    others: list[str] = []
    for key, value in td.items(include_nested=True, leaves_only=True):
        name = "/".join(key) if isinstance(key, tuple) else key
        if not isinstance(value, torch.Tensor) or value.is_nested:
            others.append(name)
            continue
        dtype = str(value.dtype)
        array = value.detach().cpu().numpy() if dtype in DTYPES else None
        leaves[name] = Leaf(name, tuple(value.shape), dtype, None, array)
    names = tuple(td.names)
    keys = td.keys()  # (iterating a TensorDict itself walks its first batch dim)
    root_keys = {k: "leaf" if isinstance(td.get(k), torch.Tensor) else "TensorDict" for k in keys}
    return Storage(
        SAVED, path, path, batch, leaves, others, names=names, root_keys=root_keys, td=td
    )


def _from_dict(data: dict, where: str, convert: str) -> Any:
    """``torch.save(td.to_dict())``: a nested dict of tensors, batch size from the rewards
    (their leading dims without the trailing feature dim)."""
    from tensordict import TensorDict

    try:
        reward = data["next"]["reward"]
        batch = tuple(reward.shape[:-1]) if reward.shape[-1:] == (1,) else tuple(reward.shape)
        return TensorDict(data, batch_size=batch)
    except Exception:  # any dict that is not a rollout
        raise InputFileError(
            f'{where} holds a dict without a ("next", "reward") tensor to size it by; {convert}'
        ) from None


# --------------------------------------------------------------------------- write-back


def existing(source: Source, names: list[str]) -> list[str]:
    """Output names that are already keys at the storage's root (leaves or nested)."""
    storage: Storage = source.raw  # type: ignore[assignment]
    return [n for n in names if n in storage.root_keys]


def stored_output(source: Source, template: str | None, array: np.ndarray) -> np.ndarray:
    """An output as the storage keeps it: the rewards' trailing feature dim of 1 (TorchRL's
    ``advantage`` is ``[*B, T, 1]``), and a replay buffer's full capacity in storage order
    (NaN in rows never written)."""
    storage: Storage = source.raw  # type: ignore[assignment]
    arr = np.asarray(array)
    ref = source.columns.get(template or "")
    extra = tuple(ref.shape)[arr.ndim :] if ref is not None else ()
    if extra and set(extra) == {1} and tuple(ref.shape)[: arr.ndim] == arr.shape:
        arr = arr.reshape(ref.shape)  # every trailing axis of 1 ([T, 1], [T, 1, 1])
    if storage.order is None:
        return np.ascontiguousarray(arr)
    full = np.full((storage.batch[0], *arr.shape[1:]), np.nan, arr.dtype)
    full[storage.order] = arr
    return full


def write_back(
    source: Source,
    outputs: Mapping[str, np.ndarray],
    *,
    template: str | None,
    metadata: Mapping[str, Any],
    overwrite: bool,
) -> int:
    """Add ``outputs`` to the storage in place (module doc); returns the bytes written.

    Args:
        source: the opened storage.
        outputs: name -> array shaped like the estimator's inputs.
        template: the rewards column (its shape gives the trailing feature dim).
        metadata: the provenance record, kept in each new leaf's meta.json entry.
        overwrite: replace outputs of an earlier rltscan run (never a foreign key).
    """
    storage: Storage = source.raw  # type: ignore[assignment]
    arrays = {n: stored_output(source, template, v) for n, v in outputs.items()}
    if storage.kind == SAVED:
        return _write_saved(storage, arrays, overwrite)  # (a pickle has no place for provenance)
    meta_path = storage.tree / META
    meta = _read_meta(storage.tree)  # as it is now, not as it was opened
    _check_clash(meta, list(arrays), overwrite, source.where)
    root = storage.root
    stage = root / f"{atomic.TMP_MARK}stage-{secrets.token_hex(4)}"
    from rltscan.io import shards  # the journal and its recovery live there

    targets = [atomic.replaceable(meta_path)]
    for name in arrays:
        targets.append(atomic.replaceable(storage.tree / f"{encode_key(name)}.memmap"))
    atomic.check_space(meta_path, sum(a.nbytes for a in arrays.values()) + len(json.dumps(meta)))
    written = 0
    stage.mkdir()
    try:
        moves: list[list[str]] = []
        for (name, arr), target in zip(arrays.items(), targets[1:], strict=True):
            staged = stage / f"{len(moves)}.memmap"
            _write_file(staged, memoryview(np.ascontiguousarray(arr)).cast("B"))
            written += int(arr.nbytes)
            meta[name] = {
                "device": "cpu",
                "shape": list(arr.shape),
                "dtype": f"torch.{arr.dtype}",
                "is_nested": False,
                PROVENANCE: dict(metadata),
            }
            moves.append([staged.name, os.path.relpath(target, root)])
        staged_meta = stage / META
        _write_file(staged_meta, json.dumps(meta, separators=(",", ":")).encode())
        with contextlib.suppress(OSError):
            shutil.copymode(meta_path, staged_meta)
        moves.append([staged_meta.name, os.path.relpath(targets[0], root)])  # metadata last
        atomic.fsync_dir(stage)
        with atomic.deferred_signals():
            if interrupts.seen():  # a Ctrl-C that something swallowed still stops the commit
                raise KeyboardInterrupt
            for path in storage.watched:
                atomic.check_unchanged(path)
            shards.write_journal(stage, moves)
            for rel, target in moves:
                os.replace(stage / rel, root / target)
                atomic.mark_committed(root / target)
        atomic.fsync_dir(storage.tree)
        shards.end_journal(stage)
    except OSError as err:
        if atomic.is_full_disk(err):
            raise atomic.no_space(meta_path, err) from None
        raise
    finally:
        if not (stage / shards.JOURNAL).exists():  # a decided commit is left for recover()
            shutil.rmtree(stage, ignore_errors=True)
    return written


def _write_file(path: Path, data: memoryview | bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _check_clash(meta: Mapping[str, Any], names: list[str], overwrite: bool, where: str) -> None:
    """Existing keys: never a nested TensorDict, only with --overwrite, only rltscan's."""
    for name in names:
        entry = meta.get(name)
        if not isinstance(entry, dict):
            continue
        if "type" in entry:
            raise ParameterError(
                f'{where}: "{name}" is a nested {entry["type"]}, never replaced by an output; '
                "pass --prefix P"
            )
        if not overwrite:
            raise OutputRefusedError(
                f'{where} already has key "{name}"; pass --overwrite or --prefix P'
            )
        if PROVENANCE not in entry:
            raise OutputRefusedError(
                f'{where}: key "{name}" was not written by rltscan (its meta.json entry has no '
                '"rltscan" record); --overwrite replaces only rltscan outputs, pass --prefix P'
            )


def _write_saved(storage: Storage, arrays: Mapping[str, np.ndarray], overwrite: bool) -> int:
    """A torch.save file rewritten whole with the new keys (temp file, fsync, rename)."""
    import torch

    td = storage.td
    where = str(storage.root)
    for name in arrays:
        if name in storage.root_keys:
            if storage.root_keys[name] != "leaf":
                raise ParameterError(
                    f'{where}: "{name}" is a nested TensorDict, never replaced by an output; '
                    "pass --prefix P"
                )
            if not overwrite:
                raise OutputRefusedError(
                    f'{where} already has key "{name}"; pass --overwrite or --prefix P'
                )
            raise OutputRefusedError(
                f'{where}: key "{name}" exists and a torch.save file records no provenance, '
                "so rltscan cannot tell it wrote it; pass --prefix P"
            )
    out = td.clone(recurse=False)
    for name, arr in arrays.items():
        out.set(name, torch.from_numpy(np.array(arr)))
    with atomic.atomic_path(storage.root) as tmp:
        torch.save(out, tmp)
    return int(sum(a.nbytes for a in arrays.values()))


# --------------------------------------------------------------------------- -o FILE


def carried(source: Source) -> dict[str, np.ndarray]:
    """Every key as presented (insertion order), or a DataError listing what cannot be
    carried to another format (nothing is dropped silently)."""
    storage: Storage = source.raw  # type: ignore[assignment]
    bad = [f'"{k}"' for k in storage.others]
    bad += [f'"{k}" ({v.dtype})' for k, v in storage.leaves.items() if v.numpy_dtype is None]
    if bad:
        shown = ", ".join(bad[:8]) + (", ..." if len(bad) > 8 else "")
        raise DataError(
            f"{source.where}: {len(bad)} key(s) cannot be carried to another format ({shown})",
            "write the outputs into the storage itself (drop -o), or exclude those keys first",
        )
    return {k: present(storage, leaf, source.where) for k, leaf in storage.leaves.items()}


def write_hdf5(
    source: Source,
    dst: Path,
    outputs: Mapping[str, np.ndarray],
    *,
    attrs: Mapping[str, Any],
) -> int:
    """``-o out.h5``: every key at its slash path (as ``TensorDict.to_h5`` writes it,
    filled rows in insertion order), the ``layout`` attribute, and the outputs with their
    provenance attributes. Returns the bytes of output data written."""
    import h5py

    columns = carried(source)
    clash = [n for n in outputs if n in columns or any(k.startswith(f"{n}/") for k in columns)]
    if clash:
        raise OutputRefusedError(f'{source.where} already has key "{clash[0]}"; pass --prefix P')
    written = 0
    with atomic.atomic_path(dst) as tmp, h5py.File(tmp, "w") as fh:
        for key, arr in columns.items():
            fh.create_dataset(key, data=arr)
        for name, arr in outputs.items():
            ds = fh.create_dataset(name, data=np.ascontiguousarray(arr))
            for k, v in attrs.items():
                ds.attrs[k] = v
            written += int(np.asarray(arr).nbytes)
        if source.layout != "flat":
            fh.attrs["layout"] = source.layout.replace("-", "_")
    return written


def table(source: Source) -> tuple[Any, dict[str, Any]]:
    """``(table, plan)``: every key as a column, one row per step (env after env for a
    ``[B, T]`` or ``[T, B]`` batch, with ``traj_id``/``step`` index columns, as
    :func:`rltscan.io.convert.table_from_hdf5` lays out a buffer); feature dims become
    fixed-size lists. ``plan["layout"]`` says how outputs become rows."""
    import pyarrow as pa

    from rltscan.io import convert
    from rltscan.io.parquet import arrow_of

    columns = carried(source)
    layout = source.layout
    dims = source.raw.presented  # type: ignore[union-attr]
    meta: dict[str, Any] = {"source": f"torchrl/{source.backend}", "layout": layout}
    rows: dict[str, np.ndarray] = {}
    if layout != "flat":
        t, b = (dims[0], dims[1]) if layout == "time-major" else (dims[1], dims[0])
        for name in (convert.TRAJ, convert.STEP):
            if name in columns:
                raise DataError(
                    f'{source.where} has a key "{name}", the name of an index column of the '
                    "converted table; rename it first"
                )
        rows[convert.TRAJ] = np.repeat(np.arange(b, dtype=np.int64), t)
        rows[convert.STEP] = np.tile(np.arange(t, dtype=np.int64), b)
        meta.update(T=t, B=b, rows="env-major: row = traj_id * T + step")
        meta["index_columns"] = [convert.TRAJ, convert.STEP]
    for key, arr in columns.items():
        if layout == "time-major":
            arr = np.swapaxes(arr, 0, 1)
        rows[key] = arr.reshape(-1, *arr.shape[2:]) if layout != "flat" else arr
    arrays = {}
    for key, arr in rows.items():
        flat = arrow_of(np.ascontiguousarray(arr).reshape(-1))
        for size in reversed(arr.shape[1:]):
            flat = pa.FixedSizeListArray.from_arrays(flat, int(size))
        arrays[key] = flat
    out = pa.table(arrays)
    out = out.replace_schema_metadata({convert.META_KEY: json.dumps(meta, sort_keys=True).encode()})
    return out, {"layout": layout}
