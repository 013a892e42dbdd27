"""API audit: TorchRL's functional estimators on layouts beyond ``[*B, T, 1]``.

TorchRL's functions take ``time_dim`` (default -2) and feature axes after time, ``done``
(any end) and ``terminated`` (defaults to ``done``). Its factors are formed in float32
even for float64 inputs, so the comparisons use float32 tolerances.
"""

from __future__ import annotations

import pytest
import torch

import rltscan

F = pytest.importorskip("torchrl.objectives.value.functional")

D = torch.float64
RTOL, ATOL = 1e-5, 1e-5


def _close(got, want):
    assert got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


def _batch(shape, seed):
    g = torch.Generator().manual_seed(seed)
    done = torch.rand(*shape, generator=g) < 0.2
    term = done & (torch.rand(*shape, generator=g) < 0.5)
    r, v, nv = (torch.randn(*shape, generator=g, dtype=D) for _ in range(3))
    return done, term, r, v, nv


def _ends(nv, done, time_dim, **flags):
    """TorchRL's ``next_state_value`` and ``done`` (any end) as rltscan's arguments;
    ``flags``: ``terminated=`` or ``ends_are=``."""
    return dict(next_values=nv, dones=done, dones_mean="ended", time_dim=time_dim, **flags)


# (shape, TorchRL time_dim, rltscan time_dim); F > 1 features are independent sequences
LAYOUTS = [
    ((3, 9, 1), -2, -2),
    ((3, 9, 2), -2, -2),  # [B, T, F]: a multi-head critic
    ((9, 3, 1), 0, 0),  # time-major
    ((9, 3, 1), 0, -3),
    ((3, 9), -1, -1),
    ((9, 3), 0, 0),
    ((2, 9, 3, 1), 1, 1),  # [B, T, E, 1]: time in the middle
]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("shape", "tdim", "rdim"), LAYOUTS, ids=str)
@pytest.mark.parametrize(("gamma", "lam"), [(0.95, 0.9), (1.0, 1.0), (0.0, 0.5), (0.9, 0.0)])
def test_gae_layouts(seed, shape, tdim, rdim, gamma, lam):
    done, term, r, v, nv = _batch(shape, seed)
    adv, target = F.generalized_advantage_estimate(gamma, lam, v, nv, r, done, term, time_dim=tdim)
    res = rltscan.gae(r, v, gamma=gamma, lam=lam, **_ends(nv, done, rdim, terminated=term))
    _close(res.advantages, adv)
    _close(res.value_targets, target)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("shape", "tdim", "rdim"), LAYOUTS, ids=str)
def test_td_lambda_td1_td0_layouts(seed, shape, tdim, rdim):
    done, term, r, _, nv = _batch(shape, seed)
    kw = _ends(nv, done, rdim, terminated=term)
    want = F.td_lambda_return_estimate(0.9, 0.7, nv, r, done, term, time_dim=tdim)
    _close(rltscan.td_lambda(r, gamma=0.9, lam=0.7, **kw).lambda_returns, want)
    want = F.td1_return_estimate(0.9, nv, r, done, term, time_dim=tdim)
    _close(rltscan.discounted_returns(r, gamma=0.9, **kw).returns, want)
    if tdim == -2:  # td0 has no time_dim
        want = F.td0_return_estimate(0.9, nv, r, term, done=done)
        _close(rltscan.td_lambda(r, gamma=0.9, lam=0.0, **kw).lambda_returns, want)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize(("shape", "tdim", "rdim"), LAYOUTS, ids=str)
@pytest.mark.parametrize(("rho", "c"), [(1.0, 1.0), (1.2, 0.9)])
def test_vtrace_layouts(seed, shape, tdim, rdim, rho, c):
    done, term, r, v, nv = _batch(shape, seed)
    g = torch.Generator().manual_seed(seed + 10)
    lp, lm = (0.3 * torch.randn(*shape, generator=g, dtype=D) for _ in range(2))
    adv, vs = F.vtrace_advantage_estimate(
        0.9, lp, lm, v, nv, r, done, term, rho_thresh=rho, c_thresh=c, time_dim=tdim
    )
    res = rltscan.vtrace(
        r,
        v,
        logp_target=lp,
        logp_behavior=lm,
        gamma=0.9,
        rho_clip=rho,
        c_clip=c,
        **_ends(nv, done, rdim, terminated=term),
    )
    _close(res.vs, vs)
    _close(res.pg_advantages, adv)


def test_done_without_terminated_is_refused():
    """TorchRL reads ``terminated=None`` as ``terminated = done``; rltscan refuses to guess
    and names ``ends_are`` (with ``"terminal"`` it gives TorchRL's numbers)."""
    done, _, r, v, nv = _batch((3, 9, 1), 0)
    adv, _ = F.generalized_advantage_estimate(0.9, 0.8, v, nv, r, done)
    with pytest.raises(rltscan.AmbiguousInputError, match='ends_are="terminal"'):
        rltscan.gae(r, v, **_ends(nv, done, -2))
    res = rltscan.gae(r, v, gamma=0.9, lam=0.8, **_ends(nv, done, -2, ends_are="terminal"))
    _close(res.advantages, adv)


def test_per_step_gamma_is_torchrls_rolling_gamma():
    """A γ tensor of the rewards' shape: TorchRL's default ``rolling_gamma=True``."""
    done, term, r, _, nv = _batch((3, 9, 1), 2)
    gamma = 0.5 + 0.5 * torch.rand(3, 9, 1, generator=torch.Generator().manual_seed(3), dtype=D)
    want = F.td_lambda_return_estimate(gamma, 0.8, nv, r, done, term, rolling_gamma=True)
    res = rltscan.td_lambda(r, gamma=gamma, lam=0.8, **_ends(nv, done, -2, terminated=term))
    _close(res.lambda_returns, want)


def test_tensordict_with_done_and_truncated_but_no_terminated():
    """A TensorDict with ("next", "done") and ("next", "truncated") but no "terminated":
    TorchRL's GAE module reads every done as terminal (terminated defaults to done);
    rltscan refuses (it does not read ("next", "truncated")) and names ends_are."""
    tensordict = pytest.importorskip("tensordict")
    value = pytest.importorskip("torchrl.objectives.value")
    done, _, r, v, nv = _batch((2, 8, 1), 4)
    trunc = done & (torch.arange(8).view(1, 8, 1) < 4)
    td = tensordict.TensorDict(
        {
            ("next", "reward"): r,
            "state_value": v,
            ("next", "state_value"): nv,
            ("next", "done"): done,
            ("next", "truncated"): trunc,
        },
        [2, 8],
    )
    want = value.GAE(gamma=0.9, lmbda=0.8, value_network=None)(td.clone())["advantage"]
    with pytest.raises(rltscan.AmbiguousInputError, match="ends_are"):
        rltscan.gae(td, gamma=0.9, lam=0.8)
    rltscan.gae(td, gamma=0.9, lam=0.8, ends_are="terminal")
    _close(td["advantage"], want)
