"""The one table of formats: an ordered tuple of rows, each a
:class:`~rltscan.io.formats.protocol.Format`, and the decisions read from it.

Every question that depends on the format (which one a path or stdin holds, which
suffix ``-o`` names, what ``--to`` means, whether the streaming engine can walk it,
how outputs go back into it) is asked of a row here; no other module compares format
names. Adding a format is one folder under ``rltscan/io/formats/`` and one row below.
Detection (docs/CONVENTIONS.md §7.3): a directory is asked of each row in order; a file
by its magic bytes first, then each row's own test (a zip), the suffix only names the
format in the message that refuses a corrupt file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from rltscan.errors import InputFileError
from rltscan.io.formats import arrow, hdf5, minari, parquet, torchrl
from rltscan.io.formats.protocol import Format, Sniffed

# Order matters only where two rows could claim one path: directories are asked in this
# order (a Minari dataset before a TorchRL storage).
FORMATS: tuple[Format, ...] = (
    hdf5.FORMAT,
    parquet.FORMAT,
    arrow.FORMAT,
    minari.FORMAT,
    torchrl.FORMAT,
)

# What a directory input can be, for the message that refuses one that is none of them.
DIRECTORIES = (
    "rltscan cannot read: it holds no Parquet files (*.parquet) and is not a Minari "
    "dataset (data/metadata.json), a LeRobot dataset (meta/info.json) or a TorchRL storage "
    "(a TensorDict memmap_ directory with meta.json, or a replay buffer's dumps directory); "
    "pass one of those, a glob such as 'data/*.parquet', or one HDF5, Parquet or Arrow file"
)

_BY_WORD: dict[str, Format] = {word: row for row in FORMATS for word in row.words}
SUFFIXES: dict[str, str] = {s: word for row in FORMATS for s, word in row.suffixes}
# ``--to`` words in registry order (the first is the default for stdout)
TO: tuple[str, ...] = tuple(row.to for row in FORMATS if row.to is not None)


def named(word: str) -> Format:
    """The row that owns a format word.

    Args:
        word: a ``Source.format`` / ``Target.format`` word (``"arrow-stream"``, ...).

    Returns:
        Its registry row.
    """
    return _BY_WORD[word]


def sniff_bytes(head: bytes) -> str | None:
    """Format word from the first bytes of a file or stream, or None if unknown.

    Args:
        head: the first 16 bytes (or fewer).

    Returns:
        The word of the row whose magic they start with, or None.
    """
    for row in FORMATS:
        for magic, word in row.magic:
            if head.startswith(magic):
                return word
    return None


def sniff_path(path: Path) -> Sniffed:
    """Detect the format of ``path`` (a file, or a dataset/storage directory).

    Args:
        path: the input.

    Returns:
        The format word (and backend, where the row has one).

    Raises:
        InputFileError: missing, unreadable, special, empty, or no row's format.
    """
    if not path.exists():
        raise InputFileError(f"{path} does not exist; check the path")
    if path.is_dir():
        for row in FORMATS:
            found = row.sniff(path, None)
            if found is not None:
                return found
        raise InputFileError(f"{path} is a directory that {DIRECTORIES}")
    mode = os.stat(path).st_mode
    if not stat.S_ISREG(mode):
        raise InputFileError(
            f"{path} is not a regular file (a pipe or device); "
            "save it to a file first, or pipe Parquet/Arrow into '-'"
        )
    try:
        with open(path, "rb") as fh:
            head = fh.read(16)
    except OSError as err:
        raise InputFileError(
            f"{path} is not readable ({err.strerror}); check its permissions"
        ) from None
    word = sniff_bytes(head)
    if word is not None:
        return Sniffed(word, path)
    for row in FORMATS:
        found = row.sniff(path, head)
        if found is not None:
            return found
    suffix = SUFFIXES.get(path.suffix.lower())
    if len(head) == 0:
        raise InputFileError(f"{path} is empty; pass an HDF5, Parquet or Arrow file")
    if head[:4] == b"FEA1":  # pyarrow's write_feather(version=1), feather-format, R feather
        raise InputFileError(
            f"{path} is a Feather version 1 file, which rltscan does not read (Feather 2 is "
            "Arrow IPC); convert it: pyarrow.feather.write_feather(pyarrow.feather.read_table"
            "(IN), OUT) writes Feather 2, then pass OUT"
        )
    if suffix is not None:
        raise InputFileError(
            f"{path} is not a valid {suffix} file (bad magic bytes {head[:4]!r}); "
            "the file is corrupt or has the wrong suffix"
        )
    raise InputFileError(
        f"{path} is not HDF5, Parquet or Arrow (starts with {head[:4]!r}); "
        "pass an .h5, .parquet or .arrow file"
    )


def to_word(to: str | None, *, stdout: bool) -> str:
    """The format word ``--to`` names: for stdout the row's stream word (the first
    ``--to`` row when ``to`` is None), for a file its main word.

    Args:
        to: ``--to`` (checked against :data:`TO` by the CLI), or None.
        stdout: the output is ``-o -`` (or stdin's results).

    Returns:
        The word to write.
    """
    row = next(r for r in FORMATS if r.to == (to or TO[0]))
    return (row.stdout or row.words[0]) if stdout else row.words[0]
