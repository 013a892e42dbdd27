"""A step counter starts episodes in a table with no flag columns, as an episode id does.

``rltscan prefix-sum`` needs no flags: on a flat table without any it sums over the
whole table. An episode-id column cut it where the id changes, but a step counter
(``step``, ``frame_index``, ``timestep``, ...) that starts again was read only beside a
flag column: a table of episodes numbered only by their steps (a frame table without
``next.done``, a logger's ``step`` column) got prefix sums running from one episode
into the next, with exit 0. The counter's restarts now start episodes there too, in one
file, in windows and across shards; a step column that is not an integer counter (a
float ``t``, time in seconds) still proves nothing. The same held for a D4RL-style file's
hidden ends (``observations[t+1]`` unlike ``next_observations[t]``): without flag
columns prefix-sum never looked, and now asks as every other run does.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests import oracles
from tests.io_helpers import run_cli

LENGTHS = [5, 3, 7, 1, 4]


def _steps() -> tuple[np.ndarray, np.ndarray]:
    steps = np.concatenate([np.arange(n) for n in LENGTHS])
    x = np.random.default_rng(0).normal(size=steps.size)
    return steps, x


def _prefix_sum(*args: str) -> tuple[int, str]:
    res = run_cli("prefix-sum", *args, "--device", "cpu", "-q", in_process=True)
    return res.returncode, res.stderr


@pytest.mark.parametrize("name", ["frame_index", "step", "timestep"])
@pytest.mark.parametrize("window", [None, 3])
def test_prefix_sums_restart_where_the_counter_does(
    name: str, window: int | None, tmp_path: Path
) -> None:
    steps, x = _steps()
    path = tmp_path / "frames.parquet"
    pq.write_table(pa.table({"rewards": x, name: steps}), path, row_group_size=4)
    extra = ["--chunk-steps", str(window), "--block-steps", str(window)] if window else []
    code, err = _prefix_sum(str(path), *extra)
    assert code == 0, err
    got = pq.read_table(path)["prefix_sums"].to_numpy()
    np.testing.assert_allclose(got, oracles.prefix_sum(x, is_first=steps == 0), rtol=1e-12)


def test_hdf5_and_shards_too(tmp_path: Path) -> None:
    steps, x = _steps()
    want = oracles.prefix_sum(x, is_first=steps == 0)
    h5 = tmp_path / "frames.h5"
    with h5py.File(h5, "w") as h:
        h["rewards"], h["step"] = x, steps
    assert _prefix_sum(str(h5))[0] == 0
    with h5py.File(h5) as h:
        np.testing.assert_allclose(h["prefix_sums"][:], want, rtol=1e-12)
    shards = tmp_path / "shards"
    shards.mkdir()
    for i, (a, b) in enumerate([(0, 6), (6, 11), (11, steps.size)]):
        pq.write_table(pa.table({"rewards": x[a:b], "step": steps[a:b]}), shards / f"p-{i}.parquet")
    assert _prefix_sum(str(shards))[0] == 0
    got = [pq.read_table(shards / f"p-{i}.parquet")["prefix_sums"].to_numpy() for i in range(3)]
    np.testing.assert_allclose(np.concatenate(got), want, rtol=1e-12)


def test_a_float_t_column_is_not_a_counter(tmp_path: Path) -> None:
    steps, x = _steps()
    path = tmp_path / "timed.parquet"
    pq.write_table(pa.table({"rewards": x, "t": steps * 0.05}), path)
    code, err = _prefix_sum(str(path))
    assert code == 0, err
    np.testing.assert_allclose(pq.read_table(path)["prefix_sums"].to_numpy(), np.cumsum(x))


def test_hidden_ends_are_asked_about_without_flag_columns(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    states = rng.normal(size=(9, 2))
    obs, nxt = states[:-1].copy(), states[1:].copy()
    obs[4] = rng.normal(size=2)  # a reset nobody flagged: nxt[3] is not obs[4]
    path = tmp_path / "d4rl.h5"
    with h5py.File(path, "w") as h:
        h["rewards"], h["observations"], h["next_observations"] = np.ones(8), obs, nxt
    code, err = _prefix_sum(str(path))
    assert code == 2 and "--ends-from-observations" in err, err
    assert _prefix_sum(str(path), "--ends-from-observations")[0] == 0
    with h5py.File(path) as h:
        np.testing.assert_array_equal(h["prefix_sums"][:], [1, 2, 3, 4, 1, 2, 3, 4])
    assert _prefix_sum(str(path), "--ignore-observation-gaps", "--overwrite")[0] == 0
    with h5py.File(path) as h:
        np.testing.assert_array_equal(h["prefix_sums"][:], np.arange(1, 9))
