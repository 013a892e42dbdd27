"""Trajectory files written the way real producers write them, with what they MEAN.

Each builder writes one small file (or Minari directory) with the producer's own
names, dtypes, shapes and alignment (docs/CONVENTIONS.md §7, each producer's documentation),
and returns a
:class:`Produced`: the path, how to read rltscan's outputs back, the producer's
meaning per step (``terminated``, ``truncated`` and the true ``V(s_{t+1})``) and the
command-line flags that state that meaning (the fix a user would pass when
rltscan asks).

The meaning follows docs/CONVENTIONS.md §1: flags describe the END of step ``t``;
``terminated`` = no bootstrap; ``truncated`` = bootstrap from ``V(s_{t+1})``; both
set = terminated. The end of the data without a flag is a truncation (D3), which
the oracles in ``tests/oracles.py`` already treat as a cut.

Every file carries garbage in the slots the meaning never reads (``next_value`` at
a terminal step, ``values[t+1]`` after an episode end, CleanRL's ``next_value`` when
the last step terminated), so a wrong reading changes the numbers.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

GARBAGE = 50.0  # V "after" a terminal state: never read by a correct reading


@dataclass
class Meaning:
    """What the data means, in the shape rltscan's outputs take in the file.

    ``time_axis`` is the axis of time (0 for flat files and ``[T, B]`` buffers, 1 for
    ``[B, T]``); every other axis indexes independent sequences. ``next_values`` is
    the true V(s_{t+1}) of every step (garbage where ``terminated``).
    """

    rewards: np.ndarray
    values: np.ndarray
    next_values: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    time_axis: int = 0


@dataclass
class Produced:
    name: str
    path: Path
    kind: str  # how outputs are read back: "h5", "parquet" or "minari"
    meaning: Meaning
    fix: list[str]  # CLI flags that state the producer's meaning
    note: str = ""
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- small hand-made files


def cleanrl_buffer(path: Path, rng: np.random.Generator) -> Path:
    """A CleanRL-style ``[T, B]`` buffer (8 x 3): ``dones`` with two ends, ``next_value``
    and ``next_done`` per env (the ``inspect``/provenance tests' random layouts)."""
    t, b = 8, 3
    with h5py.File(path, "w") as f:
        f["rewards"] = rng.normal(size=(t, b)).astype(np.float32)
        f["values"] = rng.normal(size=(t, b)).astype(np.float32)
        dones = np.zeros((t, b), np.float32)
        dones[3, 0] = dones[5, 2] = 1
        f["dones"] = dones
        f["next_value"] = rng.normal(size=b).astype(np.float32)
        f["next_done"] = np.zeros(b, np.float32)
    return path


def torchrl_dump(path: Path, rng: np.random.Generator, *, observations: bool) -> Path:
    """``TensorDict.to_h5`` of a ``[B, T]`` collector batch (2 x 9), by hand (names,
    shapes, the ``next/`` group, a trailing dim 1); with ``observations``, the
    ``observation`` and ``next/observation`` leaves too."""
    b, t = 2, 9
    term = np.zeros((b, t, 1), bool)
    trunc = np.zeros((b, t, 1), bool)
    term[0, 3] = trunc[1, 5] = True
    with h5py.File(path, "w") as f:
        if observations:
            f["observation"] = rng.normal(size=(b, t, 4)).astype(np.float32)
        f["state_value"] = rng.normal(size=(b, t, 1)).astype(np.float32)
        for key in ("done", "terminated", "truncated"):
            f[key] = np.zeros((b, t, 1), bool)
        f["next/reward"] = rng.normal(size=(b, t, 1)).astype(np.float32)
        f["next/terminated"] = term
        f["next/truncated"] = trunc
        f["next/done"] = term | trunc
        f["next/state_value"] = rng.normal(size=(b, t, 1)).astype(np.float32)
        if observations:
            f["next/observation"] = rng.normal(size=(b, t, 4)).astype(np.float32)
    return path


def torchrl_gae(td, gamma: float, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """torchrl's own GAE of a ``[B, T]`` collector rollout (a TensorDict with
    ``state_value`` and the ``("next", ...)`` outcomes): (advantage, value_target) as
    float64 ``[B, T, 1]``. Needs torchrl."""
    from torchrl.objectives.value.functional import generalized_advantage_estimate

    adv, target = generalized_advantage_estimate(
        gamma,
        lam,
        td["state_value"],
        td["next", "state_value"],
        td["next", "reward"],
        td["next", "done"],
        td["next", "terminated"],
    )
    return adv.numpy().astype(np.float64), target.numpy().astype(np.float64)


# --------------------------------------------------------------------------- episode streams


def episodes(rng: np.random.Generator, plan: list[tuple[int, str]]) -> dict[str, np.ndarray]:
    """One stream of episodes back to back. ``plan`` = [(length, end)], end in
    ``term``, ``trunc``, ``both`` (terminated and truncated on the same step) or ``cut``
    (the data stops mid-episode: no flag; only sensible for the last one)."""
    cols: dict[str, list] = {k: [] for k in ("r", "v", "nv", "term", "trunc", "eid", "step")}
    for i, (length, end) in enumerate(plan):
        v = rng.normal(size=length).astype(np.float32)
        r = rng.normal(size=length).astype(np.float32)
        boot = np.float32(rng.normal())  # V(s_T) of the state after the last step
        nv = np.append(v[1:], boot).astype(np.float32)
        term = np.zeros(length, bool)
        trunc = np.zeros(length, bool)
        if end in ("term", "both"):
            term[-1] = True
            nv[-1] = GARBAGE + i  # whatever the critic said about the terminal obs
        if end in ("trunc", "both"):
            trunc[-1] = True
        cols["r"].append(r)
        cols["v"].append(v)
        cols["nv"].append(nv)
        cols["term"].append(term)
        cols["trunc"].append(trunc)
        cols["eid"].append(np.full(length, i, np.int64))
        cols["step"].append(np.arange(length, dtype=np.int64))
    out = {k: np.concatenate(v) for k, v in cols.items()}
    out["ended"] = out["term"] | out["trunc"]
    return out


def rollout(
    rng: np.random.Generator, steps: int, ends: tuple[str, ...], last: str
) -> dict[str, np.ndarray]:
    """One env's stream of ``steps`` steps: episodes of 2-6 steps ending by one of
    ``ends``; the last one ends exactly at the last step with ``last`` (``cut``: the
    rollout stops mid-episode)."""
    lengths: list[int] = []
    while sum(lengths) < steps:
        lengths.append(min(int(rng.integers(2, 7)), steps - sum(lengths)))
    plan = [(n, ends[int(rng.integers(len(ends)))]) for n in lengths[:-1]]
    return episodes(rng, [*plan, (lengths[-1], last)])


def stack(streams: list[dict[str, np.ndarray]], axis: int) -> dict[str, np.ndarray]:
    return {k: np.stack([s[k] for s in streams], axis=axis) for k in streams[0]}


def meaning_of(s: dict[str, np.ndarray], time_axis: int = 0) -> Meaning:
    return Meaning(
        rewards=s["r"].astype(np.float64),
        values=s["v"].astype(np.float64),
        next_values=s["nv"].astype(np.float64),
        terminated=s["term"].copy(),
        truncated=s["trunc"].copy(),
        time_axis=time_axis,
    )


def flat_plan(rng: np.random.Generator, ends: tuple[str, ...] = ("term", "trunc", "both")):
    """Seven episodes with every end in ``ends`` at least twice, then a cut one."""
    kinds = [ends[i % len(ends)] for i in range(7)]
    rng.shuffle(kinds)
    return [(int(rng.integers(2, 7)), k) for k in kinds] + [(int(rng.integers(2, 6)), "cut")]


def write_parquet(path: Path, columns: dict[str, pa.Array | np.ndarray]) -> None:
    pq.write_table(pa.table(dict(columns)), path)


def fixed_list(values: np.ndarray) -> pa.Array:
    """``(N, D)`` float32 as Arrow ``fixed_size_list<float>[D]`` (how observations go)."""
    flat = pa.array(values.reshape(-1).astype(np.float32))
    return pa.FixedSizeListArray.from_arrays(flat, values.shape[1])


# --------------------------------------------------------------------------- producers


def gymnasium_parquet(tmp: Path, rng: np.random.Generator) -> Produced:
    """A gymnasium loop logged step by step to Parquet: ``terminated``/``truncated``
    as env.step returns them, rewards as Python floats (float64), the critic's
    ``value``/``next_value`` (V(final obs) at truncations), the logging stopped
    mid-episode."""
    s = episodes(rng, flat_plan(rng))
    n = len(s["r"])
    path = tmp / "gymnasium.parquet"
    write_parquet(
        path,
        {
            "episode_id": s["eid"],
            "step": s["step"],
            "observation": fixed_list(rng.normal(size=(n, 3))),
            "action": rng.integers(0, 2, n),
            "reward": s["r"].astype(np.float64),
            "terminated": s["term"],
            "truncated": s["trunc"],
            "value": s["v"],
            "next_value": s["nv"],
        },
    )
    fix = [
        "--terminals", "terminated", "--timeouts", "truncated",
        "--episode-id", "episode_id", "--next-values", "next_value",
    ]  # fmt: skip
    return Produced("gymnasium-parquet", path, "parquet", meaning_of(s), fix)


def gymnasium_h5(tmp: Path, rng: np.random.Generator) -> Produced:
    """The same loop saved as a flat HDF5 file with plural names."""
    s = episodes(rng, flat_plan(rng))
    n = len(s["r"])
    path = tmp / "gymnasium.h5"
    with h5py.File(path, "w") as f:
        f["observations"] = rng.normal(size=(n, 3)).astype(np.float32)
        f["actions"] = rng.integers(0, 2, n)
        f["rewards"] = s["r"]
        f["terminated"] = s["term"]
        f["truncated"] = s["trunc"]
        f["values"] = s["v"]
        f["next_values"] = s["nv"]
    fix = ["--terminals", "terminated", "--timeouts", "truncated", "--next-values", "next_values"]
    return Produced("gymnasium-h5", path, "h5", meaning_of(s), fix)


def done_is_terminated(tmp: Path, rng: np.random.Generator) -> Produced:
    """Issue 10 case 1: gymnasium-style Parquet where ``done`` = terminated and a
    separate ``truncated`` column (+ ``episode_id``, ``step``, ``value``, ``next_value``)."""
    s = episodes(rng, flat_plan(rng))
    path = tmp / "done_terminated.parquet"
    write_parquet(
        path,
        {
            "episode_id": s["eid"],
            "step": s["step"],
            "reward": s["r"].astype(np.float64),
            "done": s["term"],
            "truncated": s["trunc"],
            "value": s["v"],
            "next_value": s["nv"],
        },
    )
    fix = ["--terminals", "done", "--timeouts", "truncated", "--next-values", "next_value"]
    return Produced("done=terminated+truncated", path, "parquet", meaning_of(s), fix)


def old_gym(tmp: Path, rng: np.random.Generator) -> Produced:
    """Old gym (< 0.26): ``done`` = terminated or truncated; the TimeLimit wrapper's
    ``info["TimeLimit.truncated"]`` = hit the limit and NOT terminated (``not done``
    of the inner env), so terminated = done and not TimeLimit.truncated."""
    s = episodes(rng, flat_plan(rng))
    n = len(s["r"])
    path = tmp / "old_gym.h5"
    with h5py.File(path, "w") as f:
        f["observations"] = rng.normal(size=(n, 3)).astype(np.float32)
        f["actions"] = rng.integers(0, 2, n)
        f["rewards"] = s["r"]
        f["dones"] = s["ended"]
        f["TimeLimit.truncated"] = s["trunc"] & ~s["term"]
        f["values"] = s["v"]
        f["next_values"] = s["nv"]
    fix = [
        "--dones", "dones", "--dones-mean", "ended",
        "--timeouts", "TimeLimit.truncated", "--next-values", "next_values",
    ]  # fmt: skip
    return Produced("old-gym", path, "h5", meaning_of(s), fix)


def d4rl(tmp: Path, rng: np.random.Generator) -> Produced:
    """D4RL ``*-v2`` HDF5 (gzip): ``terminals``/``timeouts``, ``next_observations``,
    ``infos/*`` and scalar ``metadata/*``; the collector cut the file at ``num_data``
    so the last episode has neither flag. A step that terminated at the time limit is
    recorded as a timeout only, so no ``both``. The user added ``values`` and
    ``next_values`` (docs/CONVENTIONS.md §1.8)."""
    s = episodes(rng, flat_plan(rng, ("term", "trunc")))
    n = len(s["r"])
    path = tmp / "hopper-medium-v2.hdf5"
    gz = {"compression": "gzip"}
    with h5py.File(path, "w") as f:
        obs = rng.normal(size=(n + 1, 11)).astype(np.float32)
        f.create_dataset("observations", data=obs[:-1], **gz)
        f.create_dataset("next_observations", data=obs[1:], **gz)
        f.create_dataset("actions", data=rng.normal(size=(n, 3)).astype(np.float32), **gz)
        f.create_dataset("rewards", data=s["r"], **gz)
        f.create_dataset("terminals", data=s["term"], **gz)
        f.create_dataset("timeouts", data=s["trunc"], **gz)
        f.create_dataset("infos/action_log_probs", data=rng.normal(size=n).astype(np.float32))
        f.create_dataset("infos/qpos", data=rng.normal(size=(n, 6)).astype(np.float32))
        f["metadata/algorithm"] = np.bytes_(b"SAC")
        f["metadata/iteration"] = np.int32(1000)
        f.create_dataset("values", data=s["v"], **gz)
        f.create_dataset("next_values", data=s["nv"], **gz)
    fix = ["--terminals", "terminals", "--timeouts", "timeouts", "--next-values", "next_values"]
    return Produced("d4rl", path, "h5", meaning_of(s), fix)


T_BUF, B_BUF = 16, 4


def cleanrl(tmp: Path, rng: np.random.Generator) -> Produced:
    """CleanRL ppo.py's storage dumped with h5py: ``[num_steps, num_envs]`` float32
    tensors ``obs, actions, logprobs, rewards, dones, values`` where ``dones[t]`` is
    ``next_done`` stored BEFORE the step (obs t starts an episode), plus
    ``next_value [B]`` and ``next_done [B]``. Its GAE treats every episode end as
    terminal (``next_done = terminations | truncations``): that is what it means."""
    last = ["term", "cut", "cut", "term"]
    streams = [rollout(rng, T_BUF, ("term",), last[b]) for b in range(B_BUF)]
    s = stack(streams, axis=1)  # [T, B]
    dones = np.zeros((T_BUF, B_BUF), np.float32)
    dones[1:] = s["ended"][:-1]
    dones[0] = [1.0, 0.0, 1.0, 0.0]  # next_done of the previous rollout: not this window's
    next_value = s["nv"][-1].copy()  # V(next_obs): garbage where next_done (a reset obs)
    path = tmp / "cleanrl_ppo.h5"
    with h5py.File(path, "w") as f:
        f["obs"] = rng.normal(size=(T_BUF, B_BUF, 4)).astype(np.float32)
        f["actions"] = rng.integers(0, 2, (T_BUF, B_BUF)).astype(np.float32)
        f["logprobs"] = rng.normal(size=(T_BUF, B_BUF)).astype(np.float32)
        f["rewards"] = s["r"]
        f["dones"] = dones
        f["values"] = s["v"]
        f["next_value"] = next_value
        f["next_done"] = s["ended"][-1].astype(np.float32)
    fix = [
        "--layout", "time-major", "--dones", "dones", "--dones-mean", "starts",
        "--ends-are", "terminal", "--last-values", "next_value",
    ]  # fmt: skip
    return Produced("cleanrl-[T,B]", path, "h5", meaning_of(s), fix)


def sb3(tmp: Path, rng: np.random.Generator) -> Produced:
    """Stable-Baselines3 RolloutBuffer arrays ``(buffer_size, n_envs)`` float32 as
    ``collect_rollouts`` leaves them (before ``compute_returns_and_advantage``):
    ``observations``, ``actions (.., 1)``, ``rewards``, ``episode_starts``, ``values``,
    ``log_probs``, and the two arguments of ``compute_returns_and_advantage``:
    ``last_values [B]`` and ``dones [B]`` (from the final env.step). SB3 patches
    time-limit bootstraps into the reward and treats every end as terminal."""
    last = ["cut", "term", "cut", "term"]
    streams = [rollout(rng, T_BUF, ("term",), last[b]) for b in range(B_BUF)]
    s = stack(streams, axis=1)
    starts = np.zeros((T_BUF, B_BUF), np.float32)
    starts[1:] = s["ended"][:-1]
    starts[0] = [1.0, 1.0, 0.0, 0.0]
    path = tmp / "sb3_rollout.h5"
    with h5py.File(path, "w") as f:
        f["observations"] = rng.normal(size=(T_BUF, B_BUF, 4)).astype(np.float32)
        f["actions"] = rng.integers(0, 2, (T_BUF, B_BUF, 1)).astype(np.float32)
        f["rewards"] = s["r"]
        f["episode_starts"] = starts
        f["values"] = s["v"]
        f["log_probs"] = rng.normal(size=(T_BUF, B_BUF)).astype(np.float32)
        f["last_values"] = s["nv"][-1]
        f["dones"] = s["ended"][-1].astype(np.float32)
    fix = ["--layout", "time-major", "--ends-are", "terminal", "--last-values", "last_values"]
    note = '"dones" [B] is the final done of each env (SB3 convention); no option names it'
    return Produced("sb3-[T,B]", path, "h5", meaning_of(s), fix, note)


def torchrl(tmp: Path, rng: np.random.Generator) -> Produced:
    """A TorchRL collector batch ``[num_envs, T]`` after the value module, saved with
    ``td.flatten_keys(".")``: ``next.reward``/``next.done``/``next.terminated``/
    ``next.truncated``/``state_value``/``next.state_value`` with a trailing dim 1,
    ``collector.traj_ids``. The batch end is a cut (next.state_value bootstraps)."""
    b, t = 3, 12
    streams = [rollout(rng, t, ("term", "trunc", "both"), "cut") for _ in range(b)]
    s = stack(streams, axis=0)  # [B, T]
    path = tmp / "torchrl_batch.h5"
    with h5py.File(path, "w") as f:
        f["observation"] = rng.normal(size=(b, t, 3)).astype(np.float32)
        f["action"] = rng.normal(size=(b, t, 2)).astype(np.float32)
        f["action_log_prob"] = rng.normal(size=(b, t)).astype(np.float32)
        f["state_value"] = s["v"][..., None]
        f["next.observation"] = rng.normal(size=(b, t, 3)).astype(np.float32)
        f["next.reward"] = s["r"][..., None]
        f["next.done"] = s["ended"][..., None]
        f["next.terminated"] = s["term"][..., None]
        f["next.truncated"] = s["trunc"][..., None]
        f["next.state_value"] = s["nv"][..., None]
        f["collector.traj_ids"] = np.cumsum(s["ended"], axis=1) + 10 * np.arange(b)[:, None]
    fix = [
        "--layout", "batch-major", "--terminals", "next.terminated",
        "--timeouts", "next.truncated", "--next-values", "next.state_value",
    ]  # fmt: skip
    return Produced("torchrl-[B,T]", path, "h5", meaning_of(s, time_axis=1), fix)


def lerobot(tmp: Path, rng: np.random.Generator) -> Produced:
    """A LeRobot v3 frame table (many episodes in one file): ``episode_index``,
    ``frame_index``, ``index``, ``timestamp``, ``next.reward``, ``next.done`` = True on
    the last frame of EVERY episode (end of recording: here, the recordings were
    stopped, i.e. truncations), plus the user's critic ``value``/``next_value``."""
    s = episodes(rng, [(int(rng.integers(3, 8)), "trunc") for _ in range(6)])
    n = len(s["r"])
    path = tmp / "lerobot_file-000.parquet"
    write_parquet(
        path,
        {
            "observation.state": fixed_list(rng.normal(size=(n, 2))),
            "action": fixed_list(rng.normal(size=(n, 2))),
            "timestamp": (s["step"] / 10.0).astype(np.float32),
            "frame_index": s["step"],
            "episode_index": s["eid"],
            "index": np.arange(n, dtype=np.int64),
            "task_index": np.zeros(n, np.int64),
            "next.reward": s["r"],
            "next.done": s["ended"],
            "value": s["v"],
            "next_value": s["nv"],
        },
    )
    fix = [
        "--dones", "next.done", "--dones-mean", "ended", "--ends-are", "truncated",
        "--episode-id", "episode_index", "--next-values", "next_value",
    ]  # fmt: skip
    return Produced("lerobot", path, "parquet", meaning_of(s), fix)


def minari_dir(tmp: Path, rng: np.random.Generator) -> Produced:
    """A Minari 0.5 HDF5 dataset built by hand (docs/CONVENTIONS.md §7.2): ``episode_<id>``
    groups (11, so lexicographic order differs from numeric), observations with T+1
    rows, rewards float64, ``terminations``/``truncations``, an ``infos`` group, the
    last episode marked truncated by ``DataCollector`` on flush, and the user's
    ``values`` with T+1 rows (V(s_0..s_T))."""
    ends = ["term", "trunc", "both", "term", "trunc", "term", "both", "trunc", "term", "term"]
    plan = [(int(rng.integers(2, 6)), e) for e in ends] + [(3, "trunc")]
    root = tmp / "minari" / "cartpole" / "random-v0"
    (root / "data").mkdir(parents=True)
    s = episodes(rng, plan)
    bounds = np.cumsum([0] + [n for n, _ in plan])
    with h5py.File(root / "data" / "main_data.hdf5", "w", track_order=True) as f:
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            g = f.create_group(f"episode_{i}")
            g.attrs["id"] = i
            g.attrs["seed"] = int(rng.integers(1 << 31))
            g.attrs["total_steps"] = hi - lo
            g["observations"] = rng.normal(size=(hi - lo + 1, 4)).astype(np.float32)
            g["actions"] = rng.integers(0, 2, hi - lo)
            g["rewards"] = s["r"][lo:hi].astype(np.float64)
            g["terminations"] = s["term"][lo:hi]
            g["truncations"] = s["trunc"][lo:hi]
            g.create_group("infos")
            g["values"] = np.append(s["v"][lo:hi], s["nv"][hi - 1]).astype(np.float32)
    meta = {
        "total_episodes": len(plan),
        "total_steps": int(bounds[-1]),
        "data_format": "hdf5",
        "dataset_id": "cartpole/random-v0",
        "minari_version": "0.5.4",
        "env_spec": json.dumps({"id": "CartPole-v1", "max_episode_steps": 500}),
        "algorithm_name": "random",
    }
    (root / "data" / "metadata.json").write_text(json.dumps(meta))
    fix = ["--layout", "episodes", "--terminals", "terminations", "--timeouts", "truncations"]
    return Produced("minari-hdf5", root, "minari", meaning_of(s), fix)


def batch_major_noattr(tmp: Path, rng: np.random.Generator) -> Produced:
    """Issue 10 case 2: a ``[B, T]`` buffer (8 envs x 24 steps) saved without a
    ``layout`` attribute and without ``last_values`` (per-step ``next_values``)."""
    b, t = 8, 24
    streams = [rollout(rng, t, ("term", "trunc"), "cut") for _ in range(b)]
    s = stack(streams, axis=0)
    path = tmp / "buffer_bt.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = s["r"]
        f["values"] = s["v"]
        f["next_values"] = s["nv"]
        f["terminals"] = s["term"]
        f["timeouts"] = s["trunc"]
    return Produced(
        "[B,T]-no-attr", path, "h5", meaning_of(s, time_axis=1), ["--layout", "batch-major"]
    )


def ids_no_flags(tmp: Path, rng: np.random.Generator) -> Produced:
    """A flat table whose episodes are known only from ``episode_id`` changes (no
    flag column): time-limited episodes (Pendulum-like), all truncations, with the
    critic's ``next_value`` at every step."""
    s = episodes(rng, [(int(rng.integers(2, 7)), "trunc") for _ in range(5)] + [(3, "cut")])
    path = tmp / "ids_only.parquet"
    write_parquet(
        path,
        {
            "episode_id": s["eid"] + 100,
            "step": s["step"],
            "reward": s["r"],
            "value": s["v"],
            "next_value": s["nv"],
        },
    )
    fix = ["--episode-id", "episode_id", "--ends-are", "truncated", "--next-values", "next_value"]
    return Produced("ids-no-flags", path, "parquet", meaning_of(s), fix)


def minari_cartpole(name: str, buffers: list, description: str, data_format: str = "hdf5") -> Path:
    """A CartPole-v1 dataset written by the real ``minari`` package from its episode
    buffers (``create_dataset_from_buffers`` under ``$MINARI_DATASETS_PATH``): its root.
    Needs minari, gymnasium and pillow."""
    import gymnasium as gym
    import minari

    dataset = minari.create_dataset_from_buffers(
        name,
        buffers,
        env=gym.make("CartPole-v1"),
        algorithm_name="random",
        author="rltscan tests",
        author_email="tests@example.invalid",
        code_permalink="https://example.invalid",
        description=description,
        eval_env=gym.make("CartPole-v1"),
        data_format=data_format,
    )
    return Path(dataset.spec.data_path).parent


def minari_package(tmp: Path, rng: np.random.Generator) -> Produced:
    """The same episodes written by the real ``minari`` package
    (``create_dataset_from_buffers``, HDF5 backend; needs minari, gymnasium and
    pillow), then the user's ``values`` (T+1 rows) added to each episode group."""
    import os

    from minari.data_collector.episode_buffer import EpisodeBuffer

    ends = ["term", "trunc", "both", "term", "trunc", "term", "both", "trunc", "term", "term"]
    plan = [(int(rng.integers(2, 6)), e) for e in ends] + [(3, "trunc")]
    s = episodes(rng, plan)
    bounds = np.cumsum([0] + [n for n, _ in plan])
    buffers = []
    for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        obs = rng.normal(size=(hi - lo + 1, 4)).astype(np.float32)
        buffers.append(
            EpisodeBuffer(
                id=i,
                observations=list(obs),
                actions=[int(a) for a in rng.integers(0, 2, hi - lo)],
                rewards=[float(r) for r in s["r"][lo:hi]],
                terminations=[bool(x) for x in s["term"][lo:hi]],
                truncations=[bool(x) for x in s["trunc"][lo:hi]],
                infos={},
            )
        )
    os.environ["MINARI_DATASETS_PATH"] = str(tmp)
    root = minari_cartpole("rltscan/cartpole/real-v0", buffers, "rltscan real-layout test")
    with h5py.File(root / "data" / "main_data.hdf5", "a") as f:
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds)):
            f[f"episode_{i}"]["values"] = np.append(s["v"][lo:hi], s["nv"][hi - 1]).astype(
                np.float32
            )
    fix = ["--layout", "episodes", "--terminals", "terminations", "--timeouts", "truncations"]
    return Produced("minari-package", root, "minari", meaning_of(s), fix)


