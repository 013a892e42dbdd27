"""Red team: hive-partitioned Parquet datasets (``key=value`` directories).

polars ``write_parquet(partition_by="env")``, pandas ``to_parquet(partition_cols=[...])``
and pyarrow ``write_dataset(partitioning_flavor="hive")`` split one table by the values
of a column: ``ds/env=0/…``, ``ds/env=1/…``. The column leaves the files (it is in the
path), and the rows of ``env=1`` do not continue the steps of ``env=0``: read as one
table cut into shards, the last step of env 0 bootstrapped from the first value of
env 1 instead of its own bootstrap value, exit 0. Where the partition value changes
between shards the run now stops (exit 2) and says how to run each partition.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.io_helpers import run_cli

pl = pytest.importorskip("polars")
pd = pytest.importorskip("pandas")

GAMMA, LAM, N = 0.9, 0.8, 6


def _gae(r, v, nv, term, gamma=GAMMA, lam=LAM):
    """GAE in float64; every terminal step and the last step are cuts."""
    adv, nxt = np.zeros(len(r)), 0.0
    for t in range(len(r) - 1, -1, -1):
        delta = r[t] - v[t] if term[t] else r[t] + gamma * nv[t] - v[t]
        cut = term[t] or t == len(r) - 1
        adv[t] = nxt = delta + (0.0 if cut else gamma * lam * nxt)
    return adv


def _table(seed: int = 0):
    """Two envs' rollouts of N steps each; each env's last step is cut by the end of
    the rollout and bootstraps from its own ``bootstrap_values``."""
    rng = np.random.default_rng(seed)
    parts = []
    for env in range(2):
        term = np.zeros(N, bool)
        term[2] = True
        boot = np.full(N, np.nan)
        boot[-1] = rng.normal()
        parts.append(
            pl.DataFrame(
                {
                    "env": [env] * N,
                    "rewards": rng.normal(size=N),
                    "values": rng.normal(size=N),
                    "terminated": term,
                    "truncated": np.zeros(N, bool),
                    "bootstrap_values": boot,
                }
            )
        )
    return pl.concat(parts)


def _want(df, env: int) -> np.ndarray:
    sub = df.filter(pl.col("env") == env)
    v, boot = sub["values"].to_numpy(), sub["bootstrap_values"].to_numpy()
    nv = np.append(v[1:], boot[-1])
    return _gae(sub["rewards"].to_numpy(), v, nv, sub["terminated"].to_numpy())


def _write(df, root: Path, writer: str) -> None:
    if writer == "polars":
        df.write_parquet(root, partition_by="env")
    else:
        df.to_pandas().to_parquet(root, partition_cols=["env"])


@pytest.mark.parametrize("writer", ["polars", "pandas"])
def test_hive_partitions_of_a_column_are_not_one_stream(writer: str, tmp_path: Path) -> None:
    df = _table()
    root = tmp_path / "ds"
    _write(df, root, writer)
    out = tmp_path / "out"
    args = ("--gamma", str(GAMMA), "--lam", str(LAM), "-q")
    res = run_cli("gae", str(root), *args, "-o", str(out), in_process=True)
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    msg = (res.stderr or res.stdout).strip().splitlines()
    assert len(msg) == 1 and "env=0" in msg[0] and "--order-by" in msg[0], msg
    assert not out.exists()
    # each partition on its own is the env's own rollout: exact
    for env in range(2):
        part = root / f"env={env}"
        o = tmp_path / f"out{env}"
        res = run_cli("gae", str(part), *args, "-o", str(o), in_process=True)
        assert res.returncode == 0, res.stderr
        got = np.concatenate(
            [pq.read_table(p).column("advantages").to_numpy() for p in sorted(o.rglob("*.parquet"))]
        )
        np.testing.assert_allclose(got, _want(df, env), atol=1e-6)
        shutil.rmtree(o)


def test_one_partition_value_runs_as_before(tmp_path: Path) -> None:
    """Partition directories whose value never changes (one env, several files) are one
    table cut into shards: run as before."""
    df = _table(1).filter(pl.col("env") == 0)
    root = tmp_path / "ds" / "env=0"
    root.mkdir(parents=True)
    df.head(3).drop("env").write_parquet(root / "part-0.parquet")
    df.tail(3).drop("env").write_parquet(root / "part-1.parquet")
    res = run_cli("gae", str(tmp_path / "ds"), "--gamma", str(GAMMA), "--lam", str(LAM), "-q",
                  in_process=True)  # fmt: skip
    assert res.returncode == 0, res.stderr
    got = np.concatenate(
        [pq.read_table(root / f"part-{i}.parquet").column("advantages").to_numpy() for i in (0, 1)]
    )
    np.testing.assert_allclose(got, _want(_table(1), 0), atol=1e-6)
