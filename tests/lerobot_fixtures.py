"""LeRobot dataset directories written per the published schema, without lerobot.

Checked against lerobot's source (huggingface/lerobot): v2.1 is
``lerobot/common/datasets/utils.py`` at the commit that set ``CODEBASE_VERSION =
"v2.1"`` (``DEFAULT_PARQUET_PATH``, ``create_empty_dataset_info``, ``episodes.jsonl``,
``episodes_stats.jsonl``, ``tasks.jsonl``); v3.0 is lerobot 0.4.4
(``lerobot/datasets/utils.py``: ``DEFAULT_DATA_PATH``, ``DEFAULT_EPISODES_PATH``,
``DEFAULT_TASKS_PATH``, ``DEFAULT_FEATURES``, ``create_empty_dataset_info``,
``write_tasks``).

Statistics as lerobot writes them (``compute_stats.py``): v2.0 ``meta/stats.json``
with ``mean``/``std``/``max``/``min`` per feature (the v2.0 ``compute_stats``); v2.1
``meta/episodes_stats.jsonl``, one ``{"episode_index", "stats"}`` line per episode with
``min``/``max``/``mean``/``std``/``count``; v3.0 (lerobot 0.4.4, which adds the
quantiles ``q01``/``q10``/``q50``/``q90``/``q99``) the per-episode columns
``stats/<feature>/<stat>`` of ``meta/episodes/chunk-000/file-000.parquet`` (written by
``datasets``, as lerobot's v2.1 -> v3.0 conversion writes it: ``huggingface`` schema
metadata) and ``meta/stats.json`` for the whole dataset. Every stat is a list (shape
``[1]`` for a scalar feature, ``[d]`` for a vector), ``count`` a list of one int.

Frames: ``observation.state`` (fixed-size list of 4 float32), ``action`` (2 float32),
``next.reward`` float32, ``next.done`` bool (True on the last frame of every
recording), ``timestamp`` float32, ``frame_index``/``episode_index``/``index``/
``task_index`` int64, and a critic's ``value`` and ``next_value`` (float32, declared
in ``features`` as a user adding columns would).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

LENGTHS = (4, 6, 3, 5, 2, 7)
FPS = 10
TASK = "pick up the cube"


@dataclass
class Fixture:
    root: Path
    version: str
    rewards: np.ndarray  # float32 per frame, in index order
    values: np.ndarray
    next_values: np.ndarray
    episode: np.ndarray  # episode_index per frame
    data_files: list[str]  # relative paths, in data order


def _scalar(dtype: str) -> dict:
    return {"dtype": dtype, "shape": [1], "names": None}


FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [4], "names": ["x", "y", "z", "g"]},
    "action": {"dtype": "float32", "shape": [2], "names": ["dx", "dy"]},
    "next.reward": _scalar("float32"),
    "next.done": _scalar("bool"),
    "value": _scalar("float32"),
    "next_value": _scalar("float32"),
    "timestamp": _scalar("float32"),
    "frame_index": _scalar("int64"),
    "episode_index": _scalar("int64"),
    "index": _scalar("int64"),
    "task_index": _scalar("int64"),
}


def _hf_type(ft: dict, version: str) -> dict:
    """The ``datasets`` feature JSON of ``get_hf_features_from_features``, as the
    ``datasets`` of that lerobot wrote it: v2.x (lerobot 0.3, ``datasets`` <= 3.6) a
    ``Sequence``, v3.0 (lerobot 0.4, ``datasets`` >= 4, which reads both) a ``List``."""
    if ft["shape"] == [1]:
        return {"dtype": ft["dtype"], "_type": "Value"}
    return {
        "feature": {"dtype": ft["dtype"], "_type": "Value"},
        "length": ft["shape"][0],
        "_type": "List" if version == "v3.0" else "Sequence",
    }


def _table(frames: dict[str, np.ndarray], version: str) -> pa.Table:
    cols = {}
    for name, ft in FEATURES.items():
        x = frames[name]
        if ft["shape"] == [1]:
            cols[name] = pa.array(x)
        else:
            kind = pa.list_(pa.float32(), ft["shape"][0])
            cols[name] = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), type=kind)
    table = pa.table(cols)
    hf = {"info": {"features": {k: _hf_type(v, version) for k, v in FEATURES.items()}}}
    return table.replace_schema_metadata({"huggingface": json.dumps(hf)})


def _frames(rng: np.random.Generator) -> dict[str, np.ndarray]:
    n = sum(LENGTHS)
    episode = np.repeat(np.arange(len(LENGTHS)), LENGTHS).astype(np.int64)
    frame = np.concatenate([np.arange(k) for k in LENGTHS]).astype(np.int64)
    done = np.zeros(n, bool)
    done[np.cumsum(LENGTHS) - 1] = True
    return {
        "observation.state": rng.normal(size=(n, 4)).astype(np.float32),
        "action": rng.normal(size=(n, 2)).astype(np.float32),
        "next.reward": rng.normal(size=n).astype(np.float32),
        "next.done": done,
        "value": rng.normal(size=n).astype(np.float32),
        "next_value": rng.normal(size=n).astype(np.float32),
        "timestamp": (frame / FPS).astype(np.float32),
        "frame_index": frame,
        "episode_index": episode,
        "index": np.arange(n, dtype=np.int64),
        "task_index": np.zeros(n, np.int64),
    }


def _info(version: str, n_frames: int, **extra: object) -> dict:
    return {
        "codebase_version": version,
        "robot_type": "so100",
        "total_episodes": len(LENGTHS),
        "total_frames": n_frames,
        "total_tasks": 1,
        **extra,
        "fps": FPS,
        "splits": {"train": f"0:{len(LENGTHS)}"},
        "features": FEATURES,
    }


V20_STATS = ("mean", "std", "max", "min")
V21_STATS = ("min", "max", "mean", "std", "count")
V30_STATS = (*V21_STATS, "q01", "q10", "q50", "q90", "q99")


def feature_stats(x: np.ndarray, names: tuple[str, ...]) -> dict[str, list]:
    """One feature's stats as lerobot stores them: over the frames (axis 0), keeping a
    length-1 axis for a scalar feature; ``count`` is ``[frames]``."""
    v = x.astype(np.float64).reshape(len(x), -1)
    out: dict[str, list] = {}
    for name in names:
        if name == "count":
            out[name] = [len(x)]
        elif name.startswith("q"):
            out[name] = np.quantile(v, int(name[1:]) / 100, axis=0).tolist()
        else:
            out[name] = getattr(np, name)(v, axis=0).tolist()
    return out


def all_stats(frames: dict[str, np.ndarray], names: tuple[str, ...]) -> dict[str, dict]:
    return {k: feature_stats(frames[k], names) for k in FEATURES}


def _hf_list(dtype: str) -> dict:
    return {"feature": {"dtype": dtype, "_type": "Value"}, "_type": "List"}


def _write_json(obj: object, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=4, ensure_ascii=False))


def _part(frames: dict[str, np.ndarray], bounds: np.ndarray, e: int) -> dict[str, np.ndarray]:
    return {k: v[bounds[e] : bounds[e + 1]] for k, v in frames.items()}


def build(tmp: Path, version: str, seed: int = 0) -> Fixture:
    """A LeRobot ``version`` ("v2.0", "v2.1" or "v3.0") dataset under ``tmp``."""
    rng = np.random.default_rng([seed, int(version[1]), int(version[3])])
    frames = _frames(rng)
    n = len(frames["index"])
    root = tmp / f"lerobot_{version.replace('.', '_')}"
    bounds = np.concatenate([[0], np.cumsum(LENGTHS)])
    files: list[str] = []
    if version.startswith("v2"):
        chunks_size = 4  # episodes 4 and 5 go to chunk-001 (lerobot: episode // chunks_size)
        info = _info(
            version,
            n,
            total_videos=0,
            total_chunks=2,
            chunks_size=chunks_size,
            data_path="data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            video_path=None,
        )
        for e in range(len(LENGTHS)):
            rel = info["data_path"].format(episode_chunk=e // chunks_size, episode_index=e)
            part = {k: v[bounds[e] : bounds[e + 1]] for k, v in frames.items()}
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(_table(part, version), root / rel)
            files.append(rel)
        lines = [{"episode_index": e, "tasks": [TASK], "length": k} for e, k in enumerate(LENGTHS)]
        (root / "meta").mkdir(parents=True, exist_ok=True)
        (root / "meta" / "episodes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        (root / "meta" / "tasks.jsonl").write_text(
            json.dumps({"task_index": 0, "task": TASK}) + "\n"
        )
        if version == "v2.1":
            lines = [
                {"episode_index": e, "stats": all_stats(_part(frames, bounds, e), V21_STATS)}
                for e in range(len(LENGTHS))
            ]
            (root / "meta" / "episodes_stats.jsonl").write_text(
                "".join(json.dumps(x) + "\n" for x in lines)
            )
        else:
            _write_json(all_stats(frames, V20_STATS), root / "meta" / "stats.json")
    else:
        info = _info(
            version,
            n,
            chunks_size=1000,
            data_files_size_in_mb=100,
            video_files_size_in_mb=200,
            data_path="data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
            video_path=None,
        )
        # whole episodes per file: {0, 1}, {2, 3, 4}, {5}
        groups = [(0, 2), (2, 5), (5, 6)]
        episodes = []
        for f, (a, b) in enumerate(groups):
            rel = info["data_path"].format(chunk_index=0, file_index=f)
            part = {k: v[bounds[a] : bounds[b]] for k, v in frames.items()}
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            pq.write_table(_table(part, version), root / rel)
            files.append(rel)
            for e in range(a, b):
                episodes.append(
                    {
                        "episode_index": e,
                        "tasks": [TASK],
                        "length": LENGTHS[e],
                        "data/chunk_index": 0,
                        "data/file_index": f,
                        "dataset_from_index": int(bounds[e]),
                        "dataset_to_index": int(bounds[e + 1]),
                        **{
                            f"stats/{k}/{stat}": v
                            for k, st in all_stats(_part(frames, bounds, e), V30_STATS).items()
                            for stat, v in st.items()
                        },
                        "meta/episodes/chunk_index": 0,
                        "meta/episodes/file_index": 0,
                    }
                )
        ep_path = root / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
        ep_path.parent.mkdir(parents=True, exist_ok=True)
        table = pa.Table.from_pylist(episodes)
        hf = {
            "info": {
                "features": {
                    "episode_index": {"dtype": "int64", "_type": "Value"},
                    "tasks": _hf_list("string"),
                    "length": {"dtype": "int64", "_type": "Value"},
                    **{
                        k: _hf_list("int64" if k.endswith("/count") else "float64")
                        for k in table.column_names
                        if k.startswith("stats/")
                    },
                    **{
                        k: {"dtype": "int64", "_type": "Value"}
                        for k in table.column_names
                        if k.endswith("_index") and k != "episode_index"
                    },
                }
            }
        }
        table = table.replace_schema_metadata({"huggingface": json.dumps(hf)})
        pq.write_table(table, ep_path)
        # lerobot's write_tasks: a pandas DataFrame indexed by the task text (the index is
        # the task a frame loads as "task"), written with DataFrame.to_parquet
        pd.DataFrame({"task_index": [0]}, index=[TASK]).to_parquet(root / "meta" / "tasks.parquet")
        _write_json(all_stats(frames, V30_STATS), root / "meta" / "stats.json")
    _write_json(info, root / "meta" / "info.json")
    (root / "README.md").write_text("---\nlicense: apache-2.0\n---\n")
    return Fixture(
        root,
        version,
        frames["next.reward"],
        frames["value"],
        frames["next_value"],
        frames["episode_index"],
        files,
    )
