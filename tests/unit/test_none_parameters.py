"""A number parameter given as None is refused with rltscan's error, not float()'s
TypeError (eager, ``rltscan.ops`` and under ``torch.compile``). Only ``pg_rho_clip``
takes None (it then follows ``rho_clip``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rltscan
import rltscan.ops
from rltscan import ParameterError

T = 4
FLAGS = {"terminated": torch.zeros(T, dtype=torch.bool), "last_value": torch.tensor(0.0)}
LOGP = {"logp_target": torch.zeros(T), "logp_behavior": torch.zeros(T)}
CASES = [
    ("gae", "gamma", {}),
    ("gae", "lam", {}),
    ("vtrace", "rho_clip", LOGP),
    ("vtrace", "c_clip", LOGP),
    ("return_to_go", "scale", {}),
]


def _call(fn, name, extra):
    r = torch.ones(T)
    if fn is rltscan.return_to_go or fn is rltscan.ops.return_to_go:
        return fn(r, terminated=FLAGS["terminated"], **{name: None})
    return fn(r, torch.ones(T), **FLAGS, **extra, **{name: None})


@pytest.mark.parametrize("estimator,name,extra", CASES)
def test_none_is_refused_by_name(estimator, name, extra):
    for fn in (getattr(rltscan, estimator), getattr(rltscan.ops, estimator)):
        with pytest.raises(ParameterError, match=f"{name} must be a number, got None"):
            _call(fn, name, extra)


def test_none_in_a_list_of_settings_is_refused():
    with pytest.raises(ParameterError, match="gamma must be a number, got None"):
        rltscan.gae(np.ones(T), np.ones(T), terminated=np.zeros(T, bool), last_value=0.0,
                    gamma=[0.9, None])  # fmt: skip


def test_none_is_refused_under_compile():
    def f(r):
        return rltscan.gae(r, r, **FLAGS, gamma=None).advantages

    with pytest.raises(ParameterError, match="gamma must be a number, got None"):
        torch.compile(f, fullgraph=True, backend="eager")(torch.ones(T))


def test_pg_rho_clip_none_follows_rho_clip():
    args = (torch.ones(T), torch.ones(T))
    a = rltscan.vtrace(*args, **FLAGS, **LOGP, rho_clip=2.0, pg_rho_clip=None)
    b = rltscan.vtrace(*args, **FLAGS, **LOGP, rho_clip=2.0, pg_rho_clip=2.0)
    assert torch.equal(a.pg_advantages, b.pg_advantages)
    c = rltscan.ops.vtrace(*args, **FLAGS, **LOGP, rho_clip=2.0, pg_rho_clip=None)
    assert torch.equal(c["pg_advantages"], b.pg_advantages)
