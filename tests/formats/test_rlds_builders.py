"""RLDS tables whose ``is_last`` row is a real step: the rlds_dataset_builder template.

Every Open X-Embodiment dataset (and most robot datasets converted to RLDS since) was
written with kpertsch/rlds_dataset_builder's ``example_dataset_dataset_builder.py``,
whose ``_generate_examples`` turns each recorded step ``i`` of an episode of length
``n`` into one RLDS step::

    'discount': 1.0,
    'reward': float(i == (len(data) - 1)),
    'is_first': i == 0,
    'is_last': i == (len(data) - 1),
    'is_terminal': i == (len(data) - 1),

and its features document ``reward`` as "1 on final step for demos" and ``is_terminal``
as "True on last step of the episode if it is a terminal step, True for demos". So the
``is_last`` row holds a real action and the episode's only reward, and it is terminal:
every ``is_last`` row is terminal, yet none is a final-observation row. Reading them as
RLDS final observations (left out, NaN) dropped every reward: exit 0 and returns of 0.

Terminal ``is_last`` rows therefore prove nothing; the run asks ``--is-last-row``.
tensorflow_datasets is not installed here, so the steps are flattened to Parquet by hand
(one row per step, episodes in order: what ``tfds.as_dataframe`` over the steps gives).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests import oracles
from tests.io_helpers import run_cli

GAMMA = 0.9
LENGTHS = (4, 3, 5)


def builder_episode(n: int, rng: np.random.Generator) -> list[dict]:
    """One episode as the template's ``_generate_examples`` builds it."""
    return [
        {
            "observation/state": rng.normal(size=3).astype(np.float32),
            "action": rng.normal(size=7).astype(np.float32),
            "discount": 1.0,
            "reward": float(i == (n - 1)),
            "is_first": i == 0,
            "is_last": i == (n - 1),
            "is_terminal": i == (n - 1),
            "language_instruction": "pick up the cube",
        }
        for i in range(n)
    ]


def builder_parquet(path: Path, *, discount: bool = True) -> Path:
    rng = np.random.default_rng(0)
    steps = [s for n in LENGTHS for s in builder_episode(n, rng)]
    cols: dict[str, pa.Array] = {}
    for key in steps[0]:
        if key == "discount" and not discount:
            continue
        values = [s[key] for s in steps]
        if isinstance(values[0], np.ndarray):
            flat = pa.array(np.concatenate(values))
            cols[key] = pa.FixedSizeListArray.from_arrays(flat, len(values[0]))
        elif isinstance(values[0], float):
            cols[key] = pa.array(values, pa.float32())
        else:
            cols[key] = pa.array(values)
    pq.write_table(pa.table(cols), path)
    return path


def rltscan(*args: str) -> subprocess.CompletedProcess:
    return run_cli(*args, "--device", "cpu", "-q")


def want_returns() -> np.ndarray:
    rewards = np.concatenate([[float(i == n - 1) for i in range(n)] for n in LENGTHS])
    term = np.concatenate([[i == n - 1 for i in range(n)] for n in LENGTHS])
    nv = np.zeros(len(rewards))
    return np.asarray(
        oracles.discounted_returns(rewards.tolist(), nv.tolist(), term.tolist(), gamma=GAMMA)
    )


def test_terminal_is_last_rows_do_not_prove_final_observations(tmp_path: Path) -> None:
    """Before: with the discount set aside (the fix the first refusal names), exit 0 and
    every return 0. Now the is_last reading is asked, in the same one line."""
    path = builder_parquet(tmp_path / "oxe.parquet")
    asked = rltscan("returns", str(path), "--gamma", str(GAMMA), "--ignore", "discount")
    assert asked.returncode == 2, asked.stderr
    assert "--is-last-row observation or --is-last-row transition" in asked.stderr
    assert "returns" not in pq.read_schema(path).names
    first = rltscan("returns", str(path), "--gamma", str(GAMMA))
    assert first.returncode == 2 and "--is-last-row" in first.stderr
    assert "--ignore discount" in first.stderr and len(first.stderr.strip().splitlines()) == 1


def test_the_builder_s_meaning_with_is_last_row_transition(tmp_path: Path) -> None:
    """Each is_last row is the demo's last step, terminal, with its reward 1."""
    path = builder_parquet(tmp_path / "oxe.parquet", discount=False)
    done = rltscan("returns", str(path), "--gamma", str(GAMMA), "--is-last-row", "transition")
    assert done.returncode == 0, done.stderr
    got = pq.read_table(path, columns=["returns"]).column("returns").to_numpy()
    np.testing.assert_allclose(got, want_returns(), rtol=1e-6)
    assert got[0] == np.float32(GAMMA**3)
