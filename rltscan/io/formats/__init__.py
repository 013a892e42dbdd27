"""Formats behind one interface: each file format rltscan reads and writes back into is
one folder here implementing :class:`~rltscan.io.formats.protocol.Format`, and one row of
:data:`~rltscan.io.formats.registry.FORMATS`.

Owns: every decision that depends on the format. May import :mod:`rltscan.io`'s readers
and writers (lazily: detecting HDF5 loads no pyarrow, Parquet no h5py) and
:mod:`rltscan.errors`; nothing above io.

Adding a format: a folder ``rltscan/io/formats/<name>/`` whose ``__init__`` defines the
row (a subclass of :class:`Format`, which holds the common defaults) as ``FORMAT``, and that row in
:data:`~rltscan.io.formats.registry.FORMATS`. Nothing else names it:
``tests/formats/test_formats_registry.py`` checks the protocol and that no module outside this
package compares format names.
"""

from __future__ import annotations

from rltscan.io.formats.protocol import (
    Format,
    OpenOptions,
    Record,
    Sniffed,
    Streamed,
    Tabled,
    TableFile,
    Writing,
)
from rltscan.io.formats.registry import (
    DIRECTORIES,
    FORMATS,
    SUFFIXES,
    TO,
    named,
    sniff_bytes,
    sniff_path,
    to_word,
)

__all__ = [
    "DIRECTORIES",
    "FORMATS",
    "SUFFIXES",
    "TO",
    "Format",
    "OpenOptions",
    "Record",
    "Sniffed",
    "Streamed",
    "TableFile",
    "Tabled",
    "Writing",
    "named",
    "sniff_bytes",
    "sniff_path",
    "to_word",
]
