"""Values that peers accept mean the same here (issues 21 and 27; docs/CONVENTIONS.md §8).

TorchRL: its functional estimators on its own tensor shapes (``[*B, T, 1]``, ``done``
with ``terminated``), its ``test_gae_param_as_tensor`` cases (γ and λ as a scalar, a
one-element tensor and a full-shape tensor), and its value modules on a collector's
TensorDict. rlax: the infinite clip thresholds, against float64 loops written from
rlax's definitions (rlax itself is not installed). Stable-Baselines3 and CleanRL: their
GAE loops over their buffers (episode starts, the final dones), as float64 loops.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from conftest import assert_close_to_oracle, is_slow_backend

import rltscan
from rltscan import AmbiguousInputError, DataError, ParameterError

F32, F64 = torch.float32, torch.float64
INF = math.inf


def _torchrl_batch(N: tuple[int, ...], T: int, dtype=F64, seed: int = 0, p: float = 0.1):
    """TorchRL's test inputs: ``[*N, T, 1]``, ``done`` with ``terminated`` ⊆ ``done``."""
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(*N, T, 1, generator=g) < p
    terminated = done & (torch.rand(*N, T, 1, generator=g) < 0.5)
    r, v, nv = (torch.randn(*N, T, 1, generator=g, dtype=dtype) for _ in range(3))
    return done, terminated, r, v, nv


# --------------------------------------------------------------------------- TorchRL GAE


@pytest.mark.parametrize("N", [(1,), (3,), (2, 3)], ids=lambda n: "x".join(map(str, n)))
def test_gae_matches_torchrl_on_its_shapes(N, backend):
    """TorchRL's ``[*B, T, 1]``, ``time_dim=-2``, (done, terminated) as TorchRL passes them."""
    tf = pytest.importorskip("torchrl.objectives.value.functional")
    T = 9 if is_slow_backend(backend) else 60
    done, term, r, v, nv = _torchrl_batch(N, T)
    adv, target = tf.generalized_advantage_estimate(0.95, 0.9, v, nv, r, done, term)
    res = rltscan.gae(r, v, next_values=nv, dones=done, dones_mean="ended", terminated=term,
                      gamma=0.95, lam=0.9, time_dim=-2, backend=backend)  # fmt: skip
    assert res.advantages.shape == adv.shape == (*N, T, 1)
    # TorchRL forms γλ·(1 − done) in float32 even for float64 inputs: fp32 tolerance
    assert_close_to_oracle(res.advantages, adv, F32)
    assert_close_to_oracle(res.value_targets, target, F32)


@pytest.mark.parametrize("lmbda_tensor", ["scalar", "tensor", "tensor_single_element"])
@pytest.mark.parametrize("gamma_tensor", ["scalar", "tensor", "tensor_single_element"])
@pytest.mark.parametrize("has_done", [True, False])
@pytest.mark.parametrize("dtype", [F32, F64], ids=["f32", "f64"])
@pytest.mark.parametrize("N", [(1,), (8,), (7, 3)], ids=lambda n: "x".join(map(str, n)))
def test_gae_param_as_tensor(N, dtype, has_done, gamma_tensor, lmbda_tensor):
    """TorchRL's ``test_gae_param_as_tensor``, ported: γ/λ as a number, a one-element
    tensor or a tensor shaped like the rewards give TorchRL's scalar result, in the
    rewards' shape (issue 27: ``gamma=torch.tensor([0.99])`` returned ``[1, *shape]``)."""
    tf = pytest.importorskip("torchrl.objectives.value.functional")
    gamma, lmbda, T = 0.95, 0.90, 200
    torch.manual_seed(0)
    done = torch.zeros(*N, T, 1, dtype=torch.bool)
    terminated = done.clone()
    if has_done:
        terminated = terminated.bernoulli_(0.1)
        done = done.bernoulli_(0.1) | terminated
    reward = torch.randn(*N, T, 1, dtype=dtype)
    state_value = torch.randn(*N, T, 1, dtype=dtype)
    next_state_value = torch.randn(*N, T, 1, dtype=dtype)

    def as_given(kind: str, x: float):
        if kind == "tensor":
            return torch.full_like(reward, x)
        if kind == "tensor_single_element":
            return torch.as_tensor([x])
        return x

    want = tf.generalized_advantage_estimate(
        gamma, lmbda, state_value, next_state_value, reward, done=done, terminated=terminated
    )
    g, lam = as_given(gamma_tensor, gamma), as_given(lmbda_tensor, lmbda)
    got = rltscan.gae(reward, state_value, next_values=next_state_value, dones=done,
                      dones_mean="ended", terminated=terminated, time_dim=-2, gamma=g,
                      lam=lam)  # fmt: skip
    assert got.advantages.shape == want[0].shape == (*N, T, 1)
    assert got.settings is None
    torch.testing.assert_close(got.advantages, want[0], rtol=1e-4, atol=1e-4)  # TorchRL's own
    assert_close_to_oracle(got.value_targets, want[1], F32)


