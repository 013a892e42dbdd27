"""One executor: a file run whole, streamed in windows and split in shards is one walk.

The same small table is run four ways: as one Parquet file in one window (the whole
file), in 3 windows (``chunk_steps``), as a directory of 3 Parquet shards (local
engine), and read whole to stdout (the engine of formats that cannot be read by ranges;
not with ``--normalize``, which it refuses). With the same block grid (``block_steps``;
the shard edges on it) every output column holds the same bytes and the report the same
notes, for one setting, several settings and ``--normalize`` (issue 22). Every shard
holds an episode end, so no carry crosses a whole shard: pass 1's summary is then exact
(docs/SHARDS.md).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rltscan
from tests.shard_helpers import concat, write_shards

N, WINDOW, BLOCK = 300, 100, 50


def _table(seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    u = rng.random(N)
    term, trunc = u < 0.03, (u >= 0.03) & (u < 0.05)
    for k in (40, 170, 260):  # an episode end in every shard; the data's end stays open
        term[k] = True
    term[-1] = trunc[-1] = False
    return pa.table(
        {
            "rewards": rng.standard_normal(N).astype(np.float32),
            "values": rng.standard_normal(N).astype(np.float32),
            "terminals": term,
            "timeouts": trunc,
            "logp_behavior": np.log(rng.uniform(0.05, 1.0, N)).astype(np.float32),
            "logp_target": np.log(rng.uniform(0.05, 1.0, N)).astype(np.float32),
        }
    )


def _run(command: str, path: Path, **kw) -> list[str]:
    report = rltscan.run(command, str(path), device="cpu", backend="torch", block_steps=BLOCK, **kw)
    # the shard engine adds one line naming its shards and engine
    return [n for n in report.notes if "shard(s) in" not in n]


def _three_ways(tmp_path: Path, command: str, **kw) -> tuple[list, list]:
    table = _table(3)
    whole, windows, shards = tmp_path / "whole.parquet", tmp_path / "win.parquet", tmp_path / "d"
    pq.write_table(table, whole)
    pq.write_table(table, windows)
    paths = write_shards(shards, table, sizes=(WINDOW,) * 3)
    notes = [
        _run(command, whole, **kw),
        _run(command, windows, chunk_steps=WINDOW, **kw),
        _run(command, shards, **kw),
    ]
    made = [c for c in pq.read_table(whole).column_names if c not in table.column_names]
    outputs = [
        {c: pq.read_table(whole).column(c).to_numpy() for c in made},
        {c: pq.read_table(windows).column(c).to_numpy() for c in made},
        {c: concat(paths, c) for c in made},
    ]
    if not kw.get("normalize"):
        src, out = tmp_path / "src.parquet", io.BytesIO()
        pq.write_table(table, src)
        notes.append(_run(command, src, output="-", stdout=out, **kw))
        piped = pq.read_table(io.BytesIO(out.getvalue()))
        outputs.append({c: piped.column(c).to_numpy() for c in made})
    return outputs, notes


def _assert_same(outputs: list[dict], notes: list[list[str]], bootstraps: bool = True) -> None:
    assert outputs[0]
    for other in outputs[1:]:
        assert other.keys() == outputs[0].keys()
        for name, values in outputs[0].items():
            assert other[name].dtype == values.dtype, name
            assert other[name].tobytes() == values.tobytes(), name
    assert all(other == notes[0] for other in notes[1:])
    # the open end is a note where it bootstraps (traces read no V(s_{t+1}): no note)
    assert any("the data ends with no flag" in n for n in notes[0]) == bootstraps


@pytest.mark.parametrize(
    ("command", "params"),
    [
        ("gae", {"gamma": 0.97, "lam": 0.9}),
        ("vtrace", {"gamma": 0.97}),
        ("traces", {"gamma": 0.97, "lam": 0.9}),
    ],
)
def test_one_setting(tmp_path, command, params):
    outputs, notes = _three_ways(tmp_path, command, params=params, missing_bootstrap="zero")
    _assert_same(outputs, notes, bootstraps=command != "traces")


def test_several_settings(tmp_path):
    params = {"gamma": (0.9, 0.99), "lam": (0.8, 0.95)}
    outputs, notes = _three_ways(tmp_path, "gae", params=params, missing_bootstrap="zero")
    assert len(outputs[0]) == 8  # 2 outputs × 4 settings
    _assert_same(outputs, notes)


@pytest.mark.parametrize("params", [{"gamma": 0.97}, {"gamma": (0.9, 0.99)}])
def test_normalize(tmp_path, params):
    outputs, notes = _three_ways(
        tmp_path, "gae", params=params, missing_bootstrap="zero", normalize=True
    )
    _assert_same(outputs, notes)
    advantages = [v for k, v in outputs[0].items() if k.startswith("advantages")]
    for values in advantages:
        assert abs(float(values.astype(np.float64).mean())) < 1e-5
    assert any("--normalize: advantages" in n for n in notes[0])
