"""The fused CPU backend (``backend="cpu"``, rltscan/scan/cpu_fused.py) against the
float64 oracles of tests/oracles.py: many seeds, odd lengths, dense and sparse episode
ends, bool and uint8 flags, γ and λ at 0 and 1, ``[B, T]`` and ``[T, B]``, float32 and
float64, every bootstrap form. The fused kinds must take the fused kernel (the
generic scan is made to fail); the others must take the generic scan and agree with
the torch backend.
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

import rltscan
from rltscan.errors import BackendUnavailableError
from tests import oracles
from tests.conftest import assert_close_to_oracle

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("numba") is None, reason="the cpu backend needs numba"
)

FORMS = ("next_values", "bootstrap_values", "last_value", "zero")


def _inputs(rng, batch, steps, p_done, form, dtype, flag_dtype):
    u = rng.random((batch, steps))
    term = u < p_done / 2
    trunc = (u >= p_done / 2) & (u < p_done)
    f = lambda: rng.standard_normal((batch, steps))  # noqa: E731
    r, v = f(), f()
    lp = lambda: np.log(rng.uniform(0.05, 1.0, (batch, steps)))  # noqa: E731
    data = {"rewards": r, "values": v, "logp_target": lp(), "logp_behavior": lp()}
    data = {k: x.astype(dtype) for k, x in data.items()}
    data["terminated"], data["truncated"] = term.astype(flag_dtype), trunc.astype(flag_dtype)
    boot = {}
    if form == "next_values":
        boot["next_values"] = f().astype(dtype)
    elif form == "bootstrap_values":
        # read only at truncations and the window end: NaN elsewhere must stay out
        b = np.where(trunc | (np.arange(steps) == steps - 1), f(), np.nan)
        boot["bootstrap_values"] = b.astype(dtype)
    elif form == "last_value":
        trunc[:, : steps - 1] = False  # the window end is the only bootstrap
        data["truncated"] = trunc.astype(flag_dtype)
        boot["last_value"] = rng.standard_normal(batch).astype(dtype)
    return data, boot


def _oracle_nv(data, boot, b, form):
    """The oracle's nv for row ``b`` (in float64, from the values as given)."""
    row = {k: np.asarray(v[b], dtype=np.float64) for k, v in data.items()}
    kw = {}
    if form in ("next_values", "bootstrap_values"):
        kw[form] = np.asarray(boot[form][b], dtype=np.float64)
    elif form == "last_value":
        kw["last_value"] = float(boot["last_value"][b])
    nv = oracles.next_state_values(
        row["terminated"] != 0,
        row["truncated"] != 0,
        values=row["values"],
        missing_bootstrap="zero",
        **kw,
    )
    return row, [0.0 if x is None else float(x) for x in nv]


def _want(kind, data, boot, form, gamma, lam, clips):
    rows = []
    for b in range(len(data["rewards"])):
        row, nv = _oracle_nv(data, boot, b, form)
        term, trunc = list(row["terminated"] != 0), list(row["truncated"] != 0)
        r, v = list(row["rewards"]), list(row["values"])
        if kind == "gae":
            rows.append(oracles.gae(r, v, nv, term, trunc, gamma=gamma, lam=lam))
        elif kind == "returns":
            out = oracles.discounted_returns(r, nv, term, trunc, gamma=gamma)
            rows.append({"returns": out})
        elif kind == "td_lambda":
            out = oracles.td_lambda(r, nv, term, trunc, gamma=gamma, lam=lam)
            rows.append({"lambda_returns": out})
        else:
            ratios = oracles.ratios_from_logp(row["logp_target"], row["logp_behavior"])
            rows.append(
                oracles.vtrace(r, v, nv, ratios, term, trunc, gamma=gamma, lam=lam, **clips)
            )
    return {k: np.array([np.asarray(x[k], dtype=np.float64) for x in rows]) for k in rows[0]}


