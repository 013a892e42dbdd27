"""What one file format is to rltscan: the :class:`Format` protocol every registry row
implements (:mod:`rltscan.io.formats.registry`).

A row owns one family of on-disk forms (its ``words``: ``"arrow"`` and
``"arrow-stream"`` are one row) and answers, for them: is this path or these bytes mine
(``magic``, :meth:`Format.sniff`), open it as a :class:`~rltscan.io.source.Source` the
engines walk in windows (:meth:`Format.open`), which output names exist there already
(:meth:`Format.existing`), write outputs back into it (:meth:`Format.write_back`), and
to/from a pyarrow table for conversions (:meth:`Format.to_table`,
:meth:`Format.from_table`). Nothing here imports h5py or pyarrow.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from rltscan.io.layout import Prepared
    from rltscan.io.parquet import Additions
    from rltscan.io.source import Layout, Source


@dataclass(frozen=True)
class Sniffed:
    """The detected format; for Minari, which backend and where its data lives."""

    format: str  # a row's word ("hdf5", "arrow-stream", "minari", ...)
    path: Path
    # minari: "hdf5" | "parquet" | "arrow"; torchrl: "memmap" | "replay-buffer" | "torch-save"
    backend: str | None = None


@dataclass(frozen=True)
class OpenOptions:
    """How the user asked a path to be read (``--group``, ``--layout``, ``--rewards``),
    and the path as they typed it (``where``, for messages that name it so)."""

    group: str | None = None
    layout: Layout | None = None
    rewards: str | None = None
    where: str = ""


@dataclass(frozen=True)
class Tabled:
    """An input as one table (for ``-o`` to a table format): ``table`` (a pyarrow Table,
    or for a Parquet file going back to Parquet its ParquetFile), ``layout`` (how an
    output becomes the table's rows: :func:`rltscan.io.convert.output_rows`) and
    ``codecs`` (each column's codec in the input, ``{name: (codec, level)}``; empty when
    the table goes back into its own format or the input says nothing)."""

    table: Any
    layout: str = "flat"
    codecs: Mapping[str, tuple[str | None, int | None]] = field(default_factory=dict)

    def rows(self, outputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """``outputs`` (shaped like the estimator inputs) as the table's rows.

        Args:
            outputs: output name -> array.

        Returns:
            output name -> 1-D array, one entry per table row.
        """
        from rltscan.io.convert import output_rows

        return {name: output_rows(v, self.layout) for name, v in outputs.items()}

    def additions(self, writing: Writing) -> Additions:
        """What a table writer adds to this table: the run's outputs as its rows, the
        ``rltscan`` metadata entry, ``--overwrite``, messages naming the input.

        Args:
            writing: the run's outputs and their source.

        Returns:
            The additions for :func:`rltscan.io.parquet.write_parquet` and its kin.
        """
        from rltscan.io.parquet import Additions

        return Additions(
            self.rows(writing.outputs),
            writing.record.entry,
            writing.overwrite,
            writing.source.where,
        )


@dataclass(frozen=True)
class Writing:
    """What one run writes back: its ``outputs`` (output name -> array shaped like the
    estimator inputs) from ``source``, the run's provenance ``record`` and ``overwrite``
    (``--overwrite``); they travel together from :func:`rltscan.io.writeback.write_back`
    to the row that writes them (:meth:`Format.write_back`, :meth:`Format.from_table`)."""

    source: Source
    outputs: Mapping[str, np.ndarray]
    record: Record
    overwrite: bool


@dataclass(frozen=True)
class Record:
    """The run's provenance record three ways: as given (``metadata``), as the ``rltscan``
    key-value metadata entry of a table (``entry``) and as HDF5 attributes (``attrs``)."""

    metadata: Mapping[str, Any]
    entry: Mapping[str, Any]
    attrs: Mapping[str, Any]


def flat_only(layout: Layout | None, word: str, where: str) -> None:
    """Refuse ``--layout`` other than ``flat`` for a format of one row per step.

    Args:
        layout: ``--layout``.
        word: the format's word, as the message names it.
        where: how the message names the input.

    Raises:
        ParameterError: ``layout`` is not None or ``"flat"``.
    """
    from rltscan.errors import ParameterError

    if layout not in (None, "flat"):
        raise ParameterError(
            f"{where} is {word} (one row per step); --layout {layout} applies to HDF5 only, "
            "drop it or pass --layout flat"
        )


@runtime_checkable
class Format(Protocol):
    """One registry row: a file format rltscan reads and writes back into.

    A row subclasses this class: it sets ``name``, ``title`` and ``words``, implements
    :meth:`open` and :meth:`to_table`, and overrides the rest where it differs from what
    most rows share, the defaults here: no magic bytes, suffix or ``--to`` word (never a
    conversion target, never written to stdout), not streamed, no ``--group``, no tree of
    groups, no nulls; no layout beyond the magic bytes, no stdin (a seekable file is
    needed), no ``-o`` refusal of its own, outputs that clash with columns of the same
    name and go back through a table (in place too: the table written back into its own
    format)."""

    name: str  # the row's name ("hdf5", "parquet", "arrow", "minari", "torchrl")
    title: str  # how messages name it ("HDF5", "Parquet", "Arrow IPC", ...)
    words: tuple[str, ...]  # the Source.format / Target.format words it owns, main first
    magic: tuple[tuple[bytes, str], ...] = ()  # first bytes -> word (files and stdin)
    suffixes: tuple[tuple[str, str], ...] = ()  # file suffix -> word (``-o PATH``)
    to: str | None = None  # the ``--to`` word that picks it as an output table format
    stdout: str | None = None  # the word it is written to stdout as (None: never to stdout)
    streams: bool = False  # the streaming engine reads it by ranges and writes it by windows
    grouped: bool = False  # ``--group`` picks a part of it (inspect reports the group)
    tree: bool = False  # a tree of groups: an output lands at ``PATH:GROUP/NAME`` (reports)
    nullable: bool = False  # its columns may hold nulls, read as NaN (messages name them)
    arrays: bool = False  # its columns may be [T, B] / [B, T] arrays (``--layout``)

    def sniff(self, path: Path, head: bytes | None) -> Sniffed | None:
        """Whether ``path`` is this format beyond its ``magic`` (a directory layout, a
        container such as a zip); by default never (the ``magic`` says all).

        Args:
            path: the input path.
            head: its first 16 bytes, or None for a directory.

        Returns:
            The sniffed format, or None if the path is not this format.
        """
        return None

    def open(self, sniffed: Sniffed, options: OpenOptions) -> Source:
        """Open a sniffed path read-only.

        Args:
            sniffed: what :func:`rltscan.io.formats.sniff_path` found.
            options: ``--group``, ``--layout``, ``--rewards``.

        Returns:
            The source (``read_range`` set where the format can be read by windows).
        """
        ...

    def open_bytes(self, data: bytes, word: str, where: str, options: OpenOptions) -> Source:
        """Open in-memory bytes (stdin); by default refused: the format needs a seekable
        file.

        Args:
            data: the whole input.
            word: the word its magic named.
            where: how messages name it (``"stdin"``).
            options: ``--layout`` (``--group`` and ``--rewards`` do not reach stdin).

        Returns:
            The source (no path: results go to stdout).

        Raises:
            InputFileError: the default's refusal.
        """
        from rltscan.errors import InputFileError

        raise InputFileError(
            f"{where} holds {self.title}, which needs a seekable file; "
            "save it and pass the path instead of '-'"
        )

    def check_output(self, source: Source, word: str, path: Path) -> None:
        """Refuse ``-o PATH`` in format ``word`` from ``source`` (of this format) where
        it cannot be written; nothing otherwise (by default nothing is refused)."""

    def existing(self, source: Source, names: list[str]) -> list[str]:
        """The ``names`` that already exist where in-place outputs would go; by default
        those that are columns already.

        Args:
            source: an input of this format.
            names: the output names.

        Returns:
            Those that exist there (empty when nothing clashes).
        """
        return [n for n in names if n in source.columns]

    def write_back(self, writing: Writing, prepared: Prepared, target: Any) -> int | None:
        """Write the outputs where this row writes them itself: in place, or (HDF5-based
        rows) to a new HDF5 file. By default nowhere: the outputs go through a table, in
        place as the input's :meth:`to_table` written back by its :meth:`from_table`.

        Args:
            writing: the outputs, their source (of this format) and how to write them.
            prepared: the estimator inputs (template column, episode splits).
            target: a :class:`rltscan.io.writeback.Target`.

        Returns:
            The bytes of output data written, or None where the outputs go through a
            table (:meth:`to_table` then the target row's :meth:`from_table`).
        """
        return None

    def to_table(self, source: Source, *, same: bool) -> Tabled:
        """``source`` (this format) as one table, every column carried or refused by name.

        Args:
            source: the input.
            same: the table goes back into this format (codecs are then kept by form).

        Returns:
            The table with its row layout and the input's codecs.
        """
        ...

    def from_table(self, tabled: Tabled, sink: Path | BinaryIO, word: str, writing: Writing) -> int:
        """Write a table plus the outputs as this format (``word``) into ``sink``. By
        default never called: a row with no suffix and no ``--to`` word is never a target.

        Args:
            tabled: the input as a table (:meth:`to_table` of the input's row).
            sink: a new file's path, or a binary stream (stdout).
            word: which of this row's words to write.
            writing: the outputs and their source (its physical form is kept where the
                format is the same).

        Returns:
            The bytes of output data written.

        Raises:
            TypeError: the default: this row is no conversion target.
        """
        raise TypeError(f"{word} is read and written back in place, never a conversion target")


@runtime_checkable
class Streamed(Format, Protocol):
    """A row the streaming engine walks (``streams``): read by ranges (``Source.window``)
    and written back window by window into a sink."""

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
        """The window sink that writes outputs back into this format.

        Args:
            source: the input (of this format).
            dst: the file written (the input itself in place, or ``-o PATH``).
            shape: the whole output's shape (the time axis as the source's layout has it).
            record: the run's provenance record.
            template: the column whose storage new outputs copy (HDF5), or None.
            overwrite: ``--overwrite``.

        Returns:
            An :mod:`rltscan.io.sinks` sink (``write(start, stop, arrays)``, ``commit``,
            ``abort``).
        """
        ...


@runtime_checkable
class TableFile(Format, Protocol):
    """A row whose file is one table (Parquet, Arrow IPC): what Minari's columnar
    backends compose on, one part file per episode (its suffix: the row's first)."""

    def read_table(self, path: Path, where: str) -> Any:
        """The whole table of the file at ``path`` (messages name it ``where``)."""
        ...

    def schema(self, path: Path, where: str) -> Any:
        """The file's Arrow schema (reading no data where the format allows)."""
        ...

    def write_table(self, table: Any, dst: Path, added: Additions) -> int:
        """``table`` plus the ``added`` outputs written to ``dst`` in this format, not
        atomically (``dst`` is a temp path); the bytes of output data written."""
        ...
