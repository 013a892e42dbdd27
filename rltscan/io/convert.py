"""``-o`` to another format: carry every column the input holds, or refuse by name.

HDF5 → Parquet/Arrow (:func:`table_from_hdf5`), one row per step:

* **flat** (``N`` rows): every dataset whose first dimension is ``N`` is a column;
  trailing dimensions (observations ``(N, 4)``) become Arrow ``fixed_size_list``
  columns (nested for more than one).
* **[T, B] / [B, T] buffers**: one row per step of each env, env after env
  (``row = env * T + t``), with two index columns, ``traj_id`` (the env, an episode-id
  alias, so a re-run cuts the sequences there) and ``step`` (``t``). Per-step datasets
  ``[T, B, ...]`` are columns like above. Per-env datasets (``last_values [B]``,
  ``next_done [B]``) have no row of their own: they go into the key-value metadata.
* **episode groups** (Minari, robomimic): episode after episode with an ``episode_id``
  column. Datasets with ``T`` rows are columns; datasets with ``T + 1`` rows
  (Minari's ``observations``, ``values`` with V(s_T)) give rows ``0..T-1`` under their
  name and rows ``1..T`` under ``next_<name>`` (``next_values``, ``next_observations``),
  so the output can be processed again with the same bootstrap.
* Everything that is not per step (scalars such as ``metadata/algorithm``, small arrays,
  HDF5 attributes, per-env values) goes into the key-value metadata entry
  ``rltscan.convert`` as JSON, with dtype and shape.

Parquet/Arrow → HDF5 (:func:`write_hdf5`): a flat file, one dataset per column
(``fixed_size_list`` columns back to ``(N, ...)`` arrays, strings as UTF-8 strings),
key-value metadata as root attributes, and what ``rltscan.convert`` carried of an HDF5
file (``metadata/*`` scalars, attributes) as datasets and attributes again. A table that
was a ``[T, B]`` buffer (its ``rltscan.convert`` metadata says so) becomes that buffer
again, ``layout`` attribute and per-env datasets included.

Compression is carried where the target format has the codec (gzip between HDF5 and
Parquet, with HDF5's level; zstd and lz4 between Parquet and Arrow), else the target's
default (:mod:`rltscan.io.physical`): :func:`carried_codecs` says what each column had.

A dataset or column that cannot be carried (a compound dtype, nulls, variable-length
lists, a large array that is neither per step nor per env) refuses the conversion with
the list of them (exit 4), before anything is written: nothing is dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rltscan.errors import DataError, InputFileError, OutputRefusedError
from rltscan.io.atomic import atomic_path
from rltscan.io.columns import quoted
from rltscan.io.source import Source
from rltscan.roles import ROLES

META_KEY = b"rltscan.convert"
TRAJ = "traj_id"
STEP = "step"
EPISODE = "episode_id"
SMALL = 1 << 16  # elements: a non-per-step dataset up to this size goes into the metadata


# --------------------------------------------------------------------------- HDF5 → table


def _walk(
    group: Any, prefix: str = "", *, skip_episodes: bool, seen: set | None = None
) -> dict[str, Any]:
    """Every dataset below ``group`` by slash path (metadata/ included); a group reached
    twice (a link loop) is walked once, and groups nest no deeper than the readers take."""
    import h5py

    from rltscan.io.hdf5 import EPISODE_GROUP, MAX_DEPTH

    seen = {hash(group.id)} if seen is None else seen
    found: dict[str, Any] = {}
    for key in group:
        item = group.get(key)
        if item is None:  # a dangling link
            continue
        name = f"{prefix}{key}"
        if isinstance(item, h5py.Dataset):
            found[name] = item
        elif isinstance(item, h5py.Group):
            if skip_episodes and not prefix and EPISODE_GROUP.match(key):
                continue
            if hash(item.id) in seen:
                continue
            if name.count("/") >= MAX_DEPTH:
                raise InputFileError(
                    f'{group.file.filename}: groups nest deeper than {MAX_DEPTH} at "{name}"; '
                    "the file is corrupt or its links loop"
                )
            seen.add(hash(item.id))
            found.update(_walk(item, f"{name}/", skip_episodes=skip_episodes, seen=seen))
    return found


def _jsonable(value: Any) -> Any:
    """An HDF5 value as JSON (numbers, strings, lists); raises ValueError if it cannot be."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        kind = value.dtype.kind
        if kind not in "biufSUO" or (kind == "f" and value.dtype.itemsize > 8):
            raise ValueError(f"dtype {value.dtype}")
        return [_jsonable(v) for v in value.tolist()] if value.ndim else _jsonable(value[()])
    if isinstance(value, np.generic):
        return _jsonable(value.item())
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not np.isfinite(value):
        return repr(value)  # JSON has no NaN/Inf; "nan", "inf" as text
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise ValueError(f"type {type(value).__name__}")


