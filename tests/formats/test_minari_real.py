"""The real ``minari`` package sees rltscan's outputs (issue 14 item 2).

Datasets are written by minari's own writer (``create_dataset_from_buffers`` with
hand-built ``EpisodeBuffer``s, no jax), the user's critic values (``T+1`` per
episode) are added, ``rltscan gae DATASET_DIR`` runs as a process in place, and then
``minari.load_dataset(...).iterate_episodes()`` returns ``infos["advantages"]`` and
``infos["value_targets"]`` (``T+1`` entries, entry 0 NaN, entry ``t+1`` step ``t``)
equal to a float64 loop, while everything minari read before is unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from tests import oracles
from tests.io_helpers import ROOT, rltscan_process
from tests.producers import minari_cartpole

minari = pytest.importorskip("minari")
pytest.importorskip("gymnasium")
pytest.importorskip("PIL")  # minari's storages import it unconditionally

GAMMA, LAM = 0.99, 0.95
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "120"}


@pytest.fixture(autouse=True)
def _datasets_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Minari finds datasets by id under MINARI_DATASETS_PATH: a temp dir per test."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))


def rltscan(*args: str | Path) -> subprocess.CompletedProcess:
    return rltscan_process(ENV, *args)


def _buffers(rng: np.random.Generator, with_infos: bool, extra_info: str | None = None) -> list:
    from minari.data_collector.episode_buffer import EpisodeBuffer

    lengths = [5, 3, 7, 1, 4, 6, 2, 3, 5, 4, 3]  # 11 episodes: episode_10 sorts before _2
    ends = ["term", "trunc", "term", "term", "trunc", "term", "both", "trunc", "term", "term"]
    out = []
    for i, n in enumerate(lengths):
        end = ends[i] if i < len(ends) else "trunc"
        term = [False] * n
        trunc = [False] * n
        term[-1] = end in ("term", "both")
        trunc[-1] = end in ("trunc", "both")
        infos = {}
        if with_infos:  # an env's step infos (T+1 entries). Scalars as lists: minari
            # 0.5.4 writes a 1-D ndarray info to Arrow/Parquet with an empty "shape"
            # field metadata that its own reader cannot parse back
            infos = {
                "x_position": [float(x) for x in rng.normal(size=n + 1)],
                "success": [False] * (n + 1),
                "goal": rng.normal(size=(n + 1, 2)),
            }
        if extra_info:
            infos[extra_info] = [float(x) for x in rng.normal(size=n + 1)]
        out.append(
            EpisodeBuffer(
                id=i,
                observations=list(rng.normal(size=(n + 1, 4)).astype(np.float32)),
                actions=[int(a) for a in rng.integers(0, 2, n)],
                rewards=[float(r) for r in rng.normal(size=n)],
                terminations=term,
                truncations=trunc,
                infos=infos,
            )
        )
    return out


def _create(
    tmp: Path, data_format: str, with_infos: bool, extra_info: str | None = None
) -> tuple[str, Path]:
    os.environ["MINARI_DATASETS_PATH"] = str(tmp / "datasets")
    name = f"rltscan/cartpole/{data_format}{'-infos' if with_infos else ''}-v0"
    rng = np.random.default_rng([len(data_format), with_infos])
    buffers = _buffers(rng, with_infos, extra_info)
    root = minari_cartpole(name, buffers, "rltscan write-back test", data_format)
    _add_values(root, data_format, rng)
    return name, root


def _add_values(root: Path, data_format: str, rng: np.random.Generator) -> None:
    """The user's critic values V(s_0..s_T): T+1 per episode, as observations."""
    data = root / "data"
    if data_format == "hdf5":
        with h5py.File(data / "main_data.hdf5", "a") as f:
            for key in f:
                n = len(f[key]["rewards"])
                f[key]["values"] = rng.normal(size=n + 1).astype(np.float32)
        return
    for d in sorted(p for p in data.iterdir() if p.is_dir()):
        part = next(d.glob(f"*.{data_format}"))
        if data_format == "parquet":
            table = pq.read_table(part)
        else:  # from bytes in memory: the file is rewritten below
            table = ipc.open_file(pa.BufferReader(part.read_bytes())).read_all()
        values = rng.normal(size=table.num_rows).astype(np.float32)
        table = table.append_column("values", pa.array(values))
        if data_format == "parquet":
            pq.write_table(table, part)
        else:
            with ipc.new_file(part, table.schema) as w:
                w.write_table(table)


def _values(root: Path, data_format: str, episode: int) -> np.ndarray:
    data = root / "data"
    if data_format == "hdf5":
        with h5py.File(data / "main_data.hdf5") as f:
            return f[f"episode_{episode}"]["values"][()].astype(np.float64)
    part = next((data / str(episode)).glob(f"*.{data_format}"))
    if data_format == "parquet":
        return pq.read_table(part).column("values").to_numpy().astype(np.float64)
    table = ipc.open_file(pa.BufferReader(part.read_bytes())).read_all()
    return table.column("values").to_numpy().astype(np.float64)


def _snapshot(name: str) -> dict:
    """Everything minari shows of the dataset (episodes, metadata, spaces)."""
    ds = minari.load_dataset(name)
    episodes = {
        ep.id: {
            "observations": np.asarray(ep.observations),
            "actions": np.asarray(ep.actions),
            "rewards": ep.rewards,
            "terminations": ep.terminations,
            "truncations": ep.truncations,
            "infos": dict(ep.infos or {}),
        }
        for ep in ds.iterate_episodes()
    }
    meta = {k: v for k, v in ds.storage.metadata.items() if k != "dataset_size"}
    return {"episodes": episodes, "meta": meta, "total_steps": ds.total_steps}


