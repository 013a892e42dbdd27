"""How a Parquet or Arrow IPC file was written, and the writer options that keep it.

A rewrite (new columns appended, README "Where results go and what is kept") must
give back the file it was given: every column's codec, dictionary encoding, value
encoding, statistics, Bloom filter and page index, the data page version, the
row-group sizes and sort order, the Parquet schema (types, nullability, field ids,
list naming) and the key-value metadata; for Arrow IPC (Feather v2) the body
compression and the metadata version (:mod:`rltscan.io.formats.arrow.physical`).
:func:`parquet_form` reads all of it from the footer (and the header of each column's
first data page); :func:`parquet_options` turns it into ``pyarrow.parquet.ParquetWriter``
options.

What no file records, and what is written instead:

* **compression level**: a Parquet footer names the codec, not the level (nor does an
  IPC body). The level written is the default of the writer that made the file, as its
  ``created_by`` names it: polars (zstd 3, gzip 6, brotli 1), else pyarrow's (zstd 1,
  gzip 9, brotli 8; pandas and HF ``datasets`` write through pyarrow). A file written
  at another level keeps its codec and may change size. The levels written are
  recorded in the ``rltscan`` metadata entry (``compression_level``), so a re-run
  writes the same bytes although ``created_by`` then names pyarrow;
* **page sizes**: pyarrow's defaults (1 MiB), which are also polars' and pyarrow's own
  writers' (content-defined pages, as HF ``datasets`` writes them, are recorded in the
  file and kept);
* **the point where a dictionary falls back to plain**: a column whose dictionary
  filled the writer's limit (1 MiB: the dictionary page of a float column of distinct
  values, as pyarrow and pandas write by default) was written as a dictionary page,
  then plain pages (seen in its page headers: a dictionary page of 1 MiB or more and a
  data page after it that is not dictionary-encoded). The rewrite keeps that shape but
  falls back at the smallest limit (a power of two, at least 4 KiB) above every
  dictionary in the file that stayed whole, so those stay whole: the 1 MiB dictionary
  of distinct floats cost half of the rewrite's time and is never read as one
  (:func:`dictionary_limit`). The limit is recorded in the ``rltscan`` entry
  (``dictionary_limit``): a re-run takes it for the writer's limit, finds the same
  filled dictionaries and the same limit, and writes the same bytes. A file written
  with a larger limit, whose dictionaries of 1 MiB or more stayed whole, is rewritten
  at pyarrow's limit;
* **Bloom filter sizing**: a column that had a filter gets one, sized for the rows of
  the largest row group at pyarrow's default false-positive rate;
* **the writer's name** (``created_by``) becomes pyarrow's.

Where row groups of one file differ (a codec or a dictionary in one group and not in
another), one writer cannot repeat that: every group is written like the first and a
note says so. New columns get the codec and statistics of the rewards column, plain
encoding and no dictionary (a dictionary of distinct floats never pays).

Conversions (``-o`` to another format) keep a column's codec where the target format
has it: Parquet and Arrow IPC share zstd and lz4, Parquet and HDF5 share gzip. A
codec the target lacks becomes that format's default (Parquet: snappy; Arrow IPC and
HDF5: none); an uncompressed column stays uncompressed.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

RECORD_KEY = b"rltscan"  # the key-value metadata entry rltscan writes (parquet.META_KEY)
# Footer codec names as pyarrow's writer spells them (others: lower case).
_WRITER_CODEC = {"UNCOMPRESSED": "none", "LZ4_RAW": "lz4"}
# Value encodings that pyarrow writes on request (``column_encoding``); PLAIN, the
# dictionary encodings and RLE (levels, booleans) come with the other options.
_VALUE_ENCODINGS = (
    "DELTA_BINARY_PACKED",
    "DELTA_LENGTH_BYTE_ARRAY",
    "DELTA_BYTE_ARRAY",
    "BYTE_STREAM_SPLIT",
)
# Default compression levels of writers other than pyarrow, by the start of the footer's
# created_by (measured: polars 2.1 writes zstd at 3, gzip at 6, brotli at 1).
_WRITER_LEVELS = {"Polars": {"zstd": 3, "gzip": 6, "brotli": 1}}
_PAGE_HEADER_BYTES = 64  # the leading fields read (type, sizes, crc) come first
_DICTIONARY_LIMIT = 1 << 20  # the dictionary page size at which writers fall back to plain
_SMALLEST_LIMIT = 1 << 12
_DICTIONARY_HEADERS = 1024  # dictionary page headers read at most (else pyarrow's limit)
_FALLBACK_PAGES = 16  # data page headers read per filled dictionary, looking for plain
_FULL_HEADER_BYTES = 1024  # a data page header with its statistics
_DICTIONARY_ENCODINGS = (2, 8)  # PLAIN_DICTIONARY, RLE_DICTIONARY
_origins: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()
_forms: weakref.WeakKeyDictionary[Any, ParquetForm] = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class ParquetForm:
    """How a Parquet file was written (module doc). Column options are by leaf path as
    the footer spells it (``obs.list.element``, ``info.success``)."""

    rows: tuple[int, ...]
    codecs: Mapping[str, str]
    levels: Mapping[str, int]  # leaf path -> level, where its writer's default is not pyarrow's
    dictionary: frozenset[str]
    statistics: frozenset[str]
    encodings: Mapping[str, str]
    bloom: frozenset[str]
    page_index: bool
    page_checksum: bool
    data_page_version: str  # "1.0" | "2.0"
    dictionary_limit: int | None  # the rewrite's dictionary page limit (None: pyarrow's)
    schema_options: Mapping[str, Any]  # version, list naming, INT96: the schema as it was
    store_schema: bool  # the footer holds the Arrow schema (ARROW:schema)
    sorting: tuple[Any, ...]
    chunking: Mapping[str, Any] | None  # content-defined chunking (HF datasets), as recorded
    # key-value entries of the footer that are not in the Arrow schema's metadata (added
    # by the writer after it, as HF datasets adds "content_defined_chunking")
    footer_only: Mapping[bytes, bytes]
    notes: tuple[str, ...] = field(default=())


def remember_origin(pf: Any, origin: Any) -> None:
    """Where ``pf`` (a ``pyarrow.parquet.ParquetFile``) reads from: a path or a
    pyarrow buffer reader, for the page headers that the footer does not hold."""
    _origins[pf] = origin


def writer_codec(footer_name: str) -> str:
    """A codec as the footer names it (``ZSTD``) as pyarrow's writer takes it (``zstd``)."""
    name = footer_name.upper()
    return _WRITER_CODEC.get(name, name.lower())


