"""TorchRL storages in, TorchRL's own numbers out (issue 24): a real collector rollout
stored by ``TensorDict.memmap_``, by ``ReplayBuffer(LazyMemmapStorage).dumps`` (wrapped
circular buffers, flat and ``ndim=2``) and by ``torch.save``.

One module fixture collects two ``[3, 50]`` batches of CartPole (a 15-step limit, so
episodes both terminate and are truncated; a random policy) and runs a linear critic on
``observation`` and on ``("next", "observation")``. The reference is
``torchrl.objectives.value.functional.generalized_advantage_estimate`` on the same
tensors. Results are read back the way TorchRL users read them:
``TensorDict.load_memmap`` and ``ReplayBuffer.loads``.

The command-line tests run rltscan as a user would, with no column options (the
resolver knows TorchRL's keys: ``next/`` outcomes beat the root flags, which describe
s_t; ``collector/traj_ids`` is an episode id); the API tests name the columns, as a
user whose keys are spelled otherwise would.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import (
    AmbiguousInputError,
    DataError,
    InputFileError,
    OutputRefusedError,
    ParameterError,
)
from tests.io_helpers import KILL_AFTER_RENAMES, ROOT, rltscan_process
from tests.producers import torchrl_gae

torch = pytest.importorskip("torch")
tensordict = pytest.importorskip("tensordict")
pytest.importorskip("torchrl")
pytest.importorskip("gymnasium")

from tensordict import TensorDict  # noqa: E402 (after the skips)

GAMMA, LAM = 0.9, 0.8
B, T = 3, 50
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
# TorchRL's keys named as options (what rltscan finds by itself in a collector rollout).
NAMED = {
    "rewards": "next/reward",
    "terminated": "next/terminated",
    "truncated": "next/truncated",
    "dones": "next/done",
    "values": "state_value",
    "next_values": "next/state_value",
}


def gae_reference(td: TensorDict) -> tuple[np.ndarray, np.ndarray]:
    """torchrl's GAE of a ``[B, T]`` rollout: (advantage, value_target), ``[B, T, 1]``."""
    return torchrl_gae(td, GAMMA, LAM)


@pytest.fixture(scope="module")
def rollout() -> dict:
    """Two consecutive collector batches ``[3, 50]`` with ``state_value`` and
    ``("next", "state_value")`` from one linear critic."""
    from torchrl.collectors import Collector
    from torchrl.envs import GymEnv, SerialEnv, StepCounter, TransformedEnv
    from torchrl.envs.utils import RandomPolicy
    from torchrl.modules import ValueOperator

    torch.manual_seed(0)
    env = SerialEnv(B, lambda: TransformedEnv(GymEnv("CartPole-v1"), StepCounter(max_steps=15)))
    env.set_seed(0)
    collector = Collector(env, RandomPolicy(env.action_spec), frames_per_batch=B * T,
                          total_frames=2 * B * T)  # fmt: skip
    batches = [b.clone() for b in collector]
    collector.shutdown()
    critic = ValueOperator(torch.nn.Linear(4, 1), in_keys=["observation"])
    with torch.no_grad():
        for td in batches:
            critic(td)
            critic(td["next"])
    first = batches[0]
    assert tuple(first.batch_size) == (B, T)
    assert int(first["next", "terminated"].sum()) > 0 and int(first["next", "truncated"].sum()) > 0
    assert not first["done"].any()  # the root flags describe s_t: never read
    return {"batches": batches, "reference": [gae_reference(td) for td in batches]}


def run(path: Path, **kw) -> api.RunReport:
    return api.run("gae", str(path), device="cpu", params={"gamma": GAMMA, "lam": LAM}, **kw)


def cli_gae_report(path: Path) -> dict:
    """``rltscan gae PATH --json`` with the rollout's gamma and lam: its report (the run
    must succeed)."""
    done = rltscan_process(ENV, "gae", path, "--gamma", GAMMA, "--lam", LAM, "--json")
    assert done.returncode == 0, done.stderr.decode()
    return json.loads(done.stdout)


