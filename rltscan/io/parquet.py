"""Parquet files, and the pyarrow table layer Arrow IPC shares: read flat step tables,
write them back with new columns appended.

Owns: Parquet reading (only the columns asked for; by row groups for the streaming
engine), Parquet writing, and what any pyarrow table source needs (numpy <-> Arrow
columns, the ``rltscan`` key-value metadata entry, output clashes, writing to a path
atomically or to stdout), which :mod:`rltscan.io.formats.arrow` composes on. Writing
streams the input row group by row group, so row order and row-group sizes stay as
they were, and the writer is given the file's physical form (:mod:`rltscan.io.physical`:
every column's codec, encodings and statistics, the schema, the key-value metadata);
the new columns are appended (an ``--overwrite``-n output keeps its position). Files
are replaced whole through :func:`rltscan.io.atomic.atomic_path`. The registry row is
:mod:`rltscan.io.formats.parquet`.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rltscan.errors import DataError, InputFileError, OutputRefusedError, RltscanError
from rltscan.io import hf
from rltscan.io.atomic import atomic_path, is_full_disk
from rltscan.io.columns import ColumnInfo
from rltscan.io.physical import (
    RECORD_KEY,
    ParquetForm,
    converted_options,
    leaves,
    parquet_form,
    parquet_options,
    remember_origin,
)
from rltscan.io.source import Source

META_KEY = RECORD_KEY


def _pa() -> tuple[Any, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    return pa, pq


def _column_info(name: str, arrow_type: Any, rows: int) -> ColumnInfo:
    """Shape ``(rows, d1, ...)`` for (nested) fixed-size list columns, as HDF5 would hold it."""
    pa, _ = _pa()
    dims: list[int] = []
    kind = arrow_type
    while pa.types.is_fixed_size_list(kind):
        dims.append(kind.list_size)
        kind = kind.value_type
    if dims:
        return ColumnInfo(name, (rows, *dims), str(kind))
    return ColumnInfo(name, (rows,), str(arrow_type))


def pyarrow_errors() -> tuple[type[BaseException], ...]:
    """What pyarrow raises on a damaged file: OSError and ArrowException (ArrowInvalid,
    ArrowNotImplementedError, ...), and from Python code under it ValueError, KeyError,
    UnicodeDecodeError (non-UTF-8 names in a footer) and the like.

    Returns:
        The exception classes, for an ``except`` clause.
    """
    pa, _ = _pa()
    return (
        OSError,
        pa.ArrowException,
        ValueError,
        TypeError,
        KeyError,
        IndexError,
        OverflowError,
        UnicodeError,
        RuntimeError,
        MemoryError,
        NotImplementedError,
    )


@contextmanager
def structure(where: str, what: str) -> Iterator[None]:
    """Turn pyarrow's failures while reading a file into one-line InputFileErrors (exit 3).

    Args:
        where: how the message names the file.
        what: what could not be read (``'column "x" cannot be read'``).
    """
    try:
        yield
    except RltscanError:
        raise
    except pyarrow_errors() as err:
        raise InputFileError(f"{where}: {what} ({first_line(err)}); the file is corrupt") from None


def check_names(names: list[str], where: str) -> None:
    """Two columns of one name would make every read by name pick one of them silently."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise InputFileError(
                f'{where} has two columns named "{name}"; rename one (rltscan reads columns by '
                "name)"
            )
        seen.add(name)


def _one_length(column: Any) -> int | None:
    """The one length every list of a (null-free) list column has, or None where they
    differ or there are no rows."""
    import pyarrow.compute as pc

    if not len(column):
        return None
    lengths = pc.min_max(pc.list_value_length(column))
    low, high = lengths["min"].as_py(), lengths["max"].as_py()
    return int(low) if low == high else None


