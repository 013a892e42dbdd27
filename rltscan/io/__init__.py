"""Reading trajectory files and writing results back alongside them.

``open_input`` detects the format (magic bytes) and layout and returns a
:class:`~rltscan.io.source.Source`; ``layout.prepare`` turns it into estimator
arguments; ``write_back`` puts results next to their sources. h5py and pyarrow
are imported lazily, only here (tensordict only in :mod:`rltscan.io.torchrl`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from rltscan.errors import InputFileError
from rltscan.io.formats import sniff_bytes, sniff_path
from rltscan.io.layout import Prepared, prepare
from rltscan.io.source import LAYOUTS, Layout, Source

__all__ = ["LAYOUTS", "Layout", "Prepared", "Source", "open_input", "prepare"]


def open_input(
    path: str,
    *,
    group: str | None = None,
    layout: Layout | None = None,
    rewards: str | None = None,
    stdin: BinaryIO | None = None,
) -> Source:
    """Open ``path`` (``-`` for stdin) read-only and detect format and layout."""
    if path == "-":
        return _open_stdin(stdin or sys.stdin.buffer, layout)
    sniffed = sniff_path(Path(path))
    fmt = sniffed.format
    if fmt == "minari":
        from rltscan.io import minari

        return minari.open_dataset(sniffed.path, backend=sniffed.backend or "hdf5", layout=layout)
    if fmt == "torchrl":
        from rltscan.io import torchrl

        return torchrl.open_source(
            sniffed.path, kind=sniffed.backend or "memmap", layout=layout, group=group
        )
    if fmt == "hdf5":
        from rltscan.io import hdf5

        return hdf5.open_source(Path(path), group=group, layout=layout, rewards=rewards)
    _refuse_layout(layout, fmt, path)
    from rltscan.io import parquet

    if fmt == "parquet":
        return parquet.open_parquet(Path(path))
    if fmt == "arrow":
        return parquet.open_arrow(Path(path))
    # An IPC stream in a file (.arrows, or stream bytes under any name): a file source
    # like the others, so results go back into it (as a stream), never to stdout.
    return parquet.open_ipc(Path(path), "arrow-stream")


def _refuse_layout(layout: Layout | None, fmt: str, where: str) -> None:
    from rltscan.errors import ParameterError

    if layout not in (None, "flat"):
        raise ParameterError(
            f"{where} is {fmt} (one row per step); --layout {layout} applies to HDF5 only, "
            "drop it or pass --layout flat"
        )


def _open_stdin(stream: BinaryIO, layout: Layout | None) -> Source:
    if stream.isatty():
        raise InputFileError(
            "INPUT is '-' but stdin is a terminal; pipe Parquet or Arrow data into it"
        )
    data = stream.read()
    fmt = sniff_bytes(data[:16])
    if fmt == "hdf5":
        raise InputFileError(
            "stdin holds HDF5, which needs a seekable file; "
            "save it and pass the path instead of '-'"
        )
    if fmt is None:
        if not data:
            raise InputFileError("stdin is empty; pipe Parquet or Arrow IPC data into '-'")
        raise InputFileError(
            f"stdin is not Parquet or Arrow IPC (starts with {data[:4]!r}); "
            "pipe Parquet or Arrow data, or pass a file path"
        )
    _refuse_layout(layout, fmt, "stdin")
    from rltscan.io import parquet

    return parquet.open_bytes(data, fmt, where="stdin")