def parquet_form(pf: Any, where: str) -> ParquetForm:
    """The form of ``pf`` (cached per file object; footer and page headers only)."""
    found = _forms.get(pf)
    if found is None:
        found = _forms[pf] = _read_form(pf, where)
    return found


def _read_form(pf: Any, where: str) -> ParquetForm:
    meta = pf.metadata
    groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    rows = tuple(int(g.num_rows) for g in groups)
    codecs: dict[str, str] = {}
    dictionary: set[str] = set()
    statistics: set[str] = set()
    encodings: dict[str, str] = {}
    bloom: set[str] = set()
    page_index = False
    offsets: list[int] = []
    dictionary_pages: list[tuple[int, int, int] | None] = []
    differ: list[str] = []
    for g, group in enumerate(groups):
        for i in range(group.num_columns):
            col = group.column(i)
            path = col.path_in_schema
            codec = writer_codec(col.compression)
            has_dictionary = bool(col.has_dictionary_page)
            if has_dictionary:
                at = col.dictionary_page_offset
                ok = at and at < col.data_page_offset
                end = int(at or 0) + int(col.total_compressed_size)
                dictionary_pages.append((at, col.data_page_offset, end) if ok else None)
            if g == 0:
                codecs[path] = codec
                if has_dictionary:
                    dictionary.add(path)
                if col.is_stats_set:
                    statistics.add(path)
                found = [e for e in col.encodings if e in _VALUE_ENCODINGS]
                if found and not has_dictionary:
                    encodings[path] = found[0]
                if col.bloom_filter_offset is not None:
                    bloom.add(path)
                page_index = page_index or bool(col.has_offset_index)
                offsets.append(int(col.data_page_offset))
            elif (codecs.get(path), path in dictionary) != (codec, has_dictionary) and (
                path not in differ
            ):
                differ.append(path)
    notes = []
    if differ:
        shown = ", ".join(f'"{p}"' for p in differ[:4]) + (", ..." if len(differ) > 4 else "")
        notes.append(
            f"{where}: its row groups differ in codec or dictionary encoding for {shown}; a "
            "rewrite writes every row group like the first"
        )
    version, checksum = _page_kind(pf, offsets)
    raw = meta.metadata or {}
    rle_dictionary = any(
        "RLE_DICTIONARY" in g.column(i).encodings for g in groups[:1] for i in range(g.num_columns)
    )
    schema_options, note = _schema_options(pf, where, rle_dictionary)
    if note:
        notes.append(note)
    sorting = tuple(groups[0].sorting_columns or ()) if groups else ()
    writer = next((v for k, v in _WRITER_LEVELS.items() if meta.created_by.startswith(k)), {})
    levels = {p: writer[c] for p, c in codecs.items() if c in writer}
    levels.update({p: v for p, v in _recorded_levels(raw).items() if p in codecs})
    return ParquetForm(
        rows=rows,
        codecs=codecs,
        levels=levels,
        dictionary=frozenset(dictionary),
        statistics=frozenset(statistics),
        encodings=encodings,
        bloom=frozenset(bloom),
        page_index=page_index,
        page_checksum=checksum,
        data_page_version=version,
        dictionary_limit=dictionary_limit(pf, dictionary_pages, _recorded_limit(raw)),
        schema_options=schema_options,
        store_schema=b"ARROW:schema" in raw,
        sorting=sorting,
        chunking=_chunking(raw),
        footer_only={
            k: v
            for k, v in raw.items()
            if k != b"ARROW:schema" and k not in (pf.schema_arrow.metadata or {})
        },
        notes=tuple(notes),
    )


