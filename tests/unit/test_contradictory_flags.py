"""``dones`` beside ``terminated``/``truncated`` that contradict them are refused (API).

A ``dones`` flag read as "the episode ended after step t" is ``terminated or
truncated`` (TorchRL's ``("next", "done")``, Gymnasium's ``terminated or truncated``):
no producer writes a step that terminated or was truncated while its episode went on.
Read as it stands such a step gives two different numbers: rltscan's flags ended the
episode there, while TorchRL's ``generalized_advantage_estimate(..., done,
terminated)`` bootstraps nothing at it but keeps the trace running across it. Before,
rltscan took the first reading with no word; now the call is refused, naming the first
such step and the fix (docs/CONVENTIONS.md §1.4, §8.2). The converse, a ``done`` that
no flag explains, is read as its producer defines it (beside ``terminated`` only: a
truncation, as TorchRL's estimators read it).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rltscan
from rltscan.errors import DataError

GAMMA, LAM = 0.9, 0.8


def _data(rng: np.random.Generator, B: int = 2, T: int = 8) -> dict[str, np.ndarray]:
    """A consistent ``[B, T]`` rollout: ``done = terminated | truncated``."""
    term = np.zeros((B, T), bool)
    trunc = np.zeros((B, T), bool)
    term[0, 3], trunc[-1, min(5, T - 1)] = True, True
    return {
        "r": rng.normal(size=(B, T)),
        "v": rng.normal(size=(B, T)),
        "nv": rng.normal(size=(B, T)),
        "term": term,
        "trunc": trunc,
        "done": term | trunc,
    }


def _torchrl_gae(s: dict[str, np.ndarray]) -> np.ndarray:
    """TorchRL's reading of ``done`` and ``terminated`` (its functional GAE), ``[B, T]``:
    no bootstrap where terminated, the trace cut where done."""
    B, T = s["r"].shape
    adv = np.zeros((B, T))
    for b in range(B):
        a = 0.0
        for t in reversed(range(T)):
            delta = s["r"][b, t] + GAMMA * s["nv"][b, t] * (not s["term"][b, t]) - s["v"][b, t]
            a = delta + GAMMA * LAM * a * (not s["done"][b, t])
            adv[b, t] = a
    return adv


# -------------------------------------------------------------------- refused


def test_terminated_where_dones_is_0_is_refused_numpy() -> None:
    s = _data(np.random.default_rng(0))
    s["done"][0, 3] = False  # terminated at (0, 3), but the episode "goes on"
    with pytest.raises(DataError) as err:
        rltscan.gae(
            s["r"], s["v"], next_values=s["nv"], terminated=s["term"],
            dones=s["done"], dones_mean="ended", gamma=GAMMA, lam=LAM, time_dim=-1,
        )  # fmt: skip
    msg = str(err.value)
    assert "(0, 3)" in msg and '"terminated"' in msg and '"dones"' in msg, msg
    assert "not both" in msg, msg  # the fix: one of the two descriptions
    assert "\n" not in msg


def test_truncated_where_dones_is_0_is_refused() -> None:
    s = _data(np.random.default_rng(1))
    s["done"][1, 5] = False
    with pytest.raises(DataError, match=r'"truncated".*\(1, 5\)'):
        rltscan.gae(
            s["r"], s["v"], next_values=s["nv"], terminated=s["term"], truncated=s["trunc"],
            dones=s["done"], dones_mean="ended", ends_are="truncated",
            gamma=GAMMA, lam=LAM, time_dim=-1,
        )  # fmt: skip


def test_dones_beside_truncated_only_is_checked_too() -> None:
    s = _data(np.random.default_rng(2))
    s["done"][1, 5] = False
    with pytest.raises(DataError, match=r'"truncated"'):
        rltscan.gae(
            s["r"], s["v"], next_values=s["nv"], truncated=s["trunc"],
            dones=s["done"], dones_mean="ended", gamma=GAMMA, lam=LAM, time_dim=-1,
        )  # fmt: skip


def test_torchrl_shapes_name_the_users_index() -> None:
    """TorchRL's ``[B, T, 1]`` tensors with ``time_dim=-2``: the index has all three axes."""
    s = _data(np.random.default_rng(3))
    s["done"][0, 3] = False
    t = {k: torch.as_tensor(v)[..., None] for k, v in s.items()}
    with pytest.raises(DataError, match=r"\(0, 3, 0\)"):
        rltscan.gae(
            t["r"], t["v"], next_values=t["nv"], terminated=t["term"], dones=t["done"],
            dones_mean="ended", gamma=GAMMA, lam=LAM, time_dim=-2,
        )  # fmt: skip


@pytest.mark.parametrize("fn", ["td_lambda", "vtrace", "eligibility_traces", "prefix_sum"])
def test_every_estimator_refuses_it(fn: str) -> None:
    s = _data(np.random.default_rng(4))
    s["done"][0, 3] = False
    kwargs: dict = {"terminated": s["term"], "dones": s["done"], "dones_mean": "ended"}
    if fn == "td_lambda":
        call = lambda: rltscan.td_lambda(  # noqa: E731
            s["r"], s["v"], next_values=s["nv"], gamma=GAMMA, lam=LAM, time_dim=-1, **kwargs
        )
    elif fn == "vtrace":
        logp = np.zeros_like(s["r"])
        call = lambda: rltscan.vtrace(  # noqa: E731
            s["r"], s["v"], logp_behavior=logp, logp_target=logp, next_values=s["nv"],
            gamma=GAMMA, time_dim=-1, **kwargs,
        )  # fmt: skip
    else:
        call = lambda: getattr(rltscan, fn)(s["r"], time_dim=-1, **kwargs)  # noqa: E731
    with pytest.raises(DataError, match=r"\(0, 3\)"):
        call()


