"""API audit: CleanRL's PPO advantage loop (ppo.py / ppo_continuous_action.py), as written
in CleanRL, on its own tensors: time-major ``[num_steps, num_envs]`` float32 torch
tensors, ``dones[t]`` the done flag that came with ``obs[t]`` (so
``nextnonterminal = 1 - dones[t + 1]``), ``next_done`` / ``next_value`` for the step after
the buffer, ``next_value = agent.get_value(next_obs).reshape(1, -1)``; every end
(terminated or truncated) is terminal to CleanRL.
"""

from __future__ import annotations

import pytest
import torch

import rltscan


def cleanrl_gae(rewards, values, dones, next_value, next_done, gamma, gae_lambda):
    num_steps = rewards.shape[0]
    advantages = torch.zeros_like(rewards)
    lastgaelam = 0
    for t in reversed(range(num_steps)):
        if t == num_steps - 1:
            nextnonterminal = 1.0 - next_done
            nextvalues = next_value
        else:
            nextnonterminal = 1.0 - dones[t + 1]
            nextvalues = values[t + 1]
        delta = rewards[t] + gamma * nextvalues * nextnonterminal - values[t]
        advantages[t] = lastgaelam = delta + gamma * gae_lambda * nextnonterminal * lastgaelam
    return advantages, advantages + values


def _buffer(seed, T, B):
    g = torch.Generator().manual_seed(seed)
    rewards, values = torch.randn(T, B, generator=g), torch.randn(T, B, generator=g)
    dones = (torch.rand(T, B, generator=g) < 0.25).float()
    next_done = (torch.rand(B, generator=g) < 0.25).float()
    next_value = torch.randn(B, generator=g).reshape(1, -1)
    return rewards, values, dones, next_value, next_done


def _gae(rewards, values, dones, next_done, last_value, **kw):
    """rltscan's call on CleanRL's tensors: ``dones`` mean starts, ``next_done`` is the
    step after the buffer's, every end terminal (``kw``: time_dim, γ, λ)."""
    return rltscan.gae(
        rewards,
        values,
        dones=dones,
        dones_mean="starts",
        last_dones=next_done,
        last_value=last_value,
        ends_are="terminal",
        **kw,
    )


def _assert_as_cleanrl(res, adv, ret):
    torch.testing.assert_close(res.advantages, adv, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(res.value_targets, ret, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize(("T", "B"), [(17, 4), (5, 1), (8, 3)])
@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (0.0, 0.5), (1.0, 1.0), (0.9, 0.0)])
def test_cleanrl_ppo_loop(seed, T, B, gamma, lam):
    rewards, values, dones, next_value, next_done = _buffer(seed, T, B)
    adv, ret = cleanrl_gae(rewards, values, dones, next_value, next_done, gamma, lam)
    res = _gae(
        rewards, values, dones, next_done, next_value.flatten(), time_dim=0, gamma=gamma, lam=lam
    )
    _assert_as_cleanrl(res, adv, ret)


@pytest.mark.parametrize(("T", "B"), [(9, 3), (4, 4)])
def test_next_value_as_cleanrl_shapes_it(T, B):
    """CleanRL's ``next_value`` is ``[1, num_envs]``, one step of the ``[T, B]`` layout:
    with ``time_dim=0`` it is read as one value per env, and the numbers are CleanRL's."""
    rewards, values, dones, next_value, next_done = _buffer(0, T, B)
    adv, ret = cleanrl_gae(rewards, values, dones, next_value, next_done, 0.99, 0.95)
    res = _gae(rewards, values, dones, next_done, next_value, time_dim=0)  # γ, λ: defaults
    _assert_as_cleanrl(res, adv, ret)


def test_a_one_step_next_value_without_time_dim_is_refused():
    """Without ``time_dim`` the ``[T, B]`` buffer reads as ``[B', T']`` = ``[T, B]`` and
    CleanRL's ``[1, B]`` (or ``[B, 1]``) fits neither one value per row nor one step of
    that reading: refused, naming time_dim=0 (a square buffer is refused before)."""
    rewards, values, dones, next_value, _ = _buffer(0, 9, 3)
    for last in (next_value, next_value.reshape(-1, 1)):
        with pytest.raises(rltscan.DataError, match="time_dim=0"):
            rltscan.gae(rewards, values, dones=dones, dones_mean="starts",
                        last_value=last, ends_are="terminal")  # fmt: skip


def test_forgetting_time_dim_is_refused():
    """``[num_steps, num_envs]`` without ``time_dim=0``: the per-env ``next_done`` does not
    fit the time-last reading, so it is refused naming time_dim=0."""
    rewards, values, dones, next_value, next_done = _buffer(0, 9, 3)
    with pytest.raises(rltscan.DataError, match="time_dim=0"):
        _gae(rewards, values, dones, next_done, next_value.flatten())


@pytest.mark.xfail(
    strict=True,
    reason="finding: a time-major [T, B] buffer with no per-sequence argument (returns with "
    "the default missing_bootstrap='zero', or next_values for every step) and time_dim "
    "left out is read as B'=T sequences of B steps, without an error",
)
def test_time_major_buffer_without_time_dim_and_no_per_env_argument():
    rewards, _, dones, _, next_done = _buffer(1, 9, 3)
    gamma = 0.99
    want = torch.zeros_like(rewards)
    acc = torch.zeros(3)
    ended = torch.cat([dones[1:], next_done[None]]).bool()
    for t in reversed(range(9)):
        acc = rewards[t] + gamma * torch.where(ended[t], 0.0, acc)
        want[t] = acc
    try:  # the CleanRL-style buffer, passed as a user would to the returns estimator
        res = rltscan.discounted_returns(rewards, terminated=ended, gamma=gamma)
    except rltscan.RltscanError:
        return
    torch.testing.assert_close(res.returns, want)
