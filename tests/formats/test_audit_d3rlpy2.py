"""Audit: d3rlpy 2.x ``ReplayBuffer.dump`` / ``MDPDataset.dump`` (``d3rlpy/dataset/io.py``,
``DATASET_VERSION = "2.1"``).

Unlike 1.x (flat ``observations``/``rewards``/``terminals``/``episode_terminals``, read
by rltscan), 2.x writes one dataset per episode and key: ``observations_<i>``,
``actions_<i>``, ``rewards_<i>`` (``(T, 1)`` float32), ``terminated_<i>`` (one bool per
episode: ``Episode.terminated``), beside ``columns`` (the key names), ``num_episodes``
and ``version``. A non-terminated 2.x episode's last row is its final observation (its
transition count is ``T - 1``). rltscan has no reader for it, so it must refuse; it did
(exit 4), but the line named ``--rewards KEY``, and no key reads the file: every
``rewards_<i>`` is one episode, and its flag is a scalar. Now the line names the layout
and how to write it as a flat file (exit 3, as other files whose layout is not read).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from tests.audit_ref import one_line_error
from tests.io_helpers import digest, run_cli


def dump(path: Path, seed: int = 0) -> None:
    """What ``d3rlpy.dataset.io.dump`` writes for three ``Episode`` objects (2.1, no
    embeddings)."""
    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as h5:
        h5.create_dataset("columns", data=["observations", "actions", "rewards", "terminated"])
        h5.create_dataset("num_episodes", data=3)
        for i, (steps, terminated) in enumerate([(4, True), (5, False), (3, True)]):
            h5.create_dataset(f"observations_{i}", data=rng.normal(size=(steps, 3)).astype("f4"))
            h5.create_dataset(f"actions_{i}", data=rng.normal(size=(steps, 2)).astype("f4"))
            h5.create_dataset(f"rewards_{i}", data=rng.normal(size=(steps, 1)).astype("f4"))
            h5.create_dataset(f"terminated_{i}", data=terminated)
        h5.create_dataset("version", data="2.1")


@pytest.mark.parametrize("estimator", ["gae", "td-lambda", "returns"])
def test_refused_in_one_line_and_left_alone(estimator: str, tmp_path: Path) -> None:
    path = tmp_path / "dataset.h5"
    dump(path)
    before = digest(path)
    res = run_cli(estimator, str(path), "-q", in_process=True)
    assert res.returncode == 3  # an input file rltscan does not read
    one_line_error(res.stderr)
    assert digest(path) == before
    # what the line suggests computes one episode at most and never exits 0 without flags
    res = run_cli(estimator, str(path), "--rewards", "rewards_0", "-q", in_process=True)
    assert res.returncode != 0
    assert digest(path) == before


def test_the_refusal_names_the_layout_not_a_flag_that_cannot_work(tmp_path: Path) -> None:
    path = tmp_path / "dataset.h5"
    dump(path)
    res = run_cli("returns", str(path), "-q", in_process=True)
    line = one_line_error(res.stderr)
    assert "--rewards KEY" not in line
    assert "d3rlpy" in line
