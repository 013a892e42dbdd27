"""TorchRL storages as a registry row: a ``TensorDict.memmap_`` directory, a replay
buffer's ``dumps`` directory, a ``torch.save`` file (a zip). Owns their detection,
opening (read whole), which output names exist, writing back into the storage (or a
new HDF5 file, as ``TensorDict.to_h5`` would) and the storage as one table. The reading
and writing themselves are :mod:`rltscan.io.torchrl`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from rltscan.io.formats.protocol import Format, OpenOptions, Sniffed, Tabled, Writing

if TYPE_CHECKING:
    from rltscan.io.layout import Prepared
    from rltscan.io.source import Source

WORD = "torchrl"


class TorchRL(Format):
    """The TorchRL row (module doc)."""

    name = WORD
    title = "TorchRL"
    words = (WORD,)
    arrays = True  # [B, T] / [T, B] batches (--layout), no list cells

    def sniff(self, path: Path, head: bytes | None) -> Sniffed | None:
        """A storage directory, or a zip (``torch.save`` and tensordict's ``.tdz``)
        (see :meth:`Format.sniff`)."""
        from rltscan.io import torchrl

        if head is None:
            kind = torchrl.storage_kind(path)
            return None if kind is None else Sniffed(WORD, path, kind)
        return Sniffed(WORD, path, torchrl.SAVED) if torchrl.is_zip_storage(head) else None

    def open(self, sniffed: Sniffed, options: OpenOptions) -> Source:
        """See :meth:`Format.open` and :func:`rltscan.io.torchrl.open_source`."""
        from rltscan.io import torchrl

        return torchrl.open_source(
            sniffed.path,
            kind=sniffed.backend or torchrl.MEMMAP,
            layout=options.layout,
            group=options.group,
        )

    def existing(self, source: Source, names: list[str]) -> list[str]:
        """Keys at the storage's root (see :meth:`Format.existing`)."""
        from rltscan.io import torchrl

        return torchrl.existing(source, names)

    def write_back(self, writing: Writing, prepared: Prepared, target: Any) -> int | None:
        """In place: new leaves of the storage (or the saved file rewritten); to an HDF5
        file: the TensorDict as ``to_h5`` lays it out (see :meth:`Format.write_back`)."""
        from rltscan.io import torchrl
        from rltscan.io.formats.hdf5 import WORD as HDF5

        if target.kind == "inplace":
            return torchrl.write_back(
                writing.source,
                writing.outputs,
                template=prepared.template,
                metadata=writing.record.metadata,
                overwrite=writing.overwrite,
            )
        if target.format == HDF5:
            return torchrl.write_hdf5(
                writing.source, target.path, writing.outputs, attrs=writing.record.attrs
            )
        return None

    def to_table(self, source: Source, *, same: bool) -> Tabled:
        """Every key a column, one row per step (see :meth:`Format.to_table`)."""
        from rltscan.io import torchrl

        table, plan = torchrl.table(source)
        return Tabled(table, plan["layout"], dict(plan.get("codecs") or {}))


FORMAT = TorchRL()
