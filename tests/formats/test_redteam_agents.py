"""Red team: multi-agent step logs, one row per agent step (PettingZoo's AEC loop, a
multi-agent RLlib run), with an ``agent_id`` column.

The rows of two agents interleave; without observations to show the jump, every row
was read as the next step of one sequence and the run went on, exit 0, with each
agent's advantages built from the other agent's values. An ``agent_id`` column holding
agents now stops the run (exit 2, ``--ignore agent_id`` if the rows are one agent's
steps in order); RLlib's single-agent output, whose ``agent_id`` is all null, runs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from tests.io_helpers import run_cli

GAMMA, LAM, T = 0.9, 0.8, 5
ARGS = ("--gamma", str(GAMMA), "--lam", str(LAM), "-q", "--missing-bootstrap", "zero")


def _gae(r, v, term, gamma=GAMMA, lam=LAM):
    """GAE in float64 over one agent's steps; the last step's V(s_{t+1}) counts as 0."""
    adv, nxt = np.zeros(len(r)), 0.0
    for t in range(len(r) - 1, -1, -1):
        nv = 0.0 if t == len(r) - 1 else v[t + 1]
        delta = r[t] - v[t] if term[t] else r[t] + gamma * nv - v[t]
        adv[t] = nxt = delta + (0.0 if term[t] or t == len(r) - 1 else gamma * lam * nxt)
    return adv


def _agents(seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    rng = np.random.default_rng(seed)
    out = {}
    for a in ("agent_0", "agent_1"):
        term = np.zeros(T, bool)
        term[-1] = True
        out[a] = {
            "rewards": rng.normal(size=T),
            "vf_preds": rng.normal(size=T),
            "terminateds": term,
        }
    return out


def _interleaved(agents, agent_id: pa.Array | None = None) -> pa.Table:
    rows = [
        {"eps_id": "e0", "agent_id": a, **{k: x[t] for k, x in agents[a].items()}}
        for t in range(T)
        for a in agents
    ]
    table = pa.Table.from_pylist(rows)
    if agent_id is not None:
        table = table.set_column(table.schema.get_field_index("agent_id"), "agent_id", agent_id)
    return table


def test_interleaved_agents_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ma.parquet"
    pq.write_table(_interleaved(_agents()), path)
    res = run_cli("gae", str(path), *ARGS, in_process=True)
    assert res.returncode == 2, (res.returncode, res.stderr)
    assert "--ignore agent_id" in res.stderr + res.stdout


def test_one_agent_s_rows_give_its_advantages(tmp_path: Path) -> None:
    agents = _agents(1)
    path = tmp_path / "a0.parquet"
    table = _interleaved(agents)
    mask = pa.compute.equal(table["agent_id"], "agent_0")
    pq.write_table(table.filter(mask), path)
    res = run_cli("gae", str(path), *ARGS, "--ignore", "agent_id", in_process=True)
    assert res.returncode == 0, res.stderr
    a = agents["agent_0"]
    want = _gae(a["rewards"], a["vf_preds"], a["terminateds"])
    np.testing.assert_allclose(pq.read_table(path)["advantages"].to_numpy(), want, atol=1e-6)


def test_an_all_null_agent_id_is_rllib_s_single_agent_output(tmp_path: Path) -> None:
    agents = {"agent_0": _agents(2)["agent_0"]}
    path = tmp_path / "sa.parquet"
    pq.write_table(_interleaved(agents, pa.nulls(T)), path)
    res = run_cli("gae", str(path), *ARGS, in_process=True)
    assert res.returncode == 0, res.stderr
    a = agents["agent_0"]
    want = _gae(a["rewards"], a["vf_preds"], a["terminateds"])
    np.testing.assert_allclose(pq.read_table(path)["advantages"].to_numpy(), want, atol=1e-6)
