"""Statistics of what a run computed (rltscan/stats.py): exact merges, window and shard
invariance, episode returns across cuts, and the report of a real CLI run."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

import rltscan
from rltscan import stats
from tests.io_helpers import ROOT
from tests.shard_helpers import table, write_shards

RLTSCAN = [sys.executable, "-m", "rltscan"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "120"}


def _cuts(n: int, rng: np.random.Generator, pieces: int) -> list[tuple[int, int]]:
    edges = np.unique(np.concatenate([[0, n], rng.integers(0, n + 1, pieces)]))
    return [(int(a), int(b)) for a, b in itertools.pairwise(edges)]


def _numpy_moments(x: np.ndarray) -> dict:
    x = np.asarray(x, dtype=np.float64).reshape(-1)
    fin = x[np.isfinite(x)]
    return {
        "count": fin.size,
        "nonfinite": x.size - fin.size,
        "mean": fin.mean(),
        "std": fin.std(),
        "min": fin.min(),
        "max": fin.max(),
    }


def _assert_moments(got: dict, want: dict, rtol: float = 1e-12) -> None:
    assert got["count"] == want["count"] and got["nonfinite"] == want["nonfinite"]
    for key in ("mean", "std", "min", "max"):
        np.testing.assert_allclose(got[key], want[key], rtol=rtol, atol=rtol, err_msg=key)


@pytest.mark.parametrize("seed", range(6))
def test_merge_of_any_cut_equals_numpy_float64(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 3000))
    x = (rng.standard_normal(n) * 10 ** rng.uniform(-3, 4) + rng.uniform(-50, 50)).astype(
        np.float32
    )
    x[rng.random(n) < 0.02] = np.nan
    x[rng.random(n) < 0.01] = np.inf
    if np.isfinite(x).sum() == 0:
        x[0] = 1.0
    want = _numpy_moments(x)
    results = []
    for pieces in (0, 1, 7, 60):
        acc = stats.OutputAccumulator()
        for a, b in _cuts(n, rng, pieces)[::-1]:  # any order, like a backward walk
            acc.add({"y": torch.from_numpy(x[a:b])})
        got = acc.result()["y"]
        _assert_moments(got.moments.to_json(), want)
        results.append(got)
    # the bucket counts are exact: the same histogram whatever the cut
    assert all(r.histogram == results[0].histogram for r in results)
    assert sum(results[0].histogram.counts.values()) == want["count"]
    # shards: merged from their JSON parts
    parts = []
    for a, b in _cuts(n, rng, 5)[::-1]:
        acc = stats.OutputAccumulator()
        acc.add({"y": torch.from_numpy(x[a:b])})
        parts.append(json.loads(json.dumps(acc.parts())))
    merged = stats.from_parts(parts)["y"]
    _assert_moments(merged.moments.to_json(), want)
    assert merged.histogram == results[0].histogram


def test_select_path_equals_compacting_path() -> None:
    """The GPU path (selects, no host sync) and the CPU path (drop non-finite) agree."""
    rng = np.random.default_rng(3)
    x = torch.from_numpy(rng.standard_normal(777))
    x[[0, 5, 700]] = float("nan")
    x[9] = -float("inf")
    a = stats.block_moments(x, select=True)
    b = stats.block_moments(x, select=False)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    empty = torch.full((4,), float("nan"))
    a = stats.block_moments(empty, select=True)
    assert a[0] == 0 and a[5] == 4


def test_buckets_numpy_and_torch_agree() -> None:
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.standard_normal(500) * 1e3, [0.0, -0.0, 1e-30, -3e38, 1.5]])
    acc = stats.OutputAccumulator()
    acc.add({"y": torch.from_numpy(x)})
    assert acc.result()["y"].histogram == stats.Histogram.of(x)
    # a bucket's value is within 2^-7 (relative) below the values it holds
    v = stats.bucket_values(stats.buckets_of(x))
    nz = x != 0
    assert np.all(np.abs(v[nz]) <= np.abs(x[nz]) * (1 + 1e-7))
    assert np.all(np.abs(x[nz] - v[nz]) <= np.abs(x[nz]) * 2.0**-7)


def test_display_bins_count_everything_between_min_and_max() -> None:
    x = np.array([1.0, 2.0, 2.0, 3.0, 10.0])
    s = stats.OutputStats.of(x).to_json()
    h = s["histogram"]
    assert len(h["edges"]) == stats.DISPLAY_BINS + 1 and sum(h["counts"]) == 5
    assert h["edges"][0] == 1.0 and h["edges"][-1] == 10.0
    assert h["counts"][0] == 1 and h["counts"][-1] == 1
    one = stats.OutputStats.of(np.full(4, 2.5)).to_json()["histogram"]
    assert one == {"edges": [2.5, 2.5], "counts": [4]}


# --------------------------------------------------------------------------- episodes


def _episode_oracle(ends: np.ndarray, rewards: np.ndarray) -> tuple[list, list, list]:
    """A plain loop per row: complete episodes (length, return) and open ones."""
    lengths, returns, open_ = [], [], []
    for row in range(ends.shape[0]):
        n, s = 0, 0.0
        for t in range(ends.shape[1]):
            n, s = n + 1, s + float(rewards[row, t])
            if ends[row, t]:
                lengths.append(n)
                returns.append(s)
                n, s = 0, 0.0
        if n:
            open_.append((n, s))
    return lengths, returns, open_


@pytest.mark.parametrize("seed", range(8))
def test_episodes_across_any_cut_equal_a_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    rows, n = int(rng.integers(1, 5)), int(rng.integers(1, 400))
    p = [0.0, 0.005, 0.05, 0.5][seed % 4]  # none, sparse, dense ends
    ends = rng.random((rows, n)) < p
    if seed % 3 == 0:
        ends[:, -1] = True  # the data ends exactly at an episode end
    rewards = rng.standard_normal((rows, n))
    lengths, returns, open_ = _episode_oracle(ends, rewards)
    for pieces in (0, 1, 5, 40):
        joined = None
        for a, b in _cuts(n, rng, pieces):
            part = stats.episodes_of(ends[:, a:b], rewards[:, a:b])
            part = stats.Episodes.from_state(json.loads(json.dumps(part.state())))
            joined = part if joined is None else joined.then(part)
        got = joined.finished()
        assert got["complete"] == len(lengths)
        assert got["open"]["count"] == len(open_)
        assert got["open"]["steps"] == sum(o[0] for o in open_)
        np.testing.assert_allclose(got["open"]["return"], sum(o[1] for o in open_), atol=1e-9)
        if lengths:
            _assert_moments(got["length"], _numpy_moments(np.array(lengths)), rtol=1e-9)
            _assert_moments(got["return"], _numpy_moments(np.array(returns)), rtol=1e-9)
        else:
            assert got["length"]["mean"] is None


def test_episode_inputs_from_prepared_arguments() -> None:
    term = np.array([[0, 1, 0], [0, 0, 0]], bool).T  # [T, B] time-major
    trunc = np.array([[0, 0, 0], [0, 1, 0]], bool).T
    r = np.arange(6.0).reshape(3, 2)
    kw = {"terminated": term, "truncated": trunc, "rewards": r}
    ends, rewards = stats.episode_inputs(kw, 0, x_is_rewards=True)
    assert ends.shape == (2, 3) and ends[0, 1] and ends[1, 1]
    np.testing.assert_array_equal(rewards, r.T)
    assert stats.episode_inputs({"rewards": r}, 0, x_is_rewards=True) is None  # no flags
    # an x column the user chose is not the rewards: lengths only
    _, rewards = stats.episode_inputs({"terminated": term, "x": r}, 0, x_is_rewards=False)
    assert rewards is None


# --------------------------------------------------------------------------- runs


def _flat_file(path: Path, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    cols = {
        "rewards": rng.standard_normal(n).astype(np.float32),
        "values": rng.standard_normal(n).astype(np.float32),
        "terminals": rng.random(n) < 0.03,
        "timeouts": rng.random(n) < 0.01,
    }
    with h5py.File(path, "w") as f:
        for k, v in cols.items():
            f[k] = v
    return cols


def test_cli_statistics_equal_numpy_on_the_written_columns(tmp_path: Path) -> None:
    """As a user: `rltscan gae --json` in small windows; the report's statistics are
    numpy's on the columns it wrote, and the episodes those of the flags."""
    path = tmp_path / "run.h5"
    cols = _flat_file(path, 1500, seed=5)
    args = ["gae", str(path), "--json", "--device", "cpu", "--chunk-steps", "256"]
    args += ["--block-steps", "128", "--missing-bootstrap", "zero"]
    done = subprocess.run(
        [*RLTSCAN, *args],
        env=ENV,
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()
    report = json.loads(done.stdout)
    assert report["streaming"]["windows"] > 1
    got = report["statistics"]
    with h5py.File(path) as f:
        for name in ("advantages", "value_targets"):
            _assert_moments(got["outputs"][name], _numpy_moments(f[name][()]), rtol=1e-9)
            assert sum(got["outputs"][name]["histogram"]["counts"]) == 1500
    ends = (cols["terminals"] | cols["timeouts"])[None, :]
    lengths, returns, open_ = _episode_oracle(ends, cols["rewards"][None, :])
    assert got["episodes"]["complete"] == len(lengths)
    assert got["episodes"]["open"]["count"] == len(open_)
    _assert_moments(got["episodes"]["length"], _numpy_moments(np.array(lengths)), rtol=1e-9)
    _assert_moments(got["episodes"]["return"], _numpy_moments(np.array(returns)), rtol=1e-6)
    assert done.stderr == b""  # --json: the report (statistics included) is stdout only


def test_whole_streamed_and_sharded_runs_report_the_same(tmp_path: Path) -> None:
    """One table: as one Parquet file (streamed at two window sizes, and whole, through
    a conversion) and as uneven shards; the statistics agree to float rounding."""
    whole = table(322, 0.08, seed=2)
    pq.write_table(whole, tmp_path / "one.parquet")
    shards = tmp_path / "shards"
    write_shards(shards, whole, sizes=(53, 1, 0, 97, 31, 140))
    kw = {"params": {"gamma": 0.97, "lam": 0.9}, "missing_bootstrap": "zero", "device": "cpu"}
    # whole (a conversion to HDF5 runs the whole-file engine), then streamed in place
    reports = [
        rltscan.run("gae", str(tmp_path / "one.parquet"), output=str(tmp_path / "w.h5"), **kw)
    ]
    reports += [
        rltscan.run(
            "gae", str(tmp_path / "one.parquet"), chunk_steps=c, block_steps=b, overwrite=True, **kw
        )
        for c, b in ((1 << 20, 1 << 20), (64, 32))
    ]
    reports.append(rltscan.run("gae", str(shards), output=str(tmp_path / "out"), **kw))
    first = reports[0].statistics
    for r in reports[1:]:
        s = r.statistics
        for name in ("advantages", "value_targets"):
            _assert_moments(s["outputs"][name], first["outputs"][name], rtol=1e-5)
        assert s["episodes"]["complete"] == first["episodes"]["complete"]
        assert s["episodes"]["open"] == pytest.approx(first["episodes"]["open"])
        _assert_moments(s["episodes"]["length"], first["episodes"]["length"], rtol=1e-12)
        _assert_moments(s["episodes"]["return"], first["episodes"]["return"], rtol=1e-9)
    # the written columns, shard by shard, give the reported numbers
    out = np.concatenate(
        [
            pq.read_table(p).column("advantages").to_numpy()
            for p in sorted((tmp_path / "out").glob("*.parquet"))
        ]
    )
    _assert_moments(reports[-1].statistics["outputs"]["advantages"], _numpy_moments(out), 1e-9)
    ends = np.asarray(whole.column("terminals")) | np.asarray(whole.column("timeouts"))
    lengths, _, _ = _episode_oracle(ends[None, :], np.zeros((1, ends.size)))
    assert first["episodes"]["complete"] == len(lengths)


def test_time_major_buffer_has_one_open_episode_per_sequence(tmp_path: Path) -> None:
    path = tmp_path / "buf.h5"
    T, B = 40, 3
    term = np.zeros((T, B), bool)
    term[9, 0] = term[19, 0] = term[29, 1] = True
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones((T, B), np.float32)
        f["values"] = np.zeros((T, B), np.float32)
        f["terminals"] = term
        f["timeouts"] = np.zeros((T, B), bool)
    r = rltscan.run(
        "gae",
        str(path),
        layout="time-major",
        missing_bootstrap="zero",
        chunk_steps=30,
        block_steps=15,
        device="cpu",
    )
    ep = r.statistics["episodes"]
    assert ep["complete"] == 3  # [0..9], [10..19] in sequence 0, [0..29] in sequence 1
    assert ep["length"]["min"] == 10 and ep["length"]["max"] == 30
    assert ep["return"]["mean"] == pytest.approx(50 / 3)
    assert ep["open"] == {"count": 3, "steps": 20 + 10 + 40, "return": 70.0}
