"""Minari dataset directories (docs/CONVENTIONS.md §7.2): ``data/metadata.json`` plus either
``data/main_data.hdf5`` (episode groups) or ``data/<id>/*.parquet|*.arrow``.

In the Arrow/Parquet backends every column of an episode has ``T+1`` rows (the
observations need them); the last row of rewards, flags and actions is padding
and is dropped on read. Outputs are written with that padding row (NaN) so the
episode tables stay rectangular.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from rltscan.errors import DataError, InputFileError
from rltscan.io import hdf5, parquet
from rltscan.io.atomic import atomic_path
from rltscan.io.columns import ColumnInfo
from rltscan.io.source import Layout, Source

EPISODE_DIR = re.compile(r"^\d+$")


def open_dataset(root: Path, *, backend: str, layout: Layout | None) -> Source:
    if layout not in (None, "episodes"):
        raise DataError(
            f"{root} is a Minari dataset (one group per episode); drop --layout {layout}"
        )
    if backend == "hdf5":
        main = root / "data" / "main_data.hdf5"
        if not main.is_file():
            raise InputFileError(
                f"{root} has no data/main_data.hdf5; the Minari dataset is incomplete"
            )
        source = hdf5.open_source(main, layout="episodes", display=str(root))
        source.format, source.backend = "minari", "hdf5"
        return source
    return _open_columnar(root, backend)


def episode_dirs(root: Path) -> list[Path]:
    data = root / "data"
    try:
        dirs = [p for p in data.iterdir() if p.is_dir() and EPISODE_DIR.match(p.name)]
    except OSError as err:
        raise InputFileError(
            f"{data} cannot be listed ({err.strerror or err}); check its permissions"
        ) from None
    return sorted(dirs, key=lambda p: int(p.name))  # numeric: 2 before 10


def _part(directory: Path, backend: str) -> Path:
    suffix = ".parquet" if backend == "parquet" else ".arrow"
    parts = sorted(directory.glob(f"*{suffix}"))
    if len(parts) != 1:
        raise InputFileError(
            f"{directory} has {len(parts)} {suffix} files; rltscan reads one part per episode"
        )
    return parts[0]


def _open_columnar(root: Path, backend: str) -> Source:
    dirs = episode_dirs(root)
    if not dirs:
        raise InputFileError(f"{root} has no episode directories under data/; nothing to read")
    files = [_part(d, backend) for d in dirs]
    opener = parquet.open_parquet if backend == "parquet" else parquet.open_arrow
    first = opener(files[0])
    columns = {k: ColumnInfo(k, v.shape, v.dtype) for k, v in first.columns.items()}
    cache: dict[Path, Source] = {files[0]: first}

    def read(name: str) -> list[np.ndarray]:
        out = []
        for f in files:
            src = cache.setdefault(f, opener(f))
            if name not in src.columns:
                raise DataError(
                    f'{f} has no column "{name}" although {files[0]} has it; '
                    "every episode needs the same columns"
                )
            arr = src.read(name)
            out.append(np.asarray(arr))
        return out

    return Source(
        format="minari",
        layout="episodes",
        where=str(root),
        path=root,
        columns=columns,
        read=read,
        episode_keys=[d.name for d in dirs],
        padded=True,
        backend=backend,
    )


def existing_columnar(root: Path, backend: str, names: list[str]) -> list[str]:
    import pyarrow.parquet as pq

    f = _part(episode_dirs(root)[0], backend)
    if backend == "parquet":
        have = pq.ParquetFile(f).schema_arrow.names
    else:
        have = list(parquet.open_arrow(f).columns)
    return [n for n in names if n in have]


def write_columnar(
    root: Path,
    backend: str,
    outputs: Mapping[str, list[np.ndarray]],
    metadata: Mapping[str, Any],
    overwrite: bool,
) -> int:
    """Every episode's part file rewritten with the outputs (plus one NaN padding row).

    All temp files are written first; only then is each moved over its original,
    so an error or interrupt while writing changes nothing.
    """
    files = [_part(d, backend) for d in episode_dirs(root)]
    written = 0
    with contextlib.ExitStack() as stack:
        for i, f in enumerate(files):
            tmp = stack.enter_context(atomic_path(f))
            padded = {
                name: np.append(parts[i], np.array([np.nan], dtype=parts[i].dtype))
                for name, parts in outputs.items()
            }
            where = str(f)
            if backend == "parquet":
                written += parquet.write_parquet(
                    f,
                    tmp,
                    outputs=padded,
                    metadata=metadata,
                    overwrite=overwrite,
                    where=where,
                    atomic=False,
                )
            else:
                table = parquet.read_table(f, "arrow", where)
                written += parquet.write_arrow(
                    table,
                    tmp,
                    outputs=padded,
                    metadata=metadata,
                    overwrite=overwrite,
                    where=where,
                    stream=False,
                    atomic=False,
                )
    return written