def test_a_full_shape_gamma_is_the_per_step_discount(rng):
    """A γ tensor of the rewards' shape is γ_t (docs/CONVENTIONS.md §1.7), exactly what
    ``discount=`` computes, and so is λ; a ``[B, 1, 1]`` γ is one γ per sequence."""
    done, term, r, v, nv = _torchrl_batch((4,), 30, seed=3)
    g = torch.as_tensor(rng.uniform(0.5, 1.0, r.shape))
    lam = torch.as_tensor(rng.uniform(0.0, 1.0, r.shape))
    kw = dict(next_values=nv, terminated=term, truncated=done & ~term, time_dim=-2)
    got = rltscan.gae(r, v, **kw, gamma=g, lam=lam)
    want = rltscan.gae(r, v, **kw, discount=g, lam_per_step=lam)
    torch.testing.assert_close(got.advantages, want.advantages, rtol=0, atol=0)
    per_env = torch.tensor([0.9, 0.5, 0.99, 0.0], dtype=F64).view(4, 1, 1)
    got = rltscan.gae(r, v, **kw, gamma=per_env, lam=0.8).advantages
    for b in range(4):
        one = rltscan.gae(r[b], v[b], next_values=nv[b], terminated=term[b],
                          truncated=(done & ~term)[b], gamma=float(per_env[b]), lam=0.8,
                          time_dim=0).advantages  # fmt: skip
        torch.testing.assert_close(got[b], one)


def test_td_lambda_matches_torchrl_with_per_step_gamma_and_lambda(rng):
    tf = pytest.importorskip("torchrl.objectives.value.functional")
    done, term, r, _, nv = _torchrl_batch((3, 2), 50, seed=5)
    g = torch.as_tensor(rng.uniform(0.5, 1.0, r.shape))
    lam = torch.as_tensor(rng.uniform(0.0, 1.0, r.shape))
    for gamma, lmbda in ((0.97, 0.9), (g, 0.9), (0.97, lam), (g, lam)):
        want = tf.td_lambda_return_estimate(gamma, lmbda, nv, r, done, term)
        got = rltscan.td_lambda(r, next_values=nv, dones=done, dones_mean="ended",
                                terminated=term, gamma=gamma, lam=lmbda, time_dim=-2)  # fmt: skip
        assert got.lambda_returns.shape == want.shape
        assert_close_to_oracle(got.lambda_returns, want, F32)


