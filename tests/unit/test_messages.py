"""Messages name the file, the column as stored, the first bad index and the kind
(issue 21 item 8): null vs NaN vs Inf, never a role name or a numpy repr."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import DataError, MissingBootstrapError

FIX = "fix or mask the data (NaN is only allowed in ignored slots)"


def _table(path: Path, reward: pa.Array, value: list[float]) -> Path:
    n = len(value)
    pq.write_table(
        pa.table(
            {
                "reward": reward,
                "value": value,
                "next_value": [0.5] * n,
                "terminated": [False] * n,
                "truncated": [False] * (n - 1) + [True],
            }
        ),
        path,
    )
    return path


@pytest.mark.parametrize("streamed", [True, False], ids=["in-place", "to-arrow"])
@pytest.mark.parametrize("command", ["gae", "traces"])
def test_a_null_is_a_null_under_its_stored_name(
    command: str, streamed: bool, tmp_path: Path
) -> None:
    """A null reward (Parquet), read by GAE or by traces (whose input is the rewards):
    the file, "reward" as stored (not "rewards" or "x"), the row and "null"."""
    reward = pa.array([1.0, 1.0, 1.0, 1.0, 1.0, None, 1.0, 1.0], pa.float32())
    path = _table(tmp_path / "t.parquet", reward, [0.0] * 8)
    out = {} if streamed else {"output": str(tmp_path / "o.arrow")}
    with pytest.raises(DataError) as err:
        api.run(command, str(path), device="cpu", **out)
    assert str(err.value) == (
        f'{path}: column "reward" holds a null (read as NaN) at row 5, an entry that is read; {FIX}'
    )
    assert (err.value.column, err.value.index) == ("reward", (5,))


@pytest.mark.parametrize(("bad", "kind"), [(np.nan, "NaN"), (np.inf, "+Inf"), (-np.inf, "-Inf")])
def test_nan_and_inf_are_told_apart(bad: float, kind: str, tmp_path: Path) -> None:
    value = [0.0] * 8
    value[3] = bad
    path = _table(tmp_path / "t.parquet", pa.array([1.0] * 8), value)
    with pytest.raises(
        DataError, match=rf'column "value" holds {kind.replace("+", "[+]")} at row 3,'
    ):
        api.run("gae", str(path), device="cpu")


def test_rlds_rows_are_the_stored_rows(tmp_path: Path) -> None:
    """A bad entry after a final-observation row is named by its stored row."""
    path = tmp_path / "steps.parquet"
    reward = [1.0, 2.0, 0.0, 0.5, np.nan, -1.0, 0.0]
    pq.write_table(
        pa.table(
            {
                "is_first": [1, 0, 0, 1, 0, 0, 0],
                "is_last": [0, 0, 1, 0, 0, 0, 1],
                "is_terminal": [0, 0, 1, 0, 0, 0, 0],
                "reward": reward,
                "value": [0.5, 0.3, 0.0, 0.8, 0.6, 0.2, 0.7],
            }
        ),
        path,
    )
    with pytest.raises(DataError, match=r'column "reward" holds NaN at row 4,'):
        api.run("gae", str(path), device="cpu", is_last_row="observation")


def test_episode_groups_name_the_group(tmp_path: Path) -> None:
    path = tmp_path / "episodes.h5"
    with h5py.File(path, "w") as f:
        for i in range(2):
            g = f.create_group(f"episode_{i}")
            rewards = np.ones(4)
            rewards[2] = -np.inf if i else 1.0
            g["rewards"] = rewards
            g["terminations"] = np.array([0, 0, 0, 1], bool)
            g["truncations"] = np.zeros(4, bool)
            g["values"] = np.zeros(5)
    with pytest.raises(DataError, match=r'"rewards" holds -Inf at step 2 of episode_1 \(index 6'):
        api.run("gae", str(path), device="cpu")


def test_no_numpy_reprs(tmp_path: Path) -> None:
    """2-D flags that are not 0/1 and repeated episode ids: plain numbers."""
    path = tmp_path / "buffer.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones((4, 2), np.float32)
        terminals = np.zeros((4, 2), np.int64)
        terminals[1, 0] = 2
        f["terminals"] = terminals
        f["next_values"] = np.zeros((4, 2), np.float32)
        f.attrs["layout"] = "time_major"
    with pytest.raises(DataError) as err:
        api.run("returns", str(path), device="cpu")
    assert "found 2 at index (1, 0)" in str(err.value) and "np." not in str(err.value)
    table = tmp_path / "ids.parquet"
    pq.write_table(
        pa.table({"episode_id": np.array([3, 3, 4, 3], np.int64), "reward": [1.0] * 4}), table
    )
    with pytest.raises(DataError) as err:
        api.run("returns", str(table), device="cpu", ends_are="truncated")
    assert "episode id 3 in" in str(err.value) and "np." not in str(err.value)


def test_missing_bootstrap_names_the_first_row_and_why(tmp_path: Path) -> None:
    """D4RL: the first truncation (a timeouts row), not the last, and not "without
    termination"; then the end of the data, said as such."""
    n = 40
    path = tmp_path / "d4rl.h5"
    timeouts = np.zeros(n, bool)
    timeouts[[9, 25]] = True
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones(n, np.float32)
        f["terminals"] = np.zeros(n, bool)
        f["timeouts"] = timeouts
        f["values"] = np.zeros(n, np.float32)
    for kw in ({}, {"chunk_steps": 8, "block_steps": 8}):
        with pytest.raises(MissingBootstrapError) as err:
            api.run("gae", str(path), device="cpu", **kw)
        text = str(err.value)
        assert 'row 9 is a truncation ("timeouts" is set there)' in text, text
        assert "without termination" not in text and "V(s_{t+1})" in text
    timeouts[:] = False
    with h5py.File(path, "a") as f:
        f["timeouts"][...] = timeouts
    with pytest.raises(MissingBootstrapError, match="the data ends at row 39 with no terminal"):
        api.run("gae", str(path), device="cpu")


def test_a_column_given_to_another_role_is_named_as_taken(tmp_path: Path) -> None:
    """``--values rewards`` leaves the rewards without a column: the message said the file
    had no column "rewards" while listing it among those found."""
    path = _table(tmp_path / "t.parquet", pa.array([1.0, 2.0, 3.0]), [0.1, 0.2, 0.3])
    pq.write_table(pq.read_table(path).rename_columns(
        ["rewards", "value", "next_value", "terminated", "truncated"]), path)  # fmt: skip
    with pytest.raises(DataError) as err:
        api.run("gae", str(path), device="cpu", columns={"values": "rewards"})
    message = str(err.value)
    assert 'column "rewards" is read as the values (--values rewards)' in message
    assert "pass --rewards KEY" in message
