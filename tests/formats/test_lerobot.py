"""LeRobot datasets (issue 14 item 3): v2.x (one episode per file) and v3.0 (many
episodes per file) round-trip through ``rltscan gae`` on the shard engine: outputs in
the data files, declared in ``meta/info.json``, their statistics in the dataset's stats
files, ``next.done`` read as the end of a recording (a truncation) unless
``--ends-are terminal``, and the dataset still loads the way lerobot loads it (and with
lerobot itself where it is installed).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import InputFileError
from tests import oracles
from tests.io_helpers import ROOT
from tests.lerobot_fixtures import (
    FEATURES,
    LENGTHS,
    TASK,
    V20_STATS,
    V21_STATS,
    V30_STATS,
    Fixture,
    build,
    feature_stats,
)

CPU = {"device": "cpu"}
GAMMA, LAM = 0.99, 0.95
VERSIONS = ["v2.0", "v2.1", "v3.0"]
OUTPUTS = ("advantages", "value_targets")
EPISODES_FILE = "meta/episodes/chunk-000/file-000.parquet"
STATS_FILES = {  # the stats files each version keeps (lerobot's layout)
    "v2.0": {"meta/stats.json"},
    "v2.1": {"meta/episodes_stats.jsonl"},
    "v3.0": {"meta/stats.json", EPISODES_FILE},
}


def _files(root: Path) -> dict[str, str]:
    """Every file of the dataset by relative path, with its content hash."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _column(fx: Fixture, name: str, root: Path | None = None) -> np.ndarray:
    root = root or fx.root
    return np.concatenate([pq.read_table(root / f).column(name).to_numpy() for f in fx.data_files])


def _expected(fx: Fixture, ends_are: str) -> dict[str, list]:
    last = np.append(fx.episode[1:] != fx.episode[:-1], True)  # next.done on every last frame
    return oracles.gae(
        list(fx.rewards.astype(np.float64)),
        list(fx.values.astype(np.float64)),
        list(fx.next_values.astype(np.float64)),
        list(last & (ends_are == "terminal")),
        list(last & (ends_are == "truncated")),
        gamma=GAMMA,
        lam=LAM,
    )


def _loadable(root: Path) -> None:
    """What lerobot's loaders need: every data column declared in meta/info.json
    ``features`` with its dtype (v3.0 loads the files with those features as the
    ``datasets`` schema; a column not declared fails the cast) and every data file with
    the same columns (v2.x concatenates them)."""
    info = json.loads((root / "meta" / "info.json").read_text())
    declared = {k: v for k, v in info["features"].items() if v["dtype"] != "video"}
    schemas = [pq.read_schema(p) for p in sorted((root / "data").glob("*/*.parquet"))]
    assert all(s.names == schemas[0].names for s in schemas)
    assert set(schemas[0].names) == set(declared)
    for field in schemas[0]:
        ft = declared[field.name]
        if ft["shape"] == [1]:
            assert ft["dtype"] == np.dtype(field.type.to_pandas_dtype()).name, field.name
    try:
        import datasets
    except ImportError:
        return
    # lerobot 0.4.4 (v3.0) LeRobotDataset.load_hf_dataset: load_nested_dataset with
    # get_hf_features_from_features(info["features"]); v2.x: load_dataset("parquet")
    features = {}
    for key, ft in declared.items():
        if tuple(ft["shape"]) == (1,):
            features[key] = datasets.Value(dtype=ft["dtype"])
        else:
            features[key] = datasets.Sequence(
                length=ft["shape"][0], feature=datasets.Value(dtype=ft["dtype"])
            )
    paths = [str(p) for p in sorted((root / "data").glob("*/*.parquet"))]
    if info["codebase_version"] == "v3.0":
        ds = datasets.Dataset.from_parquet(paths, features=datasets.Features(features))
    else:
        ds = datasets.load_dataset("parquet", data_files=paths, split="train")
    assert len(ds) == info["total_frames"]
    assert "advantages" in ds.column_names
    assert ds[0]["advantages"] == pytest.approx(ds[0]["advantages"])