@pytest.mark.parametrize("thresholds", [(1.0, 1.0), (INF, 1.0), (1.0, INF), (INF, INF), (2.0, 0.5)])
def test_vtrace_matches_torchrl_with_its_thresholds(thresholds, backend):
    """TorchRL's ``vtrace_advantage_estimate`` (λ = 1, the pg ratio clipped at ρ̄), an
    infinite threshold included (issue 27: refused before)."""
    tf = pytest.importorskip("torchrl.objectives.value.functional")
    rho, c = thresholds
    T = 9 if is_slow_backend(backend) else 80
    done, term, r, v, nv = _torchrl_batch((3,), T, seed=7)
    g = torch.Generator().manual_seed(8)
    log_pi = torch.log(torch.rand(3, T, 1, generator=g, dtype=F64) * 0.95 + 0.05)
    log_mu = torch.log(torch.rand(3, T, 1, generator=g, dtype=F64) * 0.95 + 0.05)
    adv, vs = tf.vtrace_advantage_estimate(0.9, log_pi, log_mu, v, nv, r, done, term,
                                           rho_thresh=rho, c_thresh=c)  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # γ·c̄ > 1: not contractive, said
        got = rltscan.vtrace(r, v, logp_target=log_pi, logp_behavior=log_mu, next_values=nv,
                             dones=done, dones_mean="ended", terminated=term, gamma=0.9,
                             lam=1.0, rho_clip=rho, c_clip=c, time_dim=-2,
                             backend=backend)  # fmt: skip
    assert_close_to_oracle(got.vs, vs, F32)
    assert_close_to_oracle(got.pg_advantages, adv, F32)


# --------------------------------------------------------------------------- TensorDict


def _collector_batch(steps: int = 40, envs: int = 3, max_steps: int = 13):
    """A real TorchRL rollout: ``[envs, steps]`` from a collector over CartPole with a
    step limit (so there are truncations as well as terminations), then the critic
    (a ValueOperator) on the observations and on ``td["next"]``, as PPO code runs it."""
    pytest.importorskip("gymnasium")
    envs_mod = pytest.importorskip("torchrl.envs")
    collectors = pytest.importorskip("torchrl.collectors")
    modules = pytest.importorskip("torchrl.modules")
    torch.manual_seed(0)
    env = envs_mod.TransformedEnv(
        envs_mod.SerialEnv(envs, lambda: envs_mod.GymEnv("CartPole-v1")),
        envs_mod.StepCounter(max_steps=max_steps),
    )
    env.set_seed(0)
    collector = collectors.Collector(env, policy=None, frames_per_batch=envs * steps,
                                     total_frames=envs * steps)  # fmt: skip
    td = next(iter(collector))
    collector.shutdown()
    critic = modules.ValueOperator(torch.nn.Linear(4, 1), in_keys=["observation"])
    with torch.no_grad():
        critic(td)
        critic(td["next"])
    return td


def test_gae_on_a_collector_tensordict_is_torchrl_gae_in_one_line():
    """``rltscan.gae(td, gamma=, lam=)`` writes ``advantage``/``value_target`` as
    TorchRL's GAE module does, on a collector's batch with both kinds of episode end."""
    value = pytest.importorskip("torchrl.objectives.value")
    td = _collector_batch()
    assert td["next", "terminated"].any() and (td["next", "truncated"] & ~td["next",
                                               "terminated"]).any()  # fmt: skip
    want = value.GAE(gamma=0.97, lmbda=0.9, value_network=None)(td.clone())
    res = rltscan.gae(td, gamma=0.97, lam=0.9)
    assert td["advantage"].shape == want["advantage"].shape == (3, 40, 1)
    assert_close_to_oracle(td["advantage"], want["advantage"], F32)
    assert_close_to_oracle(td["value_target"], want["value_target"], F32)
    assert res.advantages is td["advantage"] or torch.equal(res.advantages, td["advantage"])
    # the inputs it read are unchanged
    assert torch.equal(td["state_value"], want["state_value"])


def test_td_lambda_on_a_tensordict_is_torchrl_tdlambda():
    value = pytest.importorskip("torchrl.objectives.value")
    td = _collector_batch(steps=30)
    want = value.TDLambdaEstimator(gamma=0.97, lmbda=0.9, value_network=None)(td.clone())
    rltscan.td_lambda(td, gamma=0.97, lam=0.9)
    assert_close_to_oracle(td["value_target"], want["value_target"], F32)
    assert_close_to_oracle(td["advantage"], want["advantage"], F32)


