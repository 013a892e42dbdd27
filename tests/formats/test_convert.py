"""``-o`` to another format carries every column it can (issue 10 item 8), and a
converted file processed again gives the same numbers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import DataError, ParameterError, RltscanError
from tests.io_helpers import BUFFER, FLAT, MINARI, PARQUET, h5_columns

CPU = {"device": "cpu"}


def _close(got: np.ndarray, want: np.ndarray) -> None:
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * scale)


def _same_when_run_again(out: Path, tmp_path: Path, **kw: object) -> None:
    """The converted Parquet file, run through GAE again: the same advantages (the
    conversion kept every column the estimator reads, with its meaning)."""
    again = tmp_path / "again.parquet"
    api.run("gae", str(out), output=str(again), prefix="b_", **kw, **CPU)
    t2 = pq.read_table(again)
    _close(t2.column("b_advantages").to_numpy(), t2.column("advantages").to_numpy())


def _round_trip(src: Path, tmp_path: Path, command: str, **back: object) -> tuple[Path, dict, dict]:
    """``src`` to Parquet (a ``command`` run), then back to HDF5 (a ``returns`` run given
    ``back``): the HDF5 file, its datasets and the source's."""
    pq_path = tmp_path / "via.parquet"
    api.run(command, str(src), output=str(pq_path), **CPU)
    back_path = tmp_path / "back.h5"
    api.run("returns", str(pq_path), output=str(back_path), **back, **CPU)
    return back_path, h5_columns(back_path), h5_columns(src)


def _meta(table: pa.Table) -> dict:
    return json.loads(table.schema.metadata[b"rltscan.convert"])


def test_flat_hdf5_to_parquet_carries_every_dataset(tmp_path: Path) -> None:
    out = tmp_path / "x.parquet"
    api.run("gae", str(FLAT), output=str(out), **CPU)
    table = pq.read_table(out)
    source = h5_columns(FLAT)
    per_step = {k for k, v in source.items() if v.ndim and v.shape[0] == 1024}
    assert per_step <= set(table.column_names)
    assert {"observations", "next_observations", "actions", "infos/action_log_probs"} <= per_step
    assert pa.types.is_fixed_size_list(table.schema.field("observations").type)
    np.testing.assert_array_equal(
        np.stack(table.column("observations").to_pylist()), source["observations"]
    )
    for name in per_step:
        got = table.column(name).to_numpy(zero_copy_only=False)
        if got.dtype != object:
            np.testing.assert_array_equal(got, source[name], err_msg=name)
    meta = _meta(table)
    assert meta["datasets"]["metadata/algorithm"]["value"] == source["metadata/algorithm"].decode()
    # processed again: the same numbers
    _same_when_run_again(out, tmp_path)


def test_buffer_to_parquet_is_env_major_with_index_columns(tmp_path: Path) -> None:
    out = tmp_path / "buf.parquet"
    api.run("gae", str(BUFFER), output=str(out), **CPU)
    table = pq.read_table(out)
    source = h5_columns(BUFFER)
    t, b = source["rewards"].shape
    assert table.num_rows == t * b
    assert table.column("traj_id").to_pylist() == np.repeat(np.arange(b), t).tolist()
    assert table.column("step").to_pylist() == np.tile(np.arange(t), b).tolist()
    for name, arr in source.items():
        if arr.shape[:2] == (t, b):
            got = np.asarray(table.column(name).to_pylist())
            want = np.swapaxes(arr, 0, 1).reshape(t * b, *arr.shape[2:])
            np.testing.assert_array_equal(got, want, err_msg=name)
    meta = _meta(table)
    assert meta["layout"] == "time-major" and (meta["T"], meta["B"]) == (t, b)
    np.testing.assert_array_equal(
        np.float32(meta["per_sequence"]["last_values"]["value"]), source["last_values"]
    )
    assert meta["attrs"]["/"]["layout"] == "time_major"
    # the buffer's advantages, env-major, equal a run on the flat table: each env's end is
    # the end of its recorded data (a truncation), which --ends-are says
    with pytest.raises(RltscanError, match="--ends-are"):
        api.run("gae", str(out), output=str(tmp_path / "z.parquet"), prefix="b_", **CPU)
    _same_when_run_again(out, tmp_path, ends_are="truncated")


def test_buffer_round_trip_through_parquet_restores_the_buffer(tmp_path: Path) -> None:
    back, restored, source = _round_trip(BUFFER, tmp_path, "gae", ends_are="truncated")
    for name, arr in source.items():
        np.testing.assert_array_equal(restored[name], arr, err_msg=name)
    with h5py.File(back) as f:
        assert f.attrs["layout"] == "time_major"
    assert restored["advantages"].shape == source["rewards"].shape
    # the restored buffer is a [T, B] buffer again: the same advantages
    again = tmp_path / "again.h5"
    api.run("gae", str(back), output=str(again), prefix="c_", **CPU)
    out = h5_columns(again)
    _close(out["c_advantages"], out["advantages"])


