"""Sharded Parquet datasets on the local engine (issue 6; docs/CONVENTIONS.md §2.4).

* a dataset cut into uneven shards (a one-row and an empty shard among them, episodes
  crossing every edge, dense and sparse episode ends) gives the result of the one
  concatenated file, to float rounding, for all seven estimators;
* flags derived from the next row (episode ids, episode-start dones) are right at
  shard edges, and the carries matter (shards computed alone differ);
* windows inside a shard do not change the bits; shards sort naturally or by a column;
* writes: in place (each shard replaced whole) or ``-o OUT_DIR``, staged until every
  shard succeeded: a shard that fails (NaN, corrupt file, an output that exists in
  one shard only, found in pass 2) leaves every input byte as it was and nothing new
  visible; a killed job leaves every shard readable with its original columns;
* Minari Parquet datasets (one episode per shard) skip pass 1 and match the whole read;
* the single-machine path never imports ray; CLI errors and exit codes.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

import rltscan
from rltscan import cli
from rltscan.errors import (
    BackendUnavailableError,
    DataError,
    InputFileError,
    OutputRefusedError,
    ParameterError,
)
from rltscan.io.shards import discover, natural_key
from tests.conftest import tolerance
from tests.io_helpers import ROOT
from tests.shard_helpers import (
    COMMANDS,
    OUTPUTS,
    SIZES,
    concat,
    kwargs,
    snapshot,
    table,
    write_shards,
)

runner = CliRunner()
SMALL = {"chunk_steps": 16, "block_steps": 8}  # several windows and blocks per shard


def dataset(tmp_path: Path, p_done: float, seed: int = 0) -> tuple[Path, list[Path], Path]:
    """``(shard dir, shard paths, the same rows as one file)``."""
    whole = table(sum(SIZES), p_done, seed)
    single = tmp_path / "whole.parquet"
    pq.write_table(whole, single, row_group_size=13)
    paths = write_shards(tmp_path / "shards", whole)
    return tmp_path / "shards", paths, single


def outputs_of(command: str) -> list[str]:
    return list(OUTPUTS[command])


@pytest.mark.parametrize("p_done", [0.3, 0.004], ids=["dense", "sparse"])
@pytest.mark.parametrize("command", COMMANDS)
def test_shards_equal_one_concatenated_file(tmp_path: Path, command: str, p_done: float) -> None:
    root, paths, single = dataset(tmp_path, p_done)
    before = {p.name: pq.read_table(p) for p in paths}
    one = rltscan.run(command, str(single), device="cpu", **kwargs(command))
    report = rltscan.run(command, str(root), device="cpu", **kwargs(command), **SMALL)
    assert (report.steps, report.episodes, report.counts) == (one.steps, one.episodes, one.counts)
    whole = pq.read_table(single)
    for name in outputs_of(command):
        want = whole.column(name).to_numpy()
        got = concat(paths, name)
        w = torch.from_numpy(want.astype(np.float64))
        torch.testing.assert_close(
            torch.from_numpy(got.astype(np.float64)), w, **tolerance(torch.float32, w)
        )
    for p in paths:  # every original column, row group and key-value entry kept
        after = pq.read_table(p)
        old = before[p.name]
        assert after.column_names[: len(old.column_names)] == old.column_names
        assert after.select(old.column_names).equals(old)
        assert after.schema.metadata[b"origin"] == b"shard test"
        assert b"rltscan" in after.schema.metadata


@pytest.mark.parametrize("command", ["gae", "traces"])
def test_carries_cross_shards(tmp_path: Path, command: str) -> None:
    """Without carries (each shard alone) the sparse dataset gives other results."""
    root, paths, _ = dataset(tmp_path, 0.004)
    alone = tmp_path / "alone"
    alone.mkdir()
    for p in paths:
        if pq.ParquetFile(p).metadata.num_rows:
            shutil.copy(p, alone / p.name)
            rltscan.run(command, str(alone / p.name), device="cpu", **kwargs(command))
    rltscan.run(command, str(root), device="cpu", **kwargs(command))
    name = outputs_of(command)[0]
    kept = [p for p in paths if (alone / p.name).exists()]
    assert not np.allclose(concat(kept, name), concat([alone / p.name for p in kept], name))


def test_windows_do_not_change_bits(tmp_path: Path) -> None:
    root, _, _ = dataset(tmp_path, 0.01)
    copy = tmp_path / "copy"
    shutil.copytree(root, copy)
    rltscan.run("vtrace", str(root), device="cpu", chunk_steps=8, block_steps=8, **kwargs("vtrace"))
    rltscan.run(
        "vtrace", str(copy), device="cpu", chunk_steps=64, block_steps=8, **kwargs("vtrace")
    )
    assert snapshot(root) == snapshot(copy)


@pytest.mark.parametrize("flag", ["episode_id", "episode_starts"])
@pytest.mark.parametrize("command", ["gae", "prefix-sum"])
def test_flags_from_the_next_row_at_shard_edges(tmp_path: Path, flag: str, command: str) -> None:
    """Episode-id changes and episode-start dones at a shard's last step need the next
    shard's first row: an episode starts exactly at a shard edge, another crosses one."""
    rng = np.random.default_rng(3)
    n = sum(SIZES)
    ids = np.repeat(np.arange(n), rng.integers(1, 30, n))[:n]
    ids[SIZES[0] :] += 1000  # a new episode begins with shard 1
    starts = np.concatenate([[True], ids[1:] != ids[:-1]])
    cols = {
        "rewards": rng.standard_normal(n).astype(np.float32),
        "values": rng.standard_normal(n).astype(np.float32),
    }
    cols |= {"episode_id": ids} if flag == "episode_id" else {"episode_starts": starts}
    whole = pa.table(cols)
    single = tmp_path / "whole.parquet"
    pq.write_table(whole, single)
    paths = write_shards(tmp_path / "shards", whole)
    extra = {"ends_are": "terminal", **kwargs(command)}
    a = rltscan.run(command, str(single), device="cpu", **extra)
    b = rltscan.run(command, str(tmp_path / "shards"), device="cpu", **extra, **SMALL)
    assert (a.episodes, a.counts) == (b.episodes, b.counts)
    name = outputs_of(command)[0]
    want = pq.read_table(single).column(name).to_numpy().astype(np.float64)
    w = torch.from_numpy(want)
    got = torch.from_numpy(concat(paths, name).astype(np.float64))
    torch.testing.assert_close(got, w, **tolerance(torch.float32, w))


