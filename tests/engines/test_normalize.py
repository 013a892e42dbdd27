"""``--normalize``: advantage columns written as (x − mean) / std over the whole dataset.

The mean and std are the run's own output statistics (every window, in float64); the
sink applies them at commit, a second pass over the written outputs only. Checked
against numpy on the raw columns of the same run, across windows and layouts.
"""

from __future__ import annotations

import json
import subprocess
import sys

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rltscan", *args], capture_output=True, text=True, timeout=300
    )


def _buffer(rng, shape) -> dict:
    term = rng.random(shape) < 0.05
    term[..., -1] = True  # every end a termination: no bootstrap needed
    return {
        "rewards": rng.standard_normal(shape).astype(np.float32),
        "values": rng.standard_normal(shape).astype(np.float32),
        "terminals": term,
    }


def _standardized(raw: np.ndarray) -> np.ndarray:
    x = raw.astype(np.float64)
    return ((x - x.mean()) / x.std()).astype(raw.dtype)


@pytest.mark.parametrize("layout", ["flat", "batch-major"])
def test_hdf5_across_windows(tmp_path, layout):
    rng = np.random.default_rng(7)
    shape = (3000,) if layout == "flat" else (4, 750)
    path = tmp_path / "buf.h5"
    with h5py.File(path, "w") as f:
        for k, v in _buffer(rng, shape).items():
            f[k] = v
            if layout != "flat":
                f[k].attrs["rltscan_layout"] = layout
    extra = ["--layout", layout] if layout != "flat" else []
    small = ["--chunk-steps", "256", "--block-steps", "256"]  # many windows
    r = _cli("gae", str(path), *extra, *small, "--prefix", "raw_", "--backend", "torch")
    assert r.returncode == 0, r.stderr
    r = _cli("gae", str(path), *extra, *small, "--normalize", "--backend", "torch", "--json")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert any("--normalize: advantages written as" in n for n in report["notes"])
    with h5py.File(path) as f:
        raw, got = f["raw_advantages"][()], f["advantages"][()]
        assert got.dtype == raw.dtype
        np.testing.assert_allclose(got, _standardized(raw), rtol=1e-6, atol=1e-6)
        assert f["advantages"].attrs["normalized_std"] == pytest.approx(raw.std(), rel=1e-6)
        # value targets are never normalised
        np.testing.assert_array_equal(f["value_targets"][()], f["raw_value_targets"][()])


def test_parquet_and_several_settings(tmp_path):
    rng = np.random.default_rng(8)
    buf = _buffer(rng, (500,))
    path = tmp_path / "buf.parquet"
    pq.write_table(pa.table({k: v for k, v in buf.items()}), path)
    r = _cli("gae", str(path), "--gamma", "0.9,0.99", "--prefix", "raw_", "--backend", "torch")
    assert r.returncode == 0, r.stderr
    r = _cli("gae", str(path), "--gamma", "0.9,0.99", "--normalize", "--backend", "torch")
    assert r.returncode == 0, r.stderr
    table = pq.read_table(path)
    for g in ("0.9", "0.99"):
        name = f"advantages_g{g}_l0.95"
        raw, got = table.column("raw_" + name).to_numpy(), table.column(name).to_numpy()
        np.testing.assert_allclose(got, _standardized(raw), rtol=1e-6, atol=1e-6)
    meta = json.loads(table.schema.metadata[b"rltscan"])
    assert "advantages_g0.9_l0.95" in meta["outputs"]["advantages_g0.9_l0.95"]["normalized"]


def test_refusals(tmp_path):
    rng = np.random.default_rng(9)
    path = tmp_path / "buf.h5"
    with h5py.File(path, "w") as f:
        for k, v in _buffer(rng, (100,)).items():
            f[k] = v
    r = _cli("returns", str(path), "--normalize")
    assert r.returncode == 2 and "returns writes none" in r.stderr
    with h5py.File(path) as f:
        assert "returns" not in f
