"""LeRobot datasets (issue 14 item 3): v2.x (one episode per file) and v3.0 (many
episodes per file) round-trip through ``rltscan gae`` on the shard engine: outputs in
the data files, declared in ``meta/info.json``, ``next.done`` read as the end of a
recording (a truncation) unless ``--ends-are terminal``, and the dataset still loads
the way lerobot loads it.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import InputFileError
from tests import oracles
from tests.io_helpers import ROOT
from tests.lerobot_fixtures import FEATURES, Fixture, build

CPU = {"device": "cpu"}
GAMMA, LAM = 0.99, 0.95
VERSIONS = ["v2.0", "v2.1", "v3.0"]
OUTPUTS = ("advantages", "value_targets")


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
    assert changed == {*fx.data_files, "meta/info.json"}  # meta/episodes, tasks, stats kept
    assert set(after) == set(before)  # no staging left behind
    _loadable(fx.root)


def test_ends_are_terminal_overrides_the_convention(tmp_path: Path) -> None:
    fx = build(tmp_path, "v3.0")
    params = {"gamma": GAMMA, "lam": LAM}
    report = api.run("gae", str(fx.root), params=params, ends_are="terminal", **CPU)
    assert any("--ends-are" in n and "terminal" in n for n in report.notes)
    assert not any("LeRobot" in n for n in report.notes)
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
    """meta/info.json is in the commit journal: a run killed after the first data file
    was renamed is completed by the next start, declaration included."""
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
    assert "meta/info.json" in moved and len(moved) == len(fx.data_files)  # 1 done before
    info = json.loads((fx.root / "meta" / "info.json").read_text())
    assert info["features"]["advantages"]["dtype"] == "float32"
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
