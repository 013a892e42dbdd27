"""Arrow IPC: the file format (Feather v2: ``.arrow``, ``.feather``, ``.ipc``) and the
stream format (``.arrows``, and what ``-o - --to arrow`` writes), as one registry row.

Owns: detecting both by their first bytes, reading them (memory-mapped, whole: no
windows), the in-memory bytes of stdin, writing outputs back in the same IPC format
(record batches, body compression and metadata version kept: :mod:`rltscan.io.physical`),
and writing any input's table as IPC. The pyarrow table layer it shares with Parquet
(columns to numpy, the ``rltscan`` metadata entry, writing atomically or to stdout) is
:mod:`rltscan.io.parquet`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from rltscan.io.formats.protocol import Format, OpenOptions, Sniffed, Tabled, Writing, flat_only

if TYPE_CHECKING:
    from rltscan.io.formats.arrow.physical import IpcForm
    from rltscan.io.parquet import Additions
    from rltscan.io.source import Source

FILE, STREAM = "arrow", "arrow-stream"


def _kind(word: str) -> str:
    return "Arrow IPC file" if word == FILE else "Arrow IPC stream"


def open_ipc(path: Path, word: str, display: str | None = None) -> Source:
    """An Arrow IPC file or IPC stream file, memory-mapped; written back in place in the
    same IPC format.

    Args:
        path: the file.
        word: ``"arrow"`` (IPC file, Feather v2) or ``"arrow-stream"``.
        display: how messages name it (default: the path).

    Returns:
        The source; ``raw`` is the table, ``form`` its IPC form.
    """
    where = display or str(path)
    return _read_ipc(path, word, where, f"a readable {_kind(word)}", "the file is corrupt")


def _read_ipc(data: Path | bytes, word: str, where: str, what: str, why: str) -> Source:
    """IPC (file or stream) from a file, memory-mapped, or from bytes, read whole.

    Args:
        data: the file's path, or the bytes themselves (stdin).
        word: ``"arrow"`` (IPC file) or ``"arrow-stream"``.
        where: how messages name it.
        what: what the message says it is not, where pyarrow cannot read it.
        why: the cause the message gives then.

    Returns:
        The source; ``raw`` is the table, ``form`` its IPC form.

    Raises:
        InputFileError: pyarrow cannot read or validate it.
    """
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from rltscan.errors import InputFileError, RltscanError
    from rltscan.io import parquet
    from rltscan.io.formats.arrow.physical import ipc_form

    path = data if isinstance(data, Path) else None
    try:
        opened = pa.py_buffer(data) if path is None else pa.memory_map(str(path), "r")
        reader = ipc.open_file(opened) if word == FILE else ipc.open_stream(opened)
        table = reader.read_all()
        table.validate(full=True)
        form = ipc_form(opened, stream=word != FILE)
    except RltscanError:
        raise
    except parquet.pyarrow_errors() as err:
        raise InputFileError(f"{where} is not {what} ({parquet.first_line(err)}); {why}") from None
    return parquet.table_source(table, word, where, path, raw=table, form=form)


def write_arrow(
    table: Any,
    sink: Path | BinaryIO,
    added: Additions,
    *,
    stream: bool,
    atomic: bool = True,
    form: IpcForm | None = None,
) -> int:
    """Arrow IPC (file, or stream with ``stream=True``), record batches preserved, the
    body compression and metadata version of ``form`` (the file it came from).

    Args:
        table: the input table.
        sink: a path (replaced atomically unless ``atomic=False``) or a binary stream.
        added: the outputs (one value per row), the metadata entry, ``--overwrite``.
        stream: write the IPC stream format.
        atomic: replace a path through a temp file.
        form: the IPC form to keep (None: pyarrow's defaults).

    Returns:
        The bytes of output data written.
    """
    import pyarrow.ipc as ipc

    from rltscan.io import parquet
    from rltscan.io.formats.arrow.physical import ipc_options

    out = parquet.table_with_outputs(table, added)
    sizes = [b.num_rows for b in table.to_batches()] or [out.num_rows]
    options = ipc_options(form)

    def emit(target: Any) -> None:
        opener = ipc.new_stream if stream else ipc.new_file
        with opener(target, out.schema, options=options) as writer:
            start = 0
            for size in sizes:
                writer.write_table(out.slice(start, size))
                start += size

    return parquet.emit_into(emit, sink, added.outputs, atomic)


class Arrow(Format):
    """The Arrow IPC row (module doc)."""

    name = "arrow"
    title = "Arrow IPC"
    words = (FILE, STREAM)
    magic = ((b"ARROW1", FILE), (b"\xff\xff\xff\xff", STREAM))
    suffixes = ((".arrow", FILE), (".feather", FILE), (".ipc", FILE), (".arrows", STREAM))
    to = FILE
    stdout = STREAM
    nullable = True

    def open(self, sniffed: Sniffed, options: OpenOptions) -> Source:
        """An IPC file or stream file (see :meth:`Format.open`); ``--layout`` other than
        flat is refused."""
        flat_only(options.layout, sniffed.format, options.where or str(sniffed.path))
        return open_ipc(sniffed.path, sniffed.format)

    def open_bytes(self, data: bytes, word: str, where: str, options: OpenOptions) -> Source:
        """IPC file or stream bytes from stdin (see :meth:`Format.open_bytes`)."""
        flat_only(options.layout, word, where)
        return _read_ipc(
            data, word, where, f"readable {word} data", "the stream is truncated or corrupt"
        )

    def to_table(self, source: Source, *, same: bool) -> Tabled:
        """The table itself, with its one body codec where it goes to another format
        (see :meth:`Format.to_table`)."""
        from rltscan.io.formats.arrow.physical import IpcForm

        form = source.form
        if same or not isinstance(form, IpcForm):
            return Tabled(source.raw)
        return Tabled(source.raw, codecs={n: (form.codec, None) for n in source.raw.column_names})

    def from_table(self, tabled: Tabled, sink: Path | BinaryIO, word: str, writing: Writing) -> int:
        """IPC (a stream to stdout) with the input's form when it was IPC too, else its
        carried codec (see :meth:`Format.from_table`)."""
        from rltscan.io.formats.arrow.physical import form_of

        source = writing.source
        same = source.format in self.words
        return write_arrow(
            tabled.table,
            sink,
            tabled.additions(writing),
            form=source.form if same else form_of(tabled.codecs),
            stream=word == STREAM or not isinstance(sink, Path),
        )

    def read_table(self, path: Path, where: str) -> Any:
        """The whole table of an IPC file (a Minari part file; see :class:`TableFile`)."""
        import pyarrow as pa
        import pyarrow.ipc as ipc

        from rltscan.io import parquet

        with parquet.structure(where, "its Arrow data cannot be read"):
            return ipc.open_file(pa.memory_map(str(path), "r")).read_all()

    def schema(self, path: Path, where: str) -> Any:
        """The schema of an IPC file (see :class:`TableFile`)."""
        return self.read_table(path, where).schema

    def write_table(self, table: Any, dst: Path, added: Additions) -> int:
        """An IPC file at temp path ``dst`` (see :class:`TableFile`)."""
        return write_arrow(table, dst, added, stream=False, atomic=False)


FORMAT = Arrow()
