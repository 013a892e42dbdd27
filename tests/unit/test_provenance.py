"""Every output says how it was computed (issue 21 item 5).

For producers' layouts and the options that change numbers (``ends_are``,
``dones_mean``, a per-step ``discount``, ``missing_bootstrap``, observation-gap
handling, ``layout``, ``is_last_row``, a value column not named ``values``), the
provenance record is the same in the file (HDF5 attributes of each output, the
``rltscan`` Parquet metadata entry) and in the ``--json`` report; it names every
column read (values included, on every layout), the reading in force and a
``terminal_rule`` that says what the run did. And it is enough: each output is
recomputed from the record alone (its options, on a fresh copy of the input) and
compared bit for bit; so are runs given the recorded columns and reading explicitly.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.roles import option_of
from tests.io_helpers import fresh
from tests.producers import cleanrl_buffer, episodes, fixed_list, torchrl_dump

PLAN = [(4, "term"), (3, "trunc"), (5, "term"), (2, "trunc"), (3, "cut")]


def _d4rl(root: Path, rng: np.random.Generator) -> Path:
    """D4RL-style HDF5 with a hidden end (observations jump, no flag) and no next
    values: --ends-from-observations and --missing-bootstrap zero both change numbers."""
    s = episodes(rng, PLAN)
    n = len(s["r"])
    obs = rng.normal(size=(n + 1, 3)).astype(np.float32)
    nxt = obs[1:].copy()
    nxt[6] += 5.0  # row 7 does not continue from row 6: a hidden end
    path = root / "d4rl.h5"
    with h5py.File(path, "w") as f:
        f["observations"] = obs[:-1]
        f["next_observations"] = nxt
        f["rewards"] = s["r"]
        f["terminals"] = s["term"]
        f["timeouts"] = s["trunc"]
        f["values"] = s["v"]
    return path


def _lerobot_like(root: Path, rng: np.random.Generator) -> Path:
    """A frame table with next.done only and episode ids: --dones-mean and --ends-are."""
    s = episodes(rng, PLAN)
    path = root / "frames.parquet"
    pq.write_table(
        pa.table(
            {
                "episode_index": s["eid"],
                "next.reward": s["r"],
                "next.done": s["ended"],
                "value": s["v"],
                "next_value": s["nv"],
            }
        ),
        path,
    )
    return path


def _robomimic(root: Path, rng: np.random.Generator) -> Path:
    path = root / "robomimic.h5"
    with h5py.File(path, "w") as f:
        for i, steps in enumerate([5, 3, 4]):
            g = f.create_group(f"data/demo_{i}")
            g["rewards"] = rng.normal(size=steps).astype(np.float32)
            g["dones"] = (np.arange(steps) == steps - 1).astype(np.int64)
            g["vpred"] = rng.normal(size=steps + 1).astype(np.float32)
    return path


def _cleanrl(root: Path, rng: np.random.Generator) -> Path:
    return cleanrl_buffer(root / "cleanrl.h5", rng)


def _rlds(root: Path, rng: np.random.Generator) -> Path:
    rows = []
    for steps, terminal in ((3, True), (4, False), (2, False)):
        rows += [(t == 0, t == steps, t == steps and terminal) for t in range(steps + 1)]
    first, last, term = (np.array(c) for c in zip(*rows, strict=True))
    n = len(first)
    path = root / "rlds.parquet"
    pq.write_table(
        pa.table(
            {
                "observation": fixed_list(rng.normal(size=(n, 2))),
                "is_first": first,
                "is_last": last,
                "is_terminal": term,
                "reward": rng.normal(size=n).astype(np.float32),
                "discount": np.where(last, 0.0, 0.95).astype(np.float32),
                "value": rng.normal(size=n).astype(np.float32),
            }
        ),
        path,
    )
    return path


def _torchrl(root: Path, rng: np.random.Generator) -> Path:
    return torchrl_dump(root / "torchrl.h5", rng, observations=False)


# (builder, command, options that change numbers, what the record must say)
CASES: dict[str, tuple[Callable, str, dict, dict]] = {
    "d4rl-gaps-zero": (
        _d4rl,
        "gae",
        {"observation_gaps": "truncate", "missing_bootstrap": "zero"},
        {"observation_gaps": "truncate", "rule": "observation jumps"},
    ),
    "frames-ended-terminal": (
        _lerobot_like,
        "td-lambda",
        {"dones_mean": "ended", "ends_are": "terminal", "params": {"gamma": 0.97, "lam": 0.8}},
        {"ends_are": "terminal", "dones_mean": "ended", "rule": "are terminations"},
    ),
    "robomimic-vpred": (
        _robomimic,
        "gae",
        {"columns": {"values": "vpred"}, "dones_mean": "ended", "ends_are": "truncated"},
        {"ends_are": "truncated", "rule": "are truncations", "values": "vpred"},
    ),
    "robomimic-returns": (
        _robomimic,
        "returns",
        {"columns": {"values": "vpred"}, "dones_mean": "ended", "ends_are": "truncated"},
        {"values": "vpred"},
    ),
    "cleanrl-starts": (
        _cleanrl,
        "gae",
        {"layout": "time-major", "dones_mean": "starts", "ends_are": "terminal"},
        {"dones_mean": "starts", "rule": "first step of an episode"},
    ),
    "rlds-discount": (
        _rlds,
        "gae",
        {"is_last_row": "observation", "columns": {"discount": "discount"}},
        {"is_last_row": "observation", "rule": "final observation", "values": "value"},
    ),
    "torchrl-batch-major": (
        _torchrl,
        "vtrace",
        {"layout": "batch-major", "params": {"gamma": 0.9}},
        None,  # vtrace needs log-probabilities: see the next case
    ),
    "torchrl-returns": (
        _torchrl,
        "returns",
        {"layout": "batch-major", "params": {"gamma": 0.9}},
        {"layout": "batch-major", "values": None},
    ),
}
CASES = {k: v for k, v in CASES.items() if v[3] is not None}


def outputs_and_records(path: Path) -> tuple[dict[str, np.ndarray], dict[str, dict]]:
    """Every rltscan output of ``path`` (episode groups concatenated) and its record."""
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        entry = json.loads(table.schema.metadata[b"rltscan"])
        names = list(entry["outputs"])
        return (
            {n: table.column(n).to_numpy() for n in names},
            {n: entry["outputs"][n] for n in names},
        )
    arrays: dict[str, list[np.ndarray]] = {}
    records: dict[str, dict] = {}
    with h5py.File(path) as f:

        def visit(name: str, obj: object) -> None:
            if isinstance(obj, h5py.Dataset) and "rltscan_version" in obj.attrs:
                key = name.rsplit("/", 1)[-1]
                arrays.setdefault(key, []).append(obj[()])
                records[key] = {k: _attr(v) for k, v in obj.attrs.items()}

        f.visititems(visit)
    return {k: np.concatenate([a.reshape(-1) for a in v]) for k, v in arrays.items()}, records


def _attr(value: object) -> object:
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str) and value[:1] in "{[":
        return json.loads(value)
    return value.item() if isinstance(value, np.generic) else value


@pytest.mark.parametrize("case", list(CASES))
def test_recorded_everywhere_and_enough_to_recompute(case: str, tmp_path: Path) -> None:
    build, command, options, expect = CASES[case]
    (tmp_path / "src").mkdir()
    source = build(tmp_path / "src", np.random.default_rng(0))
    first = fresh(source, tmp_path / "first")
    report = api.run(command, str(first), device="cpu", **options)
    target = first / "data" / "main_data.hdf5" if first.is_dir() else first
    got, records = outputs_and_records(target)
    assert set(got) == {o.name for o in report.outputs}
    json_record = report.to_dict()["provenance"]
    for name, record in records.items():
        # the same record in the file and in the --json report
        for key in ("estimator", "command", "params", "source_columns", "layout", "reading",
                    "terminal_rule", "options", "layout_evidence"):  # fmt: skip
            assert record[key] == json_record[key], f"{case} {name} {key}"
        reading = record["reading"]
        for key in ("ends_are", "dones_mean", "observation_gaps", "is_last_row", "layout"):
            if key in expect:
                assert reading.get(key) == expect[key], f"{case}: reading {reading}"
        if "rule" in expect:
            assert expect["rule"] in record["terminal_rule"], record["terminal_rule"]
        if "values" in expect:
            assert record["source_columns"].get("values") == expect["values"], record
        assert record["params"].get("missing_bootstrap") in (None, "error", "zero")
    # the record alone recomputes every output, bit for bit, on a fresh copy
    record = next(iter(records.values()))
    again = fresh(source, tmp_path / "again")
    api.run(record["command"], str(again), device="cpu", **record["options"])
    redo, _ = outputs_and_records(again / "data" / "main_data.hdf5" if again.is_dir() else again)
    for name, array in got.items():
        assert np.array_equal(redo[name], array, equal_nan=True), f"{case}: {name}"
    # and so do the columns it names as read, with the reading in force, given explicitly
    said = fresh(source, tmp_path / "said")
    kept = {"layout", "dones_mean", "ends_are", "observation_gaps", "is_last_row"}
    reading = {k: v for k, v in record["reading"].items() if k in kept}
    if "ends_are" in record["reading"]["by"]:
        reading.pop("ends_are")  # a format's convention: not an option the user gave
    columns = {r: c for r, c in record["source_columns"].items() if option_of(r)}
    params = {
        k: v
        for k, v in record["params"].items()
        if k not in ("missing_bootstrap", *reading, "observation_gaps", "is_last_row")
        and not str(v).startswith("column ")
    }
    api.run(record["command"], str(said), device="cpu", columns=columns, params=params,
            missing_bootstrap=record["params"].get("missing_bootstrap"),
            ignore=record["options"]["ignore"], **reading)  # fmt: skip
    redo, _ = outputs_and_records(said / "data" / "main_data.hdf5" if said.is_dir() else said)
    for name, array in got.items():
        assert np.array_equal(redo[name], array, equal_nan=True), f"{case}: {name} (columns)"


def test_reading_choices_are_hdf5_attributes(tmp_path: Path) -> None:
    """--ends-are and --dones-mean as attributes of each output (the issue's HDF5 case)."""
    path = _robomimic(tmp_path, np.random.default_rng(2))
    api.run("gae", str(path), device="cpu", columns={"values": "vpred"}, dones_mean="ended",
            ends_are="terminal")  # fmt: skip
    with h5py.File(path) as f:
        attrs = f["data/demo_0/advantages"].attrs
        assert attrs["ends_are"] == "terminal" and attrs["dones_mean"] == "ended"
        assert json.loads(attrs["params"])["ends_are"] == "terminal"
        assert json.loads(attrs["source_columns"])["values"] == "vpred"
        assert "are terminations (--ends-are terminal)" in attrs["terminal_rule"]


def test_terminal_rule_says_what_ends_are_did(tmp_path: Path) -> None:
    """Issue 21 item 5: a run with --ends-are terminal no longer records "ends are
    truncations", and --ends-are / --dones-mean are in the record."""
    path = _lerobot_like(tmp_path, np.random.default_rng(1))
    report = api.run("gae", str(path), device="cpu", dones_mean="ended", ends_are="terminal")
    record = json.loads(pq.read_schema(path).metadata[b"rltscan"])["outputs"]["advantages"]
    assert "are terminations (--ends-are terminal)" in record["terminal_rule"]
    assert "truncations (--ends-are" not in record["terminal_rule"]
    assert record["options"]["ends_are"] == "terminal"
    assert record["options"]["dones_mean"] == "ended"
    assert record["params"]["ends_are"] == "terminal" and record["params"]["dones_mean"] == "ended"
    assert report.to_dict()["params"]["ends_are"] == "terminal"
    assert record["reading"]["ends_are"] == "terminal"
    assert report.provenance["terminal_rule"] == record["terminal_rule"]
