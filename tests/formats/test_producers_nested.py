"""TorchRL's nested step outcomes (issue 21 item 2), on a real collector rollout.

A TorchRL collector returns a TensorDict with batch dims ``[num_envs, T]`` (env-major):
what step t led to lives under ``"next"`` (``next/reward``, ``next/done``,
``next/terminated``, ``next/truncated``; ``next/state_value`` once the value module has
run on the next observation), while the root ``done``/``terminated``/``truncated``
describe s_t (all False after the collector's automatic resets).
``TensorDict.to_h5`` writes ``next`` as an HDF5 group; flattening the same rollout
(``td.flatten_keys(".")``) into a table gives ``next.reward`` & co. beside the root
columns. Both must read the outcomes, never the root flags, and give the numbers of
``torchrl.objectives.value.functional.generalized_advantage_estimate``; the ``[B, T]``
axes are never guessed (the refusal names ``--layout``).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from rltscan import api
from rltscan.errors import AmbiguousInputError
from tests.io_helpers import fresh
from tests.producers import torchrl_gae

GAMMA, LAM = 0.9, 0.8
B, T = 3, 50


@pytest.fixture(scope="module")
def rollout(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One collector batch ``[3, 50]`` of CartPole with a 15-step limit (terminations
    and truncations both), a linear critic run on s_t and on ("next", observation),
    and torchrl's own GAE of it; saved with ``to_h5`` and flattened to Parquet."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("tensordict")
    pytest.importorskip("torchrl")
    pytest.importorskip("gymnasium")
    import polars as pl
    from torchrl.collectors import Collector
    from torchrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv
    from torchrl.envs.utils import RandomPolicy
    from torchrl.modules import ValueOperator

    torch.manual_seed(0)
    env = SerialEnv(B, lambda: TransformedEnv(GymEnv("CartPole-v1"), StepCounter(max_steps=15)))
    env.set_seed(0)
    collector = Collector(env, RandomPolicy(env.action_spec), frames_per_batch=B * T,
                          total_frames=B * T)  # fmt: skip
    td = next(iter(collector))
    collector.shutdown()
    assert tuple(td.batch_size) == (B, T)
    critic = ValueOperator(torch.nn.Linear(4, 1), in_keys=["observation"])
    with torch.no_grad():
        critic(td)
        critic(td["next"])
    adv, target = torchrl_gae(td, GAMMA, LAM)
    root = tmp_path_factory.mktemp("torchrl")
    h5 = root / "rollout.h5"
    td.to_h5(str(h5))
    flat = td.flatten_keys(".")
    columns = {}
    for key, value in flat.items():
        arr = value.reshape(B * T, *value.shape[2:]).numpy()
        columns[key] = arr[:, 0] if arr.ndim == 2 and arr.shape[1] == 1 else arr
    parquet = root / "rollout.parquet"
    pl.DataFrame(columns).write_parquet(parquet)
    return {
        "h5": h5,
        "parquet": parquet,
        "advantages": adv.squeeze(-1),
        "value_targets": target.squeeze(-1),
        "terminated": int(td["next", "terminated"].sum()),
        "truncated": int(td["next", "truncated"].sum()),
        "root_done": int(td["done"].sum() + td["terminated"].sum() + td["truncated"].sum()),
    }


def gae(path: Path, **kw) -> api.RunReport:
    return api.run("gae", str(path), device="cpu", params={"gamma": GAMMA, "lam": LAM}, **kw)


def test_the_rollout_has_every_kind_of_end(rollout: dict) -> None:
    """The fixture itself: terminations and truncations under next/, root flags all
    False (so reading the root would cut nothing and the numbers would differ)."""
    assert rollout["terminated"] > 0 and rollout["truncated"] > 0
    assert rollout["root_done"] == 0
    with h5py.File(rollout["h5"]) as f:
        assert {"next/reward", "next/done", "next/terminated", "next/state_value"} <= set(
            k for k in _datasets(f)
        )
        assert f["next/reward"].shape == (B, T, 1) and "terminated" in f


def _datasets(f: h5py.File) -> list[str]:
    found: list[str] = []
    f.visititems(lambda k, v: found.append(k) if isinstance(v, h5py.Dataset) else None)
    return found


def test_h5_axes_are_never_guessed(rollout: dict, tmp_path: Path) -> None:
    """``[B, T, 1]`` with no layout attribute: refused, naming --layout (TorchRL is
    env-major, but the file does not say so)."""
    with pytest.raises(AmbiguousInputError, match="--layout batch-major"):
        gae(fresh(rollout["h5"], tmp_path))


@pytest.mark.parametrize("named", [False, True], ids=["found", "rewards-named"])
def test_h5_next_group_gives_torchrl_gae(rollout: dict, named: bool, tmp_path: Path) -> None:
    """The outcomes under next/ (found, or with only the rewards named, as a user who
    read the first refusal would): torchrl's numbers, the root flags noted and unread."""
    path = fresh(rollout["h5"], tmp_path)
    report = gae(path, layout="batch-major", columns={"rewards": "next/reward"} if named else None)
    assert report.columns["terminated"] == "next/terminated"
    assert report.columns["truncated"] == "next/truncated"
    assert report.columns["rewards"] == "next/reward"
    assert report.columns["next_values"] == "next/state_value"
    assert report.counts["terminated"] == rollout["terminated"]
    assert any('root "terminated" describes s_t' in n for n in report.notes)
    with h5py.File(path) as f:
        for name in ("advantages", "value_targets"):
            got = f[name][()].astype(np.float64).reshape(B, T)
            np.testing.assert_allclose(got, rollout[name], rtol=1e-5, atol=1e-5)