def test_vtrace_on_a_tensordict_reads_the_behaviour_log_prob():
    """V-trace needs π's log-probabilities (TorchRL's module runs the actor for them):
    passed explicitly, the rest comes from the TensorDict's keys."""
    tf = pytest.importorskip("torchrl.objectives.value.functional")
    td = _collector_batch(steps=20)
    g = torch.Generator().manual_seed(1)
    td["sample_log_prob"] = torch.log(torch.rand(3, 20, 1, generator=g) * 0.9 + 0.1)
    log_pi = torch.log(torch.rand(3, 20, 1, generator=g) * 0.9 + 0.1)
    adv, vs = tf.vtrace_advantage_estimate(
        0.9, log_pi, td["sample_log_prob"], td["state_value"], td["next", "state_value"],
        td["next", "reward"], td["next", "done"], td["next", "terminated"],
    )  # fmt: skip
    rltscan.vtrace(td, logp_target=log_pi, gamma=0.9)
    assert_close_to_oracle(td["advantage"], adv, F32)
    assert_close_to_oracle(td["value_target"], vs, F32)


def test_tensordict_refusals_name_the_fix():
    tensordict = pytest.importorskip("tensordict")
    td = tensordict.TensorDict(
        {("next", "reward"): torch.zeros(2, 5, 1), ("next", "done"): torch.zeros(2, 5, 1).bool(),
         "state_value": torch.zeros(2, 5, 1)},
        [2, 5],
    )  # fmt: skip
    with pytest.raises(DataError, match=r"has no \('next', 'state_value'\).*pass next_values="):
        rltscan.gae(td)
    td["next", "state_value"] = torch.zeros(2, 5, 1)
    with pytest.raises(AmbiguousInputError, match='pass ends_are="terminal"'):
        rltscan.gae(td)  # done alone: terminated or truncated is not said
    rltscan.gae(td, ends_are="truncated")
    assert td["advantage"].shape == (2, 5, 1)
    with pytest.raises(ParameterError, match="takes no TensorDict"):
        rltscan.discounted_returns(td)
    with pytest.raises(ParameterError, match="one setting"):
        rltscan.gae(td, gamma=[0.9, 0.99], ends_are="truncated")
    with pytest.raises(ParameterError, match="time_dim"):
        rltscan.gae(td, time_dim=2, ends_are="truncated")


# --------------------------------------------------------------------------- rlax: no clipping


def rlax_vtrace(v_tm1, v_t, r_t, discount_t, rho_tm1, lambda_, clip_rho, clip_pg_rho):
    """rlax's ``vtrace_td_error_and_advantage`` as a float64 loop (c = λ·min(1, ρ))."""
    T = len(r_t)
    c = np.minimum(1.0, rho_tm1) * lambda_
    rho_c = np.minimum(clip_rho, rho_tm1)
    td = rho_c * (r_t + discount_t * v_t - v_tm1)
    err, acc = np.zeros(T), 0.0
    for i in reversed(range(T)):
        acc = td[i] + discount_t[i] * c[i] * acc
        err[i] = acc
    targets = err + v_tm1
    q_boot = np.concatenate([lambda_ * targets[1:] + (1 - lambda_) * v_tm1[1:], v_t[-1:]])
    pg = np.minimum(clip_pg_rho, rho_tm1) * (r_t + discount_t * q_boot - v_tm1)
    return targets, pg


def rlax_importance_corrected_td_errors(r_t, discount_t, rho_tm1, lambda_, values):
    """rlax's ``importance_corrected_td_errors`` (unclipped per-decision IS) as a loop:
    e_t = ρ_t (δ_t + γ_t λ e_{t+1})."""
    v_tm1, v_t = values[:-1], values[1:]
    delta = r_t + discount_t * v_t - v_tm1
    out, acc = np.zeros(len(r_t)), 0.0
    for i in reversed(range(len(r_t))):
        acc = rho_tm1[i] * (delta[i] + discount_t[i] * lambda_ * acc)
        out[i] = acc
    return out


