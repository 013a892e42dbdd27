"""LeRobot dataset directories (README "Minari and LeRobot datasets").

A LeRobot dataset is a directory with ``meta/info.json`` (``codebase_version``,
``features``, ...) and its frames in Parquet files under ``data/``:

* v2.0 / v2.1: ``data/chunk-XXX/episode_XXXXXX.parquet``, one episode per file;
* v3.0: ``data/chunk-XXX/file-YYY.parquet``, many whole episodes per file (an
  episode never spans two files: ``meta/episodes/`` gives each one ``data/chunk_index``
  and ``data/file_index``), in ``index`` order.

One row per frame: ``next.reward`` (r_t), ``next.done`` (the episode ended after this
frame), ``episode_index``, ``frame_index`` (the aliases of rltscan.io.columns). The
shard engine reads the data files as Parquet shards in path order (as lerobot's own
``load_nested_dataset`` sorts ``data/*/*.parquet``), which is episode order.

``next.done`` is set on the last frame of every recording ("last step of
demonstration is considered done"), so it marks where a recording stopped, not a
terminal state: unless ``--ends-are`` says otherwise such ends are truncations
(:data:`CONVENTIONS`, applied by :func:`rltscan.io.layout.prepare`, noted in the report).

LeRobot loads the data files with the Hugging Face ``datasets`` features built from
``meta/info.json`` ``features``; a column that is not declared there makes the load
fail, so every output column is declared (:func:`declare`) as LeRobot declares
``next.reward``: ``{"dtype": "float32", "shape": [1], "names": null}``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rltscan.errors import InputFileError

INFO = "meta/info.json"
VERSIONS = ("v2.0", "v2.1", "v3.0")
CONVENTIONS: dict[str, str] = {
    "ends_are": "truncated",
    "why": 'LeRobot: "next.done" marks the end of a recording, not a terminal state',
}


def is_dataset(path: Path) -> bool:
    """Whether ``path`` looks like a LeRobot dataset (``meta/info.json`` and ``data/``)."""
    return (path / INFO).is_file() and (path / "data").is_dir()


def read_info(root: Path) -> dict[str, Any]:
    """``meta/info.json``, checked to be one rltscan can keep loadable."""
    path = root / INFO
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        raise InputFileError(f"{path} cannot be read ({err}); check the file") from None
    except ValueError as err:
        raise InputFileError(f"{path} is not valid JSON ({err}); the dataset is damaged") from None
    if not isinstance(info, dict) or not isinstance(info.get("features"), dict):
        raise InputFileError(
            f'{path} has no "features" object; it is not a LeRobot dataset rltscan can read'
        )
    version = info.get("codebase_version")
    if version not in VERSIONS:
        raise InputFileError(
            f"{root} is a LeRobot dataset with codebase_version {version!r}; rltscan reads "
            f"{', '.join(VERSIONS)} (convert it with lerobot's conversion scripts)"
        )
    return info


def data_files(root: Path) -> list[Path]:
    """The frame files, ``data/<chunk>/<file>.parquet`` (what lerobot itself loads)."""
    files = [p for p in (root / "data").glob("*/*.parquet") if p.is_file()]
    if not files:
        raise InputFileError(
            f"{root} is a LeRobot dataset with no data/chunk-XXX/*.parquet files; nothing to read"
        )
    return files


def feature(dtype: str) -> dict[str, Any]:
    """How LeRobot declares a scalar per-frame column (``next.reward``)."""
    return {"dtype": dtype, "shape": [1], "names": None}


def declare(info: Mapping[str, Any], columns: Mapping[str, str]) -> dict[str, Any]:
    """``info`` with ``columns`` (name -> numpy dtype name) added to its features."""
    out = dict(info)
    features = dict(out["features"])
    for name, dtype in columns.items():
        features[name] = feature(dtype)
    out["features"] = features
    return out


def write_info(info: Mapping[str, Any], path: Path) -> None:
    """``info`` as LeRobot writes it (``json.dump(indent=4, ensure_ascii=False)``)."""
    path.write_text(json.dumps(info, indent=4, ensure_ascii=False), encoding="utf-8")


def undeclared_outputs(info: Mapping[str, Any], shard: Path) -> dict[str, str]:
    """rltscan's output columns of a written data file (those its ``rltscan`` metadata
    lists) that ``info`` does not declare as they are, with their dtypes."""
    import numpy as np
    import pyarrow.parquet as pq

    from rltscan.io import parquet

    schema = pq.read_schema(shard)
    ours = set(parquet.recorded_outputs(schema.metadata))
    out: dict[str, str] = {}
    for field in schema:
        if field.name not in ours:
            continue
        dtype = np.dtype(field.type.to_pandas_dtype()).name
        declared = info["features"].get(field.name)
        if not isinstance(declared, dict) or declared.get("dtype") != dtype:
            out[field.name] = dtype
    return out