def test_tensordict_next_done_beside_next_terminated() -> None:
    """A TorchRL TensorDict: ``("next", "done")`` 0 where ``("next", "terminated")`` is 1."""
    tensordict = pytest.importorskip("tensordict")
    s = _data(np.random.default_rng(5))
    s["done"][1, 2], s["term"][1, 2] = False, True
    col = {k: torch.as_tensor(v)[..., None] for k, v in s.items()}
    td = tensordict.TensorDict(
        {
            "state_value": col["v"],
            "next": {
                "reward": col["r"],
                "state_value": col["nv"],
                "done": col["done"],
                "terminated": col["term"],
            },
        },
        batch_size=[2, 8],
    )
    with pytest.raises(DataError, match=r"\(1, 2"):
        rltscan.gae(td, gamma=GAMMA, lam=LAM)


def test_episode_starts_that_do_not_follow_a_termination() -> None:
    """Starts read as ends (``ended[t] = starts[t+1]``) are checked the same way."""
    s = _data(np.random.default_rng(6))
    starts = np.zeros_like(s["done"])
    starts[:, 1:] = s["done"][:, :-1]
    starts[0, 4] = False  # terminated at (0, 3), yet step 4 does not start an episode
    with pytest.raises(DataError, match=r'"terminated".*\(0, 3\).*"episode_starts"'):
        rltscan.gae(
            s["r"], s["v"], next_values=s["nv"], terminated=s["term"], episode_starts=starts,
            ends_are="truncated", gamma=GAMMA, lam=LAM, time_dim=-1,
        )  # fmt: skip


def test_a_flag_on_the_last_step_is_not_contradicted_by_unknown_starts() -> None:
    """Without ``last_dones`` nothing says whether the last step ended: a flag there is
    read, not refused; with ``last_dones`` it is checked."""
    s = _data(np.random.default_rng(7), B=1, T=5)
    term = np.zeros((1, 5), bool)
    term[0, -1] = True
    starts = np.zeros((1, 5), bool)
    args = dict(
        next_values=s["nv"], terminated=term, episode_starts=starts, ends_are="truncated",
        gamma=GAMMA, lam=LAM, time_dim=-1,
    )  # fmt: skip
    out = rltscan.gae(s["r"], s["v"], **args).advantages
    want = rltscan.gae(s["r"], s["v"], next_values=s["nv"], terminated=term, gamma=GAMMA,
                       lam=LAM, time_dim=-1).advantages  # fmt: skip
    np.testing.assert_allclose(out, want)
    with pytest.raises(DataError, match=r"\(0, 4\)"):
        rltscan.gae(s["r"], s["v"], last_dones=np.zeros(1, bool), **args)


# -------------------------------------------------------------------- read


@pytest.mark.parametrize("as_torch", [False, True], ids=["numpy", "torch"])
def test_consistent_dones_beside_flags_read_exactly(as_torch: bool) -> None:
    s = _data(np.random.default_rng(8))
    conv = (lambda x: torch.as_tensor(x)) if as_torch else (lambda x: x)
    with_dones = rltscan.gae(
        conv(s["r"]), conv(s["v"]), next_values=conv(s["nv"]), terminated=conv(s["term"]),
        truncated=conv(s["trunc"]), dones=conv(s["done"]), dones_mean="ended",
        ends_are="truncated", gamma=GAMMA, lam=LAM, time_dim=-1,
    ).advantages  # fmt: skip
    flags_only = rltscan.gae(
        conv(s["r"]), conv(s["v"]), next_values=conv(s["nv"]), terminated=conv(s["term"]),
        truncated=conv(s["trunc"]), gamma=GAMMA, lam=LAM, time_dim=-1,
    ).advantages  # fmt: skip
    np.testing.assert_allclose(np.asarray(with_dones), np.asarray(flags_only))
    np.testing.assert_allclose(np.asarray(with_dones), _torchrl_gae(s), rtol=1e-12)


def test_done_that_no_flag_explains_beside_terminated_is_torchrls_truncation() -> None:
    """The converse: ``done`` set where ``terminated`` is not (and no truncated flag is
    given) is a truncation, as TorchRL's estimators read it (bootstrap, trace cut)."""
    s = _data(np.random.default_rng(9))
    s["done"][0, 6] = True  # an end the terminated flag does not explain
    out = rltscan.gae(
        s["r"], s["v"], next_values=s["nv"], terminated=s["term"], dones=s["done"],
        dones_mean="ended", gamma=GAMMA, lam=LAM, time_dim=-1,
    ).advantages  # fmt: skip
    np.testing.assert_allclose(out, _torchrl_gae(s), rtol=1e-12)


def test_validate_false_checks_nothing() -> None:
    """``validate=False`` checks nothing (docs/CONVENTIONS.md §5.1), this included."""
    s = _data(np.random.default_rng(10))
    s["done"][0, 3] = False
    out = rltscan.gae(
        s["r"], s["v"], next_values=s["nv"], terminated=s["term"], dones=s["done"],
        dones_mean="ended", gamma=GAMMA, lam=LAM, time_dim=-1, validate=False,
    )  # fmt: skip
    assert np.isfinite(out.advantages).all()