def leaves(td: TensorDict) -> dict[str, np.ndarray]:
    return {
        "/".join(k) if isinstance(k, tuple) else k: v.clone().numpy()
        for k, v in td.items(include_nested=True, leaves_only=True)
    }


def assert_unchanged(before: dict[str, np.ndarray], after: TensorDict) -> None:
    now = leaves(after)
    for key, value in before.items():
        np.testing.assert_array_equal(now[key], value, err_msg=key)


# --------------------------------------------------------------------------- memmap


def memmap_dir(rollout: dict, tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path / "rollout"
    rollout["batches"][0].clone().memmap_(path)
    return path, leaves(TensorDict.load_memmap(path))


def check_memmap(path: Path, rollout: dict, before: dict, prefix: str = "") -> None:
    td = TensorDict.load_memmap(path)
    adv, target = rollout["reference"][0]
    for name, want in ((f"{prefix}advantages", adv), (f"{prefix}value_targets", target)):
        got = td[name]
        assert (
            tuple(got.shape) == (B, T, 1) and got.dtype == torch.float32
        )  # like ("next", "reward")
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)
    assert_unchanged(before, td)


def test_memmap_rollout_gives_torchrl_gae_through_the_cli(rollout: dict, tmp_path: Path) -> None:
    """``rltscan gae DIR`` on ``td.memmap_(DIR)`` with no options: the advantages of
    torchrl's GAE, as new leaves that ``TensorDict.load_memmap`` sees."""
    path, before = memmap_dir(rollout, tmp_path)
    report = cli_gae_report(path)
    assert report["format"] == "torchrl/memmap" and report["layout"] == "batch-major"
    assert report["columns"]["terminated"] == "next/terminated"
    check_memmap(path, rollout, before)


def test_memmap_rollout_with_the_columns_named(rollout: dict, tmp_path: Path) -> None:
    """The same through the API with the columns named: the axes are proved by
    ``collector/traj_ids`` (no --layout), the leaves keep TorchRL's trailing dim."""
    path, before = memmap_dir(rollout, tmp_path)
    report = run(path, columns=NAMED)
    assert report.layout == "batch-major"
    assert any('"collector/traj_ids" changes along the second axis' in n for n in report.notes)
    assert report.counts["terminated"] == int(rollout["batches"][0]["next", "terminated"].sum())
    check_memmap(path, rollout, before)
    meta = json.loads((path / "meta.json").read_text())
    assert meta["advantages"]["rltscan"]["params"]["gamma"] == GAMMA  # provenance in the entry


def test_reading_needs_neither_tensordict_nor_torch(rollout: dict, tmp_path: Path) -> None:
    """The memmap layout is plain files: opening and reading a storage imports neither
    (tensordict is optional, and only rltscan/io/torchrl.py may import it)."""
    path, _ = memmap_dir(rollout, tmp_path)
    code = (
        "import sys; from rltscan.io import open_input; s = open_input(sys.argv[1]); "
        "x = s.read('next/reward'); print(x.shape, 'tensordict' in sys.modules, "
        "'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(path)], env=ENV, capture_output=True)
    assert done.stdout.decode().split() == ["(3,", "50,", "1)", "False", "False"], done.stderr
    importers = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "rltscan").rglob("*.py")
        if re.search(r"^\s*(from|import) tensordict\b", p.read_text(), re.M)
    ]
    assert importers == ["rltscan/io/torchrl.py"]


def test_axes_without_proof_are_refused_and_layout_decides(rollout: dict, tmp_path: Path) -> None:
    """Without ``collector/traj_ids`` a ``[3, 50]`` memmap does not say which axis is time
    (tensordict records no dim names): refused naming --layout; with it, TorchRL's numbers."""
    path = tmp_path / "no-ids"
    rollout["batches"][0].exclude("collector").clone().memmap_(path)
    before = leaves(TensorDict.load_memmap(path))
    with pytest.raises(AmbiguousInputError, match="--layout batch-major"):
        run(path, columns=NAMED)
    run(path, columns=NAMED, layout="batch-major")
    check_memmap(path, rollout, before)
    with pytest.raises(ParameterError, match="--layout flat needs one batch dimension"):
        run(path, columns=NAMED, layout="flat", overwrite=True)


