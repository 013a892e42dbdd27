"""An HDF5 buffer allocated ahead and filled in part: refused, not read as zeros.

A logger that creates its datasets at full capacity (``create_dataset("rewards",
shape=(capacity,), chunks=...)``) and writes rows as they come leaves the chunks past
its last write unallocated when it stops early; HDF5 reads them as the fill value (0).
rltscan read them as steps of reward 0 and value 0, ran the open last episode on into
them and wrote outputs for them, with exit 0. A chunk never written in a column a run
reads now stops it (exit 4), naming where, whole-file or streamed; a fully written
chunked file, and a column the run does not read, are as before.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from tests import oracles
from tests.io_helpers import run_cli

CAPACITY, WRITTEN, GAMMA, LAM = 64, 20, 0.9, 0.8


def _logger_file(path: Path, *, filled: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    data = {
        "rewards": rng.normal(size=filled).astype(np.float32),
        "values": rng.normal(size=filled).astype(np.float32),
        "terminals": np.arange(filled) == 9,
    }
    with h5py.File(path, "w") as h:
        for name, arr in data.items():
            ds = h.create_dataset(name, shape=(CAPACITY,), dtype=arr.dtype, chunks=(8,))
            ds[:filled] = arr
        h.create_dataset("notes", shape=(CAPACITY,), dtype="f4", chunks=(8,))  # never read
    return data


def _gae(path: Path, *args: str) -> tuple[int, str]:
    res = run_cli(
        "gae", str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "--device", "cpu",
        "--missing-bootstrap", "zero", "-q", *args, in_process=True,
    )  # fmt: skip
    return res.returncode, res.stderr


@pytest.mark.parametrize("window", [None, 16])
def test_a_buffer_filled_in_part_is_refused(window: int | None, tmp_path: Path) -> None:
    path = tmp_path / "log.h5"
    _logger_file(path, filled=WRITTEN)
    extra = ["--chunk-steps", str(window), "--block-steps", str(window)] if window else []
    code, err = _gae(path, *extra)
    assert code == 4, err
    assert "never written at index (24,)" in err and "resize" in err, err
    assert err.count("\n") <= 1
    with h5py.File(path) as h:
        assert "advantages" not in h


def test_a_buffer_written_in_full_runs(tmp_path: Path) -> None:
    path = tmp_path / "full.h5"
    data = _logger_file(path, filled=CAPACITY)  # "notes" stays unwritten: not read
    assert _gae(path) == (0, "")
    r, v = data["rewards"].astype(float), data["values"].astype(float)
    nv = np.append(v[1:], 0.0)
    term = data["terminals"]
    want = oracles.gae(r, v, nv, term, None, gamma=GAMMA, lam=LAM)["advantages"]
    with h5py.File(path) as h:
        np.testing.assert_allclose(h["advantages"][:], want, rtol=1e-5, atol=1e-6)
