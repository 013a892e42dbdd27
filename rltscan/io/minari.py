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

Owns: what every writer of a Minari dataset shares (the infos struct column, the
``dataset_size`` update, the episode directories), the streaming and sharded engines
included. Detecting a dataset, reading it and writing back through its backend's row is
the Minari registry row, :mod:`rltscan.io.formats.minari`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

import rltscan.io.parquet as parquet
from rltscan.errors import DataError, InputFileError, OutputRefusedError
from rltscan.io.atomic import atomic_path
from rltscan.io.hdf5 import as_info

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


def episode_dirs(root: Path) -> list[Path]:
    data = root / "data"
    try:
        dirs = [p for p in data.iterdir() if p.is_dir() and EPISODE_DIR.match(p.name)]
    except OSError as err:
        raise InputFileError(
            f"{data} cannot be listed ({err.strerror or err}); check its permissions"
        ) from None
    return sorted(dirs, key=lambda p: int(p.name))  # numeric: 2 before 10