def to_numpy(column: Any, where: str, name: str) -> np.ndarray:
    """An Arrow column as a numpy array; nulls become NaN (floats) or an error."""
    pa, _ = _pa()
    if isinstance(column, pa.ChunkedArray):
        with structure(where, f'column "{name}" cannot be read'):
            column = column.combine_chunks()
    if isinstance(column.type, pa.BaseExtensionType):
        # a tensor column (Ray's ArrowTensorType, Arrow's fixed_shape_tensor): its
        # storage is a list per row, read below as (N, size) like any other
        column = column.storage
    kind = column.type
    dims: list[int] = []
    while pa.types.is_fixed_size_list(kind) and not column.null_count:
        # observations (N, 4) written as fixed_size_list<4>: read back as (N, 4)
        dims.append(kind.list_size)
        with structure(where, f'column "{name}" cannot be read'):
            column = column.flatten()
        kind = column.type
    if dims:
        flat = to_numpy(column, where, name)
        return flat.reshape(-1, *dims)
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and not column.null_count:
        size = _one_length(column)
        if size is not None:  # rows of one length (pandas, HF datasets): read as (N, size)
            with structure(where, f'column "{name}" cannot be read'):
                inner = column.flatten()
            flat = to_numpy(inner, where, name)
            return flat.reshape(len(column), size, *flat.shape[1:])
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        raise DataError(
            f'{where}: column "{name}" holds lists (one episode per row?); rltscan reads one '
            "row per step: explode the lists, keeping each row's number as an episode id "
            "column (--episode-id), or the episodes run into each other"
        )
    if _is_text(pa, kind) and not column.null_count:
        return _text_numpy(pa, column)
    if not (pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)):
        raise DataError(
            f'{where}: column "{name}" has type {kind}, not numbers or booleans; '
            "pass the right column with its option (see rltscan inspect)"
        )
    with structure(where, f'column "{name}" cannot be read'):
        nulls = column.null_count
        if nulls and pa.types.is_floating(kind):
            column = column.fill_null(float("nan"))
        elif not nulls:
            return _plain_numpy(column, kind)
    if nulls and not pa.types.is_floating(kind):
        raise DataError(
            f'{where}: column "{name}" has {nulls} null entries; fill them or pass another column'
        )
    with structure(where, f'column "{name}" cannot be read'):
        return column.to_numpy(zero_copy_only=False)


def _is_text(pa: Any, kind: Any) -> bool:
    """Strings of any width, or a dictionary of them (pandas' categorical): ids as text."""
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    view = getattr(pa.types, "is_string_view", None)  # pyarrow >= 16
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind) or (view and view(kind)))


def _text_numpy(pa: Any, column: Any) -> np.ndarray:
    """A text column as an object array of its strings (RLlib's ``eps_id``, HF and polars
    ids), each distinct string one object: compared by equality, never converted to a
    number. Only the episode id role takes it (:class:`rltscan.io.resolve.ColumnReader`
    refuses text for every other role)."""
    if not pa.types.is_dictionary(column.type):
        column = column.dictionary_encode()
    words = np.empty(len(column.dictionary), dtype=object)
    words[:] = column.dictionary.to_pylist()
    return words[column.indices.to_numpy(zero_copy_only=False)]


def _plain_numpy(column: Any, kind: Any) -> np.ndarray:
    """A null-free numeric or boolean Arrow array as numpy, straight from its buffers:
    zero-copy for numbers (read-only, as ``to_numpy`` gives), unpacked bits for booleans.
    (pyarrow's own ``to_numpy`` imports pandas, ~0.5 s of start-up for every command
    that reads a Parquet column.)"""
    pa, _ = _pa()
    data = column.buffers()[1]
    n, offset = len(column), column.offset
    if pa.types.is_boolean(kind):
        bits = np.frombuffer(data, np.uint8) if data is not None else np.zeros(0, np.uint8)
        return np.unpackbits(bits, bitorder="little")[offset : offset + n].astype(bool)
    code = "f" if pa.types.is_floating(kind) else ("i" if pa.types.is_signed_integer(kind) else "u")
    dtype = np.dtype(f"{code}{kind.bit_width // 8}")
    if n == 0:
        return np.empty(0, dtype)
    return np.frombuffer(data, dtype, count=n, offset=offset * dtype.itemsize)


def arrow_of(values: np.ndarray) -> Any:
    """A 1-D numeric or boolean numpy array as an Arrow array built on its buffer (bits
    packed for booleans); anything else through ``pa.array``. (``pa.array`` on numpy
    imports pandas, ~0.5 s of start-up for every command that writes Parquet.)"""
    pa, _ = _pa()
    values = np.ascontiguousarray(values)
    kind = values.dtype.kind
    if values.ndim != 1 or kind not in "fiub" or values.dtype.byteorder == ">":
        return pa.array(values)
    if kind == "b":
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    kind_of = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(kind_of, len(values), [None, pa.py_buffer(values)])


