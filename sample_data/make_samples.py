"""Generate the sample rollouts in this directory from a real gymnasium environment.

    python sample_data/make_samples.py            # rewrites the files next to this script

CartPole-v1 with a 50-step TimeLimit (so both terminations and time-limit
truncations occur), B = 4 independent environments, T = 256 steps each, seed 0.
Every file holds the SAME transitions in a different layout (see README.md):

* ``cartpole_flat.h5``     flat D4RL-style HDF5 (the 4 streams concatenated)
* ``cartpole_buffer.h5``   time-major ``[T, B]`` rollout buffer with ``last_values [B]``
* ``cartpole.parquet``     one row per step, episode ids, flag columns, 4 row groups
* ``cartpole_minari/``     a Minari-style dataset (HDF5 backend, one group per episode)

Policies: behaviour μ and target π are two different stochastic "push toward the
pole" policies (logistic in a linear score of the state). Values are a least-squares
linear fit of V(s) to discounted Monte-Carlo returns; Q(s, a) a least-squares fit
to r + γ V(s'). Nothing here is a trained agent: the numbers are consistent, not good.
"""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

HERE = Path(__file__).resolve().parent
SEED = 0
B, T = 4, 256
MAX_STEPS = 50
GAMMA = 0.99


def score(obs: np.ndarray) -> np.ndarray:
    """The linear 'push right' score used by both policies."""
    return 1.0 * obs[..., 2] * 10.0 + obs[..., 3] * 2.0 + obs[..., 1] * 0.3


def p_right(obs: np.ndarray, *, sharpness: float, eps: float) -> np.ndarray:
    """Probability of action 1 (push right): logistic in the score, mixed with uniform."""
    p = 1.0 / (1.0 + np.exp(-sharpness * score(obs)))
    return eps * 0.5 + (1.0 - eps) * p


def behavior_probs(obs: np.ndarray) -> np.ndarray:
    p = p_right(obs, sharpness=0.6, eps=0.5)
    return np.stack([1.0 - p, p], axis=-1)


def target_probs(obs: np.ndarray) -> np.ndarray:
    p = p_right(obs, sharpness=4.0, eps=0.1)
    return np.stack([1.0 - p, p], axis=-1)


def features(obs: np.ndarray) -> np.ndarray:
    x, xd, th, thd = (obs[..., i] for i in range(4))
    return np.stack([np.ones_like(x), x, xd, th, thd, x * x, xd * xd, th * th, thd * thd], -1)


def collect() -> dict[str, np.ndarray]:
    """B streams of T steps each, episodes reset inside a stream, arrays [T, B, ...]."""
    rng = np.random.default_rng(SEED)
    out: dict[str, list] = {
        k: [] for k in ("obs", "next_obs", "action", "reward", "terminated", "truncated", "logp_b")
    }
    streams = []
    for b in range(B):
        env = gym.make("CartPole-v1", max_episode_steps=MAX_STEPS)
        obs, _ = env.reset(seed=SEED + b)
        env.action_space.seed(SEED + b)
        rows: dict[str, list] = {k: [] for k in out}
        for _ in range(T):
            probs = behavior_probs(obs)
            action = int(rng.random() < probs[1])
            nxt, reward, term, trunc, _ = env.step(action)
            term, trunc = bool(term), bool(trunc) and not bool(term)  # terminal wins
            rows["obs"].append(obs)
            rows["next_obs"].append(nxt)  # the true successor, also at episode ends
            rows["action"].append(action)
            rows["reward"].append(reward)
            rows["terminated"].append(term)
            rows["truncated"].append(trunc)
            rows["logp_b"].append(np.log(probs[action]))
            obs = env.reset()[0] if (term or trunc) else nxt
        streams.append({k: np.asarray(v) for k, v in rows.items()})
        env.close()
    return {k: np.stack([s[k] for s in streams], axis=1) for k in out}  # [T, B, ...]


def episode_ids(done: np.ndarray) -> np.ndarray:
    """[T, B] episode ids (stream-major numbering); a stream's last episode is cut."""
    ids = np.zeros(done.shape, np.int64)
    next_id = 0
    for b in range(done.shape[1]):
        for t in range(done.shape[0]):
            ids[t, b] = next_id
            if done[t, b] or t == done.shape[0] - 1:
                next_id += 1
    return ids


def mc_returns(reward: np.ndarray, done: np.ndarray) -> np.ndarray:
    g = np.zeros_like(reward, dtype=np.float64)
    acc = np.zeros(reward.shape[1])
    for t in range(reward.shape[0] - 1, -1, -1):
        acc = np.where(done[t], 0.0, acc) if t < reward.shape[0] - 1 else np.zeros_like(acc)
        acc = reward[t] + GAMMA * acc
        g[t] = acc
    return g


