"""d3rlpy 1.x datasets: ``episode_terminals`` ends every episode, ``terminals`` only some.

``MDPDataset.dump`` (d3rlpy 1.x) writes flat datasets ``observations``, ``actions``,
``rewards``, ``terminals`` and ``episode_terminals`` (float32 0/1), plus the scalars
``discrete_action`` and ``version``. An episode ends where ``episode_terminals`` is set;
d3rlpy's own loader (``d3rlpy.dataset.io.load_v1``) reads an end that ``terminals``
does not flag as a timeout: ``timeouts = ~terminals & episode_terminals``. Read with
``terminals`` alone, a timed-out episode would run on into the next one.

Early Minari datasets (derived from d3rlpy) wrote ``terminations``, ``truncations`` and
``episode_terminals`` together; there the column repeats the two flags.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from rltscan import cli
from tests import oracles
from tests.conftest import assert_close_to_oracle
from tests.producers import episodes

GAMMA, LAM = 0.9, 0.8
PLAN = [(4, "term"), (5, "trunc"), (3, "term"), (6, "trunc"), (4, "cut")]
runner = CliRunner()


def d3rlpy_v1(path: Path, *, minari: bool = False) -> dict[str, np.ndarray]:
    """The file ``MDPDataset.dump`` writes for the episodes of :data:`PLAN`, with a
    critic's ``values``/``next_values`` added by the user; returns the meaning."""
    s = episodes(np.random.default_rng(3), PLAN)
    n = len(s["r"])
    ended = s["ended"].copy()
    ended[-1] = True  # d3rlpy marks the last row of the data as an episode end
    with h5py.File(path, "w") as f:
        f["observations"] = np.random.default_rng(4).normal(size=(n, 3)).astype(np.float32)
        f["actions"] = np.zeros((n, 2), np.float32)
        f["rewards"] = s["r"]
        if minari:
            f["terminations"] = s["term"]
            f["truncations"] = s["trunc"] | ended & ~s["term"]
        else:
            f["terminals"] = s["term"].astype(np.float32)
        f["episode_terminals"] = ended.astype(np.float32)
        f["discrete_action"] = False
        f["version"] = "1.0"
        f["values"] = s["v"]
        f["next_values"] = s["nv"]
    return s


def run(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(cli.app, [*args, "--device", "cpu", "-q"])
    return result.exit_code, result.stderr


@pytest.mark.parametrize("minari", [False, True], ids=["d3rlpy", "early-minari"])
def test_timeouts_end_their_episode(minari: bool, tmp_path: Path) -> None:
    path = tmp_path / "dataset.h5"
    s = d3rlpy_v1(path, minari=minari)
    truncated = s["trunc"].copy()
    truncated[-1] = True  # the data's last (unfinished) episode, flagged by d3rlpy
    args = ["gae", str(path), "--gamma", str(GAMMA), "--lam", str(LAM)]
    code, err = run(args)
    assert code == 0, err
    want = oracles.gae(
        s["r"].tolist(),
        s["v"].tolist(),
        s["nv"].tolist(),
        s["term"].tolist(),
        truncated.tolist(),
        gamma=GAMMA,
        lam=LAM,
    )
    with h5py.File(path) as f:
        assert_close_to_oracle(f["advantages"][:], want["advantages"], torch.float32)
        assert_close_to_oracle(f["value_targets"][:], want["value_targets"], torch.float32)


def test_returns_stop_at_a_timeout(tmp_path: Path) -> None:
    """Without a critic, a timed-out episode's return counts its own rewards only."""
    path = tmp_path / "dataset.h5"
    s = d3rlpy_v1(path)
    code, err = run(["returns", str(path), "--gamma", str(GAMMA), "--ignore", "next_values"])
    assert code == 0, err
    zero = np.zeros_like(s["nv"])
    ended = s["ended"].copy()
    ended[-1] = True
    want = oracles.discounted_returns(
        s["r"].tolist(), zero.tolist(), s["term"].tolist(), ended.tolist(), gamma=GAMMA
    )
    with h5py.File(path) as f:
        assert_close_to_oracle(f["returns"][:], want, torch.float32)


def test_the_report_says_which_ends_were_timeouts(tmp_path: Path) -> None:
    path = tmp_path / "dataset.h5"
    d3rlpy_v1(path)
    copy = tmp_path / "copy.h5"
    shutil.copy(path, copy)
    result = runner.invoke(
        cli.app, ["gae", str(copy), "--gamma", "0.9", "--lam", "0.8", "--device", "cpu", "--json"]
    )
    assert result.exit_code == 0, result.stderr
    assert "d3rlpy's definition" in result.stdout
    assert '"truncated": 3' in result.stdout  # two timeouts and the data's last episode