def _rlax_sequence(rng, T):
    r = rng.normal(size=T)
    values = rng.normal(size=T + 1)
    discount = 0.9 * (rng.random(T) > 0.1)  # rlax: γ·(1 − terminal)
    logp_mu = np.log(rng.uniform(0.05, 1.0, T))
    logp_pi = np.log(rng.uniform(0.05, 1.0, T))
    return r, values, discount, logp_pi, logp_mu


@pytest.mark.parametrize("clip_rho,clip_pg", [(INF, INF), (INF, 1.0), (1.0, INF), (1.2, 0.8)])
def test_vtrace_infinite_thresholds_match_rlax(clip_rho, clip_pg, backend, rng):
    """rlax's V-trace with ``clip_rho_threshold=inf`` (and the pg one): no clipping,
    exactly; rlax's discount_t is the per-step γ_t (docs/CONVENTIONS.md §1.7)."""
    for T in (1, 7, 40) if is_slow_backend(backend) else (1, 7, 40, 300):
        r, values, discount, lp, lm = _rlax_sequence(rng, T)
        rho = np.exp(lp - lm)
        vs, pg = rlax_vtrace(values[:-1], values[1:], r, discount, rho, 1.0, clip_rho, clip_pg)
        got = rltscan.vtrace(r, values[:-1], next_values=values[1:], discount=discount,
                             logp_target=lp, logp_behavior=lm, terminated=np.zeros(T, bool),
                             lam=1.0, rho_clip=clip_rho, c_clip=1.0, pg_rho_clip=clip_pg,
                             time_dim=-1, backend=backend)  # fmt: skip
        assert_close_to_oracle(got.vs, vs, F64)
        assert_close_to_oracle(got.pg_advantages, pg, F64)


@pytest.mark.parametrize("lam", [1.0, 0.8, 0.0])
def test_importance_corrected_td_errors_are_vtrace_without_clipping(lam, backend, rng):
    """rlax's per-decision importance-corrected TD errors: V-trace with ρ̄ = c̄ = inf."""
    T = 30 if is_slow_backend(backend) else 200
    r, values, discount, lp, lm = _rlax_sequence(rng, T)
    want = rlax_importance_corrected_td_errors(r, discount, np.exp(lp - lm), lam, values)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got = rltscan.vtrace(r, values[:-1], next_values=values[1:], discount=discount,
                             logp_target=lp, logp_behavior=lm, terminated=np.zeros(T, bool),
                             lam=lam, rho_clip=INF, c_clip=INF, backend=backend)  # fmt: skip
    assert_close_to_oracle(got.vs - values[:-1], want, F64)


def test_retrace_without_a_c_clip_is_importance_sampling(backend, rng):
    """Retrace's c = λ·min(c̄, π/μ) with c̄ = inf is the ``is`` trace λ·π/μ, exactly."""
    T = 25 if is_slow_backend(backend) else 150
    term = rng.random((2, T)) < 0.05
    kw = dict(q_values=rng.normal(size=(2, T)), next_expected_q=rng.normal(size=(2, T)),
              logp_target=np.log(rng.uniform(0.1, 1, (2, T))),
              logp_behavior=np.log(rng.uniform(0.1, 1, (2, T))), terminated=term,
              gamma=0.9, lam=0.7, backend=backend)  # fmt: skip
    r = rng.normal(size=(2, T))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        unclipped = rltscan.retrace(r, c_clip=INF, **kw).retrace_targets
    is_trace = rltscan.retrace(r, trace="is", **kw).retrace_targets
    assert_close_to_oracle(unclipped, is_trace, F64)


