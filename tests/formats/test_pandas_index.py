"""pandas's saved index (``__index_level_0__``): rows that need not be consecutive steps.

``df.to_parquet`` writes the index as the column ``__index_level_0__`` only when it is
not a RangeIndex: after ``dropna``/a filter, ``sample``/``sort_values``,
``pd.concat`` or ``explode``. rltscan reads rows in file order, so a shuffled
D4RL-style table (rewards and flags, no ids) ran with exit 0, each row's return summing
rewards of unrelated rows; a table with a dropped row summed across the hole; two
per-env frames concatenated ran the first env's open episode into the second's. Where
the labels do not go on by one and nothing ends the episode, the run now asks (exit 2)
with the ways out, each of which gives the producer's numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests import oracles
from tests.io_helpers import run_cli

GAMMA = 0.5
IGNORE = ["--ignore", "__index_level_0__"]


def _frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    terminals = np.zeros(12, bool)
    terminals[[3, 8, 11]] = True
    return pd.DataFrame({"rewards": rng.normal(size=12), "terminals": terminals})


def _returns(path: Path, *args: str) -> tuple[int, str]:
    res = run_cli(
        "returns", str(path), *args, "--gamma", str(GAMMA), "--device", "cpu", "-q", in_process=True
    )
    return res.returncode, res.stderr


def _want(df: pd.DataFrame) -> np.ndarray:
    r, term = df["rewards"].to_numpy(), df["terminals"].to_numpy()
    return np.asarray(oracles.discounted_returns(r, np.zeros(len(r)), term, None, gamma=GAMMA))


def test_a_shuffled_table_is_refused_and_its_fix_gives_the_returns(tmp_path: Path) -> None:
    df = _frame()
    path = tmp_path / "shuffled.parquet"
    df.sample(frac=1, random_state=0).to_parquet(path)
    code, err = _returns(path)
    assert code == 2, err
    assert '"__index_level_0__" goes from' in err and "df.sort_index()" in err
    pd.read_parquet(path).sort_index().to_parquet(path)  # the fix it names
    assert _returns(path) == (0, "")
    np.testing.assert_allclose(pq.read_table(path)["returns"].to_numpy(), _want(df))


@pytest.mark.parametrize("recipe", ["dropped", "concatenated"])
def test_a_hole_or_a_seam_that_no_flag_ends_is_asked_about(recipe: str, tmp_path: Path) -> None:
    df = _frame()
    path = tmp_path / f"{recipe}.parquet"
    if recipe == "dropped":
        df.drop(index=5).to_parquet(path)
    else:  # two envs' frames, the first one's last episode open
        pd.concat([df.iloc[:6], df.iloc[:4]]).to_parquet(path)
    for estimator in ("returns", "prefix-sum"):  # whatever the estimator: both ask
        res = run_cli(estimator, str(path), "--device", "cpu", "-q", in_process=True)
        assert res.returncode == 2 and "--ignore __index_level_0__" in res.stderr, res.stderr
    assert _returns(path, *IGNORE)[0] == 0  # the user says the rows are consecutive


def test_ends_that_flags_mark_at_the_seams_ask_nothing(tmp_path: Path) -> None:
    df = _frame()
    path = tmp_path / "episodes.parquet"
    parts = [df.iloc[:4], df.iloc[4:9].reset_index(drop=True), df.iloc[9:]]
    pd.concat(parts).to_parquet(path)  # index 0-3, 0-4, 9-11: every seam is a terminal
    assert _returns(path) == (0, "")
    np.testing.assert_allclose(pq.read_table(path)["returns"].to_numpy(), _want(df))
    kept = tmp_path / "filtered.parquet"
    df[df.index >= 4].to_parquet(kept)  # a filter that keeps one run of rows
    assert _returns(kept) == (0, "")


def test_an_exploded_table_takes_its_labels_as_episode_ids(tmp_path: Path) -> None:
    rows = pd.DataFrame(
        {"rewards": [[1.0, 2.0, 3.0], [4.0, 5.0]], "terminals": [[False] * 3, [False, True]]}
    )  # episode 0 cut by its time limit: no flag at its end
    path = tmp_path / "exploded.parquet"
    cols = ["rewards", "terminals"]
    rows.explode(cols).astype({"rewards": float, "terminals": bool}).to_parquet(path)
    code, err = _returns(path)
    assert code == 2 and "--episode-id __index_level_0__" in err, err
    code, err = _returns(path, "--episode-id", "__index_level_0__", "--ends-are", "truncated")
    assert code == 0, err
    want = [1 + 0.5 * 2 + 0.25 * 3, 2 + 0.5 * 3, 3, 4 + 0.5 * 5, 5]
    np.testing.assert_allclose(pq.read_table(path)["returns"].to_numpy(), want)
