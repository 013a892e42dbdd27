"""Which file format is this? Magic bytes first, then the suffix (docs/CONVENTIONS.md §7.3).

``sniff_path`` for paths, ``sniff_bytes`` for stdin. Pure Python: no h5py/pyarrow.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rltscan.errors import InputFileError
from rltscan.io.torchrl import is_zip_storage, storage_kind

Format = Literal["hdf5", "parquet", "arrow", "arrow-stream", "minari", "torchrl"]

# What a directory input can be, for the message that refuses one that is none of them.
DIRECTORIES = (
    "rltscan cannot read: it holds no Parquet files (*.parquet) and is not a Minari "
    "dataset (data/metadata.json), a LeRobot dataset (meta/info.json) or a TorchRL storage "
    "(a TensorDict memmap_ directory with meta.json, or a replay buffer's dumps directory); "
    "pass one of those, a glob such as 'data/*.parquet', or one HDF5, Parquet or Arrow file"
)

HDF5_MAGIC = b"\x89HDF\r\n\x1a\n"
PARQUET_MAGIC = b"PAR1"
ARROW_FILE_MAGIC = b"ARROW1"
ARROW_STREAM_CONTINUATION = b"\xff\xff\xff\xff"

SUFFIXES: dict[str, Format] = {
    ".h5": "hdf5",
    ".hdf5": "hdf5",
    ".hdf": "hdf5",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".arrow": "arrow",
    ".feather": "arrow",
    ".ipc": "arrow",
    ".arrows": "arrow-stream",
}


@dataclass(frozen=True)
class Sniffed:
    """The detected format; for Minari, which backend and where its data lives."""

    format: Format
    path: Path
    # minari: "hdf5" | "parquet" | "arrow"; torchrl: "memmap" | "replay-buffer" | "torch-save"
    backend: str | None = None


def sniff_bytes(head: bytes) -> Format | None:
    """Format from the first bytes of a file or stream, or None if unknown."""
    if head.startswith(HDF5_MAGIC):
        return "hdf5"
    if head.startswith(PARQUET_MAGIC):
        return "parquet"
    if head.startswith(ARROW_FILE_MAGIC):
        return "arrow"
    if head.startswith(ARROW_STREAM_CONTINUATION):
        return "arrow-stream"
    return None


def _minari_backend(root: Path) -> Format:
    meta = root / "data" / "metadata.json"
    try:
        record = json.loads(meta.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise InputFileError(
            f"{meta} is not readable JSON ({err.__class__.__name__}); "
            "repair the Minari metadata or pass the main_data.hdf5 file"
        ) from None
    if not isinstance(record, dict):
        raise InputFileError(
            f"{meta} holds a JSON {type(record).__name__}, not an object; "
            "repair the Minari metadata or pass the main_data.hdf5 file"
        )
    data_format = record.get("data_format", "hdf5")
    if not isinstance(data_format, str) or data_format not in ("hdf5", "parquet", "arrow"):
        shown = json.dumps(data_format)[:40]
        raise InputFileError(
            f'{meta} has data_format {shown}; rltscan reads "hdf5", "parquet", "arrow"'
        )
    return data_format  # type: ignore[return-value]


def sniff_path(path: Path) -> Sniffed:
    """Detect the format of ``path`` (a file or a Minari dataset directory)."""
    if not path.exists():
        raise InputFileError(f"{path} does not exist; check the path")
    if path.is_dir():
        if (path / "data" / "metadata.json").is_file():
            return Sniffed("minari", path, _minari_backend(path))
        if (path / "data" / "main_data.hdf5").is_file():
            return Sniffed("minari", path, "hdf5")
        kind = storage_kind(path)
        if kind is not None:
            return Sniffed("torchrl", path, kind)
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
    found = sniff_bytes(head)
    if found is not None:
        return Sniffed(found, path)
    if is_zip_storage(head):  # torch.save writes a zip (so does tensordict's .tdz)
        return Sniffed("torchrl", path, "torch-save")
    suffix = SUFFIXES.get(path.suffix.lower())
    if len(head) == 0:
        raise InputFileError(f"{path} is empty; pass an HDF5, Parquet or Arrow file")
    if suffix is not None:
        raise InputFileError(
            f"{path} is not a valid {suffix} file (bad magic bytes {head[:4]!r}); "
            "the file is corrupt or has the wrong suffix"
        )
    raise InputFileError(
        f"{path} is not HDF5, Parquet or Arrow (starts with {head[:4]!r}); "
        "pass an .h5, .parquet or .arrow file"
    )


def output_format(path: Path, input_format: Format) -> Format:
    """The format of ``-o PATH``: by suffix, else the input's own."""
    found = SUFFIXES.get(path.suffix.lower())
    if found is None:
        return "parquet" if input_format in ("arrow-stream",) else input_format
    return found
