"""HDF5: open, detect the layout, read columns lazily, and write results back safely.

Layouts (docs/CONVENTIONS.md §7.1): per-episode groups (``episode_<id>``, ``demo_<id>``,
``traj_<id>``; Minari ``main_data.hdf5``), time-major ``[T, B]`` and batch-major
``[B, T]`` rollout buffers, and flat D4RL-style files (``N`` rows, under a group).

Write-back copies the file to a temporary name in the same directory, adds the
new datasets to the copy, fsyncs it and ``os.replace``s it over the target. HDF5
has no transactions: writing into the original in place (even under temporary
dataset names) can leave its superblock and metadata cache inconsistent when the
process dies mid-write, and then *every* column is lost. The copy costs one
sequential file copy and guarantees that the input is either the old file or
the complete new one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
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
from rltscan.io.columns import ALIASES, ColumnInfo, quoted
from rltscan.io.source import Layout, Source

EPISODE_GROUP = re.compile(r"^(episode|demo|traj)_(\d+)$")
SKIP_PREFIXES = ("metadata",)


def _h5py() -> Any:
    import h5py

    return h5py


def open_file(path: Path, mode: str = "r") -> Any:
    """``h5py.File`` with the failures turned into one-line InputFileErrors."""
    h5py = _h5py()
    try:
        return h5py.File(path, mode)
    except OSError as err:
        text = str(err)
        if "truncated file" in text:
            raise InputFileError(
                f"{path} is a truncated HDF5 file (shorter than its header says); "
                "the copy is incomplete or corrupt, fetch it again"
            ) from None
        if "unable to lock" in text.lower() or "lock file" in text.lower():
            raise InputFileError(
                f"{path} is locked by another process (HDF5 file lock); close the other "
                "program or set HDF5_USE_FILE_LOCKING=FALSE if you know it is safe"
            ) from None
        raise InputFileError(
            f"{path} is not a readable HDF5 file ({_short(text)}); the file is corrupt"
        ) from None


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


def _datasets(group: Any, prefix: str = "") -> dict[str, Any]:
    """All datasets below ``group`` by slash path, following links, skipping metadata/."""
    h5py = _h5py()
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
            found[name] = item
        elif isinstance(item, h5py.Group) and not EPISODE_GROUP.match(key):
            found.update(_datasets(item, f"{name}/"))
    return found


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
    for name in ALIASES["rewards"]:
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
    root = fh[gpath]
    if not isinstance(root, h5py.Group):
        raise DataError(f'{name}: "{gpath}" is a dataset, not a group; pass --group PATH')
    where = name if gpath == "/" else f"{name}:{gpath}"

    episodes = _episode_groups(root)
    nested = group is None and isinstance(root.get("data"), h5py.Group)
    if not episodes and nested and _episode_groups(root["data"]):  # robomimic: data/demo_<i>
        root, gpath, where = root["data"], "/data", f"{name}:/data"
        episodes = _episode_groups(root)
    datasets = _datasets(root)
    rewards_name = _rewards_name(datasets, rewards)
    notes: list[str] = []

    if layout is None:
        declared = _layout_attr(root)
        if declared in ("time-major", "batch-major", "flat", "episodes"):
            layout = declared  # type: ignore[assignment]
        elif episodes and rewards_name is not None:
            raise AmbiguousInputError(
                f"{where} has both episode groups and a root {rewards_name!r} dataset; "
                "pass --layout episodes or --layout flat"
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


# Datasets of one value per sequence ([B] or [B, 1]) that a [T, B] / [B, T] buffer
# carries: the bootstrap values and final dones (CleanRL ``next_value``/``next_done``,
# SB3 ``last_values``, IMPALA ``bootstrap_value``). Their length names the batch axis.
PER_SEQUENCE = tuple(dict.fromkeys((*ALIASES["last_values"], *ALIASES["last_dones"])))


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
        f"{where}: {said} and the file does not say which axis is time ({why}); {fix}"
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

    def read(key: str) -> np.ndarray:
        return _read(datasets[key], where, key)

    def read_range(key: str, start: int, stop: int) -> np.ndarray:
        index = (slice(None), slice(start, stop)) if layout == "batch-major" else slice(start, stop)
        return _read(datasets[key], where, key, index)

    steps = None
    if rewards_name is not None:
        steps = int(datasets[rewards_name].shape[1 if layout == "batch-major" else 0])
    return Source(
        format="hdf5",
        layout=layout,
        where=where,
        path=path,
        columns=columns,
        extra=extra,
        read=read,
        group=gpath,
        attrs={k: _attr(v) for k, v in fh[gpath].attrs.items()},
        close=fh.close,
        raw=fh,
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
    first = _datasets(root[keys[0]])
    columns = {k: _info(k, ds) for k, ds in first.items()}

    def read(column: str) -> list[np.ndarray]:
        out = []
        for key in keys:
            with structure(where, f'episode group "{key}"'):
                group = root[key]
                found = column in group
                ds = group[column] if found else None
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

    return Source(
        format="hdf5",
        layout="episodes",
        where=where,
        path=path,
        columns=columns,
        read=read,
        group=gpath,
        episode_keys=keys,
        attrs={k: _attr(v) for k, v in fh[gpath].attrs.items()},
        close=fh.close,
        raw=fh,
    )


def _read(ds: Any, where: str, key: str, index: Any = ()) -> np.ndarray:
    with structure(where, f'dataset "{key}"'):
        dtype = ds.dtype
        check_dtype(dtype, where, key)
        return np.asarray(ds[index])


def read_raw(ds: Any, where: str, key: str) -> np.ndarray:
    """A whole dataset, whatever its dtype (format conversion carries strings too)."""
    with structure(where, f'dataset "{key}"'):
        return np.asarray(ds[()])


def check_dtype(dtype: Any, where: str, key: str) -> None:
    """Bool, integer and float (up to 64-bit) columns only: strings, compound, complex
    and float128 would fail later as tracebacks (or be cast silently)."""
    dtype = np.dtype(dtype)
    if dtype.kind not in "biuf" or dtype.itemsize > 8:
        raise DTypeError(
            f'{where}: dataset "{key}" has dtype {dtype}, not bool, integer or float (at most '
            "64-bit); pass another column with its option (see rltscan inspect)"
        )


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


def storage_like(template: Any, shape: tuple[int, ...] | None = None) -> dict[str, Any]:
    """Storage of a new dataset of ``shape`` like ``template`` (the rewards dataset):
    its compression filter and level (gzip in D4RL files), shuffle and checksum, and its
    chunk shape where it fits ``shape`` (else h5py's choice). An uncompressed template
    gives h5py's defaults (contiguous)."""
    if template is None or template.compression is None:
        return {}
    chunks = template.chunks
    fits = (
        shape is not None
        and chunks is not None
        and len(chunks) == len(shape)
        and all(0 < c <= s for c, s in zip(chunks, shape, strict=True))
    )
    return {
        "compression": template.compression,
        "compression_opts": template.compression_opts,
        "shuffle": template.shuffle,
        "fletcher32": template.fletcher32,
        "chunks": tuple(chunks) if fits else True,
    }


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
                    if check_replaceable(parent, name, dst, overwrite=overwrite):
                        del parent[name]
                    data = np.ascontiguousarray(arr)
                    ds = parent.create_dataset(name, data=data, **storage_like(like, data.shape))
                    for key, val in attr_values.items():
                        ds.attrs[key] = val
                    written += int(np.asarray(arr).nbytes)
            fh.flush()
        except BaseException:
            close_after_error(fh)
            raise
        fh.close()
    return written


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
            del fh[path]
            ds = fh.create_dataset(path, data=data)
            for key, val in attrs.items():
                ds.attrs[key] = val


def attr_value(value: Any) -> Any:
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True)
    if value is None:
        return "none"
    return value