def test_flat_round_trip_through_parquet_restores_scalars_and_attributes(tmp_path: Path) -> None:
    """A flat D4RL file's ``metadata/*`` scalars and its attributes ride in the
    ``rltscan.convert`` entry; back to HDF5 they are datasets and attributes again (they
    were restored only for a ``[T, B]`` buffer, and dropped from a flat file)."""
    src = tmp_path / "d4rl.h5"
    shutil.copy(FLAT, src)
    with h5py.File(src, "a") as f:
        f.attrs["env"] = "CartPole-v1"
        f["rewards"].attrs["unit"] = "points"
    back, restored, source = _round_trip(src, tmp_path, "returns", prefix="b_")
    for name, arr in source.items():
        np.testing.assert_array_equal(restored[name], arr, err_msg=name)
    with h5py.File(back) as f:
        assert f.attrs["env"] == "CartPole-v1" and f["rewards"].attrs["unit"] == "points"
        assert "layout" not in f.attrs  # a flat file stays flat


def test_minari_to_parquet_keeps_v_of_s_t_as_a_bootstrap_column(tmp_path: Path) -> None:
    out = tmp_path / "m.parquet"
    api.run("gae", str(MINARI), output=str(out), **CPU)
    table = pq.read_table(out)
    assert {"episode_id", "next_values", "next_observations", "actions", "q_values"} <= set(
        table.column_names
    )
    with h5py.File(MINARI / "data" / "main_data.hdf5") as f:
        v0 = f["episode_0/values"][()]
    ids = table.column("episode_id").to_numpy()
    np.testing.assert_array_equal(table.column("next_values").to_numpy()[ids == 0], v0[1:])
    np.testing.assert_array_equal(table.column("values").to_numpy()[ids == 0], v0[:-1])
    _same_when_run_again(out, tmp_path)


def test_parquet_to_hdf5_is_a_flat_file_with_every_column(tmp_path: Path) -> None:
    out = tmp_path / "p.h5"
    api.run("gae", str(PARQUET), output=str(out), ends_are="truncated", **CPU)
    table = pq.read_table(PARQUET)
    got = h5_columns(out)
    for name in table.column_names:
        np.testing.assert_array_equal(got[name], table.column(name).to_numpy(), err_msg=name)
    with h5py.File(out) as f:
        assert f.attrs["env"] == "CartPole-v1"
        assert f["advantages"].attrs["estimator"] == "gae"
    again = tmp_path / "again.h5"
    api.run("gae", str(out), output=str(again), prefix="b_", ends_are="truncated", **CPU)
    res = h5_columns(again)
    _close(res["b_advantages"], res["advantages"])


def test_fixed_size_lists_go_back_to_arrays(tmp_path: Path) -> None:
    _, got, source = _round_trip(FLAT, tmp_path, "returns", prefix="b_")
    for name, arr in source.items():
        if arr.ndim and arr.shape[0] == 1024:
            np.testing.assert_array_equal(got[name], arr, err_msg=name)


@pytest.mark.parametrize("suffix", [".arrow", ".arrows"])
def test_hdf5_to_arrow(suffix: str, tmp_path: Path) -> None:
    out = tmp_path / f"x{suffix}"
    api.run("gae", str(BUFFER), output=str(out), **CPU)
    data = pa.memory_map(str(out))
    table = (ipc.open_stream if suffix == ".arrows" else ipc.open_file)(data).read_all()
    assert {"traj_id", "observations", "advantages"} <= set(table.column_names)


@pytest.mark.parametrize("name", ["out.txt", "out", "out.csv"])
def test_unknown_output_suffix_is_a_usage_error(name: str, tmp_path: Path) -> None:
    with pytest.raises(ParameterError) as err:
        api.run("gae", str(FLAT), output=str(tmp_path / name), **CPU)
    assert err.value.exit_code == 2
    assert ".parquet" in str(err.value) and ".h5" in str(err.value)
    assert not (tmp_path / name).exists()


def test_a_dataset_that_cannot_be_carried_refuses_by_name(tmp_path: Path) -> None:
    src = tmp_path / "in.h5"
    shutil.copyfile(FLAT, src)
    with h5py.File(src, "a") as f:
        f["pairs"] = np.zeros(1024, [("a", "f4"), ("b", "i4")])
        f["big_table"] = np.zeros((300, 300), np.float32)
    before = src.read_bytes()
    with pytest.raises(DataError) as err:
        api.run("gae", str(src), output=str(tmp_path / "x.parquet"), **CPU)
    assert err.value.exit_code == 4
    assert '"pairs"' in str(err.value) and '"big_table"' in str(err.value)
    assert str(err.value).startswith(
        f"{src}: 2 dataset(s) cannot be carried to the output format ("
    )
    assert str(err.value).endswith(
        "); write to the input's own format (-o out.h5) or remove them first"
    )
    assert not (tmp_path / "x.parquet").exists() and src.read_bytes() == before