@pytest.mark.parametrize("version", VERSIONS)
def test_gae_in_place_outputs_declared_and_loadable(version: str, tmp_path: Path) -> None:
    fx = build(tmp_path, version)
    before = _files(fx.root)
    original = json.loads((fx.root / "meta" / "info.json").read_text())
    inputs = {n: _column(fx, n) for n in FEATURES if n not in ("observation.state", "action")}
    report = api.run("gae", str(fx.root), params={"gamma": GAMMA, "lam": LAM}, **CPU)
    assert any("LeRobot" in n and "truncated" in n for n in report.notes), report.notes

    expect = _expected(fx, "truncated")
    for name in OUTPUTS:
        got = _column(fx, name)
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, expect[name], rtol=1e-5, atol=1e-5)
    for name, col in inputs.items():  # no input column changed, nor its dtype
        np.testing.assert_array_equal(_column(fx, name), col)
        assert _column(fx, name).dtype == col.dtype

    info = json.loads((fx.root / "meta" / "info.json").read_text())
    for name in OUTPUTS:
        assert info["features"][name] == {"dtype": "float32", "shape": [1], "names": None}
    assert {k: v for k, v in info.items() if k != "features"} == {
        k: v for k, v in original.items() if k != "features"
    }
    assert {k: info["features"][k] for k in original["features"]} == original["features"]
    after = _files(fx.root)
    changed = {k for k in before if before[k] != after.get(k)}
    assert changed == {*fx.data_files, "meta/info.json", *STATS_FILES[version]}  # tasks kept
    assert set(after) == set(before)  # no staging left behind
    _loadable(fx.root)


