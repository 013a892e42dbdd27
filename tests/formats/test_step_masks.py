"""A column that looks like a step mask stops the run (the trust rule, docs/CONVENTIONS.md
§1.10, §1.11).

Sequence buffers padded to a fixed length (R2D2-style replay, fixed-length chunks of a
rollout) mark their padding in a per-step column: ``mask``, ``valid``, ``is_pad``,
``padding_mask``, ... No role reads such a column and every row is computed as a step,
so computed anyway the padded rows would run into the episode before them (zero-padded
rows are finite: nothing else would notice). Present and not set aside, the column stops
every estimator with exit 2 and one line naming ``--ignore``; with ``--ignore`` every
row is a step. robomimic's ``mask/`` group (filter keys: lists of demo names) is not a
per-step column and stops nothing.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from rltscan import api, cli
from rltscan.errors import AmbiguousInputError
from rltscan.roles import STEP_MASKS
from tests import oracles
from tests.conftest import assert_close_to_oracle
from tests.io_helpers import digest

GAMMA = 0.9
runner = CliRunner()
# two sequences of 4 rows, the first 3 and 2 real, the rest zero padding
REWARDS = np.array([1.0, 2.0, 3.0, 0.0, 1.5, -1.0, 0.0, 0.0], np.float32)
TERMINALS = np.array([0, 0, 1, 0, 0, 1, 0, 0], bool)
VALID = np.array([1, 1, 1, 0, 1, 1, 0, 0], bool)


def run(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(cli.app, [*args, "--device", "cpu", "-q"])
    return result.exit_code, result.stderr


def padded_parquet(path: Path, name: str, **more: np.ndarray) -> None:
    table = {"rewards": REWARDS, "terminals": TERMINALS, name: VALID, **more}
    pq.write_table(pa.table(table), path)


@pytest.mark.parametrize("name", ["mask", "valid", "is_pad", "padding_mask"])
@pytest.mark.parametrize("estimator", ["returns", "gae"])
def test_a_step_mask_stops_the_run_naming_ignore(name: str, estimator: str, tmp_path: Path):
    path = tmp_path / "padded.parquet"
    padded_parquet(path, name, values=np.ones_like(REWARDS))
    before = digest(path)
    args = [estimator, str(path), "--gamma", str(GAMMA)]
    if estimator == "gae":
        args += ["--lam", "0.8"]
    code, err = run(args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"--ignore {name}" in lines[0] and "step mask" in lines[0]
    assert digest(path) == before


def test_ignore_computes_every_row_as_a_step(tmp_path: Path):
    path = tmp_path / "padded.parquet"
    padded_parquet(path, "mask")
    out = tmp_path / "out.parquet"
    code, err = run(
        ["returns", str(path), "--gamma", str(GAMMA), "--ignore", "mask", "-o", str(out)]
    )
    assert code == 0, err
    got = pq.read_table(out).column("returns").to_numpy()
    n = len(REWARDS)
    trunc = [False] * (n - 1) + [True]  # the data's last row ends its (unfinished) episode
    want = oracles.discounted_returns(
        REWARDS.tolist(), [0.0] * n, TERMINALS.tolist(), trunc, gamma=GAMMA
    )
    assert_close_to_oracle(got, want, torch.float32)


def test_the_python_api_refuses_it_too(tmp_path: Path):
    path = tmp_path / "padded.h5"
    with h5py.File(path, "w") as f:
        f["rewards"], f["terminals"], f["valid"] = REWARDS, TERMINALS, VALID
    with pytest.raises(AmbiguousInputError, match="--ignore valid"):
        api.run("returns", str(path), params={"gamma": GAMMA}, output=str(tmp_path / "o.h5"))


def test_a_robomimic_mask_group_is_not_a_step_mask(tmp_path: Path):
    path = tmp_path / "robomimic.h5"
    with h5py.File(path, "w") as f:
        for i, n in enumerate((3, 4)):
            g = f.create_group(f"data/demo_{i}")
            g["rewards"] = np.arange(n, dtype=np.float32)
            g["dones"] = np.eye(n, dtype=np.uint8)[-1]
        f["mask/train"] = np.array([b"demo_0", b"demo_1"])
    code, err = run(
        [
            "returns",
            str(path),
            "--gamma",
            str(GAMMA),
            "--dones-mean",
            "ended",
            "--ends-are",
            "terminal",
        ]
    )
    assert "step mask" not in err
    assert code == 0, err


def test_the_names_are_exact_column_names():
    assert len(set(STEP_MASKS.names)) == len(STEP_MASKS.names)
    assert all(n == n.strip() and "/" not in n for n in STEP_MASKS.names)
