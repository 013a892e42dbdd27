"""Reading trajectory files and writing results back alongside them.

``open_input`` detects the format (magic bytes) and layout through the format registry
(:mod:`rltscan.io.formats`) and returns a :class:`~rltscan.io.source.Source`;
``layout.prepare`` turns it into estimator arguments; ``write_back`` puts results next
to their sources. h5py and pyarrow are imported lazily, only in the format modules
(tensordict only in :mod:`rltscan.io.torchrl`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import BinaryIO

from rltscan.errors import InputFileError
from rltscan.io.formats import OpenOptions, named, sniff_bytes, sniff_path
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
    """Open ``path`` (``-`` for stdin) read-only and detect format and layout.

    Args:
        path: a file, a dataset/storage directory, or ``-``.
        group: ``--group`` (HDF5).
        layout: ``--layout`` (None: detected).
        rewards: ``--rewards`` (helps find an HDF5 group's layout).
        stdin: the stream ``-`` reads (default: the process's stdin).

    Returns:
        The source, from its format's registry row (:mod:`rltscan.io.formats`).
    """
    if path == "-":
        return _open_stdin(stdin or sys.stdin.buffer, layout)
    sniffed = sniff_path(Path(path))
    options = OpenOptions(group=group, layout=layout, rewards=rewards, where=path)
    return named(sniffed.format).open(sniffed, options)


def _open_stdin(stream: BinaryIO, layout: Layout | None) -> Source:
    if stream.isatty():
        raise InputFileError(
            "INPUT is '-' but stdin is a terminal; pipe Parquet or Arrow data into it"
        )
    data = stream.read()
    word = sniff_bytes(data[:16])
    if word is None:
        if not data:
            raise InputFileError("stdin is empty; pipe Parquet or Arrow IPC data into '-'")
        raise InputFileError(
            f"stdin is not Parquet or Arrow IPC (starts with {data[:4]!r}); "
            "pipe Parquet or Arrow data, or pass a file path"
        )
    return named(word).open_bytes(data, word, "stdin", OpenOptions(layout=layout))
