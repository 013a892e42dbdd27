"""A column read as numbers that its file stores as booleans, and episode ids that
come back: refused with the file, the column and the fix in one line.

A success flag saved as the reward column (``rewards`` of dtype bool) is not a reward
of 1 unless its writer says so; the estimator's own refusal said only that a "torch.bool"
was passed, with no file and no option. A float ``episode`` column whose values come
back after others may hold no episode ids at all; the refusal now says how to set it
aside as well as how to sort the table.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rltscan
from rltscan.errors import DTypeError
from tests.io_helpers import run_cli

N = 12


def _bool_rewards(path: Path) -> Path:
    rewards = np.arange(N) % 3 == 0
    values = np.linspace(0.0, 1.0, N, dtype=np.float32)
    terminated = np.arange(N) % 6 == 5
    if path.suffix == ".h5":
        with h5py.File(path, "w") as h:
            h["rewards"], h["values"], h["terminals"] = rewards, values, terminated
            h["timeouts"] = np.zeros(N, bool)
    else:
        pq.write_table(
            pa.table({"rewards": rewards, "values": values, "terminated": terminated}), path
        )
    return path


@pytest.mark.parametrize("suffix", [".h5", ".parquet"])
def test_boolean_rewards_in_a_file_are_refused_by_name(tmp_path: Path, suffix: str) -> None:
    path = _bool_rewards(tmp_path / f"success{suffix}")
    before = path.read_bytes()
    res = run_cli("gae", str(path), "--device", "cpu", "-q", in_process=True)
    assert res.returncode == 4
    line = res.stderr.strip()
    assert "\n" not in line
    assert path.name in line and '"rewards"' in line and "booleans" in line
    assert "--rewards" in line
    assert path.read_bytes() == before


def test_boolean_rewards_in_the_api_say_how_to_pass_numbers() -> None:
    with pytest.raises(DTypeError, match=r'"rewards" holds booleans.*astype\(np.float32\)'):
        rltscan.gae(
            np.arange(N) % 3 == 0,
            np.zeros(N, np.float32),
            terminated=np.arange(N) % 6 == 5,
            missing_bootstrap="zero",
        )


def test_a_float_episode_column_that_comes_back_can_be_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "episodes.parquet"
    episode = np.repeat([0.0, 1.0, 0.0], [4, 4, 4])
    rewards = np.linspace(0.0, 1.0, N, dtype=np.float32)
    pq.write_table(pa.table({"rewards": rewards, "episode": episode}), path)
    res = run_cli("returns", str(path), "--device", "cpu", "-q", in_process=True)
    assert res.returncode == 4
    assert "sort the table by episode" in res.stderr and "--ignore episode" in res.stderr


@pytest.mark.parametrize("suffix", [".h5", ".parquet"])
def test_inspect_is_not_ready_where_the_run_refuses_booleans(tmp_path: Path, suffix: str) -> None:
    """``inspect`` plans each estimator as the run does: boolean rewards are not
    "ready" (it said ready, and the dry run and the run then stopped with exit 4)."""
    path = _bool_rewards(tmp_path / f"flags{suffix}")
    info = rltscan.inspect(str(path))
    for command in ("gae", "returns", "return-to-go"):
        assert info["estimators"][command]["ready"] is False
        assert "--rewards" in info["estimators"][command]["needs"]
        res = run_cli(command, str(path), "--dry-run", "-q", in_process=True)
        assert res.returncode == 4, res.stderr