def _call(kind, data, boot, form, gamma, lam, clips, *, time_major, backend="cpu"):
    def lay(x):
        return np.ascontiguousarray(x.T) if time_major else x

    kw = {"terminated": lay(data["terminated"]), "truncated": lay(data["truncated"])}
    if form == "zero":
        kw["missing_bootstrap"] = "zero"
    elif form == "last_value":
        kw["last_value"] = boot["last_value"]
    else:
        kw[form] = lay(boot[form])
    kw["time_dim"] = 0 if time_major else -1
    r, v = lay(data["rewards"]), lay(data["values"])
    if kind == "gae":
        res = rltscan.gae(r, v, gamma=gamma, lam=lam, backend=backend, **kw)
    elif kind == "returns":
        if form == "next_values":
            kw.pop("next_values")
            kw["bootstrap_values"] = lay(boot["next_values"])
        res = rltscan.discounted_returns(r, values=v, gamma=gamma, backend=backend, **kw)
    elif kind == "td_lambda":
        res = rltscan.td_lambda(r, v, gamma=gamma, lam=lam, backend=backend, **kw)
    else:
        lt, lb = lay(data["logp_target"]), lay(data["logp_behavior"])
        res = rltscan.vtrace(
            r, v, logp_target=lt, logp_behavior=lb, gamma=gamma, lam=lam, backend=backend,
            **clips, **kw,
        )  # fmt: skip
    return {k: (np.asarray(x).T if time_major else np.asarray(x)) for k, x in res.items()}


@pytest.fixture
def fused_only(monkeypatch):
    """The generic path fails: a fused kind must run the fused kernel."""
    from rltscan.scan import cpu_fused

    def boom(*a, **kw):
        raise AssertionError("the generic scan ran for a fused kind")

    monkeypatch.setattr(cpu_fused, "linear_scan", boom)


CASES = [
    # (seed, batch, steps, p_done, gamma, lam)
    (0, 3, 301, 0.02, 0.99, 0.95),
    (1, 2, 1, 0.5, 0.9, 0.9),
    (2, 5, 7, 0.6, 0.0, 0.5),
    (3, 1, 513, 0.3, 1.0, 1.0),
    (4, 4, 97, 0.01, 0.97, 0.0),
    (5, 3, 64, 0.2, 1.0, 0.0),
    (6, 6, 33, 0.9, 0.5, 1.0),
]


@pytest.mark.parametrize("kind", ["gae", "returns", "td_lambda", "vtrace"])
@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"s{c[0]}")
def test_fused_matches_oracle(kind, form, case, fused_only):
    seed, batch, steps, p_done, gamma, lam = case
    rng = np.random.default_rng([seed, len(kind), len(form)])
    clips = {"rho_clip": 1.2, "c_clip": 0.8, "pg_rho_clip": 2.0} if seed % 2 else {}
    for k, (dtype, flag_dtype, time_major) in enumerate(
        [
            (np.float32, np.bool_, False),
            (np.float64, np.uint8, True),
            (np.float64, np.bool_, False),
            (np.float32, np.uint8, True),
        ]
    ):
        if kind == "returns" and form == "last_value" and k % 2:
            continue  # (returns take last_value the same way; half the layouts suffice)
        data, boot = _inputs(rng, batch, steps, p_done, form, dtype, flag_dtype)
        want = _want(kind, data, boot, form, gamma, lam, clips)
        got = _call(kind, data, boot, form, gamma, lam, clips, time_major=time_major)
        tdtype = torch.float32 if dtype == np.float32 else torch.float64
        for name, w in want.items():
            assert got[name].dtype == dtype, name
            assert_close_to_oracle(got[name], w, tdtype)


@pytest.mark.parametrize("kind", ["gae", "vtrace"])
def test_fused_matches_torch_backend(kind, rng):
    """The same problem on the torch backend: equal to float32 rounding."""
    data, boot = _inputs(rng, 4, 1001, 0.05, "bootstrap_values", np.float32, np.bool_)
    args = (kind, data, boot, "bootstrap_values", 0.99, 0.95, {})
    a = _call(*args, time_major=False)
    b = _call(*args, time_major=False, backend="torch")
    for name in a:
        np.testing.assert_allclose(a[name], b[name], rtol=2e-5, atol=2e-5)


def test_threads_split_rows_identically(rng):
    """Rows split among threads give bit-identical results (each row is one chain)."""
    data, boot = _inputs(rng, 7, 200, 0.05, "bootstrap_values", np.float32, np.bool_)
    args = ("vtrace", data, boot, "bootstrap_values", 0.99, 0.95, {})
    before = torch.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            outs.append((_call(*args, time_major=False), _call(*args, time_major=True)))
    finally:
        torch.set_num_threads(before)
    for row_major, time_major in outs:
        for name in row_major:
            np.testing.assert_array_equal(row_major[name], outs[0][0][name])
            np.testing.assert_array_equal(time_major[name], outs[0][0][name])


