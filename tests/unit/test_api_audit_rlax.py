"""API audit: rlax users porting their calls to rltscan (rlax 0.1.9, jax, float64).

rlax works on one window with a per-step ``discount_t`` (0 after a terminal step) and
next-state values ``v_t`` (``values`` of T+1 entries for GAE). The natural mapping is
``discount=discount_t`` with ``next_values=v_t`` (or ``values[:-1]`` / ``last_value``),
and ``terminated`` = the steps where the episode terminated (rltscan requires some flag
argument: an all-False ``terminated`` is what an rlax user passes, since the discount
already carries the ends). Each case runs rlax itself on the same float64 data.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import rltscan

jax = pytest.importorskip("jax")
rlax = pytest.importorskip("rlax")
jnp = jax.numpy

RTOL, ATOL = 1e-10, 1e-10
SETTINGS = [(0.9, 0.8), (0.0, 0.5), (1.0, 1.0), (0.9, 0.0), (0.97, 1.0), (1.0, 0.0)]
SEEDS = [0, 1]


@pytest.fixture(autouse=True)
def _x64():
    with jax.enable_x64(True):
        yield


def _window(seed: int, gamma: float, T: int = 13):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=T)
    v = rng.normal(size=T + 1)
    term = rng.random(T) < 0.25
    term[T // 2] = True  # an episode end mid-window, always
    disc = float(gamma) * (1.0 - term)
    return rng, r, v, term, disc


def _close(got, want):
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=RTOL, atol=ATOL)


J = jnp.asarray


# --------------------------------------------------------------------------- GAE / λ-returns


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("gamma", "lam"), SETTINGS)
@pytest.mark.parametrize("form", ["next_values", "last_value", "gamma_array", "flags"])
def test_truncated_gae(seed, gamma, lam, form):
    _, r, v, term, disc = _window(seed, gamma)
    want = rlax.truncated_generalized_advantage_estimation(J(r), J(disc), lam, J(v))
    no_flags = np.zeros_like(term)
    kw = {
        "next_values": dict(discount=disc, next_values=v[1:], terminated=no_flags),
        "last_value": dict(discount=disc, last_value=v[-1], terminated=no_flags),
        "gamma_array": dict(gamma=disc, last_value=v[-1], terminated=no_flags),
        "flags": dict(gamma=gamma, terminated=term, last_value=v[-1]),
    }[form]
    res = rltscan.gae(r, v[:-1], lam=lam, **kw)
    _close(res.advantages, want)


@pytest.mark.parametrize("seed", SEEDS)
def test_truncated_gae_per_step_lambda(seed):
    rng, r, v, term, disc = _window(seed, 0.95)
    lam_t = rng.random(r.shape)
    want = rlax.truncated_generalized_advantage_estimation(J(r), J(disc), J(lam_t), J(v))
    for kw in (dict(lam=lam_t), dict(lam_per_step=lam_t)):
        res = rltscan.gae(r, v[:-1], next_values=v[1:], discount=disc, terminated=term, **kw)
        _close(res.advantages, want)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("gamma", "lam"), SETTINGS)
def test_lambda_returns(seed, gamma, lam):
    _, r, v, term, disc = _window(seed, gamma)
    want = rlax.lambda_returns(J(r), J(disc), J(v[1:]), lam)
    res = rltscan.td_lambda(
        r, next_values=v[1:], discount=disc, terminated=np.zeros_like(term), lam=lam
    )
    _close(res.lambda_returns, want)
    res = rltscan.td_lambda(r, v[:-1], last_value=v[-1], terminated=term, gamma=gamma, lam=lam)
    _close(res.lambda_returns, want)


@pytest.mark.parametrize("seed", SEEDS)
def test_lambda_returns_per_step_lambda(seed):
    rng, r, v, term, disc = _window(seed, 0.9)
    lam_t = rng.random(r.shape)
    want = rlax.lambda_returns(J(r), J(disc), J(v[1:]), J(lam_t))
    res = rltscan.td_lambda(r, next_values=v[1:], discount=disc, terminated=term, lam=lam_t)
    _close(res.lambda_returns, want)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [0.0, 0.9, 1.0])
def test_discounted_returns(seed, gamma):
    _, r, v, term, disc = _window(seed, gamma)
    want = rlax.discounted_returns(J(r), J(disc), J(v[-1]))
    res = rltscan.discounted_returns(r, terminated=term, discount=disc, last_value=v[-1])
    _close(res.returns, want)
    # rlax's array v_t: only its last entry is read (λ = 1); rltscan's next_values likewise
    want = rlax.discounted_returns(J(r), J(disc), J(v[1:]))
    res = rltscan.discounted_returns(r, terminated=term, discount=disc, next_values=v[1:])
    _close(res.returns, want)


def test_batched_windows_via_vmap_are_b_t():
    """rlax users vmap over a leading batch axis: ``[B, T]``, time last (the default)."""
    rng = np.random.default_rng(3)
    B, T = 4, 11
    r, v = rng.normal(size=(B, T)), rng.normal(size=(B, T + 1))
    term = rng.random((B, T)) < 0.2
    disc = 0.95 * (1.0 - term)
    want = jax.vmap(rlax.truncated_generalized_advantage_estimation, in_axes=(0, 0, None, 0))(
        J(r), J(disc), 0.9, J(v)
    )
    res = rltscan.gae(r, v[:, :-1], last_value=v[:, -1], terminated=term, gamma=0.95, lam=0.9)
    _close(res.advantages, want)
    # acme-style time-major [T, B]: vmapped over axis 1
    want_tm = jax.vmap(rlax.lambda_returns, in_axes=(1, 1, 1, None), out_axes=1)(
        J(r.T), J(disc.T), J(v[:, 1:].T), 0.7
    )
    res = rltscan.td_lambda(
        r.T,
        next_values=v[:, 1:].T,
        discount=disc.T,
        terminated=np.zeros_like(term.T),
        lam=0.7,
        time_dim=0,
    )
    _close(res.lambda_returns, want_tm)


def test_discount_alone_is_refused_naming_terminated():
    """An rlax user passes only ``discount_t``: refused (not guessed), naming the flag."""
    _, r, v, _, disc = _window(0, 0.9)
    with pytest.raises(rltscan.ParameterError, match="terminated="):
        rltscan.gae(r, v[:-1], discount=disc, next_values=v[1:])


# --------------------------------------------------------------------------- V-trace


def _vtrace_window(seed: int, gamma: float):
    """``_window`` with importance ratios ``rho`` (target over behaviour)."""
    rng, r, v, _, disc = _window(seed, gamma)
    return r, v, disc, np.exp(0.7 * rng.normal(size=r.shape))


def _vtrace(r, v, disc, rho, lam, **clips):
    """rlax's arguments in rltscan's: ``v_t`` as next values, the ratios as
    ``logp_target`` over a zero ``logp_behavior``, no flags (the discount has the ends)."""
    return rltscan.vtrace(
        r,
        v[:-1],
        next_values=v[1:],
        discount=disc,
        terminated=np.zeros(r.shape, bool),
        logp_target=np.log(rho),
        logp_behavior=np.zeros_like(r),
        lam=lam,
        **clips,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(
    ("gamma", "lam"), [(0.9, 1.0), (1.0, 1.0), (0.0, 1.0), (0.9, 0.7), (0.95, 0.0)]
)
@pytest.mark.parametrize(("rho_clip", "pg_clip"), [(1.0, 1.0), (1.3, 0.8), (np.inf, np.inf)])
def test_vtrace_vs(seed, gamma, lam, rho_clip, pg_clip):
    r, v, disc, rho = _vtrace_window(seed, gamma)
    out = rlax.vtrace_td_error_and_advantage(
        J(v[:-1]), J(v[1:]), J(r), J(disc), J(rho), lam, rho_clip, pg_clip
    )
    res = _vtrace(r, v, disc, rho, lam, rho_clip=rho_clip, c_clip=1.0, pg_rho_clip=pg_clip)
    _close(res.vs, np.asarray(out.errors) + v[:-1])
    if lam == 1.0:
        _close(res.pg_advantages, out.pg_advantage)


@pytest.mark.xfail(
    strict=True,
    reason="finding: vtrace pg_advantages with lam<1 differ from rlax's "
    "vtrace_td_error_and_advantage (rlax bootstraps λ·vs_{t+1}+(1−λ)·v_{t+1}); documented in "
    "CONVENTIONS §3.4 but returned without an error or warning",
)
@pytest.mark.parametrize("lam", [0.0, 0.7])
def test_vtrace_pg_advantages_with_lambda_below_one(lam):
    r, v, disc, rho = _vtrace_window(0, 0.9)
    out = rlax.vtrace_td_error_and_advantage(J(v[:-1]), J(v[1:]), J(r), J(disc), J(rho), lam)
    res = _vtrace(r, v, disc, rho, lam)
    _close(res.pg_advantages, out.pg_advantage)


# --------------------------------------------------------------------------- off-policy returns


def _retrace_shifted(r, q_t, v_t, disc, log_c, **kw):
    """rlax's window shifted by one step into rltscan's indexing: ``q_t`` and ``log_c``
    (K−1 entries, at t+1) behind an unread first entry, ``v_t`` as ``next_expected_q``,
    no flags (the discount has the ends)."""
    K = r.size
    return rltscan.retrace(
        r,
        np.concatenate([[0.0], q_t]),
        next_expected_q=v_t,
        discount=disc,
        terminated=np.zeros(K, bool),
        logp_target=np.concatenate([[0.0], log_c]),
        logp_behavior=np.zeros(K),
        **kw,
    )


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("gamma", [0.0, 0.9, 1.0])
def test_general_off_policy_returns_from_q_and_v(seed, gamma):
    """rlax's window is shifted by one: ``q_t``, ``c_t`` are at t+1 (K−1 entries), ``v_t``
    is E_π Q(s_{t+1}). In rltscan's step indexing: ``q_values[1:] = q_t``,
    ``next_expected_q = v_t`` and the trace of step t+1 from ``logp_target[1:] = log c_t``
    (``trace="is"``, λ = 1); ``q_values[0]`` and ``logp_target[0]`` are never read."""
    rng, r, _, _, disc = _window(seed, gamma)
    K = r.size
    q_t, v_t, c_t = rng.normal(size=K - 1), rng.normal(size=K), 1.2 * rng.random(K - 1)
    want = rlax.general_off_policy_returns_from_q_and_v(J(q_t), J(v_t), J(r), J(disc), J(c_t))
    with warnings.catch_warnings():  # γ·λ·c̄ > 1 with the unclipped trace
        warnings.simplefilter("ignore")
        res = _retrace_shifted(r, q_t, v_t, disc, np.log(c_t), trace="is", lam=1.0)
    _close(res.retrace_targets, want)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("gamma", "lam"), [(0.9, 1.0), (0.9, 0.7), (1.0, 0.0), (0.0, 1.0)])
def test_retrace_continuous(seed, gamma, lam):
    rng, r, _, _, disc = _window(seed, gamma)
    T = r.size
    q_tm1, q_t, v_t = rng.normal(size=T), rng.normal(size=T - 1), rng.normal(size=T)
    log_rhos = rng.normal(size=T - 1)
    want = rlax.retrace_continuous(J(q_tm1), J(q_t), J(v_t), J(r), J(disc), J(log_rhos), lam)
    res = _retrace_shifted(r, q_t, v_t, disc, log_rhos, lam=lam)
    _close(res.retrace_targets - q_tm1, want)