def table_source(
    table: Any, fmt: str, where: str, path: Path | None, raw: Any, form: Any = None
) -> Source:
    """A pyarrow Table read whole as a flat source (Arrow IPC, stdin).

    Args:
        table: the table.
        fmt: the format word the source carries.
        where: how messages name it.
        path: the file (None for stdin).
        raw: the format's own handle, kept for the rewrite.
        form: its physical form, kept by the rewrite (its notes are reported).

    Returns:
        The source; columns are read from the table on demand.
    """
    check_names(table.column_names, where)
    columns = {
        name: _column_info(name, field.type, table.num_rows)
        for name, field in zip(table.column_names, table.schema, strict=True)
    }

    def read(name: str) -> np.ndarray:
        return to_numpy(table.column(name), where, name)

    meta = table.schema.metadata or {}
    return _flat_source(fmt, where, path, columns, read, meta, raw=raw, form=form)


def open_parquet(path: Path, display: str | None = None) -> Source:
    """A Parquet file as a flat source; columns are read on demand."""
    where = display or str(path)
    pf = _parquet_file(path, where)
    with structure(where, "its Parquet footer cannot be read"):
        schema = pf.schema_arrow
        rows = pf.metadata.num_rows
        names = list(schema.names)
        columns = {f.name: _column_info(f.name, f.type, rows) for f in schema}
        meta = schema.metadata or {}
        reader = RowGroupReader(pf, where)
        form = parquet_form(pf, where)
    check_names(names, where)

    def read(name: str) -> np.ndarray:
        with structure(where, f'column "{name}" cannot be read'):
            table = pf.read(columns=[name])
        return to_numpy(table.column(0), where, name)

    return _flat_source(
        "parquet",
        where,
        path,
        columns,
        read,
        meta,
        raw=pf,
        form=form,
        read_range=reader.read,
        steps=rows,
    )


def _flat_source(
    fmt: str,
    where: str,
    path: Path | None,
    columns: dict[str, ColumnInfo],
    read: Callable[[str], np.ndarray],
    meta: Mapping[bytes, bytes],
    *,
    raw: Any,
    form: Any,
    **fields: Any,
) -> Source:
    """A flat source of a table (Parquet, Arrow IPC): its attributes are the schema's
    key-value metadata ``meta`` as text, its notes its ``form``'s; ``fields``: the rest
    of the :class:`Source`."""
    attrs = {k.decode(errors="replace"): v.decode(errors="replace") for k, v in meta.items()}
    return Source(
        format=fmt,
        layout="flat",
        where=where,
        path=path,
        columns=columns,
        read=read,
        attrs=attrs,
        raw=raw,
        form=form,
        notes=list(getattr(form, "notes", ())),
        **fields,
    )