def _record(ds: Any) -> dict[str, Any]:
    if ds.shape is None:  # a null dataspace: no values (its attributes are carried)
        return {"dtype": str(ds.dtype), "shape": None, "value": None}
    data = ds[()]
    return {"dtype": str(ds.dtype), "shape": list(ds.shape), "value": _jsonable(data)}


def _attrs(obj: Any, bad: list[str], where: str) -> dict[str, Any]:
    out = {}
    for key, value in obj.attrs.items():
        try:
            out[key] = _jsonable(value)
        except ValueError:
            bad.append(f'attribute "{key}" of {where}')
    return out


def _arrow_column(arr: np.ndarray) -> Any:
    """A numpy array ``(N, ...)`` as an Arrow array: trailing dims as nested fixed-size lists."""
    import pyarrow as pa

    arr = np.ascontiguousarray(arr)
    if arr.dtype.kind == "O":
        flat: Any = pa.array(
            [v.decode("utf-8") if isinstance(v, bytes) else v for v in arr.reshape(-1)]
        )
    else:
        from rltscan.io.parquet import arrow_of  # (pa.array on numpy imports pandas)

        flat = arrow_of(arr.reshape(-1))
    for size in reversed(arr.shape[1:]):
        flat = pa.FixedSizeListArray.from_arrays(flat, int(size))
    return flat


def _carriable(ds: Any) -> bool:
    dt = ds.dtype
    if dt.kind == "O":
        import h5py

        return h5py.check_string_dtype(dt) is not None
    return dt.kind in "biufS" and not (dt.kind == "f" and dt.itemsize > 8)


def _bad(name: str, ds: Any, why: str) -> str:
    dims = ", ".join(str(d) for d in ds.shape or ())
    return f'"{name}" ({dims}) {ds.dtype}: {why}'


def table_from_hdf5(source: Source) -> tuple[Any, dict[str, Any]]:
    """``(table, plan)``: every dataset of an HDF5 source as columns or metadata (module doc).

    ``plan`` says how outputs shaped like the estimator inputs become rows
    (:func:`output_rows`). Raises DataError listing what cannot be carried.
    """
    import pyarrow as pa

    from rltscan.io import hdf5

    fh = source.raw
    with hdf5.structure(source.where):
        root = fh[source.group]
        if source.layout == "episodes":
            return _episodes_table(source, root)
        datasets = _walk(root, skip_episodes=True)
        ref = source.steps_column
        if ref is None or ref not in datasets:
            raise DataError(
                f"{source.where} has no rewards dataset to count steps by; pass --rewards KEY"
            )
        shape = tuple(int(d) for d in datasets[ref].shape)
        layout = source.layout
        if layout == "flat":
            step_dims, n_seq = shape[:1], 1
        else:
            step_dims = shape[:2]
            n_seq = shape[1] if layout == "time-major" else shape[0]
        columns: dict[str, Any] = {}
        meta: dict[str, Any] = {"source": "hdf5", "layout": layout, "group": source.group}
        per_seq: dict[str, Any] = {}
        other: dict[str, Any] = {}
        codecs: dict[str, Codec] = {}
        bad: list[str] = []
        if layout != "flat":
            t = shape[0] if layout == "time-major" else shape[1]
            columns[TRAJ] = np.repeat(np.arange(n_seq, dtype=np.int64), t)
            columns[STEP] = np.tile(np.arange(t, dtype=np.int64), n_seq)
            meta.update(T=t, B=n_seq, rows="env-major: row = traj_id * T + step")
            meta["index_columns"] = [TRAJ, STEP]
        for name, ds in datasets.items():
            dims = tuple(int(d) for d in ds.shape or ())
            if name in (TRAJ, STEP) and layout != "flat":
                bad.append(_bad(name, ds, "its name is taken by the index column"))
            elif not _carriable(ds):
                bad.append(_bad(name, ds, "Parquet cannot hold this dtype"))
            elif dims[: len(step_dims)] == step_dims and dims:
                arr = hdf5.read_raw(ds, source.where, name)
                if layout == "time-major":
                    arr = np.swapaxes(arr, 0, 1)  # [T, B, ...] -> [B, T, ...]: env-major rows
                if layout != "flat":
                    arr = arr.reshape(-1, *arr.shape[2:])
                columns[name] = arr
                codecs[name] = _h5_codec(ds)
            elif layout != "flat" and dims in ((n_seq,), (n_seq, 1)):
                per_seq[name] = _record(ds)
            elif int(np.prod(dims, dtype=np.int64)) <= SMALL:
                try:
                    other[name] = _record(ds)
                except ValueError:
                    bad.append(_bad(name, ds, "no JSON form for the metadata"))
            else:
                bad.append(_bad(name, ds, "neither one row per step nor small"))
        meta["attrs"] = {"/": _attrs(root, bad, "the group")}
        for name, ds in datasets.items():
            if ds.attrs:
                meta["attrs"][name] = _attrs(ds, bad, f'"{name}"')
    _refuse_datasets(bad, source.where)
    meta["per_sequence"] = per_seq
    meta["datasets"] = other
    table = pa.table({k: _arrow_column(v) for k, v in columns.items()})
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})
    return table, {"layout": layout, "codecs": codecs}