def _chunking(raw: Mapping[bytes, bytes]) -> dict[str, Any] | None:
    """The content-defined chunking options pyarrow records when it pages by content
    (HF ``datasets`` writes so), or None."""
    try:
        options = json.loads(raw[b"content_defined_chunking"])
    except (KeyError, ValueError, TypeError):
        return None
    return options if isinstance(options, dict) else None


def _recorded_limit(raw: Mapping[bytes, bytes]) -> int | None:
    """The dictionary page limit an earlier rltscan rewrite used (its ``rltscan``
    entry), if any: its filled dictionaries reached that limit, not pyarrow's."""
    try:
        limit = json.loads(raw[RECORD_KEY]).get("dictionary_limit")
    except (KeyError, ValueError, TypeError, AttributeError):
        return None
    ok = isinstance(limit, int) and _SMALLEST_LIMIT <= limit < _DICTIONARY_LIMIT
    return limit if ok else None


def _recorded_levels(raw: Mapping[bytes, bytes]) -> dict[str, int]:
    """The levels an earlier rltscan rewrite used (its ``rltscan`` entry), if any."""
    try:
        record = json.loads(raw[RECORD_KEY])
        levels = record.get("compression_level") or {}
        return {str(p): int(v) for p, v in levels.items() if isinstance(v, int)}
    except (KeyError, ValueError, TypeError, AttributeError):
        return {}


def _page_kind(pf: Any, offsets: list[int]) -> tuple[str, bool]:
    """``(data page version, page checksums)`` from the first data page of the first
    column chunk (the Thrift header of the page). ("1.0", False) when unknown."""
    origin = _origins.get(pf)
    if origin is None or not offsets:
        return "1.0", False
    try:
        with _reader(origin) as read_at:
            fields = _page_header(read_at(offsets[0], _PAGE_HEADER_BYTES)).fields
    except (OSError, ValueError):
        return "1.0", False
    kind = fields.get(1)
    return ("2.0" if kind == 3 else "1.0"), 4 in fields