def _hf_features(path: Path) -> dict:
    """The ``datasets`` features a data file declares in its ``huggingface`` metadata."""
    return json.loads(pq.read_schema(path).metadata[b"huggingface"])["info"]["features"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("where", ["in place", "-o"])
def test_data_files_declare_the_outputs_and_the_report_names_the_metadata(
    version: str, where: str, tmp_path: Path
) -> None:
    """Each data file's embedded HF features list the new columns with their dtype (as
    ``datasets.Value``), every other feature kept; the report names meta/info.json and
    each stats file it updated."""
    fx = build(tmp_path, version)
    before = {f: _hf_features(fx.root / f) for f in fx.data_files}
    out = None if where == "in place" else tmp_path / "out"
    report = api.run("gae", str(fx.root), output=None if out is None else str(out), **CPU)
    root = fx.root if out is None else out
    for f in fx.data_files:
        features = _hf_features(root / f)
        assert {k: features[k] for k in before[f]} == before[f]
        assert list(features)[len(before[f]) :] == list(OUTPUTS)
        for name in OUTPUTS:
            assert features[name] == {"dtype": "float32", "_type": "Value"}
    (note,) = [n for n in report.notes if n.startswith("LeRobot metadata")]
    assert 'meta/info.json "features" declares the outputs' in note
    for stats_file in STATS_FILES[version]:
        assert stats_file in note
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_parquet(str(root / fx.data_files[0]))  # no features passed
    assert ds.features["advantages"] == datasets.Value("float32")


def test_the_cli_report_names_the_stats_files(tmp_path: Path) -> None:
    fx = build(tmp_path, "v3.0")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "400"}
    done = subprocess.run(
        [sys.executable, "-m", "rltscan", "gae", str(fx.root), "--device", "cpu", "--json"],
        env=env,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()
    notes = json.loads(done.stdout)["notes"]
    assert (
        'LeRobot metadata brought up to date: meta/info.json "features" declares the outputs; '
        f"their statistics were added to meta/stats.json, {EPISODES_FILE}"
    ) in notes


def test_ends_are_terminal_overrides_the_convention(tmp_path: Path) -> None:
    fx = build(tmp_path, "v3.0")
    params = {"gamma": GAMMA, "lam": LAM}
    report = api.run("gae", str(fx.root), params=params, ends_are="terminal", **CPU)
    assert any("--ends-are" in n and "terminal" in n for n in report.notes)
    assert not any('"next.done"' in n for n in report.notes)  # no convention applied
    expect = _expected(fx, "terminal")
    np.testing.assert_allclose(_column(fx, "advantages"), expect["advantages"], rtol=1e-5)


def test_output_directory_is_a_loadable_copy(tmp_path: Path) -> None:
    fx = build(tmp_path, "v3.0")
    before = _files(fx.root)
    out = tmp_path / "with_advantages"
    api.run("gae", str(fx.root), output=str(out), params={"gamma": GAMMA, "lam": LAM}, **CPU)
    assert _files(fx.root) == before  # the input is untouched
    assert set(_files(out)) == set(before)  # README, meta/, data/ all there
    info = json.loads((out / "meta" / "info.json").read_text())
    assert info["features"]["advantages"]["dtype"] == "float32"
    expect = _expected(fx, "truncated")["advantages"]
    np.testing.assert_allclose(_column(fx, "advantages", out), expect, rtol=1e-5, atol=1e-5)
    _loadable(out)


def test_second_run_needs_overwrite_and_declares_once(tmp_path: Path) -> None:
    fx = build(tmp_path, "v2.1")
    api.run("gae", str(fx.root), **CPU)
    from rltscan.errors import OutputRefusedError

    with pytest.raises(OutputRefusedError):
        api.run("gae", str(fx.root), **CPU)
    api.run("gae", str(fx.root), params={"lam": 0.5}, overwrite=True, **CPU)
    api.run("returns", str(fx.root), **CPU)
    info = json.loads((fx.root / "meta" / "info.json").read_text())
    assert [k for k in info["features"] if k in (*OUTPUTS, "returns")] == [*OUTPUTS, "returns"]
    _loadable(fx.root)


def test_unknown_codebase_version_is_one_line(tmp_path: Path) -> None:
    fx = build(tmp_path, "v3.0")
    info_path = fx.root / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info_path.write_text(json.dumps({**info, "codebase_version": "v1.6"}))
    with pytest.raises(InputFileError, match=r"codebase_version 'v1\.6'"):
        api.run("gae", str(fx.root), **CPU)


def test_cli_gae_on_a_lerobot_dataset(tmp_path: Path) -> None:
    fx = build(tmp_path, "v3.0")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "200"}
    done = subprocess.run(
        [sys.executable, "-m", "rltscan", "gae", str(fx.root), "--device", "cpu"],
        env=env,
        capture_output=True,
        timeout=300,
    )
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "LeRobot" in err  # the convention is in the report
    _loadable(fx.root)


def test_a_commit_killed_among_the_renames_is_completed_with_its_info_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """meta/info.json and the stats files are in the commit journal: a run killed after
    the first data file was renamed is completed by the next start, declaration and
    stats included."""
    from rltscan.io import shards as io_shards

    fx = build(tmp_path, "v2.1")
    real_replace = os.replace
    calls: list[str] = []

    def killed_after_one(src: object, dst: object) -> None:
        if ".rltscan-stage-" in str(src) and ".rltscan-stage-" not in str(dst):  # commit
            calls.append(str(src))
            if len(calls) == 2:
                raise KeyboardInterrupt  # stands in for SIGKILL: nothing after it runs
        real_replace(src, dst)

    monkeypatch.setattr(io_shards.os, "replace", killed_after_one)
    monkeypatch.setattr(io_shards.Staging, "abort", lambda self: None)  # as after SIGKILL
    with pytest.raises(KeyboardInterrupt):
        api.run("gae", str(fx.root), **CPU)
    monkeypatch.undo()
    assert "advantages" not in json.loads((fx.root / "meta" / "info.json").read_text())["features"]
    moved = io_shards.recover(fx.root)
    meta = {"meta/info.json", "meta/episodes_stats.jsonl"}  # in the same journal
    assert meta <= set(moved) and len(moved) == len(fx.data_files) - 1 + len(meta)
    info = json.loads((fx.root / "meta" / "info.json").read_text())
    assert info["features"]["advantages"]["dtype"] == "float32"
    _check_stats(fx.root, fx, OUTPUTS, NAMES["v2.1"])
    _loadable(fx.root)


