"""HDF5 as a registry row: detection (its signature), opening a file or one group of it
(``--group``; flat, ``[T, B]``/``[B, T]`` buffers or episode groups, read by ranges so the
streaming engine walks it in windows), writing outputs back into a copy of the file (in
place, or ``-o out.h5``), the file as a table (:func:`rltscan.io.convert.table_from_hdf5`)
and a table as a flat HDF5 file (:func:`rltscan.io.convert.write_hdf5`). The reading and
writing themselves are :mod:`rltscan.io.hdf5`; Minari's HDF5 backend composes on
:func:`write_outputs`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from rltscan.io.formats.protocol import Format, OpenOptions, Record, Sniffed, Tabled, Writing

if TYPE_CHECKING:
    from rltscan.io.layout import Prepared
    from rltscan.io.source import Source

WORD = "hdf5"


def write_outputs(writing: Writing, prepared: Prepared, target: Any, *, infos: bool) -> int:
    """Outputs written into a copy of the HDF5 file ``writing.source.path`` that replaces
    it (in place) or becomes ``target.path``; per episode where the source has episode
    groups. The provenance record is written as attributes.

    Args:
        writing: the outputs, from an HDF5 source (or a Minari dataset's main_data.hdf5).
        prepared: the estimator inputs (template dataset, episode splits).
        target: a :class:`rltscan.io.writeback.Target` (in place, or an HDF5 file).
        infos: also write each episode's output where minari reads infos.

    Returns:
        The bytes of output data written.
    """
    from rltscan.io import hdf5

    source = writing.source
    assert source.path is not None
    dst = source.path if target.kind == "inplace" else target.path
    per_episode = bool(source.episode_keys)
    shaped: dict[str, Any] = {
        n: prepared.split(v) if per_episode else v for n, v in writing.outputs.items()
    }
    return hdf5.write_outputs(
        source.path,
        dst,
        group=source.group,
        outputs=shaped,
        attrs=writing.record.attrs,
        template=prepared.template,
        episode_keys=source.episode_keys,
        overwrite=writing.overwrite,
        infos=infos and per_episode,
    )


def existing(source: Source, names: list[str], *, infos: bool) -> list[str]:
    """The ``names`` that exist where in-place outputs would go in the HDF5 file.

    Args:
        source: an HDF5 source (or a Minari dataset's main_data.hdf5).
        names: the output names.
        infos: also look in each episode's ``infos`` group (Minari).

    Returns:
        Those that exist.
    """
    from rltscan.io import hdf5

    assert source.path is not None
    return hdf5.existing_names(source.path, source.group, names, source.episode_keys, infos=infos)


def to_table(source: Source) -> Tabled:
    """An HDF5 source as one table, every dataset carried or refused by name.

    Args:
        source: an HDF5 source (or a Minari dataset's main_data.hdf5).

    Returns:
        The table, its row layout and each dataset's codec.
    """
    from rltscan.io import convert

    table, plan = convert.table_from_hdf5(source)
    return Tabled(table, plan["layout"], dict(plan.get("codecs") or {}))


def _user_block(path: Path) -> int | None:
    """The size of the user block before the HDF5 signature of ``path`` (512, 1024, ...
    up to the file's size), or None where no signature is found there."""
    signature = Hdf5.magic[0][0]
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            at = 512
            while at + len(signature) <= size:
                fh.seek(at)
                if fh.read(len(signature)) == signature:
                    return at
                at *= 2
    except OSError:
        return None
    return None


class Hdf5(Format):
    """The HDF5 row (module doc)."""

    name = WORD
    title = "HDF5"
    words = (WORD,)
    magic = ((b"\x89HDF\r\n\x1a\n", WORD),)
    suffixes = ((".h5", WORD), (".hdf5", WORD), (".hdf", WORD))
    streams = True
    arrays = True
    grouped = True
    tree = True

    def sniff(self, path: Path, head: bytes | None) -> Sniffed | None:
        """A file that starts with a user block (MATLAB's -v7.3 ``.mat``): HDF5 looks for
        its signature at 0, 512, 1024, 2048, ... (the superblock's search rule)."""
        if head is None:
            return None
        return Sniffed(WORD, path) if _user_block(path) else None

    def open(self, sniffed: Sniffed, options: OpenOptions) -> Source:
        """The file (or ``--group``) with its layout detected (see :meth:`Format.open`)."""
        from rltscan.io import hdf5

        return hdf5.open_source(
            sniffed.path, group=options.group, layout=options.layout, rewards=options.rewards
        )

    def existing(self, source: Source, names: list[str]) -> list[str]:
        """See :meth:`Format.existing`."""
        return existing(source, names, infos=False)

    def write_back(self, writing: Writing, prepared: Prepared, target: Any) -> int | None:
        """In place or to a new HDF5 file: a copy of this one (see :meth:`Format.write_back`)."""
        if target.kind != "inplace" and target.format not in self.words:
            return None
        return write_outputs(writing, prepared, target, infos=False)

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
        """A copy of the file filled window by window (see :meth:`Streamed.sink`)."""
        from rltscan.io.sinks import HDF5Sink

        assert source.path is not None
        return HDF5Sink(
            source.path,
            dst,
            group=source.group,
            shape=shape,
            time_axis=1 if source.layout == "batch-major" else 0,
            attrs=record.attrs,
            template=template,
            overwrite=overwrite,
        )

    def to_table(self, source: Source, *, same: bool) -> Tabled:
        """See :meth:`Format.to_table` and :func:`to_table`."""
        return to_table(source)

    def from_table(self, tabled: Tabled, sink: Path | BinaryIO, word: str, writing: Writing) -> int:
        """A flat HDF5 file, one dataset per column, codecs carried (see
        :meth:`Format.from_table`)."""
        from rltscan.io import convert, parquet

        assert isinstance(sink, Path)
        return convert.write_hdf5(
            tabled.table,
            sink,
            outputs=tabled.rows(writing.outputs),
            attrs=writing.record.attrs,
            overwrite=writing.overwrite,
            where=writing.source.where,
            codecs=tabled.codecs,
            like=parquet.like_column(writing.record.entry),
        )


FORMAT = Hdf5()