def dictionary_limit(
    pf: Any, chunks: list[tuple[int, int, int] | None], recorded: int | None = None
) -> int | None:
    """The dictionary page limit that rewrites ``pf`` with the same dictionaries where
    they stayed whole, and falls back early where they filled the writer's limit and
    fell back to plain pages (module doc); None (pyarrow's limit) where none did, where
    a page header is out of reach, or where the file has more than
    ``_DICTIONARY_HEADERS`` dictionary pages. ``chunks``: per column chunk with a
    dictionary, the offsets of its dictionary page, its first data page and its end
    (None: not recorded). A dictionary counts as filled where it reached the writer's
    limit (1 MiB, or ``recorded``: the limit of an earlier rltscan rewrite) and a data
    page after it is not dictionary-encoded (a file written with a larger limit keeps
    larger dictionaries whole). The limit depends only on the dictionaries that stayed
    whole, so a re-run of a rewrite finds the same one."""
    threshold = recorded or _DICTIONARY_LIMIT
    origin = _origins.get(pf)
    known = [c for c in chunks if c is not None]
    if origin is None or not known or len(known) < len(chunks) or len(known) > _DICTIONARY_HEADERS:
        return None
    whole, filled = [], False
    try:
        with _reader(origin) as read_at:
            for first, data, end in known:
                size = _page_header(read_at(first, _PAGE_HEADER_BYTES)).fields.get(2)
                if size is None:
                    return None
                if size >= threshold and _fell_back(read_at, data, end):
                    filled = True
                else:
                    whole.append(size)
    except (OSError, ValueError):
        return None
    if not filled:
        return None  # every dictionary whole: the writer's own limit keeps them so
    kept = max(whole, default=0)
    limit = max(_SMALLEST_LIMIT, 1 << kept.bit_length())  # a power of two above each kept
    return limit if limit < _DICTIONARY_LIMIT else None


def _fell_back(read_at: Callable[[int, int], bytes], at: int, end: int) -> bool:
    """Whether a column chunk's data pages from ``at`` (its first) to ``end`` hold one
    that is not dictionary-encoded, within its first ``_FALLBACK_PAGES`` pages (the
    writer falls back once its dictionary fills, so such a page comes early). A header
    that cannot be walked proves nothing (False)."""
    for _ in range(_FALLBACK_PAGES):
        if at >= end:
            return False
        page = _page_header(read_at(at, _FULL_HEADER_BYTES))
        kind, size = page.fields.get(1), page.fields.get(3)
        if page.length is None or size is None:
            return False
        if kind in (0, 3) and page.encoding not in _DICTIONARY_ENCODINGS:
            return True
        at += page.length + size
    return False


class _Page(NamedTuple):
    """What is read of a Parquet PageHeader (Thrift compact protocol)."""

    fields: dict[int, int]  # its leading i32 fields: 1 type, 2 uncompressed size,
    # 3 compressed size, 4 crc
    length: int | None  # the header's bytes (None: it runs past what was read)
    encoding: int | None  # a data page's value encoding (v1 or v2)


def _page_header(data: bytes) -> _Page:
    """The PageHeader at the start of ``data``, as far as ``data`` holds it: the leading
    fields come first, so a short read still gives them (``length`` None)."""
    reader = _Compact(data)
    fields: dict[int, int] = {}
    encoding: list[int] = []

    def page(fid: int, kind: int) -> None:
        if kind == 5 and fid in (1, 2, 3, 4):
            fields[fid] = reader.zigzag()
        elif kind == 12 and fid in (5, 8):  # DataPageHeader (encoding: 2), V2 (4)
            want = 2 if fid == 5 else 4

            def header(inner: int, inner_kind: int) -> None:
                if inner == want and inner_kind == 5:
                    encoding.append(reader.zigzag())
                else:
                    reader.skip(inner_kind)

            reader.struct(header)
        else:
            reader.skip(kind)

    try:
        reader.struct(page)
    except IndexError:
        return _Page(fields, None, encoding[0] if encoding else None)
    return _Page(fields, reader.at, encoding[0] if encoding else None)


