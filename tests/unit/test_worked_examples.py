"""Every worked example (docs/CONVENTIONS.md §3-4), to 1e-12 in float64, on every backend.

The tables' numbers are typed in here by hand from the spec (they are exact
decimals); ``test_oracles_reproduce_every_table`` also checks them against both
forms of ``tests/oracles.py`` in exact rational arithmetic, so a typo in the spec or
here cannot silently become the expected value.

Each example also runs as a batch: rows scaled by (1, 2, -0.5) (every estimator is
homogeneous in its value inputs at fixed ratios, and these scales are exact in
binary), both batch-major ``[B, T]`` and time-major ``[T, B]`` with ``time_dim=0``.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
import oracles
import pytest
import torch

import rltscan

ATOL = 1e-12  # a float64 implementation must match a hand-worked example to 1e-12
NAN = float("nan")

# §3.0 common inputs
GAMMA, LAM = 0.9, 0.8
TERMINATED = [0, 0, 1, 0, 0, 0]
TRUNCATED = [0, 0, 0, 0, 1, 0]
REWARDS = [1.0, -0.5, 2.0, 0.5, 1.5, -1.0]
VALUES = [0.5, 0.2, 1.0, 0.8, 0.3, 0.6]
BOOTSTRAP = [NAN, NAN, NAN, NAN, 0.9, 0.7]  # read only where boot_t = 1 (t = 4, 5)


def next_values_with(x: float) -> list[float]:
    """§3.0: the next_values form, with X at the terminated step 2."""
    return [0.2, 1.0, x, 0.3, 0.9, 0.7]


# §3.4 / §3.5 policies
PI = [0.5, 0.6, 0.2, 0.9, 0.4, 0.3]
MU = [0.25, 0.6, 0.4, 0.3, 0.5, 0.3]
LOGP_TARGET = [math.log(p) for p in PI]
LOGP_BEHAVIOR = [math.log(p) for p in MU]
Q = [0.2, -0.3, 1.2, 0.7, 0.5, 0.4]
NEXT_TARGET_PROBS = [(0.5, 0.5), (0.25, 0.75), (0, 1), (0.6, 0.4), (0.2, 0.8), (0.5, 0.5)]
NEXT_Q = [(-0.5, 0.5), (1.0, 0.5), (7, 7), (1.0, 0.5), (0.5, 0.25), (1.0, 0.0)]
V_PI = [0.1, -0.2, 1.0, 0.5, 0.4, 0.2]
X_TRACE = [1.0, 0.5, -1.0, 2.0, 0.25, 1.0]


def next_expected_q(garbage: float | None = None) -> list[float]:
    """ev_next_t = sum_k next_target_probs[t, k] * next_q[t, k] (row 2 is ignored)."""
    ev = np.einsum("ta,ta->t", np.array(NEXT_TARGET_PROBS, float), np.array(NEXT_Q, float))
    if garbage is not None:
        ev[2] = garbage
    return ev.tolist()


# The tables, verbatim.
TABLES: dict[str, dict[str, list[float]]] = {
    "gae": {
        "advantages": [1.3424, 0.92, 1.0, 1.4172, 2.01, -0.97],
        "value_targets": [1.8424, 1.12, 2.0, 2.2172, 2.31, -0.37],
    },
    "td_lambda": {"lambda_returns": [1.8424, 1.12, 2.0, 2.2172, 2.31, -0.37]},
    "discounted_returns": {"returns": [2.17, 1.3, 2.0, 2.579, 2.31, -0.37]},
    "discounted_returns_zero": {"returns": [2.17, 1.3, 2.0, 1.85, 1.5, -1.0]},
    "vtrace": {
        "vs": [2.105, 0.85, 1.5, 2.2022, 1.908, -0.37],
        "pg_advantages": [1.8975, 0.65, 0.5, 2.1258, 1.608, -0.97],
    },
    "retrace": {
        "retrace_targets": [1.46836, 0.3505, 2.0, 1.95152, 1.77, -0.55],
        "advantages": [1.36836, 0.5505, 1.0, 1.45152, 1.37, -0.75],
    },
    "traces_init0": {"eligibility_traces": [1.0, 1.22, -0.1216, 2.0, 1.69, 1.0]},
    "traces_init2": {"eligibility_traces": [2.44, 2.2568, 0.624896, 2.0, 1.69, 1.0]},
    "prefix_r": {"prefix_sums": [1.0, 0.5, 2.5, 0.5, 2.0, -1.0]},
    "prefix_ones": {"prefix_sums": [1.0, 2.0, 3.0, 1.0, 2.0, 1.0]},
    "prefix_r_init": {"prefix_sums": [3.5, 3.0, 5.0, 0.5, 2.0, -1.0]},
}

# The (a, b) columns of the tables, for the bare scan.
AB_TABLES = {
    "gae": ([0.72, 0.72, 0, 0.72, 0, 0], [0.68, 0.2, 1.0, -0.03, 2.01, -0.97], True),
    "td_lambda": ([0.72, 0.72, 0, 0.72, 0, 0], [1.036, -0.32, 2.0, 0.554, 2.31, -0.37], True),
    "discounted_returns": ([0.9, 0.9, 0, 0.9, 0, 0], [1.0, -0.5, 2.0, 0.5, 2.31, -0.37], True),
    "vtrace": ([0.9, 0.9, 0, 0.9, 0, 0], [1.02, 0.2, 0.5, -0.045, 1.608, -0.97], True),
    "retrace": ([0.72, 0.36, 0, 0.576, 0, 0], [0.8, 0.3625, 0.8, 0.52, 1.27, -0.95], True),
    "traces_init0": ([0.72, 0.72, 0.72, 0, 0.72, 0], X_TRACE, False),
    "prefix_r": ([1, 1, 1, 0, 1, 0], REWARDS, False),
}
AB_OUTPUT = {
    "gae": TABLES["gae"]["advantages"],
    "td_lambda": TABLES["td_lambda"]["lambda_returns"],
    "discounted_returns": TABLES["discounted_returns"]["returns"],
    "vtrace": [v - b for v, b in zip(TABLES["vtrace"]["vs"], VALUES, strict=True)],
    "retrace": [v - b for v, b in zip(TABLES["retrace"]["retrace_targets"], Q, strict=True)],
    "traces_init0": TABLES["traces_init0"]["eligibility_traces"],
    "prefix_r": TABLES["prefix_r"]["prefix_sums"],
}


# ---------------------------------------------------------------------------
# One example = (function name, positional arrays, keyword arrays, scalars, table).
# Array entries scale with the batch row; flags and log-probs do not.
# ---------------------------------------------------------------------------

FLAGS = {"terminated": TERMINATED, "truncated": TRUNCATED}
VTRACE_PARAMS = {"gamma": GAMMA, "lam": 1.0, "rho_clip": 1.5, "c_clip": 1.0}
RETRACE_PARAMS = {"gamma": GAMMA, "lam": LAM, "c_clip": 1.0}
LOGPS = {"logp_target": LOGP_TARGET, "logp_behavior": LOGP_BEHAVIOR}


def _examples() -> list[Any]:
    ex = []

    def add(id_, fn, pos, scaled_kw, params, table, fixed_kw=None):
        """One example; ``table`` names a table above or is one, ``{output: values}``
        typed here (an estimator added as one module brings its example as one row,
        checked against its oracle by ``test_oracles_reproduce_the_inline_tables``)."""
        if isinstance(table, dict):
            TABLES[id_] = table
            INLINE[id_] = (fn, scaled_kw, params)
            table = id_
        ex.append(pytest.param(fn, pos, scaled_kw, fixed_kw or {}, params, table, id=id_))

    gl = {"gamma": GAMMA, "lam": LAM}
    boot = {"bootstrap_values": BOOTSTRAP}
    for x_id, x in (("X0", 0.0), ("X1e6", 1e6), ("XNaN", NAN)):
        nvs = {"next_values": next_values_with(x)}
        add(f"gae-next-{x_id}", "gae", [REWARDS, VALUES], nvs, gl, "gae")
        add(f"td_lambda-next-{x_id}", "td_lambda", [REWARDS], nvs, gl, "td_lambda")
        add(
            f"td_lambda-values-next-{x_id}",
            "td_lambda",
            [REWARDS],
            {**nvs, "values": VALUES},
            gl,
            "td_lambda",
        )
        add(
            f"discounted_returns-next-{x_id}",
            "discounted_returns",
            [REWARDS],
            nvs,
            {"gamma": GAMMA},
            "discounted_returns",
        )
        add(
            f"vtrace-next-{x_id}",
            "vtrace",
            [REWARDS, VALUES],
            nvs,
            VTRACE_PARAMS,
            "vtrace",
            LOGPS,
        )
    add("gae-boot", "gae", [REWARDS, VALUES], boot, gl, "gae")
    add("td_lambda-boot", "td_lambda", [REWARDS], {**boot, "values": VALUES}, gl, "td_lambda")
    add(
        "discounted_returns-boot",
        "discounted_returns",
        [REWARDS],
        boot,
        {"gamma": GAMMA},
        "discounted_returns",
    )
    add(
        "discounted_returns-values-boot",
        "discounted_returns",
        [REWARDS],
        {**boot, "values": VALUES},
        {"gamma": GAMMA},
        "discounted_returns",
    )
    add(
        "discounted_returns-zero-default",
        "discounted_returns",
        [REWARDS],
        {},
        {"gamma": GAMMA},
        "discounted_returns_zero",
    )
    add(
        "discounted_returns-zero-explicit",
        "discounted_returns",
        [REWARDS],
        {},
        {"gamma": GAMMA, "missing_bootstrap": "zero"},
        "discounted_returns_zero",
    )
    add("vtrace-boot", "vtrace", [REWARDS, VALUES], boot, VTRACE_PARAMS, "vtrace", LOGPS)
    add(
        "vtrace-boot-pgclip",
        "vtrace",
        [REWARDS, VALUES],
        boot,
        {**VTRACE_PARAMS, "pg_rho_clip": 1.5},
        "vtrace",
        LOGPS,
    )
    for g_id, g in (("ev7", None), ("ev1e6", 1e6), ("evNaN", NAN)):
        add(
            f"retrace-{g_id}",
            "retrace",
            [REWARDS, Q],
            {"next_expected_q": next_expected_q(g), "v_pi": V_PI},
            RETRACE_PARAMS,
            "retrace",
            LOGPS,
        )
    tr = {"gamma": GAMMA, "lam": LAM}
    add("traces-noinit", "eligibility_traces", [X_TRACE], {}, tr, "traces_init0")
    add("traces-init0", "eligibility_traces", [X_TRACE], {}, {**tr, "init": 0.0}, "traces_init0")
    add("traces-init2", "eligibility_traces", [X_TRACE], {}, {**tr, "init": 2.0}, "traces_init2")
    add("prefix-r", "prefix_sum", [REWARDS], {}, {}, "prefix_r")
    add("prefix-ones", "prefix_sum", [[1.0] * 6], {}, {}, "prefix_ones")
    add("prefix-r-init2.5", "prefix_sum", [REWARDS], {}, {"init": 2.5}, "prefix_r_init")
    add("rtg-scale2", "return_to_go", [REWARDS], {}, {"scale": 2.0},
        {"returns_to_go": [1.25, 0.75, 1.0, 1.0, 0.75, -0.5]})  # fmt: skip
    return ex


INLINE: dict[str, tuple[str, dict, dict]] = {}  # example id -> (function, arrays, params)
EXAMPLES = _examples()


def _flags_for(fn: str, first: bool = False) -> dict[str, list[int]]:
    if fn == "prefix_sum" and first:
        return {"is_first": [0, 0, 0, 1, 0, 1]}
    return FLAGS


def _call(fn, pos, scaled_kw, fixed_kw, params, *, backend, container, scales, layout, flags=None):
    """Run one example; ``scales=None`` is the flat [T] call, else one row per scale."""
    flags = FLAGS if flags is None else flags

    def arr(x, scale=1.0, flag=False):
        a = np.asarray(x, dtype=bool if flag else np.float64)
        if scales is not None:
            a = np.stack([a * s if not flag else a for s in scales])
            if layout == "tb":
                a = a.T
        elif not flag:
            a = a * scale
        return torch.from_numpy(np.ascontiguousarray(a)) if container == "torch" else a

    def fixed(x):
        a = np.asarray(x, dtype=np.float64)
        if scales is not None:
            a = np.stack([a for _ in scales])
            if layout == "tb":
                a = a.T
        return torch.from_numpy(np.ascontiguousarray(a)) if container == "torch" else a

    kwargs: dict[str, Any] = {k: arr(v) for k, v in scaled_kw.items()}
    kwargs.update({k: fixed(v) for k, v in fixed_kw.items()})
    kwargs.update({k: arr(v, flag=True) for k, v in flags.items()})
    params = dict(params)
    if scales is not None and "init" in params:
        # a scalar init cannot scale with the row: pass it per row ([B])
        per_row = np.array([params["init"] * s for s in scales])
        params["init"] = torch.from_numpy(per_row) if container == "torch" else per_row
    if layout == "tb":
        params["time_dim"] = 0
    fn_obj = getattr(rltscan, fn)
    return fn_obj(*[arr(p) for p in pos], **kwargs, **params, backend=backend)


def _as_numpy(x: Any, container: str) -> np.ndarray:
    if container == "torch":
        assert isinstance(x, torch.Tensor), f"torch in, {type(x).__name__} out"
        assert x.dtype == torch.float64, f"float64 in, {x.dtype} out"
        return x.numpy()
    assert isinstance(x, np.ndarray), f"numpy in, {type(x).__name__} out"
    assert x.dtype == np.float64, f"float64 in, {x.dtype} out"
    return x


@pytest.mark.parametrize("container", ["numpy", "torch"])
@pytest.mark.parametrize(("fn", "pos", "scaled_kw", "fixed_kw", "params", "table"), EXAMPLES)
def test_worked_example_flat(fn, pos, scaled_kw, fixed_kw, params, table, backend, container):
    res = _call(
        fn, pos, scaled_kw, fixed_kw, params,
        backend=backend, container=container, scales=None, layout="flat",
    )  # fmt: skip
    want = TABLES[table]
    assert set(want) <= set(res), f"outputs {sorted(res)} lack {sorted(set(want) - set(res))}"
    for key, expected in want.items():
        got = _as_numpy(res[key], container)
        assert got.shape == (6,)
        np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL, err_msg=key)
        # the attribute and mapping views are the same output
        got_attr = getattr(res, key)
        np.testing.assert_array_equal(_as_numpy(got_attr, container), got)


SCALES = (1.0, 2.0, -0.5)


@pytest.mark.parametrize("layout", ["bt", "tb"])
@pytest.mark.parametrize(("fn", "pos", "scaled_kw", "fixed_kw", "params", "table"), EXAMPLES)
def test_worked_example_batched(fn, pos, scaled_kw, fixed_kw, params, table, backend, layout):
    res = _call(
        fn, pos, scaled_kw, fixed_kw, params,
        backend=backend, container="torch", scales=SCALES, layout=layout,
    )  # fmt: skip
    for key, expected in TABLES[table].items():
        got = _as_numpy(res[key], "torch")
        want = np.stack([np.asarray(expected) * s for s in SCALES])
        if layout == "tb":
            assert got.shape == (6, 3), f"{key}: time-major in, shape {tuple(got.shape)} out"
            got = got.T
        else:
            assert got.shape == (3, 6)
        np.testing.assert_allclose(got, want, rtol=0, atol=ATOL, err_msg=key)


def test_prefix_sum_example_with_is_first(backend):
    """§3.7: an explicit is_first [0,0,0,1,0,1] replaces the derived starts; same table."""
    for table, x, init in (("prefix_r", REWARDS, None), ("prefix_r_init", REWARDS, 2.5),
                           ("prefix_ones", [1.0] * 6, None)):  # fmt: skip
        res = rltscan.prefix_sum(
            np.array(x), is_first=np.array([0, 0, 0, 1, 0, 1], dtype=bool),
            init=init, backend=backend,
        )  # fmt: skip
        np.testing.assert_allclose(res["prefix_sums"], TABLES[table]["prefix_sums"], atol=ATOL)


def test_traces_example_with_features(backend):
    """§3.6 with x as [T, D] and init as [D]: each feature column is its own example."""
    x = np.stack([np.array(X_TRACE), 2.0 * np.array(X_TRACE), -0.5 * np.array(X_TRACE)], axis=1)
    res = rltscan.eligibility_traces(
        torch.from_numpy(x), terminated=torch.tensor(TERMINATED, dtype=torch.bool),
        truncated=torch.tensor(TRUNCATED, dtype=torch.bool), gamma=GAMMA, lam=LAM,
        init=torch.tensor([2.0, 4.0, -1.0], dtype=torch.float64), backend=backend,
    )  # fmt: skip
    got = res["eligibility_traces"]
    assert tuple(got.shape) == (6, 3)
    want = np.array(TABLES["traces_init2"]["eligibility_traces"])[:, None] * np.array(SCALES)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=ATOL)


def test_retrace_without_v_pi_has_no_advantages(backend):
    res = rltscan.retrace(
        np.array(REWARDS), np.array(Q), next_expected_q=np.array(next_expected_q()),
        logp_target=np.array(LOGP_TARGET), logp_behavior=np.array(LOGP_BEHAVIOR),
        terminated=np.array(TERMINATED, bool), truncated=np.array(TRUNCATED, bool),
        **RETRACE_PARAMS, backend=backend,
    )  # fmt: skip
    np.testing.assert_allclose(
        res["retrace_targets"], TABLES["retrace"]["retrace_targets"], rtol=0, atol=ATOL
    )
    assert "advantages" not in res
    assert set(dict(res)) == {"retrace_targets"}


@pytest.mark.parametrize("name", sorted(AB_TABLES))
def test_table_coefficients_through_linear_scan(name, backend):
    """The tables' (a, b) columns, solved by ``rltscan.linear_scan``, give the outputs."""
    a, b, reverse = AB_TABLES[name]
    y = rltscan.linear_scan(
        torch.tensor(a, dtype=torch.float64), torch.tensor(b, dtype=torch.float64),
        reverse=reverse, backend=backend,
    )  # fmt: skip
    np.testing.assert_allclose(y.numpy(), AB_OUTPUT[name], rtol=0, atol=ATOL)


