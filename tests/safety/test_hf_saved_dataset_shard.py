"""A shard of a Hugging Face dataset saved with ``save_to_disk`` is never written in
place: ``dataset_info.json`` beside it lists the columns, and ``load_from_disk`` refuses
the whole dataset once a shard has others. The run stops (exit 5) naming ``-o``, and
nothing in the directory changes; ``-o`` to a new file works."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.ipc as ipc
import pytest

from rltscan import api
from rltscan.errors import OutputRefusedError
from tests.io_helpers import digest

datasets = pytest.importorskip("datasets")

N = 120


def saved(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    terminated = np.zeros(N, bool)
    terminated[[50, N - 1]] = True
    data = {
        "rewards": rng.standard_normal(N).tolist(),
        "values": rng.standard_normal(N).tolist(),
        "terminated": terminated.tolist(),
    }
    root = tmp_path / "saved"
    datasets.Dataset.from_dict(data).save_to_disk(str(root))
    return root


@pytest.mark.parametrize("same_file_output", [False, True])
def test_a_saved_shard_is_refused_in_place(tmp_path: Path, same_file_output: bool) -> None:
    root = saved(tmp_path)
    shard = next(root.glob("data-*.arrow"))
    before = digest(root)
    options = {"output": str(shard), "overwrite": True} if same_file_output else {}
    with pytest.raises(OutputRefusedError, match=r"save_to_disk.*-o PATH"):
        api.run("gae", str(shard), device="cpu", backend="torch", **options)
    assert digest(root) == before
    assert datasets.load_from_disk(str(root)).column_names == ["rewards", "values", "terminated"]


def test_a_saved_shard_converts_to_a_new_file(tmp_path: Path) -> None:
    root = saved(tmp_path)
    shard = next(root.glob("data-*.arrow"))
    out = tmp_path / "with_advantages.arrow"
    api.run("gae", str(shard), output=str(out), device="cpu", backend="torch")
    assert ipc.open_file(out).read_all().column_names[-2:] == ["advantages", "value_targets"]
    assert datasets.load_from_disk(str(root)).num_rows == N
