"""``--order-by COLUMN`` on shards that overlap in that column: refused, not joined.

A hive-partitioned table (pandas ``to_parquet(partition_cols=["env"])``) is refused as
one stream, and the refusal offers ``--order-by COLUMN`` "if the partitions are one
stream of steps in that column's order". Two envs that each log their own clock
(``time`` 0.00, 0.02, ...) are not: ordered by ``time`` they overlap, yet the run
joined them end to end with exit 0, env 0's open last episode summing env 1's first
rewards. In the order ``--order-by`` gives, every shard must now start no lower than
the one before it ended (and end no lower than it starts), else exit 4 naming both.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from tests import oracles
from tests.io_helpers import run_cli

T = 6
GAMMA = 0.5


def _env(env: int, clock: np.ndarray) -> pd.DataFrame:
    terminals = np.zeros(T, bool)
    terminals[2] = True
    rewards = np.random.default_rng(env).normal(size=T)
    return pd.DataFrame({"env": env, "time": clock, "rewards": rewards, "terminals": terminals})


def _returns(root: Path, out: Path) -> tuple[int, str]:
    args = ("--gamma", str(GAMMA), "--device", "cpu", "-q", "--order-by", "time", "-o", str(out))
    res = run_cli("returns", str(root), *args, in_process=True)
    return res.returncode, res.stderr


def test_two_envs_with_their_own_clocks_are_not_one_stream(tmp_path: Path) -> None:
    root = tmp_path / "hive"
    frames = [_env(0, np.arange(T) * 0.02), _env(1, np.arange(T) * 0.02)]
    pd.concat(frames, ignore_index=True).to_parquet(root, partition_cols=["env"])
    code, err = _returns(root, tmp_path / "out")
    assert code == 4, err
    assert "--order-by time" in err and "overlap" in err and "env=1" in err, err
    assert not (tmp_path / "out").exists()


def test_a_shard_whose_column_runs_backwards_is_refused(tmp_path: Path) -> None:
    root = tmp_path / "shards"
    root.mkdir()
    frame = _env(0, np.arange(T)[::-1] * 0.02)
    pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), root / "a.parquet")
    code, err = _returns(root, tmp_path / "out")
    assert code == 4 and "not in that column's order" in err, err


def test_one_clock_split_over_shards_is_one_stream(tmp_path: Path) -> None:
    root = tmp_path / "days"
    root.mkdir()
    whole = _env(0, np.arange(T) * 0.02)
    for name, rows in [("b.parquet", slice(0, 4)), ("a.parquet", slice(4, T))]:  # names: wrong
        part = pa.Table.from_pandas(whole.iloc[rows], preserve_index=False)
        pq.write_table(part, root / name)
    code, err = _returns(root, tmp_path / "out")
    assert code == 0, err
    got = [
        pq.read_table(tmp_path / "out" / n)["returns"].to_numpy()
        for n in ("b.parquet", "a.parquet")
    ]
    r, term = whole["rewards"].to_numpy(), whole["terminals"].to_numpy()
    want = oracles.discounted_returns(r, np.zeros(T), term, None, gamma=GAMMA)
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-12)