def _episodes_table(source: Source, root: Any) -> tuple[Any, dict[str, Any]]:
    import pyarrow as pa

    from rltscan.io import hdf5

    keys = source.episode_keys
    bad: list[str] = []
    parts: dict[str, list[np.ndarray]] = {}
    nexts: dict[str, list[np.ndarray]] = {}
    lengths: list[int] = []
    ids: list[int] = []
    ep_attrs: dict[str, Any] = {}
    codecs: dict[str, Codec] = {}
    first = _walk(root[keys[0]], skip_episodes=False)
    ref = next((n for n in ROLES["rewards"].aliases if n in first), None)
    if ref is None:
        raise DataError(f'{source.where}: "{keys[0]}" has no rewards dataset to count steps by')
    for key in keys:
        group = root[key]
        datasets = _walk(group, skip_episodes=False)
        if set(datasets) != set(first):
            missing = sorted(set(first) ^ set(datasets))
            raise DataError(
                f'{source.where}: episode group "{key}" and "{keys[0]}" hold different datasets '
                f"({quoted(missing)}); every episode needs the same columns"
            )
        t = int(datasets[ref].shape[0]) if datasets[ref].shape else 0
        lengths.append(t)
        ids.append(int(key.rsplit("_", 1)[-1]))
        ep_attrs[key] = _attrs(group, bad, f'"{key}"')
        for name, ds in datasets.items():
            dims = tuple(int(d) for d in ds.shape or ())
            if not _carriable(ds):
                bad.append(_bad(f"{key}/{name}", ds, "Parquet cannot hold this dtype"))
                continue
            if not dims or dims[0] not in (t, t + 1):
                bad.append(_bad(f"{key}/{name}", ds, f"neither {t} nor {t + 1} rows"))
                continue
            arr = hdf5.read_raw(ds, source.where, f"{key}/{name}")
            parts.setdefault(name, []).append(arr[:t])
            codecs.setdefault(name, _h5_codec(ds))  # the first episode's
            if dims[0] == t + 1:
                nexts.setdefault(name, []).append(arr[1:])
                codecs.setdefault(f"next_{name}", codecs[name])
    for name, got in nexts.items():
        if len(got) != len(keys):
            bad.append(f'"{name}": T+1 rows in some episodes and T in others')
        elif f"next_{name}" in parts:
            bad.append(f'"{name}": its row T would go to "next_{name}", which the file has')
    _refuse_datasets(bad, source.where)
    columns = {EPISODE: np.repeat(np.asarray(ids, np.int64), lengths)}
    columns.update({name: np.concatenate(p) for name, p in parts.items()})
    columns.update({f"next_{name}": np.concatenate(p) for name, p in nexts.items()})
    if EPISODE in parts:
        raise DataError(f'{source.where}: episodes hold a dataset "{EPISODE}"; rename it first')
    meta = {
        "source": "hdf5",
        "layout": "episodes",
        "group": source.group,
        "index_columns": [EPISODE],
        "next_of": {f"next_{n}": n for n in nexts},
        "attrs": {"/": _attrs(root, [], "the group"), **ep_attrs},
    }
    table = pa.table({k: _arrow_column(v) for k, v in columns.items()})
    table = table.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})
    return table, {"layout": "episodes", "codecs": codecs}