def test_natural_order_and_order_by(tmp_path: Path) -> None:
    whole = table(60, 0.1)
    root = tmp_path / "d"
    sizes = (10, 20, 30)
    # file names that sort wrongly as strings: p2 < p10 < p100 only as numbers
    names = ["p2.parquet", "p10.parquet", "p100.parquet"]
    root.mkdir()
    start = 0
    for name, size in zip(names, sizes, strict=True):
        pq.write_table(whole.slice(start, size), root / name)
        start += size
    (root / "_SUCCESS").write_text("")
    (root / ".hidden.parquet").write_bytes(b"not parquet")
    assert [s.rel for s in discover(str(root)).shards] == names
    assert sorted(["a10", "a9", "a100"], key=natural_key) == ["a9", "a10", "a100"]
    # an index column orders them whatever the names say
    idx = root / "idx"
    idx.mkdir()
    for i, (size, start) in enumerate([(30, 30), (10, 0), (20, 10)]):
        part = whole.slice(start, size)
        part = part.append_column("step", pa.array(np.arange(start, start + size)))
        pq.write_table(part, idx / f"z{i}.parquet")
    ordered = discover(str(idx), order_by="step").shards
    assert [s.rel for s in ordered] == ["z1.parquet", "z2.parquet", "z0.parquet"]
    glob_ds = discover(str(root / "p1*.parquet"))
    assert [s.rel for s in glob_ds.shards] == ["p10.parquet", "p100.parquet"]


