"""LeRobot dataset directories (README "Minari and LeRobot datasets").

A LeRobot dataset is a directory with ``meta/info.json`` (``codebase_version``,
``features``, ...) and its frames in Parquet files under ``data/``, so it is composed on
Parquet (each data file is read and written by :mod:`rltscan.io.parquet`); this module
owns only LeRobot's rules on top (its metadata, conventions and statistics). A LeRobot
dataset is found and walked as a sharded dataset (:mod:`rltscan.io.shards`), not by a
registry row of its own:

* v2.0 / v2.1: ``data/chunk-XXX/episode_XXXXXX.parquet``, one episode per file;
* v3.0: ``data/chunk-XXX/file-YYY.parquet``, many whole episodes per file (an
  episode never spans two files: ``meta/episodes/`` gives each one ``data/chunk_index``
  and ``data/file_index``), in ``index`` order.

One row per frame: ``next.reward`` (r_t), ``next.done`` (the episode ended after this
frame), ``episode_index``, ``frame_index`` (aliases in the role table, rltscan.roles). The
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

LeRobot also keeps per-feature statistics, read for normalisation: v2.0
``meta/stats.json``; v2.1 ``meta/episodes_stats.jsonl`` (one line per episode; lerobot
aggregates them when it loads); v3.0 ``meta/stats.json`` and, per episode, the columns
``stats/<feature>/<stat>`` of ``meta/episodes/chunk-XXX/file-YYY.parquet``. Every stat
of a scalar feature is a list of one value (``count`` of one integer). The outputs get
the same entries, with the stat names the dataset's own entries use (lerobot 0.4 adds
the quantiles ``q01`` ... ``q99``), computed in float64 from the written columns:
``min``, ``max``, ``mean``, ``std`` (population) and ``count`` exactly, quantiles exactly
(:func:`numpy.quantile`, linear; lerobot estimates them from a 5000-bin histogram), and
the dataset-wide entries from all the frames at once (lerobot aggregates per-episode
entries). :func:`metadata_updates` gives every changed ``meta/`` file; the shard
engine stages them in the same journalled commit as the data files, and the report
names them (:func:`updates_note`). The data files' own ``datasets`` features (their
``huggingface`` schema metadata) declare the outputs too (:mod:`rltscan.io.hf`, where
the Parquet writer adds them).
"""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rltscan.errors import InputFileError

INFO = "meta/info.json"
STATS = "meta/stats.json"
EPISODES_STATS = "meta/episodes_stats.jsonl"  # v2.1
EPISODES_DIR = "meta/episodes"  # v3.0: chunk-XXX/file-YYY.parquet, one row per episode
# The stats lerobot writes for a feature when the dataset has no entry to copy them
# from: v2.0 compute_stats (mean, std, max, min), v2.1 get_feature_stats, and lerobot
# 0.4's (DEFAULT_QUANTILES 0.01, 0.10, 0.50, 0.90, 0.99).
DEFAULT_STATS = {
    "v2.0": ("mean", "std", "max", "min"),
    "v2.1": ("min", "max", "mean", "std", "count"),
    "v3.0": ("min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"),
}
_QUANTILE = re.compile(r"q(\d\d)")
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


def json_bytes(obj: Any) -> bytes:
    """A JSON file as lerobot's ``write_json`` writes it (``info.json``, ``stats.json``:
    ``json.dump(indent=4, ensure_ascii=False)``)."""
    return json.dumps(obj, indent=4, ensure_ascii=False).encode("utf-8")


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


# --------------------------------------------------------------------------- statistics


def computable(stat: str) -> bool:
    """Whether rltscan can compute the stat ``stat`` (lerobot's names)."""
    return stat in ("min", "max", "mean", "std", "count") or bool(_QUANTILE.fullmatch(stat))


def stat_names(entries: Iterable[Any], default: Sequence[str]) -> tuple[str, ...]:
    """The stats the dataset keeps per feature: the most common set of names among its
    ``entries`` (each a feature's ``{stat: value}``), those rltscan can compute, in
    their order; ``default`` when no entry gives one."""
    sets = Counter(tuple(e) for e in entries if isinstance(e, Mapping) and e)
    for names, _ in sets.most_common():
        kept = tuple(n for n in names if computable(n))
        if kept:
            return kept
    return tuple(default)