Codec = tuple[str | None, int | None]  # (codec or None for uncompressed, level if known)


def _h5_codec(ds: Any) -> Codec:
    """An HDF5 dataset's compression filter ("gzip" with its level, "lzf", ...)."""
    codec = ds.compression
    return (codec, int(ds.compression_opts) if codec == "gzip" else None)


def parquet_codecs(carried: Mapping[str, Codec]) -> dict[str, tuple[str, int | None]] | None:
    """``carried`` as Parquet keeps it (None: the writer's defaults)."""
    from rltscan.io.physical import parquet_codec_of

    if not carried:
        return None
    return {
        name: (parquet_codec_of(codec), level if codec == "gzip" else None)
        for name, (codec, level) in carried.items()
    }


def _refuse(bad: list[str], where: str, what: str, fix: str) -> None:
    """Refuse a conversion that would drop ``bad`` (the first eight shown by name).

    Args:
        bad: why each dataset or column cannot be carried (empty: nothing to refuse).
        where: how messages name the input.
        what: what cannot be carried, and to where.
        fix: the way out the message gives.

    Raises:
        DataError: ``bad`` is not empty.
    """
    if bad:
        shown = "; ".join(bad[:8]) + ("; ..." if len(bad) > 8 else "")
        raise DataError(f"{where}: {len(bad)} {what} ({shown}); {fix}")


def _refuse_datasets(bad: list[str], where: str) -> None:
    _refuse(
        bad,
        where,
        "dataset(s) cannot be carried to the output format",
        "write to the input's own format (-o out.h5) or remove them first",
    )


def output_rows(array: np.ndarray, layout: str) -> np.ndarray:
    """An output shaped like the estimator inputs as the table's rows (module doc)."""
    array = np.asarray(array)
    if array.ndim < 2:
        return array
    if layout == "time-major":
        array = np.swapaxes(array, 0, 1)  # [T, B] -> [B, T]: env-major rows
    return array.reshape(-1)


# --------------------------------------------------------------------------- table → HDF5


def _numpy_column(column: Any, name: str, bad: list[str]) -> np.ndarray | None:
    import pyarrow as pa

    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if column.null_count:
        bad.append(f'"{name}": {column.null_count} null entries')
        return None
    if pa.types.is_dictionary(column.type):
        column = column.dictionary_decode()
    kind = column.type
    dims: list[int] = []
    while pa.types.is_fixed_size_list(kind):
        dims.append(kind.list_size)
        column = column.flatten()
        if column.null_count:
            bad.append(f'"{name}": null entries inside its lists')
            return None
        kind = column.type
    if pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        arr = column.to_numpy(zero_copy_only=False)
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        arr = np.array(column.to_pylist(), dtype=object)
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        arr = np.array(column.to_pylist(), dtype=bytes)
    else:
        bad.append(f'"{name}": type {kind} has no HDF5 form here')
        return None
    return arr.reshape(-1, *dims) if dims else arr