@pytest.mark.parametrize("with_infos", [False, True], ids=["no-infos", "env-infos"])
@pytest.mark.parametrize("data_format", ["hdf5", "parquet", "arrow"])
def test_minari_sees_the_outputs_as_infos(data_format: str, with_infos: bool, tmp_path: Path):
    name, root = _create(tmp_path, data_format, with_infos)
    before = _snapshot(name)

    done = rltscan("gae", root, "--device", "cpu", "--gamma", GAMMA, "--lam", LAM)
    assert done.returncode == 0, done.stderr.decode()

    after = _snapshot(name)
    assert after["meta"] == before["meta"] and after["total_steps"] == before["total_steps"]
    meta = json.loads((root / "data" / "metadata.json").read_text())  # still valid JSON
    assert meta["total_steps"] == before["total_steps"]
    assert meta["dataset_size"] == minari.load_dataset(name).storage.get_size()  # grew
    for eid, ep in after["episodes"].items():
        old = before["episodes"][eid]
        for key in ("observations", "actions", "rewards", "terminations", "truncations"):
            np.testing.assert_array_equal(ep[key], old[key])
            assert ep[key].dtype == old[key].dtype
        for key, value in old["infos"].items():  # the env's own infos are kept
            np.testing.assert_array_equal(ep["infos"][key], value)
        assert set(ep["infos"]) == set(old["infos"]) | {"advantages", "value_targets"}

        steps = len(old["rewards"])
        values = _values(root, data_format, eid)
        expect = oracles.gae(
            list(old["rewards"]),
            list(values[:-1]),
            list(values[1:]),
            list(old["terminations"]),
            list(old["truncations"]),
            gamma=GAMMA,
            lam=LAM,
        )
        for out in ("advantages", "value_targets"):
            info = np.asarray(ep["infos"][out])
            assert info.shape == (steps + 1,)  # as every Minari info: T+1 entries
            assert np.isnan(info[0])  # the reset() entry
            np.testing.assert_allclose(info[1:], expect[out], rtol=1e-5, atol=1e-5)

    # the dataset still samples and combines like any other
    ds = minari.load_dataset(name)
    sampled = ds.sample_episodes(3)
    assert all(len(ep.infos["advantages"]) == len(ep.rewards) + 1 for ep in sampled)


def test_minari_second_run_needs_overwrite_and_replaces_infos(tmp_path: Path) -> None:
    name, root = _create(tmp_path, "parquet", with_infos=False)
    first = rltscan("gae", root, "--device", "cpu")
    assert first.returncode == 0, first.stderr.decode()
    again = rltscan("gae", root, "--device", "cpu")
    assert again.returncode == 5 and "--overwrite" in again.stderr.decode()
    third = rltscan("gae", root, "--device", "cpu", "--lam", "0.5", "--overwrite")
    assert third.returncode == 0, third.stderr.decode()
    ep = next(minari.load_dataset(name).iterate_episodes())
    assert len(ep.infos["advantages"]) == len(ep.rewards) + 1


def test_minari_refuses_to_replace_an_env_info_of_the_same_name(tmp_path: Path) -> None:
    """An env info called like an output is the user's data: never replaced."""
    _, root = _create(tmp_path, "hdf5", with_infos=True)
    with h5py.File(root / "data" / "main_data.hdf5", "a") as f:
        f["episode_0/infos/advantages"] = np.zeros(len(f["episode_0/rewards"]) + 1)
    clash = rltscan("gae", root, "--device", "cpu", "--overwrite")
    assert clash.returncode == 5, clash.stderr.decode()
    assert "advantages" in clash.stderr.decode()
    with h5py.File(root / "data" / "main_data.hdf5") as f:
        assert not f["episode_0/infos/advantages"][()].any()


def test_minari_parquet_on_the_shard_engine(tmp_path: Path) -> None:
    name, root = _create(tmp_path, "parquet", with_infos=True)
    done = rltscan("gae", root, "--device", "cpu", "--engine", "local")
    assert done.returncode == 0, done.stderr.decode()
    whole_name, whole_root = _create(tmp_path / "whole", "parquet", with_infos=True)
    assert rltscan("gae", whole_root, "--device", "cpu").returncode == 0
    os.environ["MINARI_DATASETS_PATH"] = str(tmp_path / "datasets")
    sharded = list(minari.load_dataset(name).iterate_episodes())
    os.environ["MINARI_DATASETS_PATH"] = str(tmp_path / "whole" / "datasets")
    whole = list(minari.load_dataset(whole_name).iterate_episodes())
    for a, b in zip(sharded, whole, strict=True):
        np.testing.assert_allclose(a.infos["advantages"], b.infos["advantages"], rtol=1e-6)
        assert np.isnan(a.infos["advantages"][0])


@pytest.mark.parametrize("data_format", ["arrow", "parquet"])
def test_minari_columnar_env_info_of_an_output_name_is_refused(data_format: str, tmp_path: Path):
    """An env info called "returns" is the user's: `rltscan returns` stops (exit 5)."""
    _, root = _create(tmp_path, data_format, with_infos=True, extra_info="returns")
    before = {p: p.read_bytes() for p in sorted((root / "data").rglob("*")) if p.is_file()}
    for extra in ([], ["--overwrite"]):
        done = rltscan("returns", root, "--device", "cpu", *extra)
        assert done.returncode == 5, done.stderr.decode()
        assert '"returns"' in done.stderr.decode()
    after = {p: p.read_bytes() for p in sorted((root / "data").rglob("*")) if p.is_file()}
    assert after == before
    ok = rltscan("returns", root, "--device", "cpu", "--prefix", "rl_")
    assert ok.returncode == 0, ok.stderr.decode()