@pytest.mark.parametrize("version", ["v2.1", "v3.0"])
def test_inspect_reads_a_lerobot_dataset_like_the_run(tmp_path: Path, version: str) -> None:
    """inspect resolves a LeRobot dataset as the run does (its first shard, LeRobot's
    next.done convention), instead of refusing the directory."""
    from rltscan import api

    fx = build(tmp_path, version)
    info = api.inspect(str(fx.root))
    assert info["roles"]["rewards"] == "next.reward"
    assert "sharded dataset (lerobot" in info["notes"][0]
    assert any("next.done" in n for n in info["notes"])
    assert info["estimators"]["returns"]["ready"]


# --------------------------------------------------------------------------- statistics


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _episodes_table_stats(table: pa.Table) -> dict[int, dict[str, dict[str, list]]]:
    """v3.0: ``{episode: {feature: {stat: value}}}`` from the ``stats/<f>/<s>`` columns."""
    out: dict[int, dict[str, dict[str, list]]] = {}
    rows = table.to_pylist()
    for row in rows:
        ep = out.setdefault(row["episode_index"], {})
        for key, value in row.items():
            if key.startswith("stats/"):
                _, feature, stat = key.split("/")
                ep.setdefault(feature, {})[stat] = value
    return out


def _stats(root: Path, version: str) -> tuple[dict | None, dict[int, dict] | None]:
    """The dataset-wide stats (``meta/stats.json``) and the per-episode stats."""
    path = root / "meta" / "stats.json"
    dataset = json.loads(path.read_text()) if path.is_file() else None
    episodes = None
    if version == "v2.1":
        episodes = {
            x["episode_index"]: x["stats"] for x in _jsonl(root / "meta/episodes_stats.jsonl")
        }
    if version == "v3.0":
        episodes = _episodes_table_stats(pq.read_table(root / EPISODES_FILE))
    return dataset, episodes


def _same_stats(got: dict, want: dict) -> None:
    assert list(got) == list(want)  # the stat names, in lerobot's order
    for name, value in want.items():
        assert len(got[name]) == len(value) == 1, name  # shape [1] for a scalar feature
        if name == "count":
            assert got[name] == value and isinstance(got[name][0], int)
        else:
            np.testing.assert_allclose(got[name], value, rtol=1e-12, atol=1e-12, err_msg=name)


def _check_stats(root: Path, fx: Fixture, outputs: tuple[str, ...], names: dict) -> None:
    """Every output's stats entries, per episode and for the dataset, are those of the
    written column, with the stat names ``names`` ("dataset", "episodes") says."""
    dataset, episodes = _stats(root, fx.version)
    bounds = np.concatenate([[0], np.cumsum(LENGTHS)])
    for out in outputs:
        x = _column(fx, out, root)
        if dataset is not None:
            _same_stats(dataset[out], feature_stats(x, names["dataset"]))
        if episodes is not None:
            assert sorted(episodes) == list(range(len(LENGTHS)))
            for e, st in episodes.items():
                part = x[bounds[e] : bounds[e + 1]]
                _same_stats(st[out], feature_stats(part, names["episodes"]))
                assert st[out]["count"] == [LENGTHS[e]]


NAMES = {
    "v2.0": {"dataset": V20_STATS},
    "v2.1": {"episodes": V21_STATS},
    "v3.0": {"dataset": V30_STATS, "episodes": V30_STATS},
}


