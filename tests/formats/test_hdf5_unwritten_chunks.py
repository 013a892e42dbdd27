"""An HDF5 buffer allocated ahead and filled in part: refused, not read as zeros.

A logger that creates its datasets at full capacity (``create_dataset("rewards",
shape=(capacity,), chunks=...)``) and writes rows as they come leaves the chunks past
its last write unallocated when it stops early; HDF5 reads them as the fill value (0).
rltscan read them as steps of reward 0 and value 0, ran the open last episode on into
them and wrote outputs for them, with exit 0. A chunk never written in a column a run
reads now stops it (exit 4), naming where, whole-file or streamed; a fully written
chunked file, and a column the run does not read, are as before. A virtual dataset
whose source file is missing (moved, or not copied with it) reads as the fill value in
the same way, without an error from libhdf5: refused too, naming the source.
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


def _virtual(root: Path) -> Path:
    for i in range(2):
        with h5py.File(root / f"part{i}.h5", "w") as h:
            h["rewards"] = np.full(5, i + 1.0, np.float32)
            h["terminals"] = np.arange(5) == 4
    with h5py.File(root / "all.h5", "w") as h:
        for name, dtype in [("rewards", np.float32), ("terminals", bool)]:
            layout = h5py.VirtualLayout(shape=(10,), dtype=dtype)
            for i in range(2):
                layout[i * 5 : (i + 1) * 5] = h5py.VirtualSource(f"part{i}.h5", name, shape=(5,))
            h.create_virtual_dataset(name, layout, fillvalue=0)
    return root / "all.h5"


def test_a_virtual_dataset_with_a_missing_source_is_refused(tmp_path: Path) -> None:
    path = _virtual(tmp_path)
    args = ("returns", str(path), "--gamma", "0.5", "--device", "cpu", "-q")
    res = run_cli(*args, "-o", str(tmp_path / "whole.h5"), in_process=True)
    assert res.returncode == 0, res.stderr
    with h5py.File(tmp_path / "whole.h5") as h:
        want = oracles.discounted_returns(
            np.repeat([1.0, 2.0], 5), np.zeros(10), np.arange(10) % 5 == 4, None, gamma=0.5
        )
        np.testing.assert_allclose(h["returns"][:], want)
    (tmp_path / "part1.h5").rename(tmp_path / "moved.h5")
    res = run_cli(*args, "-o", str(tmp_path / "half.h5"), in_process=True)
    assert res.returncode == 4, res.stderr
    assert "'part1.h5', which is not there" in res.stderr, res.stderr
    assert not (tmp_path / "half.h5").exists()


def test_a_contiguous_dataset_created_but_never_written_is_refused(tmp_path: Path) -> None:
    """A contiguous dataset gets its storage at its first write; one never written (a
    logger that created ``values`` and stopped before filling it) reads as zeros."""
    path = tmp_path / "created.h5"
    with h5py.File(path, "w") as h:
        h["rewards"], h["terminals"] = np.ones(5), np.arange(5) == 4
        h.create_dataset("values", shape=(5,), dtype="f4")
    res = run_cli("gae", str(path), "--device", "cpu", "-q", in_process=True)
    assert res.returncode == 4 and '"values" was created but never written' in res.stderr
    with h5py.File(path, "a") as h:
        h["values"][...] = 0.5  # written now
    assert run_cli("gae", str(path), "--device", "cpu", "-q", in_process=True).returncode == 0
