"""Audit: RLlib's offline output (new API stack), as ``config.offline_data(output=DIR,
output_write_episodes=False)`` writes it.

``OfflineSingleAgentEnvRunner._map_episodes_to_data`` turns each ``SingleAgentEpisode``
into one row per step: ``eps_id`` (a hex UUID string), ``agent_id``/``module_id``
(null), ``obs``, ``actions``, ``rewards``, ``new_obs``, ``terminateds``/``truncateds``
(set only on an episode's last row) and every extra model output (``action_logp``,
``action_dist_inputs``, here also a custom module's ``vf_preds``). Recording needs
``batch_mode="complete_episodes"`` (RLlib refuses otherwise), so every episode ends in
the file. ``ray.data.from_items(rows).write_parquet(DIR/run-000000-0000k)`` then writes
one file per block, ``{dataset}_{write}_{block:06d}-0.parquet``, of one to a few rows, with the
tensor columns as ``large_list<float>`` carrying ``ray.data.arrow_tensor_v2`` extension
metadata (observed on ray 2.60). The rows are built here by RLlib's own mapping on real
``SingleAgentEpisode`` objects of a gymnasium CartPole with a time limit of 8 steps (so
terminations and truncations both occur); the files are written with pyarrow in the
layout ray.data gives (ray.data itself needs a Ray cluster: too slow for this file).

RLlib has no V(new_obs) column, so a truncation has no bootstrap value: GAE and TD(λ)
stop (exit 4) until ``--missing-bootstrap zero``; discounted returns default to it.
"""

from __future__ import annotations

import types
import uuid
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.audit_ref import estimates, one_line_error
from tests.io_helpers import digest, run_cli

pytest.importorskip("gymnasium")
sae = pytest.importorskip("ray.rllib.env.single_agent_episode")
offline_env_runner = pytest.importorskip("ray.rllib.offline.offline_env_runner")

GAMMA, LAM = 0.9, 0.8
TENSOR = {b"ARROW:extension:name": b"ray.data.arrow_tensor_v2"}


def _rows(seed: int = 0) -> list[dict]:
    """Rows of 4 CartPole episodes (time limit 12) by RLlib's own ``_map_episodes_to_data``."""
    import gymnasium as gym

    env = gym.make("CartPole-v1", max_episode_steps=12)
    rng = np.random.default_rng(seed)
    episodes = []
    for k in range(4):
        ep = sae.SingleAgentEpisode(
            observation_space=env.observation_space, action_space=env.action_space
        )
        obs, info = env.reset(seed=seed * 100 + k)
        ep.add_env_reset(observation=obs, infos=info)
        done = False
        while not done:
            # even episodes push one way (the pole falls in about 10 steps), odd ones
            # alternate (the time limit of 12 cuts them)
            action = 1 if k % 2 == 0 else len(ep) % 2
            obs, reward, term, trunc, info = env.step(action)
            ep.add_env_step(
                observation=obs,
                action=action,
                reward=float(reward) + float(rng.normal()),  # varied rewards
                infos=info,
                terminated=term,
                truncated=trunc,
                extra_model_outputs={
                    "action_logp": np.float32(rng.normal()),
                    "action_dist_inputs": rng.normal(size=2).astype(np.float32),
                    "vf_preds": np.float32(rng.normal()),
                },
            )
            done = term or trunc
        episodes.append(ep)
    runner = types.SimpleNamespace(output_compress_columns=[], _samples=[])
    offline_env_runner.OfflineSingleAgentEnvRunner._map_episodes_to_data(runner, episodes)
    return runner._samples


def _column(name: str, values: list) -> tuple[pa.Field, pa.Array]:
    first = values[0]
    if name in ("agent_id", "module_id"):
        return pa.field(name, pa.null()), pa.nulls(len(values))
    if isinstance(first, str):
        return pa.field(name, pa.string()), pa.array(values, pa.string())
    if isinstance(first, np.ndarray) and first.ndim == 1:
        arr = pa.array([np.asarray(x, np.float32) for x in values], pa.large_list(pa.float32()))
        meta = {**TENSOR, b"ARROW:extension:metadata": f"[{first.shape[0]}]".encode()}
        return pa.field(name, arr.type, metadata=meta), arr
    if isinstance(first, (bool, np.bool_)):
        return pa.field(name, pa.bool_()), pa.array([bool(x) for x in values])
    if isinstance(first, (np.floating, float)) and not isinstance(first, np.float64):
        kind = pa.float32() if isinstance(first, np.float32) else pa.float64()
        return pa.field(name, kind), pa.array([float(x) for x in values], kind)
    return pa.field(name, pa.int32()), pa.array([int(x) for x in values], pa.int32())


def rllib_output(tmp: Path) -> tuple[Path, dict[str, np.ndarray]]:
    """The ``run-000000-00001`` directory ray.data writes, and the columns in row order."""
    rows = _rows()
    names = list(rows[0])
    fields, arrays = zip(*(_column(n, [row[n] for row in rows]) for n in names), strict=True)
    table = pa.Table.from_arrays(list(arrays), schema=pa.schema(list(fields)))
    out = tmp / "out" / "cartpoleenv" / "run-000000-00001"
    out.mkdir(parents=True)
    ds, write = uuid.uuid4().hex[:22], uuid.uuid4().hex
    # ray.data's blocks of from_items hold one to a few rows each
    lo = i = 0
    while lo < table.num_rows:
        size = 1 + i % 4  # 1, 2, 3 or 4 rows
        pq.write_table(table.slice(lo, size), out / f"{ds}_{write}_{i:06d}-0.parquet")
        lo, i = lo + size, i + 1
    cols = {
        "rewards": table["rewards"].to_numpy(),
        "vf_preds": table["vf_preds"].to_numpy().astype(np.float64),
        "terminateds": table["terminateds"].to_numpy(zero_copy_only=False),
        "truncateds": table["truncateds"].to_numpy(zero_copy_only=False),
    }
    return out, cols