@pytest.mark.parametrize("name", ["rho_clip", "c_clip", "pg_rho_clip"])
@pytest.mark.parametrize("bad", [math.nan, -INF, -1.0, 0.0])
def test_nan_and_non_positive_clips_stay_refused(name, bad):
    with pytest.raises(ParameterError, match=rf"{name} must be > 0"):
        rltscan.vtrace(np.zeros(4), np.zeros(4), logp_target=np.zeros(4),
                       logp_behavior=np.zeros(4), terminated=np.zeros(4, bool),
                       missing_bootstrap="zero", **{name: bad})  # fmt: skip


def test_the_command_line_keeps_clips_finite():
    """A file run records its parameters as JSON, which has no infinity: ``--rho-clip inf``
    stays refused there, with the one wording."""
    from rltscan import api

    with pytest.raises(ParameterError, match=r"--rho-clip must be a finite number, got inf"):
        api.check_params({"rho_clip": INF})


# --------------------------------------------------------------------------- γ: lists vs tensors


def test_lists_are_settings_and_tensors_are_not(rng):
    r, v = rng.normal(size=(3, 12)), rng.normal(size=(3, 12))
    term = rng.random((3, 12)) < 0.1
    kw = dict(terminated=term, last_value=np.zeros(3))
    for several in ([0.9, 0.99], (0.9, 0.99)):
        res = rltscan.gae(r, v, **kw, gamma=several)
        assert res.advantages.shape == (2, 3, 12)
    one = rltscan.gae(r, v, **kw, gamma=np.array([0.9])).advantages
    assert one.shape == (3, 12)
    np.testing.assert_allclose(one, rltscan.gae(r, v, **kw, gamma=0.9).advantages)
    with pytest.raises(ParameterError, match=r"gamma is a tensor of shape \(2,\).*list"):
        rltscan.gae(r, v, **kw, gamma=np.array([0.9, 0.99]))
    with pytest.raises(ParameterError, match="takes one gamma"):
        rltscan.eligibility_traces(r, terminated=term, gamma=torch.full((3, 12), 0.9))
    with pytest.raises(ParameterError, match='"discount" gives gamma per step too'):
        rltscan.gae(r, v, **kw, gamma=np.full((3, 12), 0.9), discount=np.full((3, 12), 0.9))
    with pytest.raises(DataError, match='"discount" must be in \\[0, 1\\]'):
        rltscan.gae(r, v, **kw, gamma=np.full((3, 12), 1.5))


# --------------------------------------------------------------------------- SB3 and CleanRL


def sb3_gae(rewards, values, episode_starts, last_values, dones, gamma, lam):
    """Stable-Baselines3's ``RolloutBuffer.compute_returns_and_advantage``, as a float64 loop."""
    T, episode_starts = len(rewards), episode_starts.astype(np.float64)
    adv, last = np.zeros_like(rewards), 0.0
    for step in reversed(range(T)):
        if step == T - 1:
            nonterminal, next_values = 1.0 - dones.astype(np.float64), last_values
        else:
            nonterminal, next_values = 1.0 - episode_starts[step + 1], values[step + 1]
        delta = rewards[step] + gamma * next_values * nonterminal - values[step]
        last = delta + gamma * lam * nonterminal * last
        adv[step] = last
    return adv


def cleanrl_gae(rewards, values, dones, next_value, next_done, gamma, lam):
    """CleanRL's ``ppo.py`` advantage loop (``dones[t]``: obs t starts an episode), float64."""
    T, dones = len(rewards), dones.astype(np.float64)
    adv, last = np.zeros_like(rewards), 0.0
    for t in reversed(range(T)):
        if t == T - 1:
            nonterminal, next_values = 1.0 - next_done, next_value
        else:
            nonterminal, next_values = 1.0 - dones[t + 1], values[t + 1]
        delta = rewards[t] + gamma * next_values * nonterminal - values[t]
        adv[t] = last = delta + gamma * lam * nonterminal * last
    return adv


