"""How an Arrow IPC file or stream was written (body compression, metadata version),
read from its first message header, and the writer options that keep it
(:mod:`rltscan.io.physical` does the same for Parquet).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from rltscan.io.physical import most_common


@dataclass(frozen=True)
class IpcForm:
    """How an Arrow IPC file or stream was written: body compression and metadata version."""

    codec: str | None  # "lz4" | "zstd" | None
    metadata_version: Any = None  # pyarrow.ipc.MetadataVersion, None for the default


def ipc_form(source: Any, *, stream: bool) -> IpcForm:
    """The body compression and metadata version of an IPC file (``stream=False``: found
    through its footer) or stream in ``source`` (a pyarrow buffer or memory map), from
    the header of its first record or dictionary batch. Raises ValueError if a header
    cannot be parsed (the caller has read the file, so this is a damaged header)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    reader = pa.BufferReader(source) if isinstance(source, pa.Buffer) else source
    if not stream:
        return _file_form(reader)
    reader.seek(0)
    version = None
    for message in ipc.MessageReader.open_stream(reader):
        version = message.metadata_version
        if message.type in ("record batch", "dictionary"):
            return IpcForm(_body_codec(message.metadata.to_pybytes()), version)
    return IpcForm(None, version)


def _file_form(reader: Any) -> IpcForm:
    """The form of an IPC file, from its footer (Arrow's File.fbs) as file readers find
    messages: not by walking the messages after the magic, which writers need not lay
    out as a stream (polars writes its schema message with no length prefix). The
    codec and version of the first dictionary or record batch block (the footer's
    version where it has none: pyarrow's footer says V5 above V4 messages)."""
    try:
        size = reader.size()
        reader.seek(size - 10)  # int32 footer length, then the 6-byte magic
        footer_size = _u32(reader.read(4), 0)
        reader.seek(size - 10 - footer_size)
        footer = reader.read(footer_size)
        root = _table(footer, _u32(footer, 0))
        version = _version(footer, root)
        for field in (2, 3):  # dictionaries, then record batches: [Block]
            if root(field) is None:
                continue
            blocks = _deref(footer, root(field))
            if _u32(footer, blocks) == 0:
                continue
            offset, length = struct.unpack_from("<qi", footer, blocks + 4)
            reader.seek(offset)
            head = reader.read(length)
            start = 8 if _u32(head, 0) == 0xFFFFFFFF else 4  # continuation marker or not
            message = head[start:]
            return IpcForm(
                _body_codec(message), _version(message, _table(message, _u32(message, 0)))
            )
    except (struct.error, IndexError, TypeError) as err:
        raise ValueError(f"an IPC file footer cannot be parsed ({err})") from None
    return IpcForm(None, version)


def _version(buf: bytes, table: Any) -> Any:
    """Field 0 of a Message or Footer table: its MetadataVersion (absent: V1)."""
    import pyarrow.ipc as ipc

    at = table(0)
    return ipc.MetadataVersion(struct.unpack_from("<h", buf, at)[0] if at is not None else 0)


def _body_codec(buf: bytes) -> str | None:
    """The ``BodyCompression`` codec of a Message flatbuffer (Arrow's Message.fbs):
    Message.header (field 2) is a RecordBatch, or a DictionaryBatch whose field 1 is
    one; RecordBatch.compression is field 3, its codec field 0 (LZ4_FRAME 0, ZSTD 1)."""
    try:
        message = _table(buf, _u32(buf, 0))
        kind = message(1)
        header_type = buf[kind] if kind is not None else 0
        batch = _table(buf, _deref(buf, message(2)))
        if header_type == 2:  # DictionaryBatch: its data is a RecordBatch
            batch = _table(buf, _deref(buf, batch(1)))
        compression = batch(3)
        if compression is None:
            return None
        codec = _table(buf, _deref(buf, compression))(0)
        return "zstd" if codec is not None and buf[codec] == 1 else "lz4"
    except (struct.error, IndexError, TypeError) as err:
        raise ValueError(f"an IPC message header cannot be parsed ({err})") from None


def _u32(buf: bytes, at: int) -> int:
    return int(struct.unpack_from("<I", buf, at)[0])


def _deref(buf: bytes, at: int | None) -> int:
    if at is None:
        raise TypeError("a required flatbuffer field is absent")
    return at + _u32(buf, at)


def _table(buf: bytes, pos: int) -> Any:
    """Field ``i`` of the flatbuffer table at ``pos`` -> its absolute offset, or None."""
    vtable = pos - int(struct.unpack_from("<i", buf, pos)[0])
    size = int(struct.unpack_from("<H", buf, vtable)[0])

    def field_at(i: int) -> int | None:
        slot = 4 + 2 * i
        if slot + 2 > size:
            return None
        offset = int(struct.unpack_from("<H", buf, vtable + slot)[0])
        return pos + offset if offset else None

    return field_at


def ipc_options(form: IpcForm | None) -> Any:
    """``pyarrow.ipc.IpcWriteOptions`` that write a file of ``form`` (default: none)."""
    import pyarrow.ipc as ipc

    if form is None:
        return ipc.IpcWriteOptions()
    kwargs: dict[str, Any] = {"compression": form.codec}
    if form.metadata_version is not None:
        kwargs["metadata_version"] = form.metadata_version
    return ipc.IpcWriteOptions(**kwargs)


def ipc_codec_of(codecs: Iterable[str]) -> str | None:
    """The IPC codec of a file whose columns have ``codecs`` (writer names): the most
    common one where IPC has it (zstd, lz4), else none."""
    common = most_common(codecs, "none")
    return common if common in ("zstd", "lz4") else None


def form_of(carried: Mapping[str, tuple[str | None, int | None]]) -> IpcForm:
    """The IPC form of a file converted from columns with ``carried`` codecs: one codec
    for the file (:func:`ipc_codec_of`), the default metadata version.

    Args:
        carried: column name -> ``(codec or None, level or None)`` in the input.

    Returns:
        The form to write.
    """
    return IpcForm(ipc_codec_of(codec or "none" for codec, _ in carried.values()))
