"""Rewards that are already n-step returns stop the run (the trust rule, docs/CONVENTIONS.md
§1.11).

TorchRL's ``MultiStep`` post-processing replaces ``("next", "reward")`` by
r_t + γ r_{t+1} + ... + γ^{n-1} r_{t+n-1}, moves ``("next", "observation")`` n steps
ahead, and keeps the one-step reward as ``("next", "original_reward")`` beside
``steps_to_next_obs``, ``gamma`` (γ^steps, per step) and ``nonterminal``. A one-step
estimator over those rewards counts each reward up to n times, so a file with these
marks stops every estimator with exit 2 and one line naming ``--ignore``; its per-step
``gamma`` column is a discount look-alike (``--discount`` or ``--ignore``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from rltscan import cli
from tests.io_helpers import digest

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")
postprocs = pytest.importorskip("torchrl.data.postprocs")

runner = CliRunner()
T = 12


def run(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(cli.app, [*args, "--device", "cpu", "-q"])
    return result.exit_code, result.stderr


def multistep_h5(path: Path) -> None:
    """A TorchRL rollout of one env (episode ends at steps 4 and 11) through
    ``MultiStep(gamma=0.9, n_steps=3)``, written by ``TensorDict.to_h5``, with a
    critic's values and without observations (as a user keeps them)."""
    done = torch.zeros(1, T, 1, dtype=torch.bool)
    done[0, 4] = done[0, T - 1] = True
    td = tensordict.TensorDict(
        {
            "next": tensordict.TensorDict(
                {
                    "reward": torch.arange(1, T + 1, dtype=torch.float32).view(1, T, 1),
                    "done": done.clone(),
                    "terminated": done.clone(),
                    "state_value": torch.ones(1, T, 1),
                },
                batch_size=[1, T],
            ),
            "done": torch.zeros(1, T, 1, dtype=torch.bool),
            "terminated": torch.zeros(1, T, 1, dtype=torch.bool),
            "state_value": torch.ones(1, T, 1),
        },
        batch_size=[1, T],
    )
    out = postprocs.MultiStep(gamma=0.9, n_steps=3)(td)
    assert not torch.equal(out["next", "reward"], out["next", "original_reward"])
    out.reshape(-1).to_h5(str(path))


@pytest.mark.parametrize("estimator", ["returns", "gae", "td-lambda"])
def test_a_multistep_buffer_stops_every_run(estimator: str, tmp_path: Path) -> None:
    path = tmp_path / "multistep.h5"
    multistep_h5(path)
    before = digest(path)
    code, err = run([estimator, str(path), "--gamma", "0.9"])
    assert code == 2, err
    line = err.strip()
    assert "\n" not in line
    assert "--ignore steps_to_next_obs" in line and "--ignore next/original_reward" in line
    assert "n-step rewards" in line
    assert digest(path) == before


def test_its_gamma_column_is_a_discount_look_alike(tmp_path: Path) -> None:
    path = tmp_path / "multistep.h5"
    multistep_h5(path)
    code, err = run(["returns", str(path), "--gamma", "0.9"])
    assert code == 2 and "--discount gamma" in err and "--ignore gamma" in err


def test_set_aside_the_rewards_are_read_as_one_step(tmp_path: Path) -> None:
    """The user who says the marks are stale gets the one-step reading of the rewards."""
    r = np.arange(1, 7, dtype=np.float32)
    ended = np.array([0, 0, 1, 0, 0, 1], bool)
    path = tmp_path / "stale.parquet"
    table = {"rewards": r, "terminals": ended, "steps_to_next_obs": np.ones(6, np.int64)}
    pq.write_table(pa.table(table), path)
    code, err = run(["returns", str(path), "--gamma", "0.5"])
    assert code == 2 and "--ignore steps_to_next_obs" in err
    out = tmp_path / "out.parquet"
    args = ["returns", str(path), "--gamma", "0.5", "--ignore", "steps_to_next_obs"]
    code, err = run([*args, "-o", str(out)])
    assert code == 0, err
    got = pq.read_table(out).column("returns").to_numpy()
    np.testing.assert_allclose(got, [2.75, 3.5, 3.0, 8.0, 8.0, 6.0], rtol=1e-6)