def test_a_column_that_cannot_be_carried_to_hdf5_refuses_by_name(tmp_path: Path) -> None:
    src = tmp_path / "in.parquet"
    table = pq.read_table(PARQUET)
    n = table.num_rows
    table = table.append_column("tags", pa.array([[1, 2]] * n, pa.list_(pa.int64())))
    table = table.append_column("maybe", pa.array([None] + [1.0] * (n - 1)))
    pq.write_table(table, src)
    with pytest.raises(DataError) as err:
        api.run("gae", str(src), output=str(tmp_path / "x.h5"), ends_are="truncated", **CPU)
    assert '"tags"' in str(err.value) and '"maybe"' in str(err.value)
    assert str(err.value).startswith(f"{src}: 2 column(s) cannot be carried to HDF5 (")
    assert str(err.value).endswith(
        "); write Parquet or Arrow (-o out.parquet) or fix those columns first"
    )
    assert not (tmp_path / "x.h5").exists()


@pytest.mark.parametrize("backend", ["parquet", "arrow"])
def test_minari_columnar_to_parquet_drops_padding_and_keeps_v_of_s_t(
    backend: str, tmp_path: Path
) -> None:
    """Minari's Arrow/Parquet backends: every column has T+1 rows, the last one padding
    except for the values (V(s_T)), which become next_values."""
    root = tmp_path / "ds"
    (root / "data").mkdir(parents=True)
    meta = json.loads((MINARI / "data" / "metadata.json").read_text())
    (root / "data" / "metadata.json").write_text(json.dumps({**meta, "data_format": backend}))
    with h5py.File(MINARI / "data" / "main_data.hdf5") as f:
        for key in f:
            cols = {}
            for name, ds in f[key].items():
                x = ds[()]
                if name == "observations":
                    continue
                cols[name] = x if name == "values" else np.append(x, np.zeros(1, x.dtype))
            d = root / "data" / key.removeprefix("episode_")
            d.mkdir()
            table = pa.table(cols)
            if backend == "parquet":
                pq.write_table(table, d / "part-0.parquet")
            else:
                with ipc.new_file(d / "part-0.arrow", table.schema) as w:
                    w.write_table(table)
    out = tmp_path / "m.parquet"
    api.run("gae", str(root), output=str(out), **CPU)
    table = pq.read_table(out)
    assert {"episode_id", "values", "next_values", "actions", "rewards"} <= set(table.column_names)
    assert "next_rewards" not in table.column_names
    with h5py.File(MINARI / "data" / "main_data.hdf5") as f:
        steps = sum(len(f[k]["rewards"]) for k in f)
        v3 = f["episode_3/values"][()]
    assert table.num_rows == steps
    ids = table.column("episode_id").to_numpy()
    np.testing.assert_array_equal(table.column("next_values").to_numpy()[ids == 3], v3[1:])
    _same_when_run_again(out, tmp_path)


def test_batch_major_buffer_round_trip(tmp_path: Path) -> None:
    """A [B, T] buffer (proved by last_values [B]) → Parquet → HDF5 is the same buffer,
    now with a layout attribute, and gives the same advantages."""
    rng = np.random.default_rng(0)
    b, t = 3, 7
    src = tmp_path / "bt.h5"
    with h5py.File(src, "w") as f:
        f["rewards"] = rng.standard_normal((b, t)).astype(np.float32)
        f["values"] = rng.standard_normal((b, t)).astype(np.float32)
        f["terminations"] = rng.random((b, t)) < 0.2
        f["last_values"] = rng.standard_normal(b).astype(np.float32)
        f["obs"] = rng.standard_normal((b, t, 2, 2)).astype(np.float32)
    table_path = tmp_path / "bt.parquet"
    api.run("gae", str(src), output=str(table_path), **CPU)
    table = pq.read_table(table_path)
    assert table.column("traj_id").to_pylist() == np.repeat(np.arange(b), t).tolist()
    back = tmp_path / "back.h5"
    api.run("returns", str(table_path), output=str(back), ends_are="truncated", **CPU)
    got, want = h5_columns(back), h5_columns(src)
    for name, arr in want.items():
        np.testing.assert_array_equal(got[name], arr, err_msg=name)
    with h5py.File(back) as f:
        assert f.attrs["layout"] == "batch_major"
    again = tmp_path / "again.h5"
    api.run("gae", str(back), output=str(again), prefix="z_", **CPU)
    res = h5_columns(again)
    _close(res["z_advantages"], res["advantages"])