class _Compact:
    """Just enough of Thrift's compact protocol to walk a struct and skip any field."""

    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def byte(self) -> int:
        self.at += 1
        return self.data[self.at - 1]

    def varint(self) -> int:
        value, self.at = _varint(self.data, self.at)
        return value

    def zigzag(self) -> int:
        raw = self.varint()
        return (raw >> 1) ^ -(raw & 1)

    def struct(self, on_field: Callable[[int, int], None]) -> None:
        fid = 0
        while (head := self.byte()) != 0:
            delta, kind = head >> 4, head & 0x0F
            fid = fid + delta if delta else self.zigzag()
            on_field(fid, kind)

    def skip(self, kind: int) -> None:
        if kind in (1, 2):  # a bool field: its value is its type
            return
        if kind == 3:
            self.at += 1
        elif kind in (4, 5, 6):
            self.varint()
        elif kind == 7:
            self.at += 8
        elif kind == 8:
            n = self.varint()  # (read before ``at`` moves past the bytes)
            self.at += n
        elif kind in (9, 10):  # list, set
            head = self.byte()
            n, element = head >> 4, head & 0x0F
            n = self.varint() if n == 15 else n
            for _ in range(n):
                self.skip(3 if element in (1, 2) else element)  # (bools: a byte each)
        elif kind == 11:  # map
            n = self.varint()
            types = self.byte() if n else 0
            for _ in range(n):
                self.skip(types >> 4)
                self.skip(types & 0x0F)
        elif kind == 12:
            self.struct(lambda _fid, inner: self.skip(inner))
        else:
            raise ValueError(f"Thrift compact type {kind}")


@contextlib.contextmanager
def _reader(origin: Any) -> Iterator[Callable[[int, int], bytes]]:
    """``read_at(offset, size)`` on ``origin`` (a path opened once, or a buffer reader)."""
    if not isinstance(origin, (str, Path)):
        yield lambda offset, size: bytes(origin.read_at(size, offset))
        return
    with open(origin, "rb") as fh:
        yield lambda offset, size: os.pread(fh.fileno(), size, offset)


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value, shift = 0, 0
    for _ in range(10):
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at
    raise ValueError("varint longer than 10 bytes")


