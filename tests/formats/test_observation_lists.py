"""D4RL data moved to Parquet through pandas: observations as lists, a timeout unmarked.

D4RL's medium-replay files do not mark every timeout (D4RL#162); the next row then
starts a new episode with nothing but the observations to say so
(``observations[t+1] != next_observations[t]``, the check IQL and CORL run). rltscan
looks for such hidden ends and, in an HDF5 file, stops naming ``--ends-from-observations``
/ ``--ignore-observation-gaps``. The same data in a DataFrame (``pd.DataFrame({k:
list(v)})``, how most people move a D4RL dict to Parquet) holds each observation as an
Arrow ``list<float>``, which rltscan did not compare: it used to skip the check with a
note and exit 0, the two episodes bridged. Lists of one length are now read as (N, d)
and compared like fixed-size lists (polars ``Array``, pyarrow ``fixed_size_list``), so
the run stops there as for HDF5; lists of several lengths cannot be compared, and the
run stops naming the flag that waives the check.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tests import oracles
from tests.io_helpers import run_cli

GAMMA = 0.9


def d4rl_dict(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Two episodes of 4 steps back to back; the first one's timeout is not marked."""
    states = rng.normal(size=(10, 3)).astype(np.float32)
    first, second = states[:5], states[5:]  # s_0..s_4 and s_0..s_4 of the next episode
    return {
        "observations": np.concatenate([first[:-1], second[:-1]]),
        "next_observations": np.concatenate([first[1:], second[1:]]),
        "actions": rng.normal(size=(8, 2)).astype(np.float32),
        "rewards": rng.normal(size=8).astype(np.float32),
        "terminals": np.zeros(8, bool),
        "timeouts": np.zeros(8, bool),
    }


def assert_the_hidden_end_truncates(path: Path, data: dict[str, np.ndarray]) -> None:
    """The returns written into ``path`` are the episodes' own, the unmarked end after
    row 3 read as a truncation."""
    trunc = np.zeros(8, bool)
    trunc[3] = True
    want = oracles.discounted_returns(
        data["rewards"].tolist(), [0.0] * 8, [False] * 8, trunc.tolist(), gamma=GAMMA
    )
    got = pq.read_table(path, columns=["returns"]).column("returns").to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


def rltscan(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, "--gamma", str(GAMMA), "--device", "cpu", "-q")


def test_a_pandas_parquet_is_refused_like_its_hdf5_twin(tmp_path: Path) -> None:
    data = d4rl_dict(np.random.default_rng(0))
    h5 = tmp_path / "hopper-medium-replay.hdf5"
    with h5py.File(h5, "w") as f:
        for k, v in data.items():
            f[k] = v
    table = tmp_path / "hopper-medium-replay.parquet"
    pd.DataFrame({k: list(v) if v.ndim > 1 else v for k, v in data.items()}).to_parquet(table)
    assert pa.types.is_list(pq.read_schema(table).field("observations").type)
    for path in (h5, table):
        refused = rltscan("returns", str(path))
        assert refused.returncode == 2, (path, refused.stderr)
        assert "--ignore-observation-gaps" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1
    assert "returns" not in pq.read_schema(table).names
    waived = rltscan("returns", str(table), "--ignore-observation-gaps")
    assert waived.returncode == 0, waived.stderr


def test_fixed_size_lists_are_compared(tmp_path: Path) -> None:
    """The same table with fixed-size observation lists: the hidden end is found, and
    read as a truncation with --ends-from-observations (exact)."""
    data = d4rl_dict(np.random.default_rng(1))
    cols = {}
    for k, v in data.items():
        if v.ndim > 1:
            cols[k] = pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), v.shape[1])
        else:
            cols[k] = pa.array(v)
    path = tmp_path / "fixed.parquet"
    pq.write_table(pa.table(cols), path)
    assert rltscan("returns", str(path)).returncode == 2
    done = rltscan("returns", str(path), "--ends-from-observations")
    assert done.returncode == 0, done.stderr
    assert_the_hidden_end_truncates(path, data)


def test_a_pandas_parquet_is_read_exactly_with_ends_from_observations(tmp_path: Path) -> None:
    """pandas' list<float> observations (one length) are compared: the hidden end is a
    truncation with --ends-from-observations, as in the HDF5 twin."""
    data = d4rl_dict(np.random.default_rng(2))
    path = tmp_path / "pandas.parquet"
    pd.DataFrame({k: list(v) if v.ndim > 1 else v for k, v in data.items()}).to_parquet(path)
    done = rltscan("returns", str(path), "--ends-from-observations")
    assert done.returncode == 0, done.stderr
    assert_the_hidden_end_truncates(path, data)


def test_lists_of_several_lengths_are_refused_with_a_fix_that_works(tmp_path: Path) -> None:
    data = d4rl_dict(np.random.default_rng(3))
    ragged = [list(o[: 2 + i % 2]) for i, o in enumerate(data["observations"])]
    cols = {k: v for k, v in data.items() if v.ndim == 1}
    table = pa.table({**cols, "observations": ragged, "next_observations": ragged})
    path = tmp_path / "ragged.parquet"
    pq.write_table(table, path)
    refused = rltscan("returns", str(path))
    assert refused.returncode == 2 and "lists of different lengths" in refused.stderr
    asked = rltscan("returns", str(path), "--ends-from-observations")
    assert asked.returncode == 2 and "drop --ends-from-observations" in asked.stderr
    waived = rltscan("returns", str(path), "--ignore-observation-gaps")
    assert waived.returncode == 0, waived.stderr


def test_tensor_extension_observations_are_compared(tmp_path: Path) -> None:
    """Observations as Arrow's canonical ``fixed_shape_tensor`` (how Ray Data and RLlib's
    offline output store arrays, in Ray's own tensor extension): read through the
    extension's storage and compared, so the hidden end is found (it was refused as a
    column of a type that is not numbers)."""
    data = d4rl_dict(np.random.default_rng(3))
    cols = {}
    for k, v in data.items():
        if v.ndim > 1:
            kind = pa.fixed_shape_tensor(pa.float32(), [v.shape[1]])
            storage = pa.FixedSizeListArray.from_arrays(pa.array(v.reshape(-1)), v.shape[1])
            cols[k] = pa.ExtensionArray.from_storage(kind, storage)
        else:
            cols[k] = pa.array(v)
    path = tmp_path / "tensors.parquet"
    pq.write_table(pa.table(cols), path)
    assert isinstance(pq.read_schema(path).field("observations").type, pa.BaseExtensionType)
    assert rltscan("returns", str(path)).returncode == 2
    done = rltscan("returns", str(path), "--ends-from-observations")
    assert done.returncode == 0, done.stderr
    assert_the_hidden_end_truncates(path, data)
