"""API audit: Stable-Baselines3 (2.x) users porting ``RolloutBuffer.compute_returns_and_advantage``.

SB3's buffer is time-major ``[n_steps, n_envs]`` float32, ``episode_starts[t]`` is the
done flag that came with ``obs[t]`` (an episode starts at t), ``dones`` passed to
``compute_returns_and_advantage`` are the last step's, and every end is terminal: a
time-limit truncation is handled by folding ``γ·V(terminal_observation)`` into that
step's reward in ``collect_rollouts``. Compared against SB3's own code on its own buffer.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rltscan

gym = pytest.importorskip("gymnasium")
sb3_buffers = pytest.importorskip("stable_baselines3.common.buffers")

RTOL, ATOL = 1e-5, 1e-5


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL)


def _rollout_buffer(T: int, B: int, gamma: float, lam: float):
    return sb3_buffers.RolloutBuffer(
        T,
        gym.spaces.Box(-1, 1, (2,)),
        gym.spaces.Discrete(2),
        device="cpu",
        gae_lambda=lam,
        gamma=gamma,
        n_envs=B,
    )


def _gae_as_sb3(rewards, values, starts, last_values, gamma, lam, **dones):
    """The README's SB3 line: SB3's time-major buffer, every end terminal; ``dones`` is
    the final step's (``dones=`` or ``last_dones=``)."""
    return rltscan.gae(
        rewards,
        values,
        episode_starts=starts,
        last_value=last_values,
        ends_are="terminal",
        time_dim=0,
        gamma=gamma,
        lam=lam,
        **dones,
    )


def _filled_buffer(seed: int, T: int, B: int, gamma: float, lam: float):
    rng = np.random.default_rng(seed)
    buf = _rollout_buffer(T, B, gamma, lam)
    starts = rng.random(B) < 0.3
    for _ in range(T):
        buf.add(
            rng.normal(size=(B, 2)).astype(np.float32),
            rng.integers(0, 2, size=(B, 1)),
            rng.normal(size=B).astype(np.float32),
            starts,
            torch.tensor(rng.normal(size=B), dtype=torch.float32),
            torch.zeros(B),
        )
        starts = rng.random(B) < 0.3
    last_values = torch.tensor(rng.normal(size=B), dtype=torch.float32)
    return buf, last_values, starts.astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("T", "B"), [(13, 3), (9, 1), (5, 4)])
@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (0.0, 0.5), (1.0, 1.0), (0.9, 0.0)])
def test_rollout_buffer(seed, T, B, gamma, lam):
    buf, last_values, dones = _filled_buffer(seed, T, B, gamma, lam)
    rew, val, starts = buf.rewards.copy(), buf.values.copy(), buf.episode_starts.copy()
    buf.compute_returns_and_advantage(last_values, dones)
    res = _gae_as_sb3(rew, val, starts, last_values, gamma, lam, dones=dones)
    _close(res.advantages, buf.advantages)
    _close(res.value_targets, buf.returns)
    # the same final dones given as last_dones
    res = _gae_as_sb3(rew, val, starts, last_values, gamma, lam, last_dones=dones)
    _close(res.advantages, buf.advantages)


def test_rollout_buffer_without_time_dim_is_refused():
    """``[n_steps, n_envs]`` read time-last would be wrong: the per-env last values say
    which axis is time, and the refusal names ``time_dim=0``."""
    buf, last_values, dones = _filled_buffer(0, 11, 3, 0.99, 0.95)
    with pytest.raises(rltscan.DataError, match="time_dim=0"):
        rltscan.gae(
            buf.rewards,
            buf.values,
            episode_starts=buf.episode_starts,
            dones=dones,
            last_value=last_values,
            ends_are="terminal",
        )