def _schema_options(pf: Any, where: str, rle_dictionary: bool) -> tuple[dict[str, Any], str | None]:
    """The writer options under which pyarrow writes ``pf``'s Parquet schema exactly as it
    is (format version: 1.0 has no unsigned 32-bit or nanosecond types, 2.4 no
    nanoseconds; list element naming; Spark's INT96 timestamps), tried on empty files.
    The footer's own version is tried first, unless its dictionary pages say
    RLE_DICTIONARY, which pyarrow writes only as 2.x (polars' files say 1.0 and do)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    want = pf.schema
    arrow = pf.schema_arrow.remove_metadata()
    major = pf.metadata.format_version
    old = major == "1.0" and not rle_dictionary
    versions = ["1.0", "2.4", "2.6"] if old else ["2.6", "2.4", "1.0"]
    physical = {want.column(i).physical_type for i in range(len(want))}
    nested = [True, False] if _has_lists(arrow) else [True]
    for version in versions:
        for compliant in nested:
            options = {"version": version, "use_compliant_nested_type": compliant}
            if "INT96" in physical:
                options["use_deprecated_int96_timestamps"] = True
            buf = io.BytesIO()
            try:  # (Schema.empty_table would import pandas, ~0.5 s)
                pq.ParquetWriter(buf, arrow, **options).close()
                got = pq.ParquetFile(io.BytesIO(buf.getvalue())).schema
            except (pa.ArrowException, ValueError, TypeError, OSError):  # a type pyarrow
                break  # cannot write: no option keeps it
            if got.equals(want):
                return options, None
    return {"version": "2.6"}, (
        f"{where}: pyarrow cannot write its Parquet schema exactly as it is (a type or "
        "annotation of another writer); a rewrite keeps the values and the Arrow types"
    )


def _has_lists(schema: Any) -> bool:
    return any(_nested_list(f.type) for f in schema)


def _nested_list(kind: Any) -> bool:
    import pyarrow as pa

    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return True
    if pa.types.is_map(kind):
        return True
    if pa.types.is_struct(kind):
        return any(_nested_list(kind.field(i).type) for i in range(kind.num_fields))
    return False


def leaves(name: str, kind: Any) -> list[str]:
    """The Parquet leaf column paths of an Arrow field (``obs`` of lists of floats:
    ``obs.list.element``), as pyarrow names them with its default list naming."""
    import pyarrow as pa

    if pa.types.is_struct(kind):
        return [p for i in range(kind.num_fields) for p in _child(name, kind.field(i))]
    if pa.types.is_map(kind):
        return [
            *leaves(f"{name}.key_value.key", kind.key_type),
            *leaves(f"{name}.key_value.value", kind.item_type),
        ]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return leaves(f"{name}.list.element", kind.value_type)
    return [name]


def _child(name: str, child: Any) -> list[str]:
    return leaves(f"{name}.{child.name}", child.type)


def most_common(values: Iterable[str], default: str) -> str:
    """The most common of ``values`` (the first seen on a tie), ``default`` if none.

    Args:
        values: codec names.
        default: what no values give.

    Returns:
        One value.
    """
    counts = Counter(values)
    return counts.most_common(1)[0][0] if counts else default


def parquet_options(
    form: ParquetForm, new_columns: Iterable[str], like: str | None
) -> dict[str, Any]:
    """``ParquetWriter`` options that write a file of ``form`` with ``new_columns``
    (top-level numeric columns) added, each written like the leaf ``like`` (the rewards
    column): its codec and statistics, plain encoding, no dictionary."""
    codecs = dict(form.codecs)
    default = codecs.get(like or "", most_common(codecs.values(), "snappy"))
    statistics = set(form.statistics)
    for name in new_columns:
        if name in codecs:  # an output replaced in place (--overwrite): as it was written
            continue
        codecs[name] = default
        if like is None or like in form.statistics:
            statistics.add(name)
    levels = {p: v for p, v in form.levels.items() if p in codecs}
    levels.update({n: form.levels[like] for n in new_columns if like in form.levels})
    options: dict[str, Any] = {
        **form.schema_options,
        "compression": codecs,
        "use_dictionary": sorted(form.dictionary),
        "write_statistics": sorted(statistics),
        "data_page_version": form.data_page_version,
        "write_page_index": form.page_index,
        "write_page_checksum": form.page_checksum,
        "store_schema": form.store_schema,
    }
    if levels:
        options["compression_level"] = levels
    if form.encodings:
        options["column_encoding"] = dict(form.encodings)
    if form.bloom:
        ndv = max(max(form.rows, default=1), 1)
        options["bloom_filter_options"] = {p: {"ndv": ndv} for p in sorted(form.bloom)}
    if form.sorting:
        options["sorting_columns"] = list(form.sorting)
    if form.chunking is not None:
        options["use_content_defined_chunking"] = dict(form.chunking)
    if form.dictionary_limit is not None:
        options["dictionary_pagesize_limit"] = form.dictionary_limit
    return options


# --------------------------------------------------------------------------- conversions


def parquet_codec_of(codec: str | None) -> str:
    """A codec from Arrow IPC (``lz4``/``zstd``/None) or HDF5 (``gzip``, ``lzf``, ...,
    None) as the Parquet codec that keeps it (module doc)."""
    if codec is None:
        return "none"
    return codec if codec in ("zstd", "lz4", "gzip") else "snappy"


def hdf5_codec_of(codec: str) -> str | None:
    """A Parquet column's codec as HDF5 keeps it: gzip, else none (module doc)."""
    return "gzip" if codec == "gzip" else None


def converted_options(
    schema: Any, codecs: Mapping[str, tuple[str, int | None]], like: str | None
) -> dict[str, Any]:
    """``write_table`` options for a table converted from another format: each column's
    ``(codec, level)`` from ``codecs`` (by top-level name), a column not in it (an output,
    an index column) like ``like``; the rest pyarrow's defaults."""
    fallback = codecs.get(like or "") or ("snappy", None)
    compression: dict[str, str] = {}
    levels: dict[str, int] = {}
    for f in schema:
        codec, level = codecs.get(f.name, fallback)
        for path in leaves(f.name, f.type):
            compression[path] = codec
            if level is not None:
                levels[path] = level
    options: dict[str, Any] = {"compression": compression}
    if levels:
        options["compression_level"] = levels
    return options
