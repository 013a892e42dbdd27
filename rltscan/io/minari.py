"""Minari dataset directories (docs/CONVENTIONS.md §7.2): ``data/metadata.json`` plus either
``data/main_data.hdf5`` (episode groups) or ``data/<id>/*.parquet|*.arrow``.

In the Arrow/Parquet backends every column of an episode has ``T+1`` rows (the
observations need them); the last row of rewards, flags and actions is padding
and is dropped on read. Outputs are written with that padding row (NaN) so the
episode tables stay rectangular.

Where Minari users see the outputs: ``minari.load_dataset(...).iterate_episodes()``
reads only the standard keys and ``infos``, so every output is also written as an
info (README "Minari and LeRobot datasets"): the HDF5 dataset
``episode_<id>/infos/<name>`` and the field ``<name>`` of the ``infos`` struct column.
Minari's infos have ``T+1`` entries: entry 0 is the info of ``reset()`` and entry
``t+1`` the info returned by the ``step`` that produced ``rewards[t]``; an output of
step ``t`` is therefore entry ``t+1``, and entry 0 is NaN (:func:`as_info`). So
``episode.infos["advantages"][1:]`` lines up with ``episode.rewards``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

import rltscan.io.hdf5 as hdf5
import rltscan.io.parquet as parquet
from rltscan.errors import DataError, InputFileError, OutputRefusedError
from rltscan.io.atomic import atomic_path
from rltscan.io.columns import ColumnInfo
from rltscan.io.hdf5 import as_info
from rltscan.io.source import Layout, Source

EPISODE_DIR = re.compile(r"^\d+$")


INFOS = "infos"


def with_infos(
    table: Any,
    outputs: Mapping[str, np.ndarray],
    *,
    overwrite: bool,
    where: str,
) -> Any:
    """``table`` (one episode of a Minari Arrow/Parquet dataset, ``T+1`` rows) with each
    output added as a field of its ``infos`` struct column (created when absent).

    ``outputs`` hold ``T+1`` rows with the padding row last, as the top-level output
    columns are written; the info is that array shifted by one (:func:`as_info`). A
    field that exists is replaced only with ``--overwrite`` and only when the file's
    ``rltscan`` metadata lists it as an output, as for columns.
    """
    import pyarrow as pa

    fields: list[Any] = []
    arrays: list[Any] = []
    n = table.num_rows
    if INFOS in table.column_names:
        column = table.column(INFOS)
        if not pa.types.is_struct(column.type):
            raise DataError(
                f'{where}: column "{INFOS}" is {column.type}, not the struct column Minari '
                "writes; rltscan cannot add its outputs to it"
            )
        combined = column.combine_chunks()
        ours = set(parquet.recorded_outputs(table.schema.metadata))
        for i, field in enumerate(column.type):
            if field.name in outputs:
                if not overwrite:
                    raise OutputRefusedError(
                        f'{where} already has info "{field.name}"; pass --overwrite or --prefix P'
                    )
                if field.name not in ours:
                    raise OutputRefusedError(
                        f'{where}: info "{field.name}" was not written by rltscan; '
                        "--overwrite replaces only rltscan outputs, pass --prefix P"
                    )
                continue
            fields.append(field)
            arrays.append(combined.field(i))
    for name, values in outputs.items():
        arr = np.asarray(values)
        if len(arr) != n:
            raise DataError(f"{where}: output {name} has {len(arr)} rows, the episode {n}")
        info = as_info(arr[:-1])
        if info.ndim == 1:
            arrays.append(pa.array(info))
            fields.append(pa.field(name, arrays[-1].type))
        else:  # as minari's _encode_info: a fixed-size list with a "shape" field metadata
            flat = info.reshape(len(info), -1)
            kind = pa.list_(pa.from_numpy_dtype(flat.dtype), list_size=flat.shape[1])
            arrays.append(pa.FixedSizeListArray.from_arrays(flat.reshape(-1), type=kind))
            shape = ",".join(str(d) for d in info.shape[1:])
            fields.append(pa.field(name, kind, metadata={"shape": shape}))
    struct = pa.StructArray.from_arrays(arrays, fields=fields)
    if INFOS in table.column_names:
        return table.set_column(table.column_names.index(INFOS), INFOS, struct)
    return table.append_column(INFOS, struct)


def update_size(root: Path) -> None:
    """``dataset_size`` in ``data/metadata.json`` (MB, as minari computes it) after the
    data grew; every other key is kept. Nothing happens where the key is absent."""
    import json

    meta_path = root / "data" / "metadata.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError):
        return  # the reader already said what is wrong with it, or nothing to update
    if not isinstance(meta, dict) or "dataset_size" not in meta:
        return
    size = sum(p.stat().st_size for p in (root / "data").glob("**/*"))  # as minari does
    new = round(size / 1e6, 1)
    if meta["dataset_size"] == new:
        return
    meta["dataset_size"] = new
    with atomic_path(meta_path) as tmp:
        tmp.write_text(json.dumps(meta))


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


def part_file(directory: Path, backend: str) -> Path:
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
    files = [part_file(d, backend) for d in dirs]
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
    import pyarrow as pa
    import pyarrow.parquet as pq

    f = part_file(episode_dirs(root)[0], backend)
    if backend == "parquet":
        schema = pq.ParquetFile(f).schema_arrow
    else:
        schema = parquet.read_table(f, backend, str(f)).schema
    have = set(schema.names)
    if INFOS in have and pa.types.is_struct(schema.field(INFOS).type):
        have |= {field.name for field in schema.field(INFOS).type}  # where minari shows them
    return [n for n in names if n in have]


def write_columnar(
    root: Path,
    backend: str,
    outputs: Mapping[str, list[np.ndarray]],
    metadata: Mapping[str, Any],
    overwrite: bool,
) -> int:
    """Every episode's part file rewritten with the outputs: as columns (plus one NaN
    padding row) and as fields of the ``infos`` struct column (:func:`with_infos`).

    All temp files are written first; only then is each moved over its original,
    so an error or interrupt while writing changes nothing. ``dataset_size`` in
    ``data/metadata.json`` is brought up to date afterwards.
    """
    files = [part_file(d, backend) for d in episode_dirs(root)]
    written = 0
    with contextlib.ExitStack() as stack:
        for i, f in enumerate(files):
            tmp = stack.enter_context(atomic_path(f))
            padded = {
                name: np.concatenate(
                    [parts[i], np.full((1, *parts[i].shape[1:]), np.nan, dtype=parts[i].dtype)]
                )
                for name, parts in outputs.items()
            }
            written += write_episode(
                f, tmp, backend, padded, metadata=metadata, overwrite=overwrite, where=str(f)
            )
    update_size(root)
    return written


def write_episode(
    src: Path,
    dst: Path,
    backend: str,
    outputs: Mapping[str, np.ndarray],
    *,
    metadata: Mapping[str, Any],
    overwrite: bool,
    where: str,
) -> int:
    """One episode file ``src`` written to ``dst`` (not atomically: ``dst`` is a temp
    path) with ``outputs`` (``T+1`` rows, padding last) as columns and as infos."""
    table = parquet.read_table(src, backend, where)
    table = with_infos(table, outputs, overwrite=overwrite, where=where)
    if backend == "parquet":
        return parquet.write_parquet(
            table,
            dst,
            outputs=outputs,
            metadata=metadata,
            overwrite=overwrite,
            where=where,
            atomic=False,
        )
    return parquet.write_arrow(
        table,
        dst,
        outputs=outputs,
        metadata=metadata,
        overwrite=overwrite,
        where=where,
        stream=False,
        atomic=False,
    )