@pytest.mark.parametrize("version", VERSIONS)
def test_stats_of_the_outputs_as_lerobot_keeps_them(version: str, tmp_path: Path) -> None:
    """After a run the stats files lerobot reads for normalisation carry an entry per
    output (per episode and for the dataset, as the version keeps them), computed from
    the written frames; every existing entry keeps its value."""
    fx = build(tmp_path, version)
    old_dataset, old_episodes = _stats(fx.root, version)
    old_table = pq.read_table(fx.root / EPISODES_FILE) if version == "v3.0" else None
    api.run("gae", str(fx.root), params={"gamma": GAMMA, "lam": LAM}, **CPU)

    _check_stats(fx.root, fx, OUTPUTS, NAMES[version])
    dataset, episodes = _stats(fx.root, version)
    if old_dataset is not None:
        assert {k: dataset[k] for k in old_dataset} == old_dataset
        assert set(dataset) == set(old_dataset) | set(OUTPUTS)
    if old_episodes is not None:
        for e, st in old_episodes.items():
            assert {k: episodes[e][k] for k in st} == st
            assert set(episodes[e]) == set(st) | set(OUTPUTS)
    if old_table is not None:  # v3.0: the episodes file keeps its columns and types
        table = pq.read_table(fx.root / EPISODES_FILE)
        assert table.select(old_table.column_names).equals(old_table)
        added = [c for c in table.column_names if c not in old_table.column_names]
        assert added == [f"stats/{o}/{s}" for o in OUTPUTS for s in V30_STATS]
        for c in added:
            kind = pa.int64() if c.endswith("/count") else pa.float64()
            assert table.schema.field(c).type == pa.list_(kind), c
        hf = json.loads(table.schema.metadata[b"huggingface"])["info"]["features"]
        assert hf["stats/advantages/min"] == hf["stats/next.reward/min"]  # datasets' type
        assert hf["stats/advantages/count"] == hf["stats/next.reward/count"]


def test_stat_names_follow_the_dataset(tmp_path: Path) -> None:
    """A v3.0 dataset converted from v2.1 has no quantiles: the outputs get none either
    (the stat names come from the dataset's own entries, not from a guess)."""
    fx = build(tmp_path, "v3.0")
    path = fx.root / "meta" / "stats.json"
    stats = json.loads(path.read_text())
    path.write_text(json.dumps({k: {s: v[s] for s in V21_STATS} for k, v in stats.items()}))
    table = pq.read_table(fx.root / EPISODES_FILE)
    keep = [c for c in table.column_names if not c.split("/")[-1].startswith("q")]
    pq.write_table(table.select(keep), fx.root / EPISODES_FILE)
    api.run("gae", str(fx.root), params={"gamma": GAMMA, "lam": LAM}, **CPU)
    _check_stats(fx.root, fx, OUTPUTS, {"dataset": V21_STATS, "episodes": V21_STATS})


def test_stats_follow_overwrite_and_later_runs(tmp_path: Path) -> None:
    """--overwrite recomputes the outputs' stats from the new values; a later estimator
    adds its own entries and leaves the others as they are."""
    fx = build(tmp_path, "v3.0")
    api.run("gae", str(fx.root), **CPU)
    first = _stats(fx.root, "v3.0")[0]["advantages"]
    api.run("gae", str(fx.root), params={"lam": 0.5}, overwrite=True, **CPU)
    assert _stats(fx.root, "v3.0")[0]["advantages"] != first
    _check_stats(fx.root, fx, OUTPUTS, NAMES["v3.0"])
    before = _stats(fx.root, "v3.0")
    api.run("returns", str(fx.root), **CPU)
    _check_stats(fx.root, fx, (*OUTPUTS, "returns"), NAMES["v3.0"])
    after = _stats(fx.root, "v3.0")
    assert {k: after[0][k] for k in before[0]} == before[0]
    table = pq.read_table(fx.root / EPISODES_FILE)
    assert len(table.column_names) == len(set(table.column_names))


