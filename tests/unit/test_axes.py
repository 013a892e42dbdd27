"""Never guess an axis (issue 10 item 2): a 2-D HDF5 array is [T, B] or [B, T] only when
the file says so (a ``layout`` attribute, a per-sequence ``last_values``-like dataset whose
length is one axis and not the other) or ``--layout`` does; otherwise exit 2."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from rltscan import api
from rltscan.errors import AmbiguousInputError
from rltscan.io import open_input

ROOT = Path(__file__).resolve().parents[2]
FIX = "pass --layout time-major ([T, B]) or --layout batch-major ([B, T])"


def _h5(path: Path, attrs: dict | None = None, **cols: np.ndarray) -> Path:
    with h5py.File(path, "w") as f:
        for key, value in cols.items():
            f[key] = value
        for key, value in (attrs or {}).items():
            f.attrs[key] = value
    return path


def _buffer(t: int, b: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "rewards": rng.standard_normal((t, b)).astype(np.float32),
        "values": rng.standard_normal((t, b)).astype(np.float32),
        "terminations": rng.random((t, b)) < 0.1,
        "truncations": np.zeros((t, b), bool),
    }


def test_batch_major_buffer_without_attribute_is_refused(tmp_path: Path) -> None:
    path = _h5(tmp_path / "bt.h5", **_buffer(8, 512))
    with pytest.raises(AmbiguousInputError) as err:
        open_input(str(path))
    message = str(err.value)
    assert '"rewards" has shape (8, 512)' in message and message.endswith(FIX)
    assert "\n" not in message
    with pytest.raises(AmbiguousInputError):
        api.run("gae", str(path), device="cpu")
    # inspect shows what it recognised and the open decision (issue 21), never a layout
    info = api.inspect(str(path))
    assert info["layout"] is None and [d["fix"] for d in info["decisions"]] == [FIX]
    assert info["roles"]["rewards"] == "rewards"
    assert not any(state["ready"] for state in info["estimators"].values())


@pytest.mark.parametrize("layout", ["time-major", "batch-major"])
def test_flag_decides(tmp_path: Path, layout: str) -> None:
    path = _h5(tmp_path / "b.h5", **_buffer(8, 5))
    source = open_input(str(path), layout=layout)  # type: ignore[arg-type]
    try:
        assert source.layout == layout and source.notes == []
    finally:
        source.close()


@pytest.mark.parametrize("value", ["time_major", "time-major", "batch_major", "batch-major"])
def test_attribute_decides_without_a_note(tmp_path: Path, value: str) -> None:
    path = _h5(tmp_path / "b.h5", {"layout": value}, **_buffer(8, 5))
    source = open_input(str(path))
    try:
        assert source.layout == value.replace("_", "-") and source.notes == []
    finally:
        source.close()


@pytest.mark.parametrize(
    ("name", "shape", "layout"),
    [
        ("last_values", (5,), "time-major"),
        ("last_value", (5, 1), "time-major"),
        ("next_value", (5,), "time-major"),
        ("bootstrap_value", (8,), "batch-major"),
        ("next_done", (8,), "batch-major"),
        ("last_dones", (5,), "time-major"),
    ],
)
def test_per_sequence_dataset_proves_the_axes(
    tmp_path: Path, name: str, shape: tuple, layout: str
) -> None:
    cols = _buffer(8, 5)
    cols[name] = np.zeros(shape, bool if "done" in name else np.float32)
    source = open_input(str(_h5(tmp_path / "b.h5", **cols)))
    try:
        assert source.layout == layout
        assert len(source.notes) == 1 and f'"{name}"' in source.notes[0]
        assert layout in source.notes[0]
    finally:
        source.close()


def test_a_derived_layout_runs(tmp_path: Path) -> None:
    cols = _buffer(6, 3)
    cols["last_values"] = np.zeros(3, np.float32)
    path = _h5(tmp_path / "b.h5", **cols)
    report = api.run("gae", str(path), output=str(tmp_path / "o.h5"), device="cpu")
    assert report.layout == "time-major"


def test_square_buffer_proves_nothing(tmp_path: Path) -> None:
    cols = _buffer(6, 6)
    cols["last_values"] = np.zeros(6, np.float32)
    path = _h5(tmp_path / "sq.h5", **cols)
    with pytest.raises(AmbiguousInputError, match="square"):
        open_input(str(path))


def test_contradicting_datasets_are_refused(tmp_path: Path) -> None:
    cols = _buffer(8, 5)
    cols["last_values"] = np.zeros(5, np.float32)
    cols["next_done"] = np.zeros(8, bool)
    with pytest.raises(AmbiguousInputError, match=r"say \[T, B\] but"):
        open_input(str(_h5(tmp_path / "x.h5", **cols)))


def test_mismatched_per_sequence_dataset_proves_nothing(tmp_path: Path) -> None:
    cols = _buffer(8, 5)
    cols["last_values"] = np.zeros(7, np.float32)
    with pytest.raises(AmbiguousInputError, match="--layout time-major"):
        open_input(str(_h5(tmp_path / "x.h5", **cols)))


def test_batch_major_results_match_the_transposed_time_major_ones(tmp_path: Path) -> None:
    """The same data proved [B, T] by a last_values [B] gives the [T, B] numbers."""
    cols = _buffer(7, 4, seed=3)
    cols["last_values"] = np.random.default_rng(1).standard_normal(4).astype(np.float32)
    tb = _h5(tmp_path / "tb.h5", **cols)
    bt = _h5(
        tmp_path / "bt.h5",
        **{k: (v.T if v.ndim == 2 else v) for k, v in cols.items()},
    )
    out = {}
    for name, src in (("tb", tb), ("bt", bt)):
        report = api.run("gae", str(src), output=str(tmp_path / f"o_{name}.h5"), device="cpu")
        assert report.layout == ("time-major" if name == "tb" else "batch-major")
        with h5py.File(tmp_path / f"o_{name}.h5") as f:
            out[name] = f["advantages"][()]
    np.testing.assert_allclose(out["bt"].T, out["tb"], rtol=1e-6, atol=1e-6)


def test_flat_n_by_one_rewards_stay_flat(tmp_path: Path) -> None:
    path = _h5(
        tmp_path / "d4rl.h5",
        rewards=np.ones((10, 1), np.float32),
        terminals=np.zeros((10, 1), bool),
    )
    source = open_input(str(path))
    try:
        assert source.layout == "flat"
    finally:
        source.close()


def test_sample_buffer_carries_its_layout_attribute() -> None:
    path = ROOT / "sample_data" / "cartpole_buffer.h5"
    with h5py.File(path) as f:
        assert f.attrs["layout"] in ("time_major", b"time_major")
    source = open_input(str(path))
    try:
        assert source.layout == "time-major" and source.notes == []
    finally:
        source.close()