def fit(features_: np.ndarray, targets: np.ndarray) -> np.ndarray:
    x = features_.reshape(-1, features_.shape[-1])
    ridge = 1e-3 * np.eye(x.shape[1])
    return np.linalg.solve(x.T @ x + ridge, x.T @ targets.reshape(-1))


def enrich(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Values, next values, Q, E_π Q and log-probabilities, all [T, B] float32."""
    done = data["terminated"] | data["truncated"]
    w_v = fit(features(data["obs"]), mc_returns(data["reward"], done))
    value = lambda o: features(o) @ w_v  # noqa: E731 - a one-line model
    v, v_next = value(data["obs"]), value(data["next_obs"])
    q_target = data["reward"] + GAMMA * np.where(data["terminated"], 0.0, v_next)
    onehot = np.eye(2)[data["action"]]
    phi_sa = (features(data["obs"])[..., :, None] * onehot[..., None, :]).reshape(T, B, -1)
    w_q = fit(phi_sa, q_target)

    def q_all(o: np.ndarray) -> np.ndarray:
        f = features(o)
        return np.stack([f @ w_q.reshape(-1, 2)[:, a] for a in range(2)], -1)

    q_now, q_next = q_all(data["obs"]), q_all(data["next_obs"])
    pi_now, pi_next = target_probs(data["obs"]), target_probs(data["next_obs"])
    logp_t = np.log(np.take_along_axis(pi_now, data["action"][..., None], -1)[..., 0])
    f32 = np.float32
    return {
        **data,
        "value": v.astype(f32),
        "next_value": v_next.astype(f32),
        "q": np.take_along_axis(q_now, data["action"][..., None], -1)[..., 0].astype(f32),
        "next_expected_q": (pi_next * q_next).sum(-1).astype(f32),
        "v_pi": (pi_now * q_now).sum(-1).astype(f32),
        "logp_b": data["logp_b"].astype(f32),
        "logp_t": logp_t.astype(f32),
        "episode": episode_ids(done),
    }


def flat(a: np.ndarray) -> np.ndarray:
    """[T, B, ...] → [B*T, ...]: stream 0, then stream 1, ..."""
    return np.ascontiguousarray(np.swapaxes(a, 0, 1).reshape(-1, *a.shape[2:]))


def write_flat_h5(d: dict[str, np.ndarray], path: Path) -> None:
    terminals = flat(d["terminated"])
    timeouts = flat(d["truncated"]).copy()
    ends = np.arange(1, B) * T - 1  # a stream's end is a data cut: marked as a timeout ...
    timeouts[ends] |= ~terminals[ends]
    # ... except the very last row: the file ends mid-episode with neither flag (D4RL).
    gz = {"compression": "gzip", "compression_opts": 4}
    with h5py.File(path, "w", track_order=True) as f:
        f.create_dataset("observations", data=flat(d["obs"]).astype(np.float32), **gz)
        f.create_dataset("actions", data=flat(d["action"]).astype(np.int64), **gz)
        f.create_dataset("rewards", data=flat(d["reward"]).astype(np.float32), **gz)
        f.create_dataset("terminals", data=terminals, **gz)
        f.create_dataset("timeouts", data=timeouts, **gz)
        f.create_dataset("next_observations", data=flat(d["next_obs"]).astype(np.float32), **gz)
        f.create_dataset("values", data=flat(d["value"]), **gz)
        f.create_dataset("next_values", data=flat(d["next_value"]), **gz)
        f.create_dataset("infos/action_log_probs", data=flat(d["logp_b"]), **gz)
        f.create_dataset("logp_target", data=flat(d["logp_t"]), **gz)
        f.create_dataset("q_values", data=flat(d["q"]), **gz)
        f.create_dataset("next_expected_q", data=flat(d["next_expected_q"]), **gz)
        f.create_dataset("v_pi", data=flat(d["v_pi"]), **gz)
        f["metadata/algorithm"] = np.bytes_("heuristic logistic policy (sample_data)")
        f["metadata/env"] = np.bytes_(f"CartPole-v1, TimeLimit {MAX_STEPS}")


def write_buffer_h5(d: dict[str, np.ndarray], path: Path) -> None:
    with h5py.File(path, "w", track_order=True) as f:
        f.attrs["layout"] = "time_major"
        f.attrs["gamma_used_for_values"] = GAMMA
        f["observations"] = d["obs"].astype(np.float32)
        f["actions"] = d["action"].astype(np.int64)
        f["rewards"] = d["reward"].astype(np.float32)
        f["terminations"] = d["terminated"]
        f["truncations"] = d["truncated"]
        f["values"] = d["value"]
        f["next_values"] = d["next_value"]
        f["last_values"] = d["next_value"][-1]
        f["logp_behavior"] = d["logp_b"]
        f["logp_target"] = d["logp_t"]
        f["q_values"] = d["q"]
        f["next_expected_q"] = d["next_expected_q"]
        f["v_pi"] = d["v_pi"]


def write_parquet(d: dict[str, np.ndarray], path: Path) -> None:
    step = np.zeros((T, B), np.int64)
    for b in range(B):
        for t in range(1, T):
            step[t, b] = 0 if d["episode"][t, b] != d["episode"][t - 1, b] else step[t - 1, b] + 1
    obs = flat(d["obs"]).astype(np.float32)
    table = pa.table(
        {
            "eps_id": flat(d["episode"]),
            "t": flat(step),
            **{f"obs_{i}": obs[:, i] for i in range(4)},
            "action": flat(d["action"]).astype(np.int64),
            "reward": flat(d["reward"]).astype(np.float32),
            "terminated": flat(d["terminated"]),
            "truncated": flat(d["truncated"]),
            "vf_preds": flat(d["value"]),
            "next_values": flat(d["next_value"]),
            "action_logp": flat(d["logp_b"]),
            "logp_target": flat(d["logp_t"]),
            "q_values": flat(d["q"]),
            "next_expected_q": flat(d["next_expected_q"]),
            "v_pi": flat(d["v_pi"]),
        }
    )
    meta = {b"source": b"rltscan sample_data/make_samples.py", b"env": b"CartPole-v1"}
    table = table.replace_schema_metadata(meta)
    pq.write_table(table, path, row_group_size=T, compression="zstd")


def write_minari(d: dict[str, np.ndarray], root: Path) -> None:
    data = root / "data"
    data.mkdir(parents=True, exist_ok=True)
    eps = flat(d["episode"])
    cols = {k: flat(d[k]) for k in d}
    n_eps = int(eps.max()) + 1
    with h5py.File(data / "main_data.hdf5", "w") as f:
        for e in range(n_eps):
            rows = np.flatnonzero(eps == e)
            g = f.create_group(f"episode_{e}")
            g.attrs["id"] = e
            g.attrs["total_steps"] = len(rows)
            last = rows[-1]
            final_obs = cols["next_obs"][last : last + 1]
            g["observations"] = np.concatenate([cols["obs"][rows], final_obs])
            g["actions"] = cols["action"][rows].astype(np.int64)
            g["rewards"] = cols["reward"][rows].astype(np.float64)  # Minari stores floats as f64
            terminations = cols["terminated"][rows].copy()
            truncations = cols["truncated"][rows].copy()
            truncations[-1] |= ~terminations[-1]  # a cut stream end is a truncation
            g["terminations"] = terminations
            g["truncations"] = truncations
            g["values"] = np.concatenate([cols["value"][rows], cols["next_value"][last : last + 1]])
            g["logp_behavior"] = cols["logp_b"][rows]
            g["logp_target"] = cols["logp_t"][rows]
            g["q_values"] = cols["q"][rows]
            g["next_expected_q"] = cols["next_expected_q"][rows]
            g["v_pi"] = cols["v_pi"][rows]
    meta = {
        "dataset_id": "rltscan/cartpole/heuristic-v0",
        "total_episodes": n_eps,
        "total_steps": int(B * T),
        "data_format": "hdf5",
        "env_spec": json.dumps({"id": "CartPole-v1", "max_episode_steps": MAX_STEPS}),
        "algorithm_name": "heuristic logistic policy",
        "minari_version": "0.5.4 (layout only; written by rltscan's make_samples.py)",
    }
    (data / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n")


def main(out: Path = HERE) -> None:
    d = enrich(collect())
    write_flat_h5(d, out / "cartpole_flat.h5")
    write_buffer_h5(d, out / "cartpole_buffer.h5")
    write_parquet(d, out / "cartpole.parquet")
    write_minari(d, out / "cartpole_minari")
    done = d["terminated"] | d["truncated"]
    print(
        f"wrote {B}x{T} steps: {int(d['terminated'].sum())} terminations, "
        f"{int(d['truncated'].sum())} truncations, {int(done.sum())} episode ends"
    )


if __name__ == "__main__":
    main()