def write_hdf5(
    table: Any,
    sink: Path,
    *,
    outputs: Mapping[str, np.ndarray],
    attrs: Mapping[str, Any],
    overwrite: bool,
    where: str,
    codecs: Mapping[str, Codec] | None = None,
    like: str | None = None,
) -> int:
    """A flat HDF5 file (or the ``[T, B]`` buffer the table came from) with the outputs.

    ``codecs`` (:func:`carried_codecs`) says which columns were gzip-compressed: those
    datasets are gzip too (with the level where known), outputs like column ``like``."""
    import h5py

    from rltscan.io.parquet import check_names

    check_names(table.column_names, where)
    meta_raw = table.schema.metadata or {}
    convert: dict[str, Any] = {}
    if META_KEY in meta_raw:
        try:
            convert = json.loads(meta_raw[META_KEY])
        except ValueError:
            convert = {}
    if not isinstance(convert, dict):
        convert = {}
    buffer = convert.get("layout") in ("time-major", "batch-major") and all(
        isinstance(convert.get(k), int) for k in ("T", "B")
    )
    bad: list[str] = []
    arrays: dict[str, np.ndarray] = {}
    for name, column in zip(table.column_names, table.columns, strict=True):
        if buffer and name in (TRAJ, STEP):
            continue
        arr = _numpy_column(column, name, bad)
        if arr is not None:
            arrays[name] = arr
    _refuse(
        bad,
        where,
        "column(s) cannot be carried to HDF5",
        "write Parquet or Arrow (-o out.parquet) or fix those columns first",
    )
    clash = [n for n in outputs if n in arrays]
    if clash and not overwrite:
        raise OutputRefusedError(
            f'{where} already has column "{clash[0]}"; pass --overwrite or --prefix P'
        )
    if buffer:
        t, b = convert["T"], convert["B"]
        if table.num_rows != t * b:
            buffer = False
    shaped = {**arrays, **{n: np.asarray(v) for n, v in outputs.items()}}
    if buffer:
        shaped = {n: _unrows(v, convert["layout"], t, b) for n, v in shaped.items()}
    written = 0
    codecs = codecs or {}
    with atomic_path(sink) as tmp, h5py.File(tmp, "w") as fh:
        for name, arr in shaped.items():
            codec = codecs.get(like or "") if name in outputs else codecs.get(name)
            storage = _h5_storage(codec)
            if arr.dtype.kind == "O":
                ds = fh.create_dataset(name, data=arr, dtype=h5py.string_dtype(), **storage)
            else:
                ds = fh.create_dataset(name, data=np.ascontiguousarray(arr), **storage)
            if name in outputs:
                for key, value in attrs.items():
                    ds.attrs[key] = value
                written += int(arr.nbytes)
        for key, value in meta_raw.items():
            if key in (META_KEY, b"ARROW:schema"):
                continue
            fh.attrs[key.decode(errors="replace")] = value.decode(errors="replace")
        if convert:  # what the table carried of an HDF5 file: datasets, attributes
            _restore(fh, convert, buffer)
    return written


def _h5_storage(codec: Codec | None) -> dict[str, Any]:
    """``create_dataset`` options keeping ``codec`` where HDF5 has it (gzip), else none."""
    from rltscan.io.physical import hdf5_codec_of

    if codec is None or codec[0] is None or hdf5_codec_of(codec[0]) is None:
        return {}
    storage: dict[str, Any] = {"compression": "gzip", "chunks": True}
    if codec[1] is not None and 0 <= codec[1] <= 9:
        storage["compression_opts"] = codec[1]
    return storage


def _unrows(arr: np.ndarray, layout: str, t: int, b: int) -> np.ndarray:
    arr = arr.reshape(b, t, *arr.shape[1:])
    return np.swapaxes(arr, 0, 1) if layout == "time-major" else arr


def _restore(fh: Any, convert: Mapping[str, Any], buffer: bool) -> None:
    """Per-env datasets, other datasets (``metadata/*`` scalars) and attributes of a
    converted file; a ``[T, B]`` buffer (``buffer``) also gets its ``layout`` attribute."""
    for section in ("per_sequence", "datasets"):
        for name, rec in (convert.get(section) or {}).items():
            if not isinstance(rec, dict) or name in fh:
                continue
            try:
                value = np.asarray(rec["value"], dtype=np.dtype(rec["dtype"]))
                fh.create_dataset(name, data=value.reshape(rec["shape"]))
            except (KeyError, TypeError, ValueError):
                continue
    # the axes were known when the table was made (attribute, flag or proof): say so
    if buffer and "layout" not in fh.attrs:
        fh.attrs["layout"] = str(convert["layout"]).replace("-", "_")
    for path, values in (convert.get("attrs") or {}).items():
        holder = fh if path == "/" else fh.get(path)
        if holder is None or not isinstance(values, dict):
            continue
        for key, value in values.items():
            if key not in holder.attrs and value is not None:
                try:
                    holder.attrs[key] = value
                except (TypeError, ValueError):
                    continue
