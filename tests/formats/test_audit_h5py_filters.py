"""Audit: flat HDF5 rollouts written by h5py with the storage options producers use.

D4RL's ``*-v2`` files are gzip; robomimic and many loggers write chunked datasets that
can grow (``maxshape=(None, ...)``) with ``shuffle``/``fletcher32``, ``lzf`` for speed,
``scaleoffset`` for lossy floats and integers; flags as h5py's bool (an HDF5 enum), or
big-endian data from other tools. An in-place run must read every value as stored, and
leave every dataset it did not write as it was: bytes, dtype, shape, maxshape, chunks,
filters and their options, fill value, attributes; and no file beside it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.audit_ref import episode_ends, estimates
from tests.io_helpers import run_cli

GAMMA, LAM = 0.9, 0.8


def rollout(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    lengths = [5, 7, 4, 6]  # terminated, truncated, terminated, cut by the end of the file
    n = sum(lengths)
    ends, term, trunc = episode_ends(lengths)
    r = rng.normal(size=n).astype(np.float32)
    v = rng.normal(size=n).astype(">f4")  # big-endian, as a non-numpy tool writes it
    nv = np.append(v[1:], rng.normal()).astype(np.float64)
    nv[ends[1]] = rng.normal()  # V(final obs) of the truncated episode
    nv[term] = np.nan  # never read
    with h5py.File(path, "w") as f:
        f.create_dataset(
            "observations", data=rng.normal(size=(n, 5)).astype(np.float32), chunks=(4, 5),
            maxshape=(None, 5), compression="lzf", shuffle=True, fletcher32=True,
        )  # fmt: skip
        f.create_dataset(
            "rewards", data=r, chunks=(6,), maxshape=(None,), compression="gzip",
            compression_opts=9, shuffle=True, fletcher32=True,
        )  # fmt: skip
        f["rewards"].attrs["unit"] = "points"
        f.create_dataset("values", data=v, chunks=(5,), compression="lzf")
        f.create_dataset("next_values", data=nv, chunks=True, fletcher32=True, fillvalue=-1.0)
        f.create_dataset("terminals", data=term, compression="gzip", compression_opts=1)
        f.create_dataset("timeouts", data=trunc, compression="lzf", shuffle=True)
        f.create_dataset("actions", data=rng.integers(0, 5, n).astype(np.int32), scaleoffset=0)
        f.create_dataset("qpos", data=rng.normal(size=n), scaleoffset=3, chunks=(7,))
        f.attrs["env"] = "Hopper-v4"
    return {"r": r, "v": v.astype(np.float64), "nv": nv, "term": term, "trunc": trunc}


def storage(path: Path) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    with h5py.File(path, "r") as f:

        def visit(name: str, d: object) -> None:
            if isinstance(d, h5py.Dataset):
                out[name] = (
                    d.dtype.str, d.shape, d.maxshape, d.chunks, d.compression,
                    d.compression_opts, d.shuffle, d.fletcher32, d.scaleoffset,
                    np.asarray(d.fillvalue).tobytes(), dict(d.attrs), d[()].tobytes(),
                )  # fmt: skip

        f.visititems(visit)
        out["/"] = (dict(f.attrs),)
    return out


@pytest.mark.parametrize("estimator", ["gae", "td-lambda"])
def test_in_place_is_exact_and_keeps_every_dataset_s_storage(estimator: str, tmp_path: Path):
    path = tmp_path / "hopper.hdf5"
    e = rollout(path)
    before = storage(path)
    res = run_cli(estimator, str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "-q")
    assert res.returncode == 0, res.stderr
    after = storage(path)
    assert {k: after[k] for k in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hopper.hdf5"]
    ref = estimates(e["r"], e["v"], e["nv"], e["term"], e["trunc"], GAMMA, LAM)
    with h5py.File(path, "r") as f:
        if estimator == "gae":
            np.testing.assert_allclose(f["advantages"][()], ref["advantages"], atol=1e-5)
            np.testing.assert_allclose(f["value_targets"][()], ref["value_targets"], atol=1e-5)
        else:
            np.testing.assert_allclose(f["lambda_returns"][()], ref["lambda_returns"], atol=1e-5)


def test_to_a_new_file_leaves_the_input_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "hopper.hdf5"
    e = rollout(path, seed=1)
    copy = tmp_path / "copy.hdf5"
    shutil.copy(path, copy)
    out = tmp_path / "out.hdf5"
    args = ["gae", str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "-o", str(out), "-q"]
    res = run_cli(*args, in_process=True)
    assert res.returncode == 0, res.stderr
    assert path.read_bytes() == copy.read_bytes()
    before = storage(path)
    after = storage(out)
    for name in ("rewards", "values", "terminals", "timeouts", "actions"):
        assert after[name][-1] == before[name][-1]  # the data
    ref = estimates(e["r"], e["v"], e["nv"], e["term"], e["trunc"], GAMMA, LAM)
    with h5py.File(out, "r") as f:
        np.testing.assert_allclose(f["advantages"][()], ref["advantages"], atol=1e-5)