def read_back(directory: Path, name: str) -> np.ndarray:
    files = sorted(directory.glob("*.parquet"))
    return np.concatenate([pq.read_table(f, columns=[name])[name].to_numpy() for f in files])


@pytest.fixture
def output(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    out, cols = rllib_output(tmp_path)
    assert cols["terminateds"].any() and cols["truncateds"].any()
    return out, cols


def want(cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    # V(s_{t+1}) is the next row's vf_preds inside an episode; no V(new_obs) column, so
    # a truncation bootstraps 0 (--missing-bootstrap zero)
    v, term, trunc = cols["vf_preds"], cols["terminateds"], cols["truncateds"]
    nv = np.append(v[1:], np.nan)
    nv[term | trunc] = np.nan
    return estimates(cols["rewards"], v, nv, term, trunc, GAMMA, LAM)


def test_string_eps_id_is_read(output) -> None:
    """RLlib's ``eps_id`` is a UUID string: read as text ids (an episode ends where it
    changes; checked across the shard files), so ``returns`` needs no flag."""
    out, cols = output
    res = run_cli("returns", str(out), "--gamma", str(GAMMA), "-q")
    assert res.returncode == 0, res.stderr
    np.testing.assert_allclose(read_back(out, "returns"), want(cols)["returns"], atol=1e-9)


def test_gae_with_string_eps_id_asks_only_for_the_bootstrap(output) -> None:
    """The ids read, what is left open is the truncations' V(s_{t+1}): asked in one
    line, nothing written."""
    out, _ = output
    before = digest(out)
    res = run_cli("gae", str(out), "--gamma", str(GAMMA), "--lam", str(LAM), "-q", in_process=True)
    assert res.returncode == 4
    assert "--missing-bootstrap" in one_line_error(res.stderr)
    assert digest(out) == before


def test_returns_with_eps_id_set_aside_are_exact(output) -> None:
    out, cols = output
    res = run_cli(
        "returns", str(out), "--gamma", str(GAMMA), "--ignore", "eps_id", "-q", in_process=True
    )
    assert res.returncode == 0, res.stderr
    np.testing.assert_allclose(read_back(out, "returns"), want(cols)["returns"], atol=1e-9)


def test_gae_asks_for_the_missing_bootstrap_then_is_exact_and_keeps_the_shards(output) -> None:
    out, cols = output
    files = sorted(out.glob("*.parquet"))
    before = {f.name: (pq.read_table(f), pq.ParquetFile(f).metadata) for f in files}
    args = ["gae", str(out), "--gamma", str(GAMMA), "--lam", str(LAM), "--ignore", "eps_id"]
    res = run_cli(*args, "-q", in_process=True)
    assert res.returncode == 4
    assert "--missing-bootstrap" in one_line_error(res.stderr)
    res = run_cli(*args, "--missing-bootstrap", "zero", "-q")
    assert res.returncode == 0, res.stderr
    ref = want(cols)
    np.testing.assert_allclose(read_back(out, "advantages"), ref["advantages"], atol=1e-5)
    np.testing.assert_allclose(read_back(out, "value_targets"), ref["value_targets"], atol=1e-5)
    # data safety: no stray files, every input column and ray's tensor metadata kept
    assert sorted(p.name for p in out.iterdir()) == sorted(before)
    for f in files:
        table, meta = before[f.name]
        now = pq.read_table(f)
        assert now.drop_columns(["advantages", "value_targets"]).equals(table)
        for name in ("obs", "new_obs", "action_dist_inputs"):
            assert now.schema.field(name).metadata == table.schema.field(name).metadata
        new = pq.ParquetFile(f).metadata
        for i in range(meta.num_columns):
            a, b = meta.row_group(0).column(i), new.row_group(0).column(i)
            assert (a.path_in_schema, a.compression, a.encodings) == (
                b.path_in_schema, b.compression, b.encodings,
            )  # fmt: skip


def test_td_lambda_is_exact(output) -> None:
    out, cols = output
    args = ["td-lambda", str(out), "--gamma", str(GAMMA), "--lam", str(LAM)]
    res = run_cli(*args, "--ignore", "eps_id", "--missing-bootstrap", "zero", "-q", in_process=True)
    assert res.returncode == 0, res.stderr
    np.testing.assert_allclose(
        read_back(out, "lambda_returns"), want(cols)["lambda_returns"], atol=1e-5
    )


def test_a_gap_between_blocks_is_seen_through_new_obs(output) -> None:
    """RLlib with ``output_max_rows_per_file`` writes only the last of the chunks one
    iteration fills (the write is after its ``while`` loop), and a glob over some of the
    blocks drops rows too: here the blocks that hold the end of the first episode and the
    start of the second are gone. ``new_obs`` of the last row before the gap is not the
    ``obs`` after it, and no flag ends that episode."""
    out, _ = output
    files = sorted(out.glob("*.parquet"))
    ends = np.flatnonzero(read_back(out, "terminateds") | read_back(out, "truncateds"))
    rows = np.cumsum([pq.ParquetFile(f).metadata.num_rows for f in files])
    block = int(np.searchsorted(rows, ends[0], side="right"))  # the first episode's last block
    assert block + 1 < len(files)
    files[block].unlink()
    files[block + 1].unlink()
    res = run_cli("returns", str(out), "--gamma", str(GAMMA), "--ignore", "eps_id", "-q")
    assert res.returncode == 2
    assert "--ends-from-observations" in one_line_error(res.stderr)