class RowGroupReader:
    """Rows ``[start, stop)`` of one column, decoding only the row groups they touch.

    The groups a range needs are decoded in ONE ``read_row_groups`` call, for every
    column asked for so far, so pyarrow decodes groups x columns on all cores. The
    cache holds every group of the last range (plus ``keep``): the other columns of
    the same window, and the next window's first group, never decode twice. The groups
    a decode will not keep are dropped before it, not after: a streamed run reads a
    window while the one before it is computed and written, and the earlier window's
    decoded groups (a copy of its inputs) held through the next decode made the peak
    RSS of a Parquet run depend on how its threads lined up, so on how many windows it
    has (bench/results/cpu-stream-2core-2026-12-07-d/).
    """

    def __init__(self, pf: Any, where: str, keep: int = 1) -> None:
        self.pf, self.where, self.keep = pf, where, keep
        sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
        self.starts = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
        self.wanted: list[str] = []
        self.cache: dict[int, dict[str, np.ndarray]] = {}
        self.lock = threading.Lock()

    def _groups(self, ids: list[int], name: str) -> list[np.ndarray]:
        """Column ``name`` of row groups ``ids``, decoding the missing ones together."""
        with self.lock:
            if name not in self.wanted:
                self.wanted.append(name)
            wanted = list(self.wanted)
            found = {i: self.cache[i][name] for i in ids if name in self.cache.get(i, {})}
        missing = [i for i in ids if i not in found]
        if missing:
            self._drop_all_but(ids)
            with structure(self.where, f'column "{name}" cannot be read'):
                table = self.pf.read_row_groups(missing, columns=wanted, use_threads=True)
            fresh, at = {}, 0
            for i in missing:
                rows = int(self.starts[i + 1] - self.starts[i])
                part = table.slice(at, rows)
                fresh[i] = {n: to_numpy(part.column(n), self.where, n) for n in wanted}
                at += rows
            with self.lock:
                self.cache.update(fresh)
                for i in ids:  # most recently used last
                    self.cache[i] = self.cache.pop(i, fresh.get(i, {}))
            found.update({i: fresh[i][name] for i in missing})
        return [found[i] for i in ids]

    def _drop_all_but(self, ids: list[int]) -> None:
        """Drop every cached group but ``ids`` and the ``keep`` most recently used."""
        with self.lock:
            others = [i for i in self.cache if i not in ids]
            for i in others[: max(len(others) - self.keep, 0)]:
                del self.cache[i]

    def read(self, name: str, start: int, stop: int) -> np.ndarray:
        first = max(int(np.searchsorted(self.starts, start, side="right")) - 1, 0)
        ids = []
        i = first
        while i < len(self.starts) - 1 and self.starts[i] < stop:
            ids.append(i)
            i += 1
        if not ids:
            return self._groups([0], name)[0][:0] if len(self.starts) > 1 else np.zeros(0)
        parts = [
            arr[max(start - int(self.starts[i]), 0) : stop - int(self.starts[i])]
            for i, arr in zip(ids, self._groups(ids, name), strict=True)
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _parquet_file(path_or_buffer: Any, where: str) -> Any:
    _, pq = _pa()
    try:
        pf = pq.ParquetFile(path_or_buffer)
        remember_origin(pf, path_or_buffer)  # its page headers tell the data page version
        return pf
    except RltscanError:
        raise
    except pyarrow_errors() as err:
        raise InputFileError(
            f"{where} is not a readable Parquet file ({first_line(err)}); "
            "the file is truncated or corrupt"
        ) from None


def first_line(err: BaseException) -> str:
    """The first line of an exception's text for a one-line message (at most 120
    characters; the exception's class name where the text says nothing).

    Args:
        err: the exception.

    Returns:
        The line.
    """
    text = str(err).strip().splitlines()
    line = text[0][:120] if text else ""
    return line if line.strip("'\" ") else err.__class__.__name__


def open_bytes(data: bytes, where: str = "stdin") -> Source:
    """Parquet from an in-memory buffer (stdin).

    Args:
        data: the whole input.
        where: how messages name it.

    Returns:
        The source; ``raw`` is the ParquetFile, written back in its form.
    """
    pa, _ = _pa()
    try:
        raw = _parquet_file(pa.BufferReader(pa.py_buffer(data)), where)
        table = raw.read()
        form = parquet_form(raw, where)
        table.validate(full=True)
    except RltscanError:
        raise
    except pyarrow_errors() as err:
        raise InputFileError(
            f"{where} is not readable parquet data ({first_line(err)}); the stream is truncated "
            "or corrupt"
        ) from None
    return table_source(table, "parquet", where, None, raw=raw, form=form)


# --------------------------------------------------------------------------- writing


def merged_metadata(existing: Mapping[bytes, bytes] | None, entry: Mapping[str, Any]) -> dict:
    """Key-value metadata with the ``rltscan`` JSON updated by ``entry`` (outputs by name)."""
    meta = dict(existing or {})
    meta.pop(b"ARROW:schema", None)
    record: dict[str, Any] = {}
    if META_KEY in meta:
        try:
            record = json.loads(meta[META_KEY])
        except ValueError:
            record = {}
    outputs = dict(record.get("outputs", {}))
    outputs.update(entry.get("outputs", {}))
    record.update({k: v for k, v in entry.items() if k != "outputs"})
    record["outputs"] = dict(sorted(outputs.items()))
    meta[META_KEY] = json.dumps(record, sort_keys=True).encode()
    return meta


def _with_outputs(
    batch: Any, outputs: Mapping[str, np.ndarray], start: int, order: list[str]
) -> Any:
    """``batch`` with the output slices set (replaced in place or appended, in ``order``);
    every input field keeps its nullability and field metadata (a table built from bare
    arrays would make each field nullable and drop its metadata)."""
    pa, _ = _pa()
    n = batch.num_rows
    arrays = {name: batch.column(name) for name in batch.schema.names}
    fields = {f.name: f for f in batch.schema}
    for name, values in outputs.items():
        arrays[name] = arrow_of(values[start : start + n])
        fields[name] = pa.field(name, arrays[name].type)
    schema = pa.schema([fields[name] for name in order], metadata=batch.schema.metadata)
    return pa.table([arrays[name] for name in order], schema=schema)


def _dtype(values: Any) -> np.dtype:
    """The dtype of an output column: an array, or a spilled column read back by slices."""
    return values.dtype if hasattr(values, "dtype") else np.asarray(values).dtype


def _dtype_names(outputs: Mapping[str, Any]) -> dict[str, str]:
    return {name: _dtype(values).name for name, values in outputs.items()}


def _order(names: list[str], outputs: Mapping[str, np.ndarray]) -> list[str]:
    return [*names, *(n for n in outputs if n not in names)]


def _check_existing(
    names: list[str], added: Additions, metadata: Mapping[bytes, bytes] | None
) -> None:
    """Outputs that exist need --overwrite, and --overwrite replaces only columns that
    the file's ``rltscan`` metadata lists as outputs (never a foreign column)."""
    where = added.where
    clash = [n for n in added.outputs if n in names]
    if clash and not added.overwrite:
        raise OutputRefusedError(
            f'{where} already has column "{clash[0]}"; pass --overwrite or --prefix P'
        )
    if not clash:
        return
    ours = set(recorded_outputs(metadata))
    foreign = [n for n in clash if n not in ours]
    if foreign:
        raise OutputRefusedError(
            f'{where}: column "{foreign[0]}" was not written by rltscan (its "rltscan" '
            "metadata does not list it); --overwrite replaces only rltscan outputs, "
            "pass --prefix P"
        )


def recorded_outputs(metadata: Mapping[bytes, bytes] | None) -> list[str]:
    try:
        record = json.loads((metadata or {})[META_KEY])
        return [str(n) for n in record.get("outputs", {})]
    except (KeyError, ValueError, TypeError, AttributeError):
        return []


def like_column(metadata: Mapping[str, Any]) -> str | None:
    """The column whose codec new outputs get: the rewards (or ``x``) the run read, from
    the ``rltscan`` metadata entry being written (:func:`rltscan.io.writeback.parquet_entry`)."""
    for record in (metadata.get("outputs") or {}).values():
        columns = record.get("source_columns") if isinstance(record, Mapping) else None
        for role in ("rewards", "x"):
            name = (columns or {}).get(role)
            if isinstance(name, str):
                return name
    return None


@dataclass(frozen=True)
class Additions:
    """The outputs a write adds to a table, and how: ``outputs`` (output name -> one value
    per row), ``metadata`` (the ``rltscan`` key-value metadata entry), ``overwrite``
    (``--overwrite``: replaces only columns rltscan wrote) and ``where`` (how messages
    name the input). One value, as every table writer (Parquet, Arrow IPC, a Minari part
    file) takes all four."""

    outputs: Mapping[str, np.ndarray]
    metadata: Mapping[str, Any]
    overwrite: bool
    where: str


def write_parquet(
    src: Any,
    sink: Path | BinaryIO,
    added: Additions,
    *,
    atomic: bool = True,
    form: ParquetForm | None = None,
    codecs: Mapping[str, tuple[str, int | None]] | None = None,
) -> int:
    """Rewrite Parquet ``src`` into ``sink`` with ``added`` outputs; the bytes of output
    data written.

    ``src`` is a ParquetFile or a path (written back in its own physical form, row group
    by row group), or a pyarrow Table: one read from a Parquet file is written in that
    file's ``form``; one converted from another format gets ``codecs`` (column name ->
    ``(codec, level)``, :mod:`rltscan.io.physical`).
    """
    pa, pq = _pa()
    if isinstance(src, pa.Table):
        out = table_with_outputs(src, added)
        plan = _table_plan(src, out, added.metadata, form, codecs)
    else:
        pf = src if isinstance(src, pq.ParquetFile) else _parquet_file(src, added.where)
        plan = _file_plan(pf, added)

    def emit(target: Any) -> None:
        with _parquet_writer(target, plan.schema, plan.options, plan.form) as w:
            for table, size in plan.groups():
                w.write_table(table, row_group_size=size)

    return emit_into(emit, sink, added.outputs, atomic)


@dataclass(frozen=True)
class _Plan:
    """A Parquet file to write: its schema, the ``ParquetWriter`` options, the form whose
    footer-only entries are kept, and its row groups (a table and its ``row_group_size``,
    None for pyarrow's own), made as they are written."""

    schema: Any
    options: Mapping[str, Any]
    form: ParquetForm | None
    groups: Callable[[], Iterator[tuple[Any, int | None]]]


def _file_plan(pf: Any, added: Additions) -> _Plan:
    """The ParquetFile ``pf`` with the ``added`` outputs, in its own physical form, row
    group by row group (decoded one ahead)."""
    pa, _ = _pa()
    outputs, metadata, where = added.outputs, added.metadata, added.where
    schema = pf.schema_arrow
    _check_existing(schema.names, added, schema.metadata)
    order = _order(schema.names, outputs)
    fields = {f.name: f for f in schema}
    for name, values in outputs.items():
        fields[name] = pa.field(name, pa.from_numpy_dtype(_dtype(values)))
    with structure(where, "its Parquet footer cannot be read"):
        form = parquet_form(pf, where)
        options = parquet_options(form, list(outputs), like_column(metadata))
    new_schema = pa.schema(
        [fields[n] for n in order],
        metadata=hf.declared(
            merged_metadata(schema.metadata, _with_unrecorded(metadata, options)),
            _dtype_names(outputs),
        ),
    )

    def groups() -> Iterator[tuple[Any, int | None]]:
        for batch, start in _prefetched(pf, where):
            table = _with_outputs(batch, outputs, start, order).cast(new_schema)
            yield table, max(batch.num_rows, 1)

    return _Plan(new_schema, options, form, groups)


def _with_unrecorded(metadata: Mapping[str, Any], options: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``rltscan`` entry with the compression levels written where they are not
    pyarrow's defaults (:mod:`rltscan.io.physical`: no footer records a level) and the
    dictionary page limit where it is not pyarrow's (so that a re-run repeats it)."""
    out = dict(metadata)
    levels = options.get("compression_level")
    if levels:
        out["compression_level"] = dict(sorted(levels.items()))
    if "dictionary_pagesize_limit" in options:
        out["dictionary_limit"] = options["dictionary_pagesize_limit"]
    return out


@contextmanager
def _parquet_writer(
    target: Any, schema: Any, options: Mapping[str, Any], form: ParquetForm | None
) -> Iterator[Any]:
    """A ``ParquetWriter`` that also keeps the footer's key-value entries that are not
    in the Arrow schema (``form.footer_only``), and, without a stored Arrow schema (a
    file that had none), writes the schema's metadata into the footer on its own
    (pyarrow writes it only with the schema), so no entry is lost."""
    _, pq = _pa()
    with pq.ParquetWriter(target, schema, **options) as writer:
        yield writer
        extra = dict(form.footer_only) if form is not None else {}
        if not options.get("store_schema", True) and schema.metadata:
            extra.update(schema.metadata)
        if extra:
            writer.add_key_value_metadata(extra)


def _prefetched(pf: Any, where: str) -> Any:
    """``(row group, first row)`` in order, decoding group i+1 while group i is written."""
    starts = np.concatenate(
        [[0], np.cumsum([pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)])]
    )
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="rltscan-rowgroup") as pool:
        ahead = pool.submit(pf.read_row_group, 0) if pf.num_row_groups else None
        for i in range(pf.num_row_groups):
            try:
                batch = ahead.result()
            except OSError as err:  # a column no estimator reads, met while copying it
                raise InputFileError(
                    f"{where}: row group {i} cannot be read ({first_line(err)}); "
                    "the file is corrupt"
                ) from None
            if i + 1 < pf.num_row_groups:
                ahead = pool.submit(pf.read_row_group, i + 1)
            yield batch, int(starts[i])


