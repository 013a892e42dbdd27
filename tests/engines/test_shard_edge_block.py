"""Pass 1 reads one block of a shard where that block decides its carry (issue 25).

A shard's carry out depends only on the steps between the edge it leaves by (its first
step for backward estimators, its last for forward ones) and the nearest cut. Pass 1
walks that edge block alone first; only where it holds no cut does it walk the whole
shard. Checked here, with shards of four blocks and cuts placed in the edge block, only
outside it, or nowhere in a shard:

* the outputs are the bytes of the one concatenated file (the shard edges on its block
  grid) wherever every carried shard holds a cut, and agree to float rounding where a
  carry crosses a whole shard, for a backward and a forward estimator and for several
  settings;
* pass 1 reads one block (and the row past it) of a shard whose edge block holds a cut,
  and the whole shard otherwise;
* only a cut lets the edge block decide (not an ``A`` below float64 rounding);
* 35 random datasets (every estimator, the five flag kinds, cuts at shard and edge-block
  edges, several settings, ``--normalize``) hold the bytes of the one file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

import rltscan
from rltscan.engines.shards import task
from tests.conftest import tolerance
from tests.shard_helpers import COMMANDS, OUTPUTS, PARAMS, concat, kwargs, write_shards
from tests.shard_helpers import table as every_column

BLOCK, SHARD, SHARDS = 25, 100, 4


def _table(cuts: list[int], seed: int = 0) -> pa.Table:
    """shard_helpers' table with no random episode ends: ``cuts`` alternate between
    truncations and terminations."""
    n = SHARD * SHARDS
    term = np.zeros(n, dtype=bool)
    trunc = np.zeros(n, dtype=bool)
    for i, k in enumerate(cuts):
        (term if i % 2 else trunc)[k] = True
    t = every_column(n, 0.0, seed)
    t = t.set_column(t.schema.get_field_index("terminals"), "terminals", pa.array(term))
    return t.set_column(t.schema.get_field_index("timeouts"), "timeouts", pa.array(trunc))


# cuts inside each shard's first block (backward edge) and last block (forward edge)
EDGES = [s * SHARD + o for s in range(SHARDS) for o in (7, 93)]
# cuts only in the middle blocks: every shard holds a cut, no edge block does
MIDDLE = [s * SHARD + 50 for s in range(SHARDS)]
# shard 1 holds no cut: a carry crosses it whole (the float64 aggregate)
GAP = [k for k in EDGES if not SHARD <= k < 2 * SHARD]


def _both(tmp_path: Path, command: str, cuts: list[int], **kw) -> tuple[dict, dict]:
    table = _table(cuts)
    whole = tmp_path / "whole.parquet"
    pq.write_table(table, whole)
    paths = write_shards(tmp_path / "d", table, sizes=(SHARD,) * SHARDS)
    args = {"device": "cpu", "block_steps": BLOCK, **kwargs(command), **kw}
    rltscan.run(command, str(whole), **args)
    rltscan.run(command, str(tmp_path / "d"), **args)
    made = [c for c in pq.read_table(whole).column_names if c not in table.column_names]
    one = {c: pq.read_table(whole).column(c).to_numpy() for c in made}
    return one, {c: concat(paths, c) for c in made}


@pytest.mark.parametrize("cuts", [EDGES, MIDDLE], ids=["edge", "middle"])
@pytest.mark.parametrize("command", ["gae", "vtrace", "retrace", "traces"])
def test_bytes_of_the_one_file_wherever_every_shard_holds_a_cut(tmp_path, command, cuts):
    one, sharded = _both(tmp_path, command, cuts)
    assert one and set(one) <= set(OUTPUTS[command])
    for name, values in one.items():
        assert sharded[name].tobytes() == values.tobytes(), name


def test_several_settings_from_the_edge_block(tmp_path):
    params = {"gamma": (0.9, 0.99), "lam": (0.8, 1.0)}
    one, sharded = _both(tmp_path, "gae", EDGES, params=params)
    assert len(one) == 8  # 2 outputs × 4 settings
    for name, values in one.items():
        assert sharded[name].tobytes() == values.tobytes(), name


@pytest.mark.parametrize("command", ["gae", "traces"])
def test_a_shard_without_a_cut_agrees_to_rounding(tmp_path, command):
    one, sharded = _both(tmp_path, command, GAP)
    for name, values in one.items():
        want = torch.from_numpy(values.astype(np.float64))
        got = torch.from_numpy(sharded[name].astype(np.float64))
        torch.testing.assert_close(got, want, **tolerance(torch.float32, want))


@pytest.mark.parametrize(
    ("command", "cuts", "steps"),
    [
        ("gae", EDGES, {BLOCK + 1}),  # the first block and the row after it
        ("traces", EDGES, {BLOCK + 1}),  # the last block and the row before it
        # the edge block, then the whole shard and the neighbour's row (none at the end)
        ("gae", MIDDLE, {BLOCK + 1 + SHARD, BLOCK + 1 + SHARD + 1}),
    ],
)
def test_pass_1_reads_one_block_where_it_decides(tmp_path, monkeypatch, command, cuts, steps):
    table = _table(cuts)
    write_shards(tmp_path / "d", table, sizes=(SHARD,) * SHARDS)
    read: list[tuple[int, int]] = []
    real = task.prepare

    def counted(view, window=None, **kw):
        read.append(window)
        return real(view, window=window, **kw)

    monkeypatch.setattr(task, "prepare", counted)
    real_aggregate = task.aggregate
    rows: list[int] = []

    def aggregate(job, k):
        read.clear()
        out = real_aggregate(job, k)
        rows.append(sum(b - a for a, b in read if a is not None))
        return out

    monkeypatch.setattr(task, "aggregate", aggregate)
    rltscan.run(command, str(tmp_path / "d"), device="cpu", block_steps=BLOCK, **kwargs(command))
    # every shard but the last in scan order runs pass 1 (the data's end needs no carry
    # in, the one-row neighbour read aside)
    assert len(rows) == SHARDS - 1
    assert set(rows) <= steps, rows


def test_only_a_cut_lets_the_edge_block_decide(tmp_path):
    """Rewards 1e25 times the others between the edge block and the cut: the carry in's
    weight over the edge block (0.25^32 against B) is below float64 rounding with a
    probe carry of 1, so chains entered with 0 and 1 merge there without a cut. The
    edge block must not decide then (the whole shard is walked, through its cut)."""
    size = 128  # four blocks of 32: the shard edges on the block grid
    n = size * 3
    rng = np.random.default_rng(0)
    rewards = rng.standard_normal(n).astype(np.float32)
    term = np.zeros(n, dtype=bool)
    for s in range(3):
        rewards[s * size + 32 : s * size + 64] *= np.float32(1e25)
        term[s * size + 64] = True  # each shard's only cut, past its edge block
    table = pa.table(
        {
            "rewards": rewards,
            "values": np.zeros(n, dtype=np.float32),
            "terminals": term,
            "timeouts": np.zeros(n, dtype=bool),
        }
    )
    whole = tmp_path / "whole.parquet"
    pq.write_table(table, whole)
    paths = write_shards(tmp_path / "d", table, sizes=(size,) * 3)
    args = {"device": "cpu", "block_steps": 32, "params": {"gamma": 0.5, "lam": 0.5}}
    rltscan.run("gae", str(whole), missing_bootstrap="zero", **args)
    rltscan.run("gae", str(tmp_path / "d"), missing_bootstrap="zero", **args)
    for name in OUTPUTS["gae"]:
        want = pq.read_table(whole).column(name).to_numpy()
        assert concat(paths, name).tobytes() == want.tobytes(), name


FLAGS = ("terminals/timeouts", "dones ended", "dones starts", "episode_starts", "episode_id")


def _random_case(seed: int) -> tuple[str, list[int], int, dict, dict]:
    """A dataset on a block grid of 2-8 steps, shards of 1-3 blocks, at least one
    episode end in every shard (at its first or last step, its edge block's, or
    anywhere), one of the five flag kinds, sometimes several settings or --normalize."""
    rng = np.random.default_rng(seed)
    block = int(rng.choice([2, 3, 4, 8]))
    sizes = [block * int(rng.integers(1, 4)) for _ in range(int(rng.integers(2, 5)))]
    n = sum(sizes)
    command = COMMANDS[seed % len(COMMANDS)]
    flag = FLAGS[(seed // len(COMMANDS)) % len(FLAGS)]
    end = rng.random(n) < rng.choice([0.0, 0.05, 0.2])
    off = 0
    for size in sizes:
        at = (0, size - 1, block - 1, size - block, int(rng.integers(0, size)))
        end[off + at[int(rng.integers(0, len(at)))]] = True
        off += size
    cols = {
        name: rng.standard_normal(n).astype(np.float32)
        for name in ("rewards", "values", "q_values", "next_expected_q")
    }
    for name in ("logp_behavior", "logp_target"):
        cols[name] = np.log(rng.uniform(0.05, 1.0, n)).astype(np.float32)
    starts = np.concatenate([[True], end[:-1]])
    extra = dict(kwargs(command))
    terminal = {"ends_are": "terminal"}
    if flag == "terminals/timeouts":
        kind = rng.random(n) < 0.5
        cols["terminals"], cols["timeouts"] = end & kind, end & ~kind
    elif flag == "dones ended":
        cols["dones"] = end
        extra |= {"dones_mean": "ended", **terminal}
    elif flag == "dones starts":
        cols["dones"] = starts
        extra |= {"dones_mean": "starts", **terminal}
    elif flag == "episode_starts":
        cols["episode_starts"] = starts
        extra |= terminal
    else:
        cols["episode_id"] = np.cumsum(starts).astype(np.int64)
        extra |= terminal
    if rng.random() < 0.25 and command != "prefix-sum":
        two = {k: (v, v * 0.9) if k in ("gamma", "lam") else v for k, v in PARAMS[command].items()}
        extra["params"] = two
    if rng.random() < 0.2 and command in ("gae", "vtrace", "retrace"):
        extra["normalize"] = True
    return command, sizes, block, cols, extra


@pytest.mark.parametrize("seed", range(35))
def test_random_datasets_give_the_bytes_of_the_one_file(tmp_path, seed):
    """Every estimator, every flag kind, cuts at the edges of shards and of their edge
    blocks: where every shard holds an episode end and the shard edges are on the block
    grid, the shards hold the bytes of the one file (pass 1 from the edge block or the
    whole shard, whichever decides)."""
    command, sizes, block, cols, extra = _random_case(seed)
    table = pa.table(cols)
    whole = tmp_path / "whole.parquet"
    pq.write_table(table, whole)
    paths = write_shards(tmp_path / "d", table, sizes=tuple(sizes), row_group=5)
    args = {"device": "cpu", "block_steps": block, **extra}
    rltscan.run(command, str(whole), **args)
    rltscan.run(command, str(tmp_path / "d"), **args)
    made = [c for c in pq.read_table(whole).column_names if c not in cols]
    assert made
    for name in made:
        want = pq.read_table(whole).column(name).to_numpy()
        assert concat(paths, name).tobytes() == want.tobytes(), (name, sizes, block)
