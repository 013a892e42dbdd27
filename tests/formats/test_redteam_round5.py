"""Red-team round 5: producer layouts and API calls checked against their meaning.

dm_env / RLDS store a per-step ``discount`` that an agent multiplies by its own γ
(rlax and Acme build ``discount_t = gamma * timestep.discount``). rltscan's
``--discount COLUMN`` *replaces* γ (docs/CONVENTIONS.md §1.7), so a command line that
names both asks for something neither alone gives, and is refused. Typing the default's
value (``--gamma 0.99``) used to pass silently, as if not typed: the run computed with
γ_t = discount_t (γ = 1 inside every episode) and exit 0.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rltscan
from tests import oracles
from tests.io_helpers import ROOT, digest

N = 10


def _columns() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    term = np.zeros(N, bool)
    term[4] = True
    discount = np.ones(N)
    discount[4] = 0.0  # dm_env: 0 at the terminal transition, 1 elsewhere
    bootstrap = np.full(N, np.nan)
    bootstrap[-1] = 0.3
    return {
        "rewards": rng.normal(size=N),
        "values": rng.normal(size=N),
        "terminated": term,
        "discount": discount,
        "bootstrap_values": bootstrap,
    }


def _rlds_like(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    cols = _columns()
    path = tmp_path / "episodes.parquet"
    pq.write_table(pa.table(cols), path)
    return path, cols


def _cli(*args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rltscan", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


@pytest.mark.parametrize("gamma", ["0.99", "0.9", "0.99,0.9"])
def test_gamma_typed_beside_a_discount_column_is_refused(tmp_path: Path, gamma: str) -> None:
    path, _ = _rlds_like(tmp_path)
    before = digest(path)
    r = _cli("gae", path, "--discount", "discount", "--gamma", gamma)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert "--discount discount gives gamma per step" in lines[0] and "drop one" in lines[0]
    assert digest(path) == before


def test_a_discount_column_alone_is_gamma_per_step(tmp_path: Path) -> None:
    path, c = _rlds_like(tmp_path)
    r = _cli("gae", path, "--discount", "discount", "--lam", "0.8", "-q")
    assert r.returncode == 0, r.stderr
    got = pq.read_table(path).column("advantages").to_numpy()
    nv = np.r_[c["values"][1:], 0.3]
    # γ_t = discount_t: 1 inside the episode, the terminal step reads no next value
    want = oracles.gae(c["rewards"], c["values"], nv, c["terminated"], gamma=1.0, lam=0.8)
    np.testing.assert_allclose(got, np.asarray(want["advantages"], float), rtol=1e-6)


def test_the_file_api_refuses_gamma_beside_a_discount_column(tmp_path: Path) -> None:
    path, _ = _rlds_like(tmp_path)
    with pytest.raises(rltscan.ParameterError, match="gives gamma per step"):
        rltscan.run("gae", path, params={"gamma": 0.99}, columns={"discount": "discount"})


@pytest.mark.xfail(
    strict=True,
    reason="gamma's default is 0.99 in the signature, so gamma=0.99 typed beside "
    "discount= cannot be told from no gamma: the call runs with gamma_t = discount_t "
    "(a sentinel default in the five public functions and their declarations would fix it)",
)
def test_python_gamma_at_the_default_value_beside_discount_is_refused() -> None:
    c = _columns()
    with pytest.raises(rltscan.ParameterError, match="gives gamma per step"):
        rltscan.gae(
            c["rewards"],
            c["values"],
            terminated=c["terminated"],
            bootstrap_values=c["bootstrap_values"],
            discount=c["discount"],
            gamma=0.99,
        )