def scalar_stats(x: Any, names: Sequence[str]) -> dict[str, list[Any]]:
    """lerobot's statistics of a scalar feature's frames ``x`` (1-D, at least one):
    each a list of one float (shape ``[1]``), ``count`` a list of one int."""
    import numpy as np

    v = np.asarray(x, dtype=np.float64)
    out: dict[str, list[Any]] = {}
    for name in names:
        if name == "count":
            out[name] = [int(v.size)]
            continue
        q = _QUANTILE.fullmatch(name)
        if q:
            value = np.quantile(v, int(q.group(1)) / 100)
        else:
            value = {"min": np.min, "max": np.max, "mean": np.mean, "std": np.std}[name](v)
        out[name] = [float(value)]
    return out


def read_outputs(files: Sequence[Path]) -> tuple[Any, dict[str, Any]]:
    """``episode_index`` and rltscan's output columns (those the first file's ``rltscan``
    metadata lists) of the data files ``files``, concatenated in file order."""
    import numpy as np
    import pyarrow.parquet as pq

    from rltscan.io import parquet

    names = parquet.recorded_outputs(pq.read_schema(files[0]).metadata)
    if not names:
        return np.zeros(0, np.int64), {}
    tables = [pq.read_table(f, columns=["episode_index", *names]) for f in files]
    episode = np.concatenate([t.column("episode_index").to_numpy() for t in tables])
    columns = {n: np.concatenate([t.column(n).to_numpy() for t in tables]) for n in names}
    return episode, columns


