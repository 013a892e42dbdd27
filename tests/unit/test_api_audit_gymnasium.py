"""API audit: rollouts logged from Gymnasium (1.x) vector envs under both autoreset modes.

A fixed linear critic V(obs) = w·obs on CartPole with a 12-step time limit (so both
terminations and truncations happen), 3 envs. The truth is GAE over the real
transitions of each env: a termination reads nothing, a truncation bootstraps with
V(final observation), the last step with V(last next observation).

* ``SAME_STEP``: every row is a step; the final observation is in
  ``infos["final_obs"]`` at the ending step, so a user's next-state values come from it.
* ``NEXT_STEP`` (the 1.x default): the ``step()`` after an end is the reset (reward 0, no
  flags, its observation the final one). Logged row by row with ``next_values`` from
  the observation each step returned, the real rows are exact; the reset rows are not
  steps (nothing marks them; the Python functions take no ``autoreset=``).
"""

from __future__ import annotations

import numpy as np
import pytest

import rltscan

gym = pytest.importorskip("gymnasium")
from gymnasium.vector import AutoresetMode, SyncVectorEnv  # noqa: E402

W = np.array([0.3, -1.2, 2.0, 0.7])
GAMMA, LAM, T, B = 0.9, 0.8, 60, 3


def V(obs):
    return np.asarray(obs, np.float64) @ W


def _env(mode):
    return SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=12)] * B, autoreset_mode=mode
    )


def _truth(rows):
    """GAE per env over real transitions: rows = list of (r, v, nv, term, trunc) per env."""
    out = []
    for r, v, nv, term, trunc in rows:
        adv, acc = np.zeros(len(r)), 0.0
        for t in reversed(range(len(r))):
            cut = term[t] or trunc[t] or t == len(r) - 1
            delta = r[t] + (0.0 if term[t] else GAMMA * nv[t]) - v[t]
            acc = delta + (0.0 if cut else GAMMA * LAM * acc)
            adv[t] = acc
        out.append(adv)
    return out


def _env_rows(log, v, nv, b, keep=slice(None)):
    """Env ``b``'s ``(r, v, nv, term, trunc)``, the rows ``keep``, for ``_truth``."""
    return log["r"][keep, b], v[keep, b], nv[keep, b], log["term"][keep, b], log["trunc"][keep, b]


def _gae(log, v, nv):
    """The logged ``[T, B]`` columns with next-state values ``nv``."""
    return rltscan.gae(
        log["r"].astype(np.float64),
        v,
        next_values=nv,
        terminated=log["term"],
        truncated=log["trunc"],
        gamma=GAMMA,
        lam=LAM,
        time_dim=0,
    )


def _rollout(mode, seed):
    env = _env(mode)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    log = {k: [] for k in ("obs", "r", "term", "trunc", "next_obs", "final_obs", "reset_row")}
    prev_done = np.zeros(B, bool)
    for _ in range(T):
        act = rng.integers(0, 2, size=B)
        act[0] = 0  # env 0 falls over (terminations); env 1 random (time limits)
        nobs, r, term, trunc, info = env.step(act)
        final = nobs.copy()
        if mode == AutoresetMode.SAME_STEP and "final_obs" in info:
            for i in np.flatnonzero(info["_final_obs"]):
                final[i] = info["final_obs"][i]
        for k, x in (
            ("obs", obs),
            ("r", r),
            ("term", term),
            ("trunc", trunc),
            ("next_obs", nobs),
            ("final_obs", final),
        ):
            log[k].append(np.array(x))
        log["reset_row"].append(
            prev_done.copy() if mode == AutoresetMode.NEXT_STEP else np.zeros(B, bool)
        )
        prev_done = term | trunc
        obs = nobs
    env.close()
    return {k: np.stack(x) for k, x in log.items()}


@pytest.mark.parametrize("seed", [0, 1])
def test_same_step_with_final_obs(seed):
    log = _rollout(AutoresetMode.SAME_STEP, seed)
    assert log["trunc"].any() and log["term"].any()
    v, nv = V(log["obs"]), V(log["final_obs"])
    res = _gae(log, v, nv)
    want = _truth([_env_rows(log, v, nv, b) for b in range(B)])
    np.testing.assert_allclose(res.advantages, np.stack(want, 1), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("seed", [0, 1])
def test_next_step_real_rows_are_exact_with_next_values(seed):
    log = _rollout(AutoresetMode.NEXT_STEP, seed)
    assert log["reset_row"].any() and log["trunc"].any() and log["term"].any()
    reset = log["reset_row"]
    assert (log["r"][reset] == 0).all() and not (log["term"] | log["trunc"])[reset].any()
    v, nv = V(log["obs"]), V(log["next_obs"])
    res = _gae(log, v, nv)
    for b in range(B):
        keep = ~reset[:, b]
        (want,) = _truth([_env_rows(log, v, nv, b, keep)])
        np.testing.assert_allclose(res.advantages[keep, b], want, rtol=1e-10, atol=1e-10)


def test_next_step_values_and_flags_alone_are_refused():
    """Without a bootstrap source the truncations are refused (not bootstrapped with the
    reset row's value, nor with 0)."""
    log = _rollout(AutoresetMode.NEXT_STEP, 0)
    with pytest.raises(rltscan.DataError, match="bootstrap"):
        rltscan.gae(
            log["r"].astype(np.float64),
            V(log["obs"]),
            terminated=log["term"],
            truncated=log["trunc"],
            last_value=V(log["next_obs"][-1]),
            time_dim=0,
        )