def test_output_dir_and_overwrite(tmp_path: Path) -> None:
    root, paths, _ = dataset(tmp_path, 0.05)
    (root / "README.txt").write_text("kept")
    pristine = snapshot(root)
    out = tmp_path / "out"
    rltscan.run("gae", str(root), output=str(out), device="cpu", **kwargs("gae"))
    assert snapshot(root) == pristine  # the input is untouched
    assert sorted(p.name for p in out.iterdir()) == sorted([p.name for p in paths] + ["README.txt"])
    for p in paths:
        new = pq.read_table(out / p.name)
        assert new.select(pq.read_table(p).column_names).equals(pq.read_table(p))
        assert (out / p.name).stat().st_mode == p.stat().st_mode
    produced = snapshot(out)
    with pytest.raises(OutputRefusedError, match="already exists; pass --overwrite"):
        rltscan.run("gae", str(root), output=str(out), device="cpu", **kwargs("gae"))
    rltscan.run("gae", str(root), output=str(out), overwrite=True, device="cpu", **kwargs("gae"))
    assert snapshot(out) == produced  # idempotent
    # in place gives the very same files
    rltscan.run("gae", str(root), device="cpu", **kwargs("gae"))
    assert {k: v for k, v in snapshot(root).items() if k != "README.txt"} == {
        k: v for k, v in produced.items() if k != "README.txt"
    }
    assert not [p for p in tmp_path.rglob("*") if ".rltscan-" in p.name]
    with pytest.raises(ParameterError, match="inside the input dataset"):
        rltscan.run("gae", str(root), output=str(root / "sub"), device="cpu")


def test_rerun_in_place_is_refused_then_idempotent(tmp_path: Path) -> None:
    root, _, _ = dataset(tmp_path, 0.05)
    rltscan.run("returns", str(root), device="cpu", **kwargs("returns"))
    first = snapshot(root)
    with pytest.raises(OutputRefusedError, match='already has column "returns"'):
        rltscan.run("returns", str(root), device="cpu", **kwargs("returns"))
    assert snapshot(root) == first
    rltscan.run("returns", str(root), device="cpu", overwrite=True, **kwargs("returns"))
    assert snapshot(root) == first


def _nan_in_shard_3(paths: list[Path]) -> type:
    t = pq.read_table(paths[3])
    rewards = t.column("rewards").to_numpy().copy()
    rewards[5] = np.nan
    t = t.set_column(t.column_names.index("rewards"), "rewards", pa.array(rewards))
    pq.write_table(t, paths[3])
    return DataError


def _corrupt_shard_3(paths: list[Path]) -> type:
    paths[3].write_bytes(b"PAR1 this is not a parquet file")
    return InputFileError


def _existing_output_in_shard_3(paths: list[Path]) -> type:
    t = pq.read_table(paths[3])
    t = t.append_column("advantages", pa.array(np.zeros(t.num_rows, np.float32)))
    pq.write_table(t, paths[3])
    return OutputRefusedError  # found by shard 3's pass-2 task, after others were staged