def test_the_root_flags_only_when_named(rollout: dict, tmp_path: Path) -> None:
    """Naming the root column reads it (the user's word), and then the numbers are not
    TorchRL's: the root flags describe s_t."""
    report = gae(
        fresh(rollout["h5"], tmp_path / "a"),
        layout="batch-major",
        columns={"terminated": "terminated", "truncated": "truncated", "dones": "done"},
    )
    assert report.columns["terminated"] == "terminated"
    assert report.counts["terminated"] == 0


def test_flattened_table_gives_the_same_numbers(rollout: dict, tmp_path: Path) -> None:
    """``next.`` columns resolve as the ``next/`` group does; the only decision left is
    what the env boundaries of the flattened ``[B, T]`` are (the end of each env's data:
    truncations), asked for once, by name."""
    path = fresh(rollout["parquet"], tmp_path)
    with pytest.raises(AmbiguousInputError) as err:
        gae(path)
    assert "--ends-are" in str(err.value) and '"collector.traj_ids" changes' in str(err.value)
    assert len(err.value.decisions) == 1
    report = gae(path, ends_are="truncated")
    h5_report = gae(fresh(rollout["h5"], tmp_path / "h5"), layout="batch-major")
    common = set(report.columns) & set(h5_report.columns)
    assert {k: report.columns[k].replace(".", "/") for k in common} == {
        k: h5_report.columns[k] for k in common
    }
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    for name in ("advantages", "value_targets"):
        got = table.column(name).to_numpy().astype(np.float64).reshape(B, T)
        np.testing.assert_allclose(got, rollout[name], rtol=1e-5, atol=1e-5)


def test_inspect_shows_roles_and_the_open_layout(rollout: dict) -> None:
    """While the layout is open, inspect still shows the roles it recognised and names
    the decision (not blank roles, not a bare error)."""
    info = api.inspect(str(rollout["h5"]))
    assert info["roles"]["terminated"] == "next/terminated"
    assert info["roles"]["rewards"] == "next/reward"
    assert [d["fix"] for d in info["decisions"]] == [
        "pass --layout time-major ([T, B]) or --layout batch-major ([B, T])"
    ]
    assert not any(e["ready"] for e in info["estimators"].values())
    ready = api.inspect(str(rollout["h5"]), layout="batch-major")
    assert ready["estimators"]["gae"]["ready"] and ready["decisions"] == []


def test_worked_example(tmp_path: Path) -> None:
    """docs/CONVENTIONS.md §1.8: the table's numbers, the root flags beside next/."""
    path = tmp_path / "rollout.h5"
    with h5py.File(path, "w") as f:
        f["next/reward"] = np.array([[1.0, 2.0, 0.5, 1.0]])[..., None]
        f["state_value"] = np.array([[0.5, 1.0, 0.2, 0.4]])[..., None]
        f["next/state_value"] = np.array([[1.0, 9.9, 0.4, 0.6]])[..., None]
        f["next/terminated"] = np.array([[0, 1, 0, 0]], bool)[..., None]
        f["next/truncated"] = np.array([[0, 0, 0, 1]], bool)[..., None]
        f["next/done"] = np.array([[0, 1, 0, 1]], bool)[..., None]
        for key in ("terminated", "truncated", "done"):
            f[key] = np.zeros((1, 4, 1), bool)
    gae(path, layout="batch-major")
    with h5py.File(path) as f:
        np.testing.assert_allclose(f["advantages"][()].reshape(-1), [2.12, 1.0, 1.4808, 1.14])


def test_cli_numbers_equal_torchrl(rollout: dict, tmp_path: Path) -> None:
    """The command line on the to_h5 file: exit 2 naming --layout, then torchrl's GAE."""
    from typer.testing import CliRunner

    from rltscan import cli

    path = fresh(rollout["h5"], tmp_path)
    args = ["gae", str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "--device", "cpu", "-q"]
    runner = CliRunner()
    refused = runner.invoke(cli.app, args)
    assert refused.exit_code == 2 and "--layout batch-major" in refused.stderr
    done = runner.invoke(cli.app, [*args, "--layout", "batch-major"])
    assert done.exit_code == 0, done.stderr
    with h5py.File(path) as f:
        got = f["advantages"][()].astype(np.float64).reshape(B, T)
    np.testing.assert_allclose(got, rollout["advantages"], rtol=1e-5, atol=1e-5)