def table_with_outputs(table: Any, added: Additions) -> Any:
    """The input table with the outputs appended and the rltscan metadata merged in.

    Args:
        table: the input table.
        added: the outputs (one value per row), the metadata entry, ``--overwrite``.

    Returns:
        The new table (an existing output keeps its position).
    """
    outputs = added.outputs
    _check_existing(table.column_names, added, table.schema.metadata)
    out = _with_outputs(table, outputs, 0, _order(table.column_names, outputs))
    meta = merged_metadata(table.schema.metadata, added.metadata)
    return out.replace_schema_metadata(hf.declared(meta, _dtype_names(outputs)))


def _table_plan(
    table: Any,
    out: Any,
    metadata: Mapping[str, Any],
    form: ParquetForm | None,
    codecs: Mapping[str, tuple[str, int | None]] | None,
) -> _Plan:
    """``out`` (``table`` with the outputs) written in ``form`` (the Parquet file the table
    was read from: its row groups too where the rows still match), else with ``codecs``
    (converted from another format), else pyarrow's defaults."""
    like = like_column(metadata)
    rows: list[int] = []
    options: dict[str, Any] = {}
    if form is not None:
        new = [p for f in out.schema for p in leaves(f.name, f.type) if p not in form.codecs]
        options = parquet_options(form, new, like)
        if sum(form.rows) == out.num_rows:
            rows = list(form.rows)
    elif codecs is not None:
        options = converted_options(out.schema, codecs, like)
    entry = _with_unrecorded(metadata, options)
    if entry is not metadata:
        out = out.replace_schema_metadata(merged_metadata(table.schema.metadata, entry))

    def groups() -> Iterator[tuple[Any, int | None]]:
        if not rows:  # pyarrow's row groups
            yield out, None
        start = 0
        for size in rows:
            yield out.slice(start, size), max(size, 1)
            start += size

    return _Plan(out.schema, options, form, groups)