def _buffer(rng, T=32, B=4):
    return (rng.normal(size=(T, B)), rng.normal(size=(T, B)),
            (rng.random((T, B)) < 0.15).astype(np.float32),  # starts, float like SB3's
            rng.normal(size=B), rng.random(B) < 0.5)  # fmt: skip


def test_sb3_buffer_needs_no_hand_shifting(backend, rng):
    T = 8 if is_slow_backend(backend) else 32
    r, v, starts, last_values, dones = _buffer(rng, T)
    want = sb3_gae(r, v, starts, last_values, dones, 0.99, 0.95)
    got = rltscan.gae(r, v, episode_starts=starts, dones=dones, last_value=last_values,
                      ends_are="terminal", gamma=0.99, lam=0.95, time_dim=0,
                      backend=backend)  # fmt: skip
    assert_close_to_oracle(got.advantages, want, F64)
    assert_close_to_oracle(got.value_targets, want + v, F64)  # SB3's returns


def test_cleanrl_buffer_needs_no_hand_shifting(backend, rng):
    T = 8 if is_slow_backend(backend) else 32
    r, v, dones, next_value, next_done = _buffer(rng, T)
    want = cleanrl_gae(r, v, dones, next_value, next_done.astype(np.float64), 0.99, 0.95)
    for kw in (dict(dones=dones, dones_mean="starts", last_dones=next_done),
               dict(episode_starts=dones, dones=next_done)):  # fmt: skip
        got = rltscan.gae(r, v, **kw, last_value=next_value, ends_are="terminal",
                          gamma=0.99, lam=0.95, time_dim=0, backend=backend)  # fmt: skip
        assert_close_to_oracle(got.advantages, want, F64)


def test_old_gym_done_beside_terminals_splits_the_ends(rng):
    """``done`` (ended) beside ``terminated``: the other ends are truncations (the file
    resolver's rule), and beside ``truncated`` they are terminations; no ends_are."""
    T = 20
    term = rng.random(T) < 0.1
    trunc = (rng.random(T) < 0.1) & ~term
    r, v, nv = rng.normal(size=T), rng.normal(size=T), rng.normal(size=T)
    want = rltscan.gae(r, v, next_values=nv, terminated=term, truncated=trunc).advantages
    done = term | trunc
    for flags in (dict(terminated=term), dict(truncated=trunc)):
        got = rltscan.gae(r, v, next_values=nv, dones=done, dones_mean="ended", **flags)
        np.testing.assert_allclose(got.advantages, want, rtol=1e-12)
    with pytest.raises(ParameterError, match="ends_are is not used"):
        rltscan.gae(r, v, next_values=nv, dones=done, dones_mean="ended", terminated=term,
                    ends_are="terminal")  # fmt: skip


def test_a_bare_dones_is_never_guessed(rng):
    r, v = rng.normal(size=(6, 3)), rng.normal(size=(6, 3))
    dones = rng.random((6, 3)) < 0.3
    with pytest.raises(AmbiguousInputError, match='dones_mean="ended" or dones_mean="starts"'):
        rltscan.gae(r, v, dones=dones, last_value=np.zeros(3), time_dim=0)
    with pytest.raises(AmbiguousInputError, match='ends_are="terminal" or ends_are="truncated"'):
        rltscan.gae(r, v, dones=dones, dones_mean="ended", last_value=np.zeros(3), time_dim=0)
    with pytest.raises(ParameterError, match="dones_mean must be one of ended, starts"):
        rltscan.gae(r, v, dones=dones, dones_mean="end", last_value=np.zeros(3), time_dim=0)
    with pytest.raises(ParameterError, match="neither was given"):
        rltscan.gae(r, v, terminated=dones, ends_are="terminal", last_value=np.zeros(3),
                    time_dim=0)  # fmt: skip
    with pytest.raises(ParameterError, match=r'"last_dones".*goes with episode starts'):
        rltscan.gae(r, v, dones=dones, dones_mean="ended", last_dones=np.zeros(3, bool),
                    ends_are="terminal", last_value=np.zeros(3), time_dim=0)  # fmt: skip
    with pytest.raises(ParameterError, match='gae needs "terminated"'):
        rltscan.gae(r, v, last_value=np.zeros(3), time_dim=0)
    # prefix sums and traces: a termination and a truncation give the same numbers
    x = rltscan.prefix_sum(r, dones=dones, dones_mean="ended", time_dim=0).prefix_sums
    np.testing.assert_allclose(x, rltscan.prefix_sum(r, terminated=dones, time_dim=0).prefix_sums)