def per_episode(episode: Any, columns: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """The frames of every output column split by ``episode_index``, in frame order."""
    import numpy as np

    order = np.argsort(episode, kind="stable")
    ids, starts = np.unique(episode[order], return_index=True)
    bounds = [*starts.tolist(), len(order)]
    return {
        int(e): {n: c[order[bounds[i] : bounds[i + 1]]] for n, c in columns.items()}
        for i, e in enumerate(ids)
    }


def with_stats(
    stats: Mapping[str, Any], columns: Mapping[str, Any], default: Sequence[str]
) -> dict[str, Any]:
    """``stats`` (``{feature: {stat: value}}``) with an entry for every column of
    ``columns``, with the stat names its other entries use; every other entry kept."""
    names = stat_names((v for k, v in stats.items() if k not in columns), default)
    out = dict(stats)
    for name, x in columns.items():
        out[name] = scalar_stats(x, names)
    return out


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise InputFileError(
            f"{path} cannot be read as JSON ({err}); the dataset is damaged"
        ) from None


def _episode(frames: Mapping[int, Any], e: Any, where: Path) -> Any:
    try:
        return frames[int(e)]
    except (KeyError, TypeError, ValueError):
        raise InputFileError(
            f"{where} lists episode {e!r}, which no data file holds; the dataset is damaged "
            "(rebuild its meta/ with lerobot)"
        ) from None


def _stats_json(root: Path, columns: Mapping[str, Any], default: Sequence[str]) -> dict[str, bytes]:
    path = root / STATS
    if not path.is_file():
        return {}
    old = _read_json(path)
    if not isinstance(old, dict):
        raise InputFileError(f"{path} is not a JSON object; the dataset is damaged")
    new = with_stats(old, columns, default)
    return {} if new == old else {STATS: json_bytes(new)}


def _episodes_stats_jsonl(root: Path, frames: Mapping[int, Any]) -> dict[str, bytes]:
    path = root / EPISODES_STATS
    if not path.is_file():
        return {}
    lines, changed = [], False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
            stats = dict(item["stats"])
            episode = item["episode_index"]
        except (ValueError, KeyError, TypeError):
            raise InputFileError(
                f"{path} line {n + 1} is not an episode's stats; the dataset is damaged"
            ) from None
        new = with_stats(stats, _episode(frames, episode, path), DEFAULT_STATS["v2.1"])
        changed |= new != stats
        lines.append(json.dumps({**item, "stats": new}, ensure_ascii=False))
    if not changed:
        return {}
    return {EPISODES_STATS: "".join(line + "\n" for line in lines).encode("utf-8")}


def _episodes_parquet(root: Path, frames: Mapping[int, Any]) -> dict[str, bytes]:
    """v3.0: each ``meta/episodes`` file with the ``stats/<output>/<stat>`` columns
    (``list<double>``, ``count`` ``list<int64>``) set for its rows' episodes."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out: dict[str, bytes] = {}
    outputs = next(iter(frames.values()), {})
    for path in sorted((root / EPISODES_DIR).glob("*/*.parquet")):
        table = pq.read_table(path)
        if "episode_index" not in table.column_names:
            raise InputFileError(f"{path} has no episode_index column; the dataset is damaged")
        existing: dict[str, dict[str, None]] = {}
        for col in table.column_names:
            parts = col.split("/")
            if len(parts) == 3 and parts[0] == "stats" and parts[1] not in outputs:
                existing.setdefault(parts[1], {})[parts[2]] = None
        names = stat_names(existing.values(), DEFAULT_STATS["v3.0"])
        rows = [_episode(frames, e, path) for e in table.column("episode_index").to_pylist()]
        new = table
        for output in outputs:
            stats = [scalar_stats(r[output], names) for r in rows]
            for name in names:
                kind = pa.int64() if name == "count" else pa.float64()
                values = pa.array([s[name] for s in stats], pa.list_(kind))
                new = _set_column(new, f"stats/{output}/{name}", values, _template(table, kind))
        if new.equals(table, check_metadata=True):
            continue
        sink = io.BytesIO()
        pq.write_table(new, sink, compression=_codec(path))
        out[path.relative_to(root).as_posix()] = sink.getvalue()
    return out


def _codec(path: Path) -> str:
    """The compression of the Parquet file's first column chunk (what a rewrite keeps)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(path).metadata
    if not meta.num_row_groups or meta.num_columns == 0:
        return "snappy"
    codec = meta.row_group(0).column(0).compression.lower()
    return "none" if codec == "uncompressed" else codec


def _template(table: Any, kind: Any) -> str | None:
    """A ``stats/...`` column of ``table`` holding ``list<kind>``: the one whose
    ``datasets`` feature (``huggingface`` schema metadata) a new such column copies."""
    import pyarrow as pa

    for field in table.schema:
        if field.name.startswith("stats/") and field.type == pa.list_(kind):
            return field.name
    return None


def _set_column(table: Any, name: str, values: Any, template: str | None) -> Any:
    """``table`` with column ``name`` replaced (same place) or appended, and declared in
    the ``huggingface`` schema metadata as ``template`` is, when the file has one (a
    file written by ``datasets``), so ``datasets`` reads it with the same feature type."""
    import pyarrow as pa

    if name in table.column_names:
        i = table.column_names.index(name)
        return table.set_column(i, pa.field(name, values.type), values)
    new = table.append_column(pa.field(name, values.type), values)
    meta = dict(table.schema.metadata or {})
    try:
        hf = json.loads(meta[b"huggingface"])
        features = hf["info"]["features"]
        features[name] = features[template]
    except (KeyError, TypeError, ValueError):
        return new
    meta[b"huggingface"] = json.dumps(hf).encode("utf-8")
    return new.replace_schema_metadata(meta)


def metadata_updates(root: Path, written: Sequence[Path]) -> dict[str, bytes]:
    """The ``meta/`` files of the LeRobot dataset at ``root`` that change once its data
    files are replaced by ``written`` (the same files with rltscan's outputs): their new
    contents by path relative to ``root``. ``meta/info.json`` declares the outputs that
    it does not declare yet; the stats files (those the dataset has) get every output's
    entries, recomputed from ``written``; every other entry is kept as it was."""
    info = read_info(root)
    version = info["codebase_version"]
    out: dict[str, bytes] = {}
    new = undeclared_outputs(info, written[0])
    if new:
        out[INFO] = json_bytes(declare(info, new))
    episode, columns = read_outputs(written)
    if not columns:
        return out
    frames = per_episode(episode, columns)
    out.update(_stats_json(root, columns, DEFAULT_STATS[version]))
    if version == "v2.1":
        out.update(_episodes_stats_jsonl(root, frames))
    if version == "v3.0":
        out.update(_episodes_parquet(root, frames))
    return out


def updates_note(updates: Mapping[str, bytes]) -> str:
    """The report's note naming the ``meta/`` files :func:`metadata_updates` changed:
    ``meta/info.json`` for its features, every other one for the outputs' statistics."""
    stats = [rel for rel in updates if rel != INFO]
    parts = []
    if INFO in updates:
        parts.append(f'{INFO} "features" declares the outputs')
    if stats:
        parts.append(f"their statistics were added to {', '.join(stats)}")
    return "LeRobot metadata brought up to date: " + "; ".join(parts)