def emit_into(
    emit: Any, sink: Path | BinaryIO, outputs: Mapping[str, np.ndarray], atomic: bool
) -> int:
    """Run ``emit`` into a path (atomically unless ``atomic=False``) or a binary stream.

    Args:
        emit: writes the file to the target it is given (a path string or a buffer).
        sink: a path, or a binary stream (stdout: every byte or one OutputRefusedError).
        outputs: the outputs written (their bytes are counted).
        atomic: replace a path through a temp file.

    Returns:
        The bytes of output data written.
    """
    written = sum(int(v.nbytes) if hasattr(v, "nbytes") else 0 for v in outputs.values())
    if isinstance(sink, Path) and not atomic:
        emit(str(sink))
    elif isinstance(sink, Path):
        with atomic_path(sink) as tmp:
            emit(str(tmp))
    else:
        buf = io.BytesIO()
        emit(buf)
        _write_all(sink, buf.getbuffer())
    return written


def _write_all(sink: BinaryIO, data: memoryview) -> None:
    """Every byte to a stream (stdout), or one OutputRefusedError: a closed pipe or a
    short write is never a success with a truncated stream."""
    try:
        view = memoryview(data).cast("B")
        while view:  # a short write is retried; a write that takes nothing is an error
            done = sink.write(view)
            if done is None:
                break  # a text-style stream that takes everything
            if done <= 0:
                raise OSError(errno.EIO, f"short write ({len(view)} bytes not taken)")
            view = view[done:]
        sink.flush()
    except (BrokenPipeError, ConnectionResetError):
        _quiet_stdout(sink)
        raise OutputRefusedError(
            "the reader of stdout closed it before the output was complete (broken pipe); "
            "the output is truncated, write to a file with -o PATH"
        ) from None
    except OSError as err:
        _quiet_stdout(sink)
        if is_full_disk(err):
            raise OutputRefusedError(
                "no space left on device writing to stdout; the output is truncated"
            ) from None
        raise OutputRefusedError(
            f"writing to stdout failed ({err.strerror or err}); the output is truncated, "
            "write to a file with -o PATH"
        ) from None


def _quiet_stdout(sink: BinaryIO) -> None:
    """After a failed write to stdout, point it at /dev/null so that the interpreter's
    final flush does not print a second error."""
    import os
    import sys

    with contextlib.suppress(Exception):
        if sink is sys.stdout.buffer or sink.fileno() == sys.stdout.fileno():
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)


def as_table(src: Any) -> Any:
    """A pyarrow Table from a ParquetFile or a Table."""
    _, pq = _pa()
    return src.read() if isinstance(src, pq.ParquetFile) else src


def read_table(path: Path, where: str) -> Any:
    """The whole table of a Parquet file (Minari part files, format conversion).

    Args:
        path: the file.
        where: how messages name it.

    Returns:
        The pyarrow Table.
    """
    pf = _parquet_file(path, where)
    with structure(where, "its data cannot be read"):
        return pf.read()
