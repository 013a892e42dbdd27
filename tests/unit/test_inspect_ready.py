"""``inspect`` "ready" means the run goes (issue 21 item 4): a property test.

For layouts users bring (flat D4RL HDF5, gymnasium Parquet with ids, a CleanRL
``[T, B]`` buffer, a TorchRL ``[B, T, 1]`` dump with its ``next/`` group, robomimic
``data/demo_k`` groups with a value dataset not named ``values``, a Minari dataset, an
RLDS table) x every estimator x the reading options drawn at random (column names,
``dones_mean``, ``ends_are``, ``missing_bootstrap``, ``layout``, ``is_last_row``), the
same options given to ``rltscan.inspect`` and to ``rltscan.run``:

    inspect(...)["estimators"][cmd]["ready"]
        == run(cmd, ..., dry_run=True) succeeds
        == run(cmd, ...) succeeds (and writes its outputs)

Anything that is not an :class:`~rltscan.errors.RltscanError` fails the test (a bug).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rltscan import api
from rltscan.errors import RltscanError
from rltscan.estimators import DECLARATIONS
from tests.io_helpers import fresh
from tests.producers import cleanrl_buffer, episodes, torchrl_dump

PLAN = [(4, "term"), (3, "trunc"), (5, "term"), (3, "cut")]


def _flat_d4rl(root: Path, rng: np.random.Generator) -> tuple[Path, dict]:
    s = episodes(rng, PLAN)
    path = root / "d4rl.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = s["r"]
        f["terminals"] = s["term"]
        f["timeouts"] = s["trunc"]
        f["values"] = s["v"]
    return path, {"values": ["values"], "next_values": []}


def _gym_parquet(root: Path, rng: np.random.Generator) -> tuple[Path, dict]:
    s = episodes(rng, PLAN)
    path = root / "gym.parquet"
    pq.write_table(
        pa.table(
            {
                "episode_id": s["eid"],
                "reward": s["r"],
                "done": s["term"],
                "truncated": s["trunc"],
                "value": s["v"],
                "next_value": s["nv"],
            }
        ),
        path,
    )
    return path, {"values": ["value"], "next_values": ["next_value"], "terminated": ["done"]}


def _cleanrl(root: Path, rng: np.random.Generator) -> tuple[Path, dict]:
    path = cleanrl_buffer(root / "cleanrl.h5", rng)
    return path, {"values": ["values"], "last_values": ["next_value"], "layout": ["time-major"]}


def _torchrl(root: Path, rng: np.random.Generator) -> tuple[Path, dict]:
    path = torchrl_dump(root / "torchrl.h5", rng, observations=True)
    return path, {"values": ["state_value"], "layout": ["batch-major"]}


def _robomimic(root: Path, rng: np.random.Generator, plus_one: bool) -> tuple[Path, dict]:
    path = root / f"robomimic{int(plus_one)}.h5"
    with h5py.File(path, "w") as f:
        data = f.create_group("data")
        for i, steps in enumerate([5, 3, 4]):
            g = data.create_group(f"demo_{i}")
            g["actions"] = rng.normal(size=(steps, 2)).astype(np.float32)
            g["rewards"] = rng.normal(size=steps).astype(np.float32)
            dones = np.zeros(steps, np.int64)
            dones[-1] = 1
            g["dones"] = dones
            g["obs/state"] = rng.normal(size=(steps, 3)).astype(np.float32)
            g["vpred"] = rng.normal(size=steps + int(plus_one)).astype(np.float32)
    return path, {"values": ["vpred"]}


def _minari(root: Path, rng: np.random.Generator) -> tuple[Path, dict]:
    path = root / "minari"
    (path / "data").mkdir(parents=True)
    with h5py.File(path / "data" / "main_data.hdf5", "w") as f:
        for i, steps in enumerate([4, 3, 5]):
            g = f.create_group(f"episode_{i}")
            g["observations"] = rng.normal(size=(steps + 1, 2)).astype(np.float32)
            g["rewards"] = rng.normal(size=steps)
            g["terminations"] = np.arange(steps) == steps - 1 if i == 0 else np.zeros(steps, bool)
            g["truncations"] = np.arange(steps) == steps - 1 if i == 1 else np.zeros(steps, bool)
            g["values"] = rng.normal(size=steps + 1).astype(np.float32)
    meta = {"total_episodes": 3, "total_steps": 12, "data_format": "hdf5"}
    (path / "data" / "metadata.json").write_text(json.dumps(meta))
    return path, {"values": ["values"]}


def _rlds(root: Path, rng: np.random.Generator) -> tuple[Path, dict]:
    rows = []
    for steps, terminal in ((3, True), (4, False), (2, False)):
        for t in range(steps + 1):
            last = t == steps
            rows.append((t == 0, last, last and terminal))
    first, last, term = (np.array(c) for c in zip(*rows, strict=True))
    n = len(first)
    path = root / "rlds.parquet"
    pq.write_table(
        pa.table(
            {
                "is_first": first,
                "is_last": last,
                "is_terminal": term,
                "reward": rng.normal(size=n).astype(np.float32),
                "value": rng.normal(size=n).astype(np.float32),
            }
        ),
        path,
    )
    return path, {"values": ["value"], "is_last_row": ["observation", "transition"]}


LAYOUTS: dict[str, Callable[[Path, np.random.Generator], tuple[Path, dict]]] = {
    "d4rl": _flat_d4rl,
    "gym-parquet": _gym_parquet,
    "cleanrl-[T,B]": _cleanrl,
    "torchrl-[B,T,1]": _torchrl,
    "robomimic-T": lambda root, rng: _robomimic(root, rng, False),
    "robomimic-T+1": lambda root, rng: _robomimic(root, rng, True),
    "minari": _minari,
    "rlds": _rlds,
}


@st.composite
def reading(draw: st.DrawFn, choices: dict) -> dict:
    """Reading options: None or a plausible value for each (a column of the file, a
    word), so both readiness and refusals are reached."""
    kw: dict = {}
    columns = {}
    for role in ("values", "next_values", "terminated", "last_values"):
        names = choices.get(role)
        if names and draw(st.booleans()):
            columns[role] = draw(st.sampled_from(names))
    if columns:
        kw["columns"] = columns
    for key, words in (
        ("dones_mean", ["ended", "starts"]),
        ("ends_are", ["terminal", "truncated"]),
        ("missing_bootstrap", ["error", "zero"]),
        ("layout", choices.get("layout", [])),
        ("is_last_row", choices.get("is_last_row", [])),
    ):
        if words and draw(st.booleans()):
            kw[key] = draw(st.sampled_from(words))
    return kw


def goes(command: str, path: Path, kw: dict, *, dry_run: bool) -> tuple[bool, str]:
    try:
        report = api.run(command, str(path), device="cpu", dry_run=dry_run, **kw)
    except RltscanError as err:
        return False, str(err)
    assert report.written != dry_run
    return True, ""


@pytest.mark.parametrize("layout", list(LAYOUTS))
@settings(
    max_examples=5,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_ready_means_the_run_goes(layout: str, data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        path, choices = LAYOUTS[layout](root, np.random.default_rng(0))
        kw = data.draw(reading(choices))
        try:
            info = api.inspect(str(path), **kw)
        except RltscanError as err:  # the file itself refused: so must every run be
            for command in DECLARATIONS:
                ok, _ = goes(command, fresh(path, root / f"d-{command}"), kw, dry_run=True)
                assert not ok, f"{layout} {kw}: inspect refused ({err}) but {command} plans"
            return
        for command in DECLARATIONS:
            ready = info["estimators"][command]["ready"]
            dry, why_dry = goes(command, fresh(path, root / f"d-{command}"), kw, dry_run=True)
            real, why_real = goes(command, fresh(path, root / f"r-{command}"), kw, dry_run=False)
            state = info["estimators"][command]
            assert ready == dry == real, (
                f"{layout} {command} {kw}: inspect {state}, dry run "
                f"{'goes' if dry else why_dry}, run {'goes' if real else why_real}"
            )
            if not ready:
                assert state["needs"], f"{layout} {command} {kw}: not ready, needs nothing"


@pytest.mark.parametrize("layout", ["robomimic-T", "robomimic-T+1"])
def test_episode_groups_take_every_value_option(layout: str, tmp_path: Path) -> None:
    """robomimic groups whose value dataset is "vpred": --values vpred works on every
    estimator that reads values (never "not used by this command here"), td-lambda
    names the file and the options when V is missing, and inspect and the run agree."""
    path, _ = LAYOUTS[layout](tmp_path, np.random.default_rng(1))
    kw = {"dones_mean": "ended", "ends_are": "truncated", "missing_bootstrap": "zero"}
    for command in ("gae", "td-lambda", "vtrace"):
        run_kw = {**kw, "columns": {"values": "vpred"}}
        ok, why = goes(command, fresh(path, tmp_path / command), run_kw, dry_run=False)
        if command == "vtrace":
            assert not ok and "--logp-target" in why  # it needs log-probabilities too
            continue
        assert ok, f"{command}: {why}"
        report = api.run(command, str(fresh(path, tmp_path / f"{command}-r")), device="cpu",
                         **run_kw)  # fmt: skip
        assert report.columns["values"] == "vpred"
        assert report.provenance["source_columns"]["values"] == "vpred"
        info = api.inspect(str(path), **run_kw)
        assert info["estimators"][command]["ready"]
        assert "values" in (c["role"] or "" for c in info["columns"] if c["name"] == "vpred")
    bare = fresh(path, tmp_path / "bare")
    ok, why = goes("td-lambda", bare, kw, dry_run=False)
    assert not ok and why.startswith(f'{bare}:/data has no column "values" or "next_values"')
    assert "--values KEY or --next-values KEY" in why