@pytest.mark.parametrize("kind", ["gae", "vtrace", "returns"])
def test_fused_chunks_carry(kind, rng, fused_only):
    """A sequence cut into chunks, each with the carry of the next one: the whole."""
    data, boot = _inputs(rng, 3, 257, 0.05, "bootstrap_values", np.float64, np.bool_)
    fn = {"gae": rltscan.gae, "vtrace": rltscan.vtrace, "returns": rltscan.discounted_returns}
    extra = {"logp_target": data["logp_target"], "logp_behavior": data["logp_behavior"]}
    kw = {"rewards": data["rewards"], "values": data["values"], "terminated": data["terminated"]}
    kw |= {"truncated": data["truncated"], "bootstrap_values": boot["bootstrap_values"]}
    kw |= extra if kind == "vtrace" else {}

    def part(a, b, carry=None):
        return fn[kind](**{k: x[:, a:b] for k, x in kw.items()}, carry=carry, backend="cpu")

    whole = part(0, 257)
    later = part(100, 257)
    earlier = part(0, 100, carry=later.carry)
    for name in whole:
        got = np.concatenate([np.asarray(earlier[name]), np.asarray(later[name])], axis=1)
        np.testing.assert_allclose(got, np.asarray(whole[name]), rtol=1e-12, atol=1e-12)


def test_generic_path_per_step_discount_and_other_kinds(rng):
    """A per-step discount (and a forward estimator) takes the generic scan: it agrees
    with the float64 oracle."""
    steps = 301
    data, _ = _inputs(rng, 3, steps, 0.05, "bootstrap_values", np.float64, np.bool_)
    disc = rng.uniform(0.8, 1.0, (3, steps))
    got = rltscan.discounted_returns(
        data["rewards"], terminated=data["terminated"], truncated=data["truncated"],
        discount=disc, missing_bootstrap="zero", backend="cpu",
    )  # fmt: skip
    want = rltscan.discounted_returns(
        data["rewards"], terminated=data["terminated"], truncated=data["truncated"],
        discount=disc, missing_bootstrap="zero", backend="reference",
    )  # fmt: skip
    assert_close_to_oracle(got["returns"], want["returns"], torch.float64)
    x = data["rewards"]
    term, trunc = data["terminated"], data["truncated"]
    got = rltscan.prefix_sum(x, terminated=term, truncated=trunc, backend="cpu")
    want = oracles.per_row(oracles.prefix_sum, x, term, trunc)
    assert_close_to_oracle(np.asarray(got["prefix_sums"]), want, torch.float64)


@pytest.mark.parametrize("reverse", [True, False])
@pytest.mark.parametrize("time_major", [True, False])
def test_linear_scan(reverse, time_major, rng):
    from rltscan.scan import linear_scan, reference

    a = torch.from_numpy(rng.uniform(-1, 1, (5, 77)))
    b = torch.from_numpy(rng.standard_normal((5, 77)))
    init = torch.from_numpy(rng.standard_normal(5))
    if time_major:
        a, b = a.t().contiguous().t(), b.t().contiguous().t()
    got = linear_scan(a, b, reverse=reverse, init=init, backend="cpu")
    want = reference.linear_scan(a, b, reverse=reverse, init=init)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_backend_choice(monkeypatch):
    from rltscan import scan

    assert scan.resolve_backend("auto", torch.device("cpu")) == "cpu"
    assert scan.resolve_backend("cpu", torch.device("cpu")) == "cpu"
    with pytest.raises(BackendUnavailableError, match="needs CPU tensors"):
        scan.resolve_backend("cpu", torch.device("cuda"))
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "numba" else real(name, *a)
    )
    assert scan.resolve_backend("auto", torch.device("cpu")) == "torch"
    with pytest.raises(BackendUnavailableError, match="rltscan\\[cpu\\]"):
        scan.resolve_backend("cpu", torch.device("cpu"))


def test_forked_child_runs_its_own_threads(rng):
    """A process forked after the thread pool started (a Ray worker) computes too."""
    import os

    x = rng.standard_normal((4, 50))
    flags = np.zeros((4, 50), bool)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        want = rltscan.gae(x, x, terminated=flags, missing_bootstrap="zero", backend="cpu")
        pid = os.fork()
        if pid == 0:  # the child: exit 0 when it computes the same
            got = rltscan.gae(x, x, terminated=flags, missing_bootstrap="zero", backend="cpu")
            os._exit(0 if np.array_equal(got.advantages, want.advantages) else 3)
        _, status = os.waitpid(pid, 0)
    finally:
        torch.set_num_threads(before)
    assert os.waitstatus_to_exitcode(status) == 0