def test_existing_keys_need_overwrite_and_foreign_keys_are_kept(
    rollout: dict, tmp_path: Path
) -> None:
    """A second run is refused without --overwrite; --overwrite replaces only rltscan's
    own leaves; a user's own "advantages" is never replaced; --prefix sits beside."""
    path, before = memmap_dir(rollout, tmp_path)
    run(path, columns=NAMED)
    with pytest.raises(OutputRefusedError, match='already has "advantages"'):
        run(path, columns=NAMED)
    run(path, columns=NAMED, overwrite=True)
    run(path, columns=NAMED, prefix="g_")
    check_memmap(path, rollout, before, prefix="g_")
    foreign = tmp_path / "foreign"
    td = rollout["batches"][0].clone()
    td["advantages"] = torch.zeros(B, T, 1)
    td.memmap_(foreign)
    with pytest.raises(OutputRefusedError, match="not written by rltscan"):
        run(foreign, columns=NAMED, overwrite=True)
    np.testing.assert_array_equal(TensorDict.load_memmap(foreign)["advantages"].numpy(), 0)
    nested = tmp_path / "nested"
    td = rollout["batches"][0].clone()
    td["advantages"] = TensorDict({"mine": torch.zeros(B, T)}, [B, T])
    td.memmap_(nested)
    with pytest.raises(ParameterError, match='"advantages" is a nested TensorDict'):
        run(nested, columns=NAMED, overwrite=True)