def test_traces_table_through_linear_scan_with_init(backend):
    a, b, _ = AB_TABLES["traces_init0"]
    y = rltscan.linear_scan(
        torch.tensor([a, a], dtype=torch.float64), torch.tensor([b, b], dtype=torch.float64),
        reverse=False, init=torch.tensor([0.0, 2.0], dtype=torch.float64), backend=backend,
    )  # fmt: skip
    want = [
        TABLES["traces_init0"]["eligibility_traces"],
        TABLES["traces_init2"]["eligibility_traces"],
    ]
    np.testing.assert_allclose(y.numpy(), want, rtol=0, atol=ATOL)


# ---------------------------------------------------------------------------
# The spec's tables against the oracles, in exact arithmetic (no library involved).
# ---------------------------------------------------------------------------


def _fr(xs):
    return [Fraction(str(x)) for x in xs]


def test_oracles_reproduce_every_table():
    """Both oracle forms reproduce every number of §3 exactly (rational arithmetic)."""
    g, l = Fraction("0.9"), Fraction("0.8")
    r, v = _fr(REWARDS), _fr(VALUES)
    boot = [None, None, None, None, Fraction("0.9"), Fraction("0.7")]
    nv = oracles.next_state_values(TERMINATED, TRUNCATED, values=v, bootstrap_values=boot)
    nv_next = oracles.next_state_values(TERMINATED, TRUNCATED, next_values=_fr(next_values_with(5)))
    assert nv == nv_next
    nv_zero = oracles.next_state_values(TERMINATED, TRUNCATED, values=v, missing_bootstrap="zero")
    flags = (TERMINATED, TRUNCATED)
    exact = lambda xs: _fr(xs)  # noqa: E731
    for form in (oracles.gae, oracles.gae_sum):
        got = form(r, v, nv, *flags, gamma=g, lam=l)
        assert got["advantages"] == exact(TABLES["gae"]["advantages"])
        assert got["value_targets"] == exact(TABLES["gae"]["value_targets"])
    for form in (oracles.td_lambda, oracles.td_lambda_mixture):
        assert form(r, nv, *flags, gamma=g, lam=l) == exact(TABLES["td_lambda"]["lambda_returns"])
    for form in (oracles.discounted_returns, oracles.discounted_returns_sum):
        assert form(r, nv, *flags, gamma=g) == exact(TABLES["discounted_returns"]["returns"])
        assert form(r, nv_zero, *flags, gamma=g) == exact(
            TABLES["discounted_returns_zero"]["returns"]
        )
    ratios = [a / b for a, b in zip(_fr(PI), _fr(MU), strict=True)]
    for form in (oracles.vtrace, oracles.vtrace_sum):
        got = form(r, v, nv, ratios, *flags, gamma=g, lam=1, rho_clip=Fraction("1.5"), c_clip=1)
        assert got["vs"] == exact(TABLES["vtrace"]["vs"])
        assert got["pg_advantages"] == exact(TABLES["vtrace"]["pg_advantages"])
    ev = oracles.expected_q([_fr(p) for p in NEXT_TARGET_PROBS], [_fr(q) for q in NEXT_Q])
    assert ev == _fr([0.0, 0.625, 7, 0.8, 0.3, 0.5])
    for form in (oracles.retrace, oracles.retrace_sum):
        got = form(r, _fr(Q), ev, ratios, *flags, gamma=g, lam=l, c_clip=1, v_pi=_fr(V_PI))
        assert got["retrace_targets"] == exact(TABLES["retrace"]["retrace_targets"])
        assert got["advantages"] == exact(TABLES["retrace"]["advantages"])
    tr = oracles.eligibility_traces(X_TRACE, *flags, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(tr, TABLES["traces_init0"]["eligibility_traces"], atol=1e-15)
    tr2 = oracles.eligibility_traces(X_TRACE, *flags, gamma=0.9, lam=0.8, init=2.0)
    np.testing.assert_allclose(tr2, TABLES["traces_init2"]["eligibility_traces"], atol=1e-15)
    np.testing.assert_array_equal(
        oracles.prefix_sum(REWARDS, *flags), TABLES["prefix_r"]["prefix_sums"]
    )
    np.testing.assert_array_equal(
        oracles.prefix_sum([1.0] * 6, *flags), TABLES["prefix_ones"]["prefix_sums"]
    )
    np.testing.assert_array_equal(
        oracles.prefix_sum(REWARDS, *flags, init=2.5), TABLES["prefix_r_init"]["prefix_sums"]
    )
    # the (a, b) columns solve to the outputs (checks the transcription of AB_TABLES)
    for name, (a, b, reverse) in AB_TABLES.items():
        y, carry = [0.0] * 6, 0.0
        for t in reversed(range(6)) if reverse else range(6):
            carry = b[t] + a[t] * carry
            y[t] = carry
        np.testing.assert_allclose(y, AB_OUTPUT[name], rtol=0, atol=1e-14, err_msg=name)


@pytest.mark.parametrize("id_", sorted(INLINE))
def test_oracles_reproduce_the_inline_tables(id_):
    """An inline table (a declared estimator's example row) is its oracle's answer on the
    §3.0 inputs (rewards, flags), in exact rational arithmetic."""
    fn, scaled_kw, params = INLINE[id_]
    arrays = {"rewards": _fr(REWARDS), **{k: _fr(v) for k, v in scaled_kw.items()}}
    exact = {k: Fraction(v) if isinstance(v, float) else v for k, v in params.items()}
    got = oracles.ORACLES[fn](**arrays, terminated=TERMINATED, truncated=TRUNCATED, **exact)
    for key, want in TABLES[id_].items():
        assert list(got[key]) == _fr(want), key
