"""One episode per row (Hugging Face ``datasets``): refused, with a recipe that is exact.

``edbeeching/decision_transformer_gym_replay`` (the HF Decision Transformer tutorial)
stores each D4RL episode as one row of list columns ``observations``, ``actions``,
``rewards``, ``dones``, where ``dones`` are D4RL's ``terminals``: an episode cut by its
time limit ends with ``dones[-1] = False``. rltscan reads one row per step and refuses
list columns. Its fix used to say only "explode the lists first"; exploded without the
row number, a time-limited episode runs into the next one (nothing marks its end), so
following the fix gave exit 0 with wrong numbers. The fix now says to keep the row
number as an episode id, and that recipe gives the episodes' own returns.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from tests import oracles
from tests.io_helpers import run_cli

datasets = pytest.importorskip("datasets")
GAMMA = 0.9
PLAN = [(5, True), (4, False), (3, True)]  # (length, terminated); False: time limit


def dt_rows(rng: np.random.Generator) -> list[dict]:
    return [
        {
            "observations": rng.normal(size=(n, 3)).astype(np.float32).tolist(),
            "actions": rng.normal(size=(n, 2)).astype(np.float32).tolist(),
            "rewards": rng.normal(size=n).astype(np.float32).tolist(),
            "dones": [False] * (n - 1) + [term],
        }
        for n, term in PLAN
    ]


def rltscan(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, "--gamma", str(GAMMA), "--device", "cpu", "-q")


def test_the_refusal_s_recipe_keeps_the_episodes_apart(tmp_path: Path) -> None:
    rows = dt_rows(np.random.default_rng(0))
    path = tmp_path / "train-00000-of-00001.parquet"
    datasets.Dataset.from_list(rows).to_parquet(str(path))
    refused = rltscan("returns", str(path))
    assert refused.returncode == 4 and "holds lists" in refused.stderr
    assert "episode id" in refused.stderr and "--episode-id" in refused.stderr
    steps = tmp_path / "steps.parquet"
    frame = pd.read_parquet(path).rename_axis("episode_id").reset_index()
    frame = frame.explode(["observations", "actions", "rewards", "dones"])
    frame.astype({"rewards": "float32", "dones": bool}).to_parquet(steps, index=False)
    args = ["--episode-id", "episode_id", "--terminals", "dones", "--ends-are", "truncated"]
    done = rltscan("returns", str(steps), *args)
    assert done.returncode == 0, done.stderr
    rewards = [r for row in rows for r in row["rewards"]]
    term = [d for row in rows for d in row["dones"]]
    trunc = [t == n - 1 and not end for n, end in PLAN for t in range(n)]
    want = oracles.discounted_returns(rewards, [0.0] * len(rewards), term, trunc, gamma=GAMMA)
    got = pq.read_table(steps, columns=["returns"]).column("returns").to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("writer", ["parquet", "arrow"])
def test_episodes_of_one_length_as_fixed_size_lists_get_the_same_recipe(
    tmp_path: Path, writer: str
) -> None:
    """``Sequence(length=T)`` stores equal-length episodes as fixed-size lists; the
    refusal said "shape (1, T)" and named --layout, which a table of rows refuses."""
    features = datasets.Features(
        {
            "rewards": datasets.Sequence(datasets.Value("float32"), length=4),
            "dones": datasets.Sequence(datasets.Value("bool"), length=4),
        }
    )
    rows = {"rewards": [[1.0, 2.0, 3.0, 4.0]] * 3, "dones": [[False] * 3 + [True]] * 3}
    table = datasets.Dataset.from_dict(rows, features=features).data.table
    path = tmp_path / ("episodes.parquet" if writer == "parquet" else "episodes.arrow")
    if writer == "parquet":
        pq.write_table(table, path)
    else:
        import pyarrow.feather as feather

        feather.write_feather(table, path)
    refused = rltscan("returns", str(path))
    assert refused.returncode == 4, refused.stderr
    assert "4 values a row" in refused.stderr and "--episode-id" in refused.stderr
    assert "--layout" not in refused.stderr