@pytest.mark.parametrize("seed", [0, 1])
def test_timeout_folded_into_rewards_equals_an_explicit_truncation(seed):
    """SB3 folds γ·V(terminal obs) into a truncated step's reward and ends it as terminal;
    a user who kept the raw reward passes ``truncated`` + ``bootstrap_values`` instead:
    both give SB3's numbers."""
    gamma, lam, T, B = 0.98, 0.9, 12, 3
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=(T, B)).astype(np.float32)
    val = rng.normal(size=(T, B)).astype(np.float32)
    ended = rng.random((T, B)) < 0.25
    trunc = ended & (rng.random((T, B)) < 0.5)
    term_value = rng.normal(size=(T, B)).astype(np.float32)
    folded = np.where(trunc, raw + gamma * term_value, raw).astype(np.float32)
    starts = np.zeros((T, B), np.float32)
    starts[1:] = ended[:-1]
    starts[0] = rng.random(B) < 0.3
    last_values = torch.tensor(rng.normal(size=B), dtype=torch.float32)
    buf = _rollout_buffer(T, B, gamma, lam)
    buf.rewards[:], buf.values[:], buf.episode_starts[:] = folded, val, starts
    buf.full = True
    buf.compute_returns_and_advantage(last_values, ended[-1].astype(np.float32))
    res = _gae_as_sb3(folded, val, starts, last_values, gamma, lam, dones=ended[-1])
    _close(res.advantages, buf.advantages)
    boot = np.where(trunc, term_value, np.nan).astype(np.float32)
    boot[-1] = np.where(trunc[-1], term_value[-1], last_values.numpy())  # the data's end
    res = rltscan.gae(
        raw,
        val,
        terminated=ended & ~trunc,
        truncated=trunc,
        bootstrap_values=boot,
        time_dim=0,
        gamma=gamma,
        lam=lam,
    )
    _close(res.advantages, buf.advantages)


def _ppo_rollout():
    """A real PPO rollout (CartPole with a 10-step limit, 3 envs): the buffer and the
    ``(last_values, dones)`` that ``collect_rollouts`` hands to
    ``compute_returns_and_advantage``."""
    sb3 = pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("CartPole-v1", n_envs=3, seed=0, env_kwargs={"max_episode_steps": 10})
    model = sb3.PPO(
        "MlpPolicy",
        env,
        n_steps=37,
        batch_size=37,
        gamma=0.97,
        gae_lambda=0.9,
        seed=0,
        device="cpu",
    )
    seen = {}
    original = model.rollout_buffer.compute_returns_and_advantage

    def spy(last_values, dones):
        b = model.rollout_buffer
        seen.update(
            rew=b.rewards.copy(),
            val=b.values.copy(),
            starts=b.episode_starts.copy(),
            last=last_values.clone(),
            dones=np.array(dones, np.float32),
        )
        original(last_values, dones)

    model.rollout_buffer.compute_returns_and_advantage = spy

    class _Cb(BaseCallback):
        def _on_step(self) -> bool:
            return True

    cb = _Cb()
    cb.init_callback(model)
    model._setup_learn(37 * 3, cb)
    model.collect_rollouts(model.env, cb, model.rollout_buffer, n_rollout_steps=37)
    env.close()
    assert seen["starts"].any()
    return seen, model.rollout_buffer


@pytest.fixture(scope="module")
def ppo_rollout():
    return _ppo_rollout()


def _gae_on_rollout(seen, last_value):
    """The README's SB3 line on what the spy saw, with the rollout's γ and λ."""
    return _gae_as_sb3(
        seen["rew"], seen["val"], seen["starts"], last_value, 0.97, 0.9, dones=seen["dones"]
    )


def test_ppo_collect_rollouts_with_a_time_limit(ppo_rollout):
    """The README's SB3 line on a real rollout, ``last_values`` flattened (as SB3 does
    inside ``compute_returns_and_advantage``)."""
    seen, buf = ppo_rollout
    assert seen["last"].shape == (3, 1)  # what SB3 passes: predict_values' [n_envs, 1]
    res = _gae_on_rollout(seen, seen["last"].flatten())
    _close(res.advantages, buf.advantages)
    _close(res.value_targets, buf.returns)


def test_ppo_last_values_as_sb3_passes_them(ppo_rollout):
    """SB3 hands compute_returns_and_advantage ``last_values`` of shape ``[n_envs, 1]``
    (its value head's): beside the ``[T, n_envs]`` buffer with ``time_dim=0`` they are one
    value per env."""
    seen, buf = ppo_rollout
    res = _gae_on_rollout(seen, seen["last"])
    _close(res.advantages, buf.advantages)