BUILDERS: dict[str, Callable[[Path, np.random.Generator], Produced]] = {
    "gymnasium-parquet": gymnasium_parquet,
    "gymnasium-h5": gymnasium_h5,
    "done=terminated+truncated": done_is_terminated,
    "old-gym": old_gym,
    "d4rl": d4rl,
    "cleanrl-[T,B]": cleanrl,
    "sb3-[T,B]": sb3,
    "torchrl-[B,T]": torchrl,
    "lerobot": lerobot,
    "minari-hdf5": minari_dir,
    "[B,T]-no-attr": batch_major_noattr,
    "ids-no-flags": ids_no_flags,
}


def build(name: str, tmp: Path, seed: int = 0) -> Produced:
    directory = tmp / name.replace("[", "").replace("]", "").replace(",", "").replace("=", "-")
    directory.mkdir(parents=True, exist_ok=True)
    return BUILDERS[name](directory, np.random.default_rng([seed, len(name), sum(map(ord, name))]))


# --------------------------------------------------------------------------- reading back


def read_output(produced: Produced, path: Path, name: str) -> np.ndarray:
    """An output rltscan wrote into ``path`` (a copy of ``produced.path``), in the
    meaning's shape (trailing unit dims dropped)."""
    if produced.kind == "parquet":
        out = pq.read_table(path, columns=[name]).column(name).to_numpy()
    elif produced.kind == "minari":
        with h5py.File(path / "data" / "main_data.hdf5", "r") as f:
            keys = sorted(f, key=lambda k: int(k.split("_")[1]))
            out = np.concatenate([f[k][name][()] for k in keys])
    else:
        with h5py.File(path, "r") as f:
            out = f[name][()]
    out = np.asarray(out, dtype=np.float64)
    shape = produced.meaning.rewards.shape
    while out.ndim > len(shape) and out.shape[-1] == 1:
        out = out[..., 0]
    return out
