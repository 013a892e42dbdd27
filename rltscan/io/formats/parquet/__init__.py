"""Parquet as a registry row: detection (``PAR1``), opening (by row groups, so the
streaming engine reads it in windows), stdin, writing back in place in the file's own
physical form, and writing any input's table as Parquet. The reading and writing
themselves are :mod:`rltscan.io.parquet`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from rltscan.io.formats.protocol import (
    Format,
    OpenOptions,
    Record,
    Sniffed,
    Tabled,
    Writing,
    flat_only,
)

if TYPE_CHECKING:
    from rltscan.io.parquet import Additions
    from rltscan.io.source import Source

WORD = "parquet"


class Parquet(Format):
    """The Parquet row (module doc)."""

    name = WORD
    title = "Parquet"
    words = (WORD,)
    magic = ((b"PAR1", WORD),)
    suffixes = ((".parquet", WORD), (".pq", WORD))
    to = WORD
    stdout = WORD
    streams = True
    nullable = True

    def open(self, sniffed: Sniffed, options: OpenOptions) -> Source:
        """A Parquet file, read by row groups (see :meth:`Format.open`); ``--layout``
        other than flat is refused."""
        from rltscan.io import parquet

        flat_only(options.layout, sniffed.format, options.where or str(sniffed.path))
        return parquet.open_parquet(sniffed.path)

    def open_bytes(self, data: bytes, word: str, where: str, options: OpenOptions) -> Source:
        """Parquet bytes from stdin (see :meth:`Format.open_bytes`)."""
        from rltscan.io import parquet

        flat_only(options.layout, word, where)
        return parquet.open_bytes(data, where)

    def sink(
        self,
        source: Source,
        dst: Path,
        *,
        shape: tuple[int, ...],
        record: Record,
        template: str | None,
        overwrite: bool,
    ) -> Any:
        """Outputs spilled window by window, the file rewritten in its own form at commit
        (see :meth:`Streamed.sink`)."""
        from rltscan.io.sinks import ParquetSink

        return ParquetSink(
            source.raw,
            dst,
            steps=shape[0],
            metadata=record.entry,
            overwrite=overwrite,
            where=source.where,
        )

    def to_table(self, source: Source, *, same: bool) -> Tabled:
        """Back into Parquet: the ParquetFile itself (its row groups are kept); to another
        format: the table with each column's codec (see :meth:`Format.to_table`)."""
        from rltscan.io import parquet
        from rltscan.io.physical import ParquetForm, leaves

        if same:
            return Tabled(source.raw)
        table = parquet.as_table(source.raw)
        form = source.form
        if not isinstance(form, ParquetForm):
            return Tabled(table)
        codecs = {}
        for f in table.schema:
            codec = form.codecs.get(leaves(f.name, f.type)[0], "none")
            codecs[f.name] = (None if codec == "none" else codec, None)
        return Tabled(table, codecs=codecs)

    def from_table(self, tabled: Tabled, sink: Path | BinaryIO, word: str, writing: Writing) -> int:
        """Parquet with the input's codecs carried where the input was another format
        (see :meth:`Format.from_table`)."""
        from rltscan.io import convert, parquet

        return parquet.write_parquet(
            tabled.table,
            sink,
            tabled.additions(writing),
            codecs=convert.parquet_codecs(tabled.codecs),
        )

    def read_table(self, path: Path, where: str) -> Any:
        """The whole table of a Parquet file (see :class:`TableFile`)."""
        from rltscan.io import parquet

        return parquet.read_table(path, where)

    def schema(self, path: Path, where: str) -> Any:
        """The file's Arrow schema from its footer (see :class:`TableFile`)."""
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).schema_arrow

    def write_table(self, table: Any, dst: Path, added: Additions) -> int:
        """A Parquet file at temp path ``dst`` (see :class:`TableFile`)."""
        from rltscan.io import parquet

        return parquet.write_parquet(table, dst, added, atomic=False)


FORMAT = Parquet()