def test_no_stats_file_is_created(tmp_path: Path) -> None:
    """A dataset without a stats file gets none from rltscan (lerobot has nothing to
    normalise with either way): only the files the dataset has are updated."""
    fx = build(tmp_path, "v2.0")
    (fx.root / "meta" / "stats.json").unlink()
    api.run("gae", str(fx.root), **CPU)
    assert not (fx.root / "meta" / "stats.json").exists()
    assert not list((fx.root / "meta").glob("*rltscan*"))


def test_stats_of_an_episode_no_data_file_holds_is_one_line(tmp_path: Path) -> None:
    """meta/episodes_stats.jsonl naming an episode the data files lack: the run stops
    before anything is replaced, with one line naming the file."""
    fx = build(tmp_path, "v2.1")
    path = fx.root / "meta" / "episodes_stats.jsonl"
    lines = _jsonl(path)
    path.write_text(
        "".join(json.dumps(x) + "\n" for x in [*lines, {**lines[0], "episode_index": 99}])
    )
    before = _files(fx.root)
    with pytest.raises(InputFileError, match=r"episodes_stats\.jsonl lists episode 99"):
        api.run("gae", str(fx.root), **CPU)
    assert _files(fx.root) == before


@pytest.mark.parametrize("version", VERSIONS)
def test_real_lerobot_loads_the_outputs_and_their_stats(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the real lerobot (not a test dependency: it pulls torch, torchvision, opencv,
    av, ...; checked with 0.4.4 on v3.0 and 0.3.3 on v2.0 and v2.1, the versions each
    loads): LeRobotDataset loads the dataset rltscan wrote, with the outputs as frame
    columns and in meta.stats, and lerobot aggregates the per-episode stats rltscan
    wrote (0.4: its dataset tools read the stats columns of meta/episodes; 0.3: a
    dataset of some episodes aggregates their episodes_stats.jsonl lines)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a local dataset: never the Hub
    pytest.importorskip("lerobot")
    from lerobot.datasets.lerobot_dataset import CODEBASE_VERSION, LeRobotDataset

    if version[:2] != CODEBASE_VERSION[:2]:  # lerobot 0.4 refuses v2.x, 0.3 knows no v3.0
        pytest.skip(f"lerobot with codebase {CODEBASE_VERSION} does not load {version}")
    fx = build(tmp_path, version)
    api.run("gae", str(fx.root), params={"gamma": GAMMA, "lam": LAM}, **CPU)
    ds = LeRobotDataset("local/rltscan_fixture", root=fx.root)
    assert len(ds) == sum(LENGTHS)
    assert {*OUTPUTS} <= set(ds.hf_dataset.column_names)
    assert ds[len(ds) - 1]["task"] == TASK and int(ds[len(ds) - 1]["episode_index"]) == 5
    names = NAMES[fx.version].get("dataset") or NAMES[fx.version]["episodes"]
    for name in OUTPUTS:
        got = np.array([float(ds[i][name]) for i in range(len(ds))], np.float32)
        np.testing.assert_array_equal(got, _column(fx, name))
        assert set(ds.meta.stats[name]) == set(names)
        assert all(np.asarray(v).shape == (1,) for v in ds.meta.stats[name].values())

    if version == "v2.0":  # stats.json only: nothing per episode to aggregate
        return
    if version == "v3.0":
        from lerobot.datasets.dataset_tools import delete_episodes

        kept = tmp_path / "without_episode_0"
        agg = delete_episodes(ds, [0], output_dir=kept, repo_id="local/rltscan_kept").meta.stats
    else:
        some = LeRobotDataset("local/rltscan_fixture", root=fx.root, episodes=[1, 2, 3, 4, 5])
        agg = some.stats
    x = _column(fx, "advantages")[LENGTHS[0] :].astype(np.float64)  # episodes 1 to 5
    got = {k: np.asarray(v).tolist() for k, v in agg["advantages"].items()}
    assert got["count"] == [len(x)]
    np.testing.assert_allclose(got["min"] + got["max"], [x.min(), x.max()], rtol=1e-6)
    np.testing.assert_allclose(got["mean"] + got["std"], [x.mean(), x.std()], rtol=1e-6)