def test_a_chunk_of_episode_starts_needs_the_next_chunks_first_start(rng):
    """Backward estimators in chunks: a chunk's last step ends where the next chunk's
    first step starts an episode; with a carry, that is given as last_dones."""
    T = 24
    r, v = rng.normal(size=(2, T)), rng.normal(size=(2, T))
    starts = rng.random((2, T)) < 0.2
    starts[:, 12] = True
    kw = dict(ends_are="terminal", gamma=0.9, lam=0.8, time_dim=-1)
    whole = rltscan.gae(r, v, episode_starts=starts, last_value=np.zeros(2), **kw).advantages
    late = rltscan.gae(r[:, 12:], v[:, 12:], episode_starts=starts[:, 12:],
                       last_value=np.zeros(2), **kw)  # fmt: skip
    with pytest.raises(ParameterError, match="pass last_dones="):
        rltscan.gae(r[:, :12], v[:, :12], episode_starts=starts[:, :12], carry=late.carry, **kw)
    early = rltscan.gae(r[:, :12], v[:, :12], episode_starts=starts[:, :12],
                        last_dones=starts[:, 12], carry=late.carry, **kw)  # fmt: skip
    np.testing.assert_allclose(np.concatenate([early.advantages, late.advantages], 1), whole,
                               rtol=1e-12, atol=1e-12)  # fmt: skip


def test_calls_with_dones_are_never_bound(monkeypatch):
    """A call whose flags are derived from dones takes the front end every time: it never
    reaches the bound-call key (whose lookup would skip the derivation)."""
    fn = rltscan.gae
    seen = []
    monkeypatch.setitem(fn.__globals__, "_GAE_KEY", lambda a: seen.append(1))
    args = (np.zeros(5), np.zeros(5))
    fn(*args, dones=np.zeros(5, bool), dones_mean="ended", ends_are="truncated",
       last_value=0.0)  # fmt: skip
    assert seen == []
    fn(*args, terminated=np.zeros(5, bool), last_value=0.0)
    assert seen == [1]


# --------------------------------------------------------------------------- torch.compile


def test_gamma_tensor_through_the_custom_op_in_fullgraph_compile():
    """``rltscan.ops.gae`` with γ as a 0-d tensor (how TorchRL's modules hold it, a
    buffer) and λ per step: one opaque op, the plain function's numbers."""
    import rltscan.ops as ops

    done, term, r, v, nv = _torchrl_batch((2,), 17, dtype=F32, seed=11)
    lam = torch.full_like(r, 0.9)

    def f(r, v, nv, done, term, gamma, lam):
        out = ops.gae(r, v, next_values=nv, dones=done, dones_mean="ended", terminated=term,
                      gamma=gamma, lam=lam, time_dim=-2)  # fmt: skip
        return out["advantages"]

    got = torch.compile(f, fullgraph=True, backend="aot_eager")(
        r, v, nv, done, term, torch.tensor(0.97), lam
    )
    want = rltscan.gae(r, v, next_values=nv, dones=done, dones_mean="ended", terminated=term,
                       gamma=0.97, lam=0.9, time_dim=-2)  # fmt: skip
    assert got.shape == (2, 17, 1)
    assert_close_to_oracle(got, want.advantages, F32)