@pytest.mark.parametrize("to_dir", [False, True], ids=["in-place", "out-dir"])
@pytest.mark.parametrize(
    "break_it", [_nan_in_shard_3, _corrupt_shard_3, _existing_output_in_shard_3]
)
def test_a_failing_shard_leaves_nothing_visible(tmp_path: Path, break_it, to_dir: bool) -> None:
    root, paths, _ = dataset(tmp_path, 0.05)
    error = break_it(paths)
    pristine = snapshot(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(error) as info:
        rltscan.run(
            "gae", str(root), output=str(out) if to_dir else None, device="cpu", **kwargs("gae")
        )
    assert info.value.args[0].startswith("part-3.parquet")  # the shard is named
    assert snapshot(tmp_path) == pristine  # no output, no staging left, inputs as they were
    assert not out.exists()


def test_cli_exit_codes_and_messages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, paths, _ = dataset(tmp_path, 0.05)
    ok = runner.invoke(cli.app, ["gae", str(root), "--device", "cpu", "-q", "--no-bootstrap"])
    assert ok.exit_code == 0, ok.stderr
    again = runner.invoke(cli.app, ["gae", str(root), "--device", "cpu", "-q", "--no-bootstrap"])
    assert again.exit_code == 5
    assert again.stderr.startswith("error: part-5.parquet already has column")
    one = runner.invoke(cli.app, ["gae", str(paths[0]), "--engine", "ray"])
    assert one.exit_code == 2 and "is one file" in one.stderr
    workers = runner.invoke(cli.app, ["gae", str(root), "--workers", "2"])
    assert workers.exit_code == 2 and "apply to --engine ray" in workers.stderr
    bad = runner.invoke(cli.app, ["gae", str(root), "--engine", "spark"])
    assert bad.exit_code == 2
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    with pytest.raises(BackendUnavailableError, match=r"pip install 'rltscan\[ray\]'"):
        rltscan.run(
            "gae", str(root), engine="ray", overwrite=True, device="cpu", missing_bootstrap="zero"
        )
    noray = runner.invoke(
        cli.app, ["gae", str(root), "--engine", "ray", "--overwrite", "--no-bootstrap"]
    )
    assert noray.exit_code == 6
    assert noray.stderr.splitlines()[0].endswith("pip install 'rltscan[ray]'")
    empty = tmp_path / "empty"
    empty.mkdir()
    none = runner.invoke(cli.app, ["gae", str(empty)])
    assert none.exit_code == 3 and "holds no Parquet files" in none.stderr
    for kind in ("Minari", "LeRobot", "TorchRL", "HDF5"):  # every directory it could have been
        assert kind in none.stderr


def _minari_parquet(root: Path, episodes: int = 6) -> Path:
    """A Minari dataset with the Parquet backend: one ``data/<id>/`` per episode, every
    column T+1 rows (values real, the rest padded with a dummy row)."""
    import json

    rng = np.random.default_rng(5)
    (root / "data").mkdir(parents=True)
    meta = {"data_format": "parquet", "total_episodes": episodes, "dataset_id": "t/t-v0"}
    (root / "data" / "metadata.json").write_text(json.dumps(meta))
    for i in range(episodes):
        t = int(rng.integers(1, 40))
        term = np.zeros(t + 1, bool)
        trunc = np.zeros(t + 1, bool)
        (term if i % 2 else trunc)[t - 1] = True
        cols = {
            "rewards": np.append(rng.standard_normal(t), 0.0),
            "values": rng.standard_normal(t + 1).astype(np.float32),
            "terminations": term,
            "truncations": trunc,
        }
        d = root / "data" / str(i)
        d.mkdir()
        pq.write_table(pa.table(cols), d / "part-0.parquet")
        (d / "metadata.json").write_text(json.dumps({"id": i}))
    return root


@pytest.mark.parametrize("command", ["gae", "prefix-sum"])
def test_minari_parquet_one_episode_per_shard(tmp_path: Path, command: str) -> None:
    whole = _minari_parquet(tmp_path / "whole")
    sharded = _minari_parquet(tmp_path / "sharded")
    rltscan.run(command, str(whole), device="cpu")
    report = rltscan.run(command, str(sharded), engine="local", device="cpu")
    assert any("pass 1 skipped" in n for n in report.notes)
    name = outputs_of(command)[0]
    for d in sorted((whole / "data").iterdir()):
        if not d.is_dir():
            continue
        want = pq.read_table(d / "part-0.parquet").column(name).to_numpy()
        got = pq.read_table(sharded / "data" / d.name / "part-0.parquet").column(name).to_numpy()
        assert np.isnan(got[-1]) and np.isnan(want[-1])  # Minari's padding row
        np.testing.assert_allclose(got[:-1], want[:-1], rtol=1e-5, atol=1e-5)
    out = tmp_path / "out"
    fresh = _minari_parquet(tmp_path / "fresh")
    rltscan.run(command, str(fresh), engine="local", output=str(out), device="cpu")
    assert (out / "data" / "metadata.json").read_bytes() == (
        fresh / "data" / "metadata.json"
    ).read_bytes()
    assert (out / "data" / "3" / "metadata.json").is_file()
    assert snapshot(out / "data" / "2") == snapshot(sharded / "data" / "2")


def test_each_kind_answers_what_the_engines_ask(tmp_path: Path) -> None:
    """The engines ask the Dataset, never its kind (issue 29): each kind's answers."""
    from tests.lerobot_fixtures import build

    flat = discover(str(dataset(tmp_path, 0.05)[0]))
    minari = discover(str(_minari_parquet(tmp_path / "minari")))
    lerobot = discover(str(build(tmp_path, "v2.1").root))
    answers = {
        ds.kind: (
            ds.episode_shards,
            ds.final_rows,
            ds.outputs_in_infos,
            ds.meta_describes_data,
            ds.records_size,
            ds.layout,
            ds.format,
            ds.sequences,
            ds.order(None),
            ds.order("step"),
        )
        for ds in (flat, minari, lerobot)
    }
    assert answers == {
        "parquet": (
            False, 0, False, False, False, "flat", "parquet shards", 1, "file-name", "--order-by"
        ),
        "minari": (  # (discover refuses --order-by: order(None) is what runs)
            True, 1, True, False, True, "episodes", "minari/parquet shards", 6, "episode",
            "--order-by",
        ),
        "lerobot": (
            False, 0, False, True, False, "flat", "lerobot/parquet shards", 1,
            "episode (path)", "--order-by",  # (discover sorted it by that column)
        ),
    }  # fmt: skip
    assert [flat.steps(s) for s in flat.shards] == list(SIZES)
    rows = [pq.ParquetFile(s.path).metadata.num_rows for s in minari.shards]
    assert [minari.steps(s) for s in minari.shards] == [r - 1 for r in rows]  # T+1 rows


def test_single_machine_path_never_imports_ray(tmp_path: Path) -> None:
    root, _, _ = dataset(tmp_path, 0.05)
    code = (
        "import sys, rltscan\n"
        f"rltscan.run('gae', {str(root)!r}, device='cpu', missing_bootstrap='zero')\n"
        "assert 'ray' not in sys.modules, 'ray was imported'\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=120)


def test_killed_job_leaves_every_shard_readable(tmp_path: Path) -> None:
    """SIGKILL once pass 2 has started staging: every shard still opens with its original
    columns; a re-run with --overwrite gives the clean result."""
    whole = table(400_000, 0.01)
    root = tmp_path / "shards"
    paths = write_shards(root, whole, sizes=(100_000,) * 4, row_group=25_000)
    clean = tmp_path / "clean"
    shutil.copytree(root, clean)
    before = {p.name: pq.read_table(p) for p in paths}
    cmd = [sys.executable, "-m", "rltscan", "gae", str(root), "-q", "--device", "cpu"]
    cmd += ["--no-bootstrap", "--chunk-steps", "4096"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while proc.poll() is None and time.monotonic() < deadline:
        if any(p.is_file() for p in root.glob(".rltscan-stage-*/*")):
            break  # a staged shard (or its temp file) exists: pass 2 is under way
        time.sleep(0.005)
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    for p in paths:
        table_now = pq.read_table(p)
        assert table_now.select(before[p.name].column_names).equals(before[p.name])
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == sorted(
        p.name for p in paths
    )
    rltscan.run("gae", str(root), device="cpu", overwrite=True, **kwargs("gae"))
    rltscan.run("gae", str(clean), device="cpu", **kwargs("gae"))
    assert {k: v for k, v in snapshot(root).items() if not k.startswith(".")} == snapshot(clean)


def test_readme_scaling_figures_come_from_the_result_file() -> None:
    """The README quotes the H200 Ray scaling run; the figures must be the result file's."""
    import json
    import re

    rows = json.loads(
        (ROOT / "bench" / "results" / "ray-scaling-h200-2026-12-06" / "result.json").read_text()
    )["rows"]
    data = {(r["device"].split()[0], r["workers"]): r for r in rows}
    text = " ".join((ROOT / "README.md").read_text().split())
    found = re.search(
        r"GAE over ([\d,]+) steps in (\d+) Parquet shards at every worker count: one worker "
        r"([\d.]+)M steps/s \(([\d.]+) s\), 8 workers ([\d.]+)M \(([\d.]+) s\), 16 workers "
        r"([\d.]+)M \(([\d.]+) s\), so efficiency is ([\d.]+), ([\d.]+), ([\d.]+), ([\d.]+) at "
        r"2, 4, 8, 16 workers; 16 GPU-sharing workers \(1/16 GPU each\) ([\d.]+)M steps/s "
        r"\(([\d.]+) s\)",
        text,
    )
    assert found, "the README's scaling sentence moved; update this test"
    g = found.groups()
    assert {r["steps"] for r in rows} == {int(g[0].replace(",", ""))}  # every row, all steps

    def figures(row: dict) -> tuple[float, float]:
        return round(row["steps_per_s"] / 1e6, 1), round(row["seconds"], 1)

    for (rate, secs), key in zip(
        ((g[2], g[3]), (g[4], g[5]), (g[6], g[7]), (g[12], g[13])),
        (("cpu", 1), ("cpu", 8), ("cpu", 16), ("cuda", 16)),
        strict=True,
    ):
        assert (float(rate), float(secs)) == figures(data[key]), key
    for text_eff, workers in zip(g[8:12], (2, 4, 8, 16), strict=True):
        assert float(text_eff) == round(data[("cpu", workers)]["efficiency"], 2)
