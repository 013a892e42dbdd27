"""Replay buffers saved in slot order: refused unless their rows are in time order.

tianshou: ``ReplayBuffer.save_hdf5`` writes the buffer's ``__dict__``
(``tianshou.data.utils.converter.to_hdf5``): ints and floats as root attributes
(``maxsize``, ``_size``, ``_insertion_idx``; ``buffer_num`` for a
``VectorReplayBuffer``), arrays as datasets, and the transitions as the group ``_meta``
(``obs``, ``act``, ``rew``, ``terminated``, ``truncated``, ``done``, ``obs_next``, each
``maxsize`` rows). The rows are buffer slots: rows past ``_size`` were never written, a
full buffer wraps at ``_insertion_idx`` (its oldest row), and a ``VectorReplayBuffer``
keeps each env's buffer in its own slice. Read as one table (with the columns named, as
the missing rewards message asks), the steps of other times and envs run into each
other and rltscan would exit 0 with numbers no step has; so such a file is refused with
one line (exit 3), under ``--group _meta`` too. tianshou is not a test dependency: the
files are written here the way ``to_hdf5`` writes them (checked against tianshou 2.0.1).

Stable-Baselines3: a ``ReplayBuffer``'s arrays saved with its state (``vars(rb)``:
``rewards``, ``dones``, ``timeouts`` of shape ``[buffer_size, n_envs]``, and ``pos``,
``full``, ``buffer_size``) are slots written round-robin at ``pos``; only a full buffer
whose cursor is back at row 0 is in time order (checked against stable-baselines3 2.9).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.testing import CliRunner

from rltscan import cli
from tests import oracles
from tests.io_helpers import digest

runner = CliRunner()
NAMED = [
    "--rewards",
    "_meta/rew",
    "--terminals",
    "_meta/terminated",
    "--timeouts",
    "_meta/truncated",
]


def _dataset(group: h5py.Group, key: str, data: np.ndarray) -> None:
    group.create_dataset(key, data=data)
    group[key].attrs["__data_type__"] = "ndarray"


def save_hdf5(path: Path, capacity: int, steps: int, envs: int = 1) -> None:
    """A tianshou buffer of ``capacity`` slots (``envs`` buffers of ``capacity // envs``
    for a VectorReplayBuffer) after ``steps`` steps of each env, as save_hdf5 leaves it."""
    size = capacity // envs
    rew = np.zeros(capacity)
    term = np.zeros(capacity, bool)
    trunc = np.zeros(capacity, bool)
    for env in range(envs):
        for t in range(steps):
            slot = env * size + t % size  # each env's buffer wraps in its own slice
            rew[slot] = 100 * env + t + 1
            term[slot] = t % 5 == 3
            trunc[slot] = t % 5 == 4
    with h5py.File(path, "w") as f:
        attrs = {"maxsize": capacity, "stack_num": 1, "_ep_len": 0, "_ep_return": 0.0}
        if envs == 1:
            attrs |= {"_size": min(steps, size), "_insertion_idx": steps % size}
            _dataset(f, "last_index", np.array([(steps - 1) % size]))
        else:  # the manager's own cursor stays 0; each env buffer keeps its own
            attrs |= {"_size": 0, "_insertion_idx": 0, "buffer_num": envs}
            _dataset(f, "_offset", np.arange(envs) * size)
            _dataset(f, "_lengths", np.full(envs, min(steps, size)))
            _dataset(f, "last_index", np.arange(envs) * size + (steps - 1) % size)
        f.attrs.update(attrs)
        _dataset(f, "_indices", np.arange(capacity))
        meta = f.create_group("_meta")
        meta.attrs["__data_type__"] = "Batch"
        _dataset(meta, "obs", np.arange(capacity, dtype=np.float32)[:, None])
        _dataset(meta, "act", np.zeros(capacity, np.int64))
        _dataset(meta, "rew", rew)
        _dataset(meta, "terminated", term)
        _dataset(meta, "truncated", trunc)
        _dataset(meta, "done", term | trunc)
        _dataset(meta, "obs_next", np.arange(1, capacity + 1, dtype=np.float32)[:, None])
        meta.create_group("info")
        f.create_group("options").attrs.update({"stack_num": 1, "ignore_obs_next": False})


BUFFERS = {
    "partly-filled": ({"capacity": 20, "steps": 11}, "11 of 20 rows written"),
    "wrapped": ({"capacity": 8, "steps": 11}, "wrapped (its oldest row is row 3)"),
    "vector": ({"capacity": 16, "steps": 5, "envs": 2}, "VectorReplayBuffer (2 envs'"),
}


@pytest.mark.parametrize("options", [NAMED, ["--group", "_meta"]], ids=["named", "group"])
@pytest.mark.parametrize("buffer", list(BUFFERS))
def test_a_buffer_in_slot_order_is_refused(buffer: str, options: list[str], tmp_path: Path) -> None:
    shape, said = BUFFERS[buffer]
    path = tmp_path / "buffer.h5"
    save_hdf5(path, **shape)
    before = digest(path)
    if options[0] == "--group":
        options = [*options, "--rewards", "rew", "--terminals", "terminated"]
        options += ["--timeouts", "truncated"]
    result = runner.invoke(
        cli.app, ["returns", str(path), "--gamma", "0.9", "--device", "cpu", *options]
    )
    assert result.exit_code == 3, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), lines
    assert said in lines[0] and "load_hdf5" in lines[0], lines[0]
    assert digest(path) == before


def test_inspect_says_the_same(tmp_path: Path) -> None:
    path = tmp_path / "buffer.h5"
    save_hdf5(path, capacity=8, steps=11)
    result = runner.invoke(cli.app, ["inspect", str(path)])
    assert result.exit_code == 3, result.output
    assert "tianshou ReplayBuffer, wrapped" in result.stderr


def sb3_arrays(path: Path, writes: int, buffer_size: int = 3, envs: int = 2) -> dict:
    """What ``vars(rb)`` of a Stable-Baselines3 ReplayBuffer holds after ``writes``
    ``rb.add`` calls (env 0 terminates at its 4th step), saved with h5py; returns the
    steps of each env in time order (the last ``buffer_size`` writes)."""
    rewards = np.zeros((buffer_size, envs), np.float32)
    dones = np.zeros((buffer_size, envs), np.float32)
    for t in range(writes):
        rewards[t % buffer_size] = [t + 1.0, t + 11.0]
        dones[t % buffer_size] = [t == 3, 0.0]
    with h5py.File(path, "w") as f:
        f["buffer_size"], f["n_envs"] = buffer_size, envs
        f["pos"], f["full"] = writes % buffer_size, writes >= buffer_size
        f["rewards"], f["dones"] = rewards, dones
        f["timeouts"] = np.zeros((buffer_size, envs), np.float32)
    return {"rewards": rewards, "dones": dones}


SB3_OPTIONS = ["--layout", "time-major", "--dones-mean", "ended"]


@pytest.mark.parametrize(
    ("writes", "said"),
    [
        (8, "its oldest row is row 2; save each array a in time order (np.roll(a, -2, axis=0))"),
        (2, "rows 2 on were never written; save each array a in time order (a[:2])"),
    ],
    ids=["wrapped", "partly-filled"],
)
def test_a_stable_baselines3_buffer_in_slot_order_is_refused(
    writes: int, said: str, tmp_path: Path
) -> None:
    path = tmp_path / "rb.h5"
    sb3_arrays(path, writes)
    before = digest(path)
    result = runner.invoke(
        cli.app, ["returns", str(path), "--gamma", "0.9", "--device", "cpu", *SB3_OPTIONS]
    )
    assert result.exit_code == 3, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and said in lines[0], lines
    assert digest(path) == before


def test_a_full_stable_baselines3_buffer_at_row_0_is_in_time_order(tmp_path: Path) -> None:
    path = tmp_path / "rb.h5"
    stored = sb3_arrays(path, 6)
    result = runner.invoke(
        cli.app, ["returns", str(path), "--gamma", "0.9", "--device", "cpu", "-q", *SB3_OPTIONS]
    )
    assert result.exit_code == 0, result.output
    with h5py.File(path) as f:
        got = f["returns"][:]
    for env in range(2):
        r, done = stored["rewards"][:, env], stored["dones"][:, env] != 0
        want = oracles.discounted_returns(
            r.tolist(), [0.0] * len(r), done.tolist(), [False] * len(r), gamma=0.9
        )
        np.testing.assert_allclose(got[:, env], want, rtol=1e-6)


def test_a_full_tianshou_buffer_at_row_0_is_in_time_order(tmp_path: Path) -> None:
    """A one-env buffer written exactly ``maxsize`` times (cursor back at 0) holds its
    steps in time order, like an SB3 buffer full at ``pos`` 0; it was refused as
    "10 of 10 rows written: its rows are buffer slots, not steps in time order"."""
    path = tmp_path / "buffer.h5"
    save_hdf5(path, capacity=10, steps=10)
    options = ["--group", "_meta", "--rewards", "rew", "--terminals", "terminated"]
    options += ["--timeouts", "truncated", "-q"]
    result = runner.invoke(
        cli.app, ["returns", str(path), "--gamma", "0.9", "--device", "cpu", *options]
    )
    assert result.exit_code == 0, result.output
    with h5py.File(path) as f:
        got = f["_meta/returns"][:]
        r, term = f["_meta/rew"][:], f["_meta/terminated"][:]
        trunc = f["_meta/truncated"][:]
    want = oracles.discounted_returns(
        r.tolist(), [0.0] * len(r), term.tolist(), trunc.tolist(), gamma=0.9
    )
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_full_stable_baselines3_rollout_buffer_is_in_time_order(tmp_path: Path) -> None:
    """An SB3 ``RolloutBuffer`` saved with its state is full with ``pos`` at
    ``buffer_size`` (it never wraps: ``reset()`` starts the next rollout). It was refused
    as a ReplayBuffer "whose oldest row is row 16", with a no-op ``np.roll`` as the fix;
    read, it gives the producer's numbers."""
    from tests import producers
    from tests.formats.test_real_layouts import check_rule

    produced = producers.sb3(tmp_path, np.random.default_rng(0))
    with h5py.File(produced.path, "a") as f:
        steps, envs = f["rewards"].shape
        f["pos"], f["full"], f["buffer_size"], f["n_envs"] = steps, True, steps, envs
    args = ["gae", str(produced.path), "--gamma", "0.9", "--lam", "0.8"]
    result = runner.invoke(cli.app, [*args, "--device", "cpu", "-q", *produced.fix])
    assert result.exit_code == 0, result.stderr
    check_rule(produced, "gae", produced.path, "", 0, "", fixed=True)
