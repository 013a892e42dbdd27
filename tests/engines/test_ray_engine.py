"""``--engine ray`` on a local Ray cluster started here (issue 6, items 1-4).

The Ray engine runs the same shard tasks as the local engine
(``rltscan.engines.shards.task.run_task``) as Ray Data tasks, with the same carries, so
every output file is the same bytes: checked for a backward (GAE) and a forward (eligibility traces)
estimator, in place and with ``-o OUT_DIR``, on shards with episodes crossing every
edge. A shard that fails in the middle of the job leaves every input byte as it was
and no output visible.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

import rltscan
from rltscan import cli
from rltscan.errors import DataError, OutputRefusedError
from tests.shard_helpers import SIZES, kwargs, snapshot, table, write_shards

ray = pytest.importorskip("ray")
runner = CliRunner()


@pytest.fixture(scope="module", autouse=True)
def cluster():
    """A local two-CPU Ray cluster for this module (CI has two cores)."""
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.ERROR)
    yield
    ray.shutdown()


def shards(tmp_path: Path, name: str, p_done: float = 0.01) -> Path:
    write_shards(tmp_path / name, table(sum(SIZES), p_done, seed=7))
    return tmp_path / name


@pytest.mark.parametrize("to_dir", [False, True], ids=["in-place", "out-dir"])
@pytest.mark.parametrize("command", ["gae", "traces"])
def test_ray_equals_local_bit_for_bit(tmp_path: Path, command: str, to_dir: bool) -> None:
    local, remote = shards(tmp_path, "local"), shards(tmp_path, "ray")
    options = dict(device="cpu", chunk_steps=16, block_steps=8, **kwargs(command))
    out_local = str(tmp_path / "out_local") if to_dir else None
    out_ray = str(tmp_path / "out_ray") if to_dir else None
    a = rltscan.run(command, str(local), engine="local", output=out_local, **options)
    b = rltscan.run(command, str(remote), engine="ray", workers=2, output=out_ray, **options)
    assert (a.steps, a.episodes, a.counts) == (b.steps, b.episodes, b.counts)
    got = snapshot(Path(out_ray) if to_dir else remote)
    want = snapshot(Path(out_local) if to_dir else local)
    assert got == want and len(got) == 6  # every shard, the same bytes
    if to_dir:  # the inputs themselves are untouched
        assert snapshot(remote) == snapshot(local)
        assert not any("advantages" in pq.read_schema(p).names for p in remote.iterdir())


def test_ray_equals_local_for_several_settings_and_normalize(tmp_path: Path) -> None:
    """The same shard task on both engines: several settings (one carry per setting)
    and --normalize (a measuring pass, then the scales) give the same bytes and notes."""
    local, remote = shards(tmp_path, "local"), shards(tmp_path, "ray")
    options = dict(device="cpu", chunk_steps=16, block_steps=8, normalize=True, **kwargs("gae"))
    options["params"] = {"gamma": (0.9, 0.97), "lam": 0.9}
    a = rltscan.run("gae", str(local), engine="local", **options)
    b = rltscan.run("gae", str(remote), engine="ray", workers=2, **options)
    assert snapshot(remote) == snapshot(local)
    assert "advantages_g0.97_l0.9" in pq.read_schema(remote / "part-0.parquet").names
    assert [n for n in a.notes if "engine" not in n] == [n for n in b.notes if "engine" not in n]
    assert any(n.startswith("--normalize: advantages_g0.9_l0.9") for n in b.notes)


def test_ray_minari_skips_pass_1_and_matches_local(tmp_path: Path) -> None:
    from tests.engines.test_shards import _minari_parquet

    a = _minari_parquet(tmp_path / "a")
    b = _minari_parquet(tmp_path / "b")
    rltscan.run("gae", str(a), engine="local", device="cpu")
    report = rltscan.run("gae", str(b), engine="ray", device="cpu")
    assert any("pass 1 skipped" in n for n in report.notes)
    assert not any(s.name.startswith("pass 1") for s in report.stages)
    assert snapshot(a) == snapshot(b)


def _existing_output_in_shard_3(root: Path) -> type:
    path = root / "part-3.parquet"
    t = pq.read_table(path)
    pq.write_table(t.append_column("advantages", pa.array(np.zeros(t.num_rows))), path)
    return OutputRefusedError  # seen by shard 3's pass-2 task while others stage theirs


def _nan_in_shard_3(root: Path) -> type:
    path = root / "part-3.parquet"
    t = pq.read_table(path)
    values = t.column("values").to_numpy().copy()
    values[7] = np.inf
    pq.write_table(t.set_column(t.column_names.index("values"), "values", pa.array(values)), path)
    return DataError


@pytest.mark.parametrize("to_dir", [False, True], ids=["in-place", "out-dir"])
@pytest.mark.parametrize("break_it", [_existing_output_in_shard_3, _nan_in_shard_3])
def test_ray_failing_shard_leaves_nothing_visible(tmp_path: Path, break_it, to_dir: bool) -> None:
    root = shards(tmp_path, "data")
    error = break_it(root)
    pristine = snapshot(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(error, match=r"^part-3\.parquet"):
        rltscan.run(
            "gae",
            str(root),
            engine="ray",
            output=str(out) if to_dir else None,
            device="cpu",
            **kwargs("gae"),
        )
    assert snapshot(tmp_path) == pristine
    assert not out.exists()


def test_cli_engine_ray(tmp_path: Path) -> None:
    root = shards(tmp_path, "data")
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    args = ["returns", "--device", "cpu", "-q"]
    result = runner.invoke(cli.app, [*args[:1], str(root), *args[1:], "--engine", "ray"])
    assert result.exit_code == 0, result.stderr
    rltscan.run("returns", str(copy), device="cpu")
    assert snapshot(root) == snapshot(copy)
    again = runner.invoke(cli.app, ["returns", str(root), "--engine", "ray", "--device", "cpu"])
    assert again.exit_code == 5
    assert again.stderr.startswith('error: part-5.parquet already has column "returns"')