def test_a_storage_changed_during_the_run_is_not_written_into(
    rollout: dict, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A producer that writes into the storage while rltscan computes (here: touches
    ``next/reward`` as the outputs are staged) makes the commit stop (exit 3): nothing is
    renamed, no staging directory stays, the storage loads as it was."""
    from rltscan.io import torchrl as io_torchrl

    path, before = memmap_dir(rollout, tmp_path)
    stage_file = io_torchrl._write_file

    def meddle(target: Path, data: object) -> None:
        os.utime(path / "next" / "reward.memmap", ns=(1, 1))
        stage_file(target, data)

    monkeypatch.setattr(io_torchrl, "_write_file", meddle)
    with pytest.raises(InputFileError, match="changed while rltscan ran") as err:
        run(path)
    assert err.value.exit_code == 3
    assert not list(path.glob(".rltscan-*"))
    td = TensorDict.load_memmap(path)
    assert set(leaves(td)) == set(before)
    assert_unchanged(before, td)


def test_keys_are_found_by_tensordict_s_file_names(tmp_path: Path) -> None:
    """Keys with characters a file name cannot hold (a space, "%", "/" inside a key) are
    read from tensordict's encoded file names, and an output with such a prefix is
    written where tensordict looks for it."""
    path = tmp_path / "odd"
    td = TensorDict(
        {
            "my reward%": torch.tensor([1.0, 2.0, 3.0]),
            "next": {"done": torch.tensor([False, False, True])},
        },
        batch_size=[3],
    )
    td.memmap_(path)
    assert (path / "my%20reward%25.memmap").is_file()
    report = api.run(
        "returns",
        str(path),
        device="cpu",
        params={"gamma": 0.5},
        columns={"rewards": "my reward%", "dones": "next/done"},
        ends_are="terminal",
        prefix="g 0.5 ",
    )
    assert report.outputs[0].name == "g 0.5 returns"
    assert (path / "g%200.5%20returns.memmap").is_file()  # tensordict's own encoding
    back = TensorDict.load_memmap(path)
    np.testing.assert_allclose(back["g 0.5 returns"].numpy(), [2.75, 3.5, 3.0])


def test_a_meta_json_alone_does_not_make_a_directory_a_storage(tmp_path: Path) -> None:
    """Parquet shards beside a "meta.json" of their own stay a sharded dataset; a memmap
    directory whose meta.json is damaged is still named as one."""
    import pyarrow as pa

    from rltscan.io.shards import is_sharded

    shards = tmp_path / "shards"
    shards.mkdir()
    pq.write_table(pa.table({"rewards": [1.0, 2.0]}), shards / "part-0.parquet")
    (shards / "meta.json").write_text(json.dumps({"author": "me", "shape": [2]}))
    assert is_sharded(str(shards), None)
    damaged = tmp_path / "damaged"
    TensorDict({"reward": torch.ones(4)}, [4]).memmap_(damaged)
    (damaged / "meta.json").write_text("{")
    with pytest.raises(InputFileError, match=r"meta\.json is not readable JSON"):
        api.run("returns", str(damaged), device="cpu")


# --------------------------------------------------------------------------- replay buffers


def flat_buffer(rollout: dict, tmp_path: Path) -> Path:
    """Both batches flattened (the PPO tutorial's ``extend(td.reshape(-1))``) into 200
    slots: 300 writes, so the buffer wrapped and its oldest 100 rows were overwritten."""
    from torchrl.data import LazyMemmapStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyMemmapStorage(200))
    for td in rollout["batches"]:
        rb.extend(td.reshape(-1))
    path = tmp_path / "buffer"
    rb.dumps(path)
    return path


def flat_expected(rollout: dict) -> tuple[np.ndarray, np.ndarray]:
    """torchrl's GAE per batch, in storage order: slot s holds write s (s >= 100) or
    write 200 + s (the second pass)."""
    adv = np.concatenate([a.reshape(-1) for a, _ in rollout["reference"]])
    target = np.concatenate([t.reshape(-1) for _, t in rollout["reference"]])
    slots = np.arange(200)
    writes = np.where(slots < 100, slots + 200, slots)
    return adv[writes], target[writes]


def loaded_buffer(path: Path, capacity: int, ndim: int = 1) -> TensorDict:
    from torchrl.data import LazyMemmapStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyMemmapStorage(capacity, ndim=ndim))
    rb.loads(path)
    return rb.storage[:]


def check_flat_buffer(path: Path, rollout: dict, before: dict) -> None:
    td = loaded_buffer(path, 200)
    adv, target = flat_expected(rollout)
    for name, want in (("advantages", adv), ("value_targets", target)):
        got = td[name]
        assert tuple(got.shape) == (200, 1) and got.dtype == torch.float32
        np.testing.assert_allclose(got.numpy()[:, 0], want, rtol=1e-5, atol=1e-5)
    assert_unchanged(before, td)


def test_wrapped_replay_buffer_gives_torchrl_gae_through_the_cli(
    rollout: dict, tmp_path: Path
) -> None:
    """``rltscan gae DIR`` on a wrapped buffer's dumps: rows read in insertion order, env
    slices cut where the trajectory ids change, every advantage torchrl's."""
    path = flat_buffer(rollout, tmp_path)
    before = leaves(loaded_buffer(path, 200))
    report = cli_gae_report(path)
    assert report["format"] == "torchrl/replay-buffer" and report["layout"] == "flat"
    assert report["columns"]["episode_id"] == "collector/traj_ids"
    check_flat_buffer(path, rollout, before)


def test_wrapped_replay_buffer_with_the_columns_named(rollout: dict, tmp_path: Path) -> None:
    path = flat_buffer(rollout, tmp_path)
    before = leaves(loaded_buffer(path, 200))
    report = run(path, columns={**NAMED, "episode_id": "collector/traj_ids"})
    assert report.steps == 200 and report.layout == "flat"
    assert any("rows 100..199 then 0..99" in n for n in report.notes)
    assert any("episode ends that no flag explains are truncated" in n for n in report.notes)
    check_flat_buffer(path, rollout, before)


def test_time_major_buffer_wraps_along_time(rollout: dict, tmp_path: Path) -> None:
    """``LazyMemmapStorage(240, ndim=2)`` extended with both ``[3, 50]`` batches stores
    ``[80, 3]`` time-major (TorchRL extends along the time dim) and wraps after 80 steps:
    rows 20..79 then 0..19 are steps 20..99 of each env's stream. Proved time-major by
    the trajectory ids; equal to torchrl's GAE over those 80 steps."""
    from torchrl.data import LazyMemmapStorage, ReplayBuffer

    rb = ReplayBuffer(storage=LazyMemmapStorage(240, ndim=2))
    for td in rollout["batches"]:
        rb.extend(td)
    path = tmp_path / "tm-buffer"
    rb.dumps(path)
    before = leaves(loaded_buffer(path, 240, ndim=2))
    report = run(path, columns=NAMED)
    assert report.layout == "time-major"
    stream = torch.cat(rollout["batches"], dim=1)[:, 20:]
    adv, _ = gae_reference(stream)  # [3, 80, 1] over steps 20..99
    td = loaded_buffer(path, 240, ndim=2)
    got = td["advantages"].numpy()[..., 0]  # [80 rows, 3 envs] in storage order
    rows = np.arange(80)
    steps = np.where(rows < 20, rows + 80, rows) - 20
    np.testing.assert_allclose(got, adv[:, steps, 0].T, rtol=1e-5, atol=1e-5)
    assert_unchanged(before, td)


def test_other_outputs_carry_every_key(rollout: dict, tmp_path: Path) -> None:
    """``-o out.h5`` / ``-o out.parquet`` from a wrapped buffer: every key, in insertion
    order, the outputs beside them; the input untouched."""
    path = flat_buffer(rollout, tmp_path)
    columns = {**NAMED, "episode_id": "collector/traj_ids"}
    keys = set(leaves(loaded_buffer(path, 200)))
    adv, _ = flat_expected(rollout)
    order = np.concatenate([np.arange(100, 200), np.arange(100)])
    h5 = tmp_path / "out.h5"
    run(path, columns=columns, output=str(h5))
    with h5py.File(h5) as f:
        found: list[str] = []
        f.visititems(lambda k, v: found.append(k) if isinstance(v, h5py.Dataset) else None)
        assert set(found) == keys | {"advantages", "value_targets"}
        np.testing.assert_allclose(f["advantages"][()], adv[order], rtol=1e-5, atol=1e-5)
        assert f["advantages"].attrs["estimator"] == "gae"
    table = tmp_path / "out.parquet"
    run(path, columns=columns, output=str(table))
    got = pq.read_table(table)
    assert set(got.column_names) == keys | {"advantages", "value_targets"}
    np.testing.assert_allclose(got["advantages"].to_numpy(), adv[order], rtol=1e-5, atol=1e-5)
    assert "advantages" not in json.loads((path / "storage" / "meta.json").read_text())


def test_buffers_rltscan_cannot_order_are_refused(rollout: dict, tmp_path: Path) -> None:
    """A buffer ranked by TensorDictMaxValueWriter holds no trajectory; a leaf shorter
    than its shape is a damaged dump; both are one line each (exit 3)."""
    path = flat_buffer(rollout, tmp_path)
    ranked = tmp_path / "ranked"
    shutil.copytree(path, ranked)
    meta = ranked / "writer" / "metadata.json"
    meta.write_text(json.dumps({**json.loads(meta.read_text()), "rank_key": "td_error"}))
    with pytest.raises(InputFileError, match="TensorDictMaxValueWriter"):
        run(ranked, columns=NAMED)
    short = tmp_path / "short"
    shutil.copytree(path, short)
    with open(short / "storage" / "next" / "reward.memmap", "r+b") as f:
        f.truncate(10)
    with pytest.raises(InputFileError, match=r'"next/reward" .* needs 800 bytes but reward.memmap'):
        run(short, columns=NAMED)
    with pytest.raises(InputFileError, match="the storage of a replay buffer dump"):
        run(path / "storage")  # its rows are in write order only with the writer's state


@pytest.mark.parametrize(
    ("record", "text", "message"),
    [
        ("writer/metadata.json", "[1]", "holds a JSON list, not an object"),
        (
            "storage/storage_metadata.json",
            "{",
            "is not readable JSON (JSONDecodeError); the replay buffer dump is damaged",
        ),
        ("storage/meta.json", "[]", "holds a JSON list, not a TensorDict's metadata"),
    ],
)
def test_a_damaged_json_record_is_named_with_what_it_damages(
    rollout: dict, tmp_path: Path, record: str, text: str, message: str
) -> None:
    """A dump's JSON records (the writer's state, the storage's metadata, a level's
    meta.json) that cannot be read, or hold no object, are one line naming the file."""
    path = flat_buffer(rollout, tmp_path)
    (path / record).write_text(text)
    with pytest.raises(InputFileError, match=re.escape(f"{path / record} {message}")):
        run(path, columns=NAMED)


# --------------------------------------------------------------------------- torch.save


def test_torch_save_is_read_with_the_safe_loader(rollout: dict, tmp_path: Path) -> None:
    """``torch.save(td)``: loaded by the weights_only unpickler (TensorDict allowed by
    name); its dim names ("time") prove the axes; the file is rewritten with the keys."""
    path = tmp_path / "rollout.pt"
    td = rollout["batches"][0].clone()
    assert td.names[-1] == "time"
    torch.save(td.exclude("collector"), path)
    report = run(path)
    assert report.layout == "batch-major" and any('say which is "time"' in n for n in report.notes)
    back = torch.load(path, weights_only=False)  # the test trusts its own file
    adv, _ = rollout["reference"][0]
    np.testing.assert_allclose(back["advantages"].numpy(), adv, rtol=1e-5, atol=1e-5)


class _Payload:
    def __reduce__(self):
        return (os.system, (f"touch {_Payload.marker}",))

    marker = ""


def test_torch_save_never_runs_code_from_the_file(tmp_path: Path) -> None:
    """A pickle that names another function is refused before it runs, with the line
    saying how to convert the file."""
    marker = tmp_path / "ran"
    _Payload.marker = str(marker)
    path = tmp_path / "evil.pt"
    torch.save({"next": {"reward": torch.zeros(3, 1)}, "x": _Payload()}, path)
    with pytest.raises(InputFileError) as err:
        run(path)
    assert str(err.value).startswith(f"{path} is a torch.save file that the safe loader")
    assert 'TensorDict.memmap_("DIR")' in str(err.value)
    assert err.value.exit_code == 3
    assert not marker.exists()


# --------------------------------------------------------------------------- crash safety

N_KILL = 3_000_000
NAMED_OPTIONS = ["--rewards", "next/reward", "--terminals", "next/terminated", "--timeouts",
                 "next/truncated", "--dones", "next/done", "--values", "state_value",
                 "--next-values", "next/state_value"]  # fmt: skip
GAE = [sys.executable, "-m", "rltscan", "gae", "--device", "cpu", "-q", *NAMED_OPTIONS]


def synthetic(path: Path, n: int) -> dict[str, np.ndarray]:
    """A flat ``[n]`` rollout as ``td.memmap_`` writes it; returns its leaves."""
    rng = np.random.default_rng(0)
    term = rng.random(n) < 0.01
    trunc = ~term & (rng.random(n) < 0.005)

    def normal() -> torch.Tensor:
        return torch.from_numpy(rng.normal(size=(n, 1)).astype(np.float32))

    TensorDict(
        {
            "state_value": normal(),
            "next": {
                "reward": normal(),
                "terminated": torch.from_numpy(term[:, None]),
                "truncated": torch.from_numpy(trunc[:, None]),
                "done": torch.from_numpy((term | trunc)[:, None]),
                "state_value": normal(),
            },
        },
        batch_size=[n],
    ).memmap_(path)
    return leaves(TensorDict.load_memmap(path))


def clean_outputs(master: Path, tmp_path: Path, before: dict) -> tuple[dict, dict]:
    """The outputs of an uninterrupted run, and its stage times."""
    clean = tmp_path / "clean"
    shutil.copytree(master, clean)
    done = subprocess.run([*GAE, str(clean), "--json"], env=ENV, capture_output=True)
    assert done.returncode == 0, done.stderr.decode()
    stages = {s["name"]: s["seconds"] or 0.0 for s in json.loads(done.stdout)["stages"]}
    outputs = {k: v for k, v in leaves(TensorDict.load_memmap(clean)).items() if k not in before}
    assert set(outputs) == {"advantages", "value_targets"}
    return outputs, stages


def check_loadable(path: Path, before: dict, outputs: dict) -> set[str]:
    """Loads; every original leaf unchanged; the new keys all absent or all complete."""
    td = TensorDict.load_memmap(path)
    assert_unchanged(before, td)
    now = {k: v for k, v in leaves(td).items() if k not in before}
    assert set(now) in (set(), set(outputs)), f"half-written keys: {sorted(now)}"
    for key, value in now.items():
        np.testing.assert_array_equal(value, outputs[key])
    return set(now)


@pytest.mark.slow
def test_sigkill_during_write_back_leaves_the_storage_loadable(tmp_path: Path) -> None:
    """SIGKILL a real ``python -m rltscan gae`` at random times once its staging
    directory appears: the storage loads, every original leaf is unchanged, a new key
    is absent or complete; the next run (which first completes or discards the
    interrupted commit) gives the clean result and leaves no staging directory."""
    master = tmp_path / "master"
    before = synthetic(master, N_KILL)
    outputs, stages = clean_outputs(master, tmp_path, before)
    killed, chance = 0, random.Random(7)
    for trial in range(3):
        path = tmp_path / f"trial{trial}"
        shutil.copytree(master, path)
        proc = subprocess.Popen([*GAE, str(path)], env=ENV, stderr=subprocess.DEVNULL)
        while proc.poll() is None and not list(path.glob(".rltscan-stage-*")):
            time.sleep(0.0005)
        time.sleep(chance.uniform(0.0, 2.0 * stages["write"]))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        code = proc.wait()
        assert code in (0, -signal.SIGKILL)
        killed += code == -signal.SIGKILL
        check_loadable(path, before, outputs)
        again = subprocess.run([*GAE, "--overwrite", str(path)], env=ENV, capture_output=True)
        assert again.returncode == 0, again.stderr.decode()
        assert not list(path.glob(".rltscan-*")), "a staging directory was left behind"
        assert check_loadable(path, before, outputs) == set(outputs)
    assert killed, "no trial was killed mid-run; the timing window is off"


@pytest.mark.slow
@pytest.mark.parametrize("renames", [1, 2, 3], ids=["one-leaf", "both-leaves", "metadata"])
def test_a_kill_among_the_renames_is_completed_by_the_next_run(
    renames: int, tmp_path: Path
) -> None:
    """Killed after 1, 2 or 3 of its renames (leaf, leaf, meta.json): meta.json is the
    last, so the storage loads without the new keys until it lands; the next rltscan run
    on the directory rolls the journal forward (the keys appear, complete) and then
    refuses to overwrite them without --overwrite."""
    path = tmp_path / "rollout"
    before = synthetic(path, 1000)
    killed = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_RENAMES, *GAE[3:], str(path)],
        env={**ENV, "KILL_AFTER": str(renames)},
        capture_output=True,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr.decode()
    td = TensorDict.load_memmap(path)
    assert_unchanged(before, td)
    assert ("advantages" in set(td.keys())) == (renames == 3)
    again = subprocess.run([*GAE, str(path)], env=ENV, capture_output=True)
    assert again.returncode == 5, again.stderr.decode()  # the commit was completed first
    assert 'already has "advantages"' in again.stderr.decode()
    assert not list(path.glob(".rltscan-*"))
    td = TensorDict.load_memmap(path)
    assert_unchanged(before, td)
    assert {"advantages", "value_targets"} <= set(td.keys())


def test_a_reward_of_two_entries_a_step_names_no_list_recipe(tmp_path: Path) -> None:
    """A storage is arrays, not a table of list cells: ``next/reward`` [N, 2] (two reward
    terms a step) was refused as "one episode a row?" with the recipe for list columns
    (explode them, keep the row number as --episode-id), which a storage has none of."""
    n = 6
    TensorDict(
        {
            "state_value": torch.zeros(n, 1),
            "next": {
                "reward": torch.ones(n, 2),
                "done": torch.zeros(n, 1, dtype=torch.bool),
                "terminated": torch.zeros(n, 1, dtype=torch.bool),
                "state_value": torch.zeros(n, 1),
            },
        },
        [n],
    ).memmap_(tmp_path / "td")
    with pytest.raises(DataError) as err:
        run(tmp_path / "td", dry_run=True)
    message = f"{err.value} {err.value.fix}"
    assert "(6, 2)" in message and "--rewards KEY" in message
    assert "explode" not in message and "--episode-id" not in message
