"""Every validation rule (docs/CONVENTIONS.md §5) and D5/D13, with its class, exit code and message.

Message contract (issue 2): one line, lower-case, no trailing period,
the input's name in double quotes, the first offending index, and the fix after a
"; ". Parameter errors name the parameter (quoted or not).
"""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

import rltscan
from rltscan import DataError, DTypeError, ParameterError

EXIT = {ParameterError: 2, DataError: 4, DTypeError: 4}
T = 12
NAN, INF = float("nan"), float("inf")


def check_error(err: BaseException, cls: type, name: str, index: str | None = None,
                quoted: bool = True) -> str:  # fmt: skip
    # a refinement (MissingBootstrapError is a DataError) is fine; the exit code must match
    assert isinstance(err, cls), f"expected {cls.__name__}, got {type(err).__name__}: {err}"
    assert err.exit_code == EXIT[cls]
    assert isinstance(err, TypeError if cls is DTypeError else ValueError)
    msg = str(err)
    assert "\n" not in msg, f"message is not one line: {msg!r}"
    assert msg and not msg[0].isupper(), f"message is not lower-case: {msg!r}"
    assert not msg.endswith("."), f"message ends with a period: {msg!r}"
    assert "; " in msg, f"message has no '; <fix>' part: {msg!r}"
    # STYLE §8 quotes names with "..."; single quotes are accepted here (reported as a nit)
    named = (f'"{name}"' in msg or f"'{name}'" in msg) if quoted else name in msg
    assert named, f"message does not name {name!r}: {msg!r}"
    if index is not None:
        pattern = rf"(?<![\d.]){re.escape(index)}(?![\d.])"
        assert re.search(pattern, msg), f"message does not give index {index}: {msg!r}"
    return msg


# A small valid flat sequence: termination at 3, truncation at 7, both flags at 10.
TERM = np.zeros(T, bool)
TERM[[3, 10]] = True
TRUNC = np.zeros(T, bool)
TRUNC[[7, 10]] = True
BOOT_AT = [7, 11]  # where bootstrap_values is read (truncation, window end)


def base(rng: np.random.Generator, name: str) -> tuple[list, dict]:
    """Valid args/kwargs for ``name`` (float64 numpy, finite everywhere)."""
    r, v, bv, lt, lb, q, ev, vpi = rng.normal(size=(8, T))
    flags = {"terminated": TERM.copy(), "truncated": TRUNC.copy()}
    if name == "gae":
        return [r, v], {**flags, "bootstrap_values": bv, "gamma": 0.9, "lam": 0.9}
    if name == "td_lambda":
        return [r], {**flags, "values": v, "bootstrap_values": bv, "gamma": 0.9, "lam": 0.9}
    if name == "discounted_returns":
        return [r], {**flags, "bootstrap_values": bv, "gamma": 0.9}
    if name == "vtrace":
        return [r, v], {
            **flags, "bootstrap_values": bv, "logp_target": -np.abs(lt),
            "logp_behavior": -np.abs(lb), "gamma": 0.9, "lam": 1.0,
        }  # fmt: skip
    if name == "retrace":
        return [r, q], {
            **flags, "next_expected_q": ev, "logp_target": -np.abs(lt),
            "logp_behavior": -np.abs(lb), "v_pi": vpi, "gamma": 0.9, "lam": 0.9,
        }  # fmt: skip
    if name == "eligibility_traces":
        return [r], {**flags, "gamma": 0.9, "lam": 0.9}
    if name == "prefix_sum":
        return [r], dict(flags)
    raise ValueError(name)


ALL = ("gae", "td_lambda", "discounted_returns", "vtrace", "retrace", "eligibility_traces",
       "prefix_sum")  # fmt: skip
WITH_LAM = ("gae", "td_lambda", "vtrace", "retrace", "eligibility_traces")
WITH_GAMMA = tuple(n for n in ALL if n != "prefix_sum")


def call(name, args, kwargs, **over):
    return getattr(rltscan, name)(*args, **{**kwargs, **over})


def test_valid_base_inputs_run(rng):
    """The fixtures below are valid: each error test changes exactly one thing."""
    for name in ALL:
        args, kw = base(rng, name)
        res = call(name, args, kw)
        for key in res:
            assert np.all(np.isfinite(res[key]))


# ---------------------------------------------------------------------------
# Scalar parameters
# ---------------------------------------------------------------------------


def refused(rng, name: str, named: str, *, quoted: bool = True, **bad) -> None:
    """``name`` called on valid inputs with the parameters ``bad``: a ParameterError
    that names ``named`` (see :func:`check_error`)."""
    args, kw = base(rng, name)
    with pytest.raises(ParameterError) as ei:
        call(name, args, kw, **bad)
    check_error(ei.value, ParameterError, named, quoted=quoted)


@pytest.mark.parametrize("name", WITH_GAMMA)
@pytest.mark.parametrize("bad", [-0.1, 1.0001, 2.0, NAN, -INF, INF])
def test_gamma_out_of_range(name, bad, rng):
    refused(rng, name, "gamma", quoted=False, gamma=bad)


@pytest.mark.parametrize("name", WITH_LAM)
@pytest.mark.parametrize("bad", [-1e-9, 1.5, NAN])
def test_lam_out_of_range(name, bad, rng):
    refused(rng, name, "lam", quoted=False, lam=bad)


@pytest.mark.parametrize("name", WITH_LAM)
@pytest.mark.parametrize(("gamma", "lam"), [(0.0, 0.0), (1.0, 1.0), (1, 0)])
def test_gamma_lam_bounds_are_inclusive(name, gamma, lam, rng):
    args, kw = base(rng, name)
    res = call(name, args, kw, gamma=gamma, lam=lam)
    assert all(np.all(np.isfinite(res[k])) for k in res)


@pytest.mark.parametrize("scalar", [np.float32(0.9), np.float64(0.9), torch.tensor(0.9)],
                         ids=["np.float32", "np.float64", "torch-0d"])  # fmt: skip
def test_gamma_as_numpy_or_torch_scalar(scalar, rng):
    """D14: gamma is a scalar; a numpy/torch scalar (e.g. from a config array) is one."""
    args, kw = base(rng, "gae")
    want = call("gae", args, kw, gamma=0.9)
    got = call("gae", args, kw, gamma=scalar)
    np.testing.assert_allclose(got["advantages"], want["advantages"], rtol=1e-6)


@pytest.mark.parametrize(
    ("name", "param"),
    [("vtrace", "rho_clip"), ("vtrace", "c_clip"), ("vtrace", "pg_rho_clip"),
     ("retrace", "c_clip")],
)  # fmt: skip
@pytest.mark.parametrize("bad", [0.0, -1.0, NAN])
def test_clip_must_be_positive(name, param, bad, rng):
    refused(rng, name, param, quoted=False, **{param: bad})


def test_unknown_missing_bootstrap_mode(rng):
    refused(rng, "gae", "ignore", quoted=False, missing_bootstrap="ignore")


def test_unknown_backend(rng):
    refused(rng, "gae", "cuda-please", backend="cuda-please")


def test_time_dim_out_of_range(rng):
    refused(rng, "gae", "time_dim", quoted=False, time_dim=1)


# ---------------------------------------------------------------------------
# Flags
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("flag", ["terminated", "truncated"])
@pytest.mark.parametrize("bad", [2, -1, 0.5], ids=["2", "-1", "0.5"])
def test_flags_must_be_zero_or_one(name, flag, bad, rng):
    args, kw = base(rng, name)
    f = kw[flag].astype(np.float64 if isinstance(bad, float) else np.int64)
    f[5] = bad
    f[8] = bad
    with pytest.raises(DataError) as ei:
        call(name, args, kw, **{flag: f})
    check_error(ei.value, DataError, flag, index="5")


def test_is_first_must_be_zero_or_one(rng):
    x = rng.normal(size=T)
    first = np.zeros(T, np.int64)
    first[4] = 3
    with pytest.raises(DataError) as ei:
        rltscan.prefix_sum(x, is_first=first)
    check_error(ei.value, DataError, "is_first", index="4")


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize("kind", ["uint8", "int32", "float32", "bool"])
def test_zero_one_flags_of_any_numeric_dtype_are_accepted(name, kind, rng):
    args, kw = base(rng, name)
    want = call(name, args, kw)
    kw = {
        **kw,
        "terminated": kw["terminated"].astype(kind),
        "truncated": kw["truncated"].astype(kind),
    }
    got = call(name, args, kw)
    for key in want:
        np.testing.assert_array_equal(got[key], want[key])


# ---------------------------------------------------------------------------
# Non-finite entries: raise where read, pass where ignored
# ---------------------------------------------------------------------------

READ_EVERYWHERE = {
    "gae": ["rewards", "values"],
    "td_lambda": ["rewards"],
    "discounted_returns": ["rewards"],
    "vtrace": ["rewards", "values", "logp_behavior"],
    "retrace": ["rewards", "q_values", "v_pi"],
    "eligibility_traces": ["x"],
    "prefix_sum": ["x"],
}
POS_NAMES = {
    "gae": ["rewards", "values"], "td_lambda": ["rewards"], "discounted_returns": ["rewards"],
    "vtrace": ["rewards", "values"], "retrace": ["rewards", "q_values"],
    "eligibility_traces": ["x"], "prefix_sum": ["x"],
}  # fmt: skip


def _set(args, kw, name, fn_name, idx, value):
    args = [a.copy() for a in args]
    kw = dict(kw)
    pos = POS_NAMES[fn_name]
    if name in pos:
        args[pos.index(name)][idx] = value
    else:
        kw[name] = kw[name].copy()
        kw[name][idx] = value
    return args, kw


@pytest.mark.parametrize("fn_name", sorted(READ_EVERYWHERE))
@pytest.mark.parametrize("bad", [NAN, INF, -INF], ids=["nan", "inf", "-inf"])
def test_non_finite_read_entry_raises(fn_name, bad, rng):
    for input_name in READ_EVERYWHERE[fn_name]:
        args, kw = base(rng, fn_name)
        args, kw = _set(args, kw, input_name, fn_name, 6, bad)
        args, kw = _set(args, kw, input_name, fn_name, 9, bad)
        with pytest.raises(DataError) as ei:
            call(fn_name, args, kw)
        check_error(ei.value, DataError, input_name, index="6")


@pytest.mark.parametrize("bad", [NAN, INF], ids=["nan", "inf"])
def test_logp_target_nan_or_plus_inf_raises(bad, rng):
    for fn_name in ("vtrace", "retrace"):
        args, kw = base(rng, fn_name)
        args, kw = _set(args, kw, "logp_target", fn_name, 5, bad)
        with pytest.raises(DataError) as ei:
            call(fn_name, args, kw)
        check_error(ei.value, DataError, "logp_target", index="5")


def test_logp_target_minus_inf_is_allowed(rng):
    for fn_name in ("vtrace", "retrace"):
        args, kw = base(rng, fn_name)
        args, kw = _set(args, kw, "logp_target", fn_name, 5, -INF)
        res = call(fn_name, args, kw)
        for key in res:
            assert np.all(np.isfinite(res[key])), f"{fn_name}.{key}"


def test_logp_behavior_minus_inf_raises(rng):
    """A behaviour log-probability of -inf would mean an action mu never takes."""
    args, kw = base(rng, "vtrace")
    args, kw = _set(args, kw, "logp_behavior", "vtrace", 2, -INF)
    with pytest.raises(DataError) as ei:
        call("vtrace", args, kw)
    check_error(ei.value, DataError, "logp_behavior", index="2")


@pytest.mark.parametrize("name", ["gae", "td_lambda", "discounted_returns", "vtrace"])
def test_bootstrap_values_read_only_at_boot_steps(name, rng):
    args, kw = base(rng, name)
    bv = kw["bootstrap_values"].copy()
    not_boot = [t for t in range(T) if t not in BOOT_AT]
    bv[not_boot] = NAN  # ignored: fine
    res = call(name, args, kw, bootstrap_values=bv)
    assert all(np.all(np.isfinite(res[k])) for k in res)
    bv[7] = NAN  # read (truncation at 7)
    with pytest.raises(DataError) as ei:
        call(name, args, kw, bootstrap_values=bv)
    check_error(ei.value, DataError, "bootstrap_values", index="7")


@pytest.mark.parametrize("name", ["gae", "td_lambda", "discounted_returns", "vtrace"])
def test_next_values_ignored_only_at_terminal_steps(name, rng):
    args, kw = base(rng, name)
    kw = {k: v for k, v in kw.items() if k not in ("bootstrap_values", "values")}
    nv = rng.normal(size=T)
    nv[[3, 10]] = NAN  # terminated steps (10 has both flags: terminated wins, D2)
    res = call(name, args, kw, next_values=nv)
    assert all(np.all(np.isfinite(res[k])) for k in res)
    # discounted returns read next_values only where a bootstrap is needed (§3.3)
    bad = 7 if name == "discounted_returns" else 4
    if name == "discounted_returns":
        nv[4] = NAN
        res = call(name, args, kw, next_values=nv)
        assert np.all(np.isfinite(res["returns"]))
    nv[bad] = INF
    with pytest.raises(DataError) as ei:
        call(name, args, kw, next_values=nv)
    check_error(ei.value, DataError, "next_values", index=str(bad))


def test_next_expected_q_ignored_only_at_terminal_steps(rng):
    args, kw = base(rng, "retrace")
    ev = kw["next_expected_q"].copy()
    ev[[3, 10]] = NAN
    res = call("retrace", args, kw, next_expected_q=ev)
    assert np.all(np.isfinite(res["retrace_targets"]))
    ev[11] = NAN  # window end: read
    with pytest.raises(DataError) as ei:
        call("retrace", args, kw, next_expected_q=ev)
    check_error(ei.value, DataError, "next_expected_q", index="11")


def test_first_bad_index_in_a_batch_is_in_the_users_layout(rng):
    r, v, bv = rng.normal(size=(3, 2, T))
    term, trunc = np.zeros((2, T), bool), np.zeros((2, T), bool)
    r[1, 4] = NAN
    with pytest.raises(DataError) as ei:
        rltscan.gae(r, v, terminated=term, truncated=trunc, bootstrap_values=bv)
    check_error(ei.value, DataError, "rewards")
    assert re.search(r"1,\s*4", str(ei.value)), str(ei.value)
    with pytest.raises(DataError) as ei:  # time-major: the same entry is [4, 1]
        rltscan.gae(r.T, v.T, terminated=term.T, truncated=trunc.T, bootstrap_values=bv.T,
                    time_dim=0)  # fmt: skip
    assert re.search(r"4,\s*1", str(ei.value)), str(ei.value)


# ---------------------------------------------------------------------------
# Bootstrap forms (D5, §6)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gae", "td_lambda", "vtrace"])
def test_missing_bootstrap_raises_by_default(name, rng):
    args, kw = base(rng, name)
    del kw["bootstrap_values"]
    if name == "td_lambda":
        pass  # values alone: interior steps are covered, the cuts are not
    with pytest.raises(DataError) as ei:
        call(name, args, kw)
    msg = check_error(ei.value, DataError, "bootstrap_values" if '"bootstrap_values"' in
                      str(ei.value) else "missing_bootstrap", index="7")  # fmt: skip
    assert "zero" in msg, f"the fix should mention missing_bootstrap='zero': {msg!r}"
    res = call(name, args, kw, missing_bootstrap="zero")
    assert all(np.all(np.isfinite(res[k])) for k in res)


@pytest.mark.parametrize("name", ["gae", "td_lambda", "vtrace"])
def test_missing_bootstrap_at_window_end_only(name, rng):
    """No interior truncation, no bootstrap: the window end (a cut, D3) still needs one."""
    args, kw = base(rng, name)
    del kw["bootstrap_values"]
    kw["truncated"] = np.zeros(T, bool)
    with pytest.raises(DataError) as ei:
        call(name, args, kw)
    assert str(T - 1) in str(ei.value)
    assert ei.value.exit_code == 4


def test_missing_bootstrap_at_window_end_terminated_is_fine(rng):
    args, kw = base(rng, "gae")
    del kw["bootstrap_values"]
    kw["truncated"] = np.zeros(T, bool)
    kw["terminated"] = kw["terminated"].copy()
    kw["terminated"][-1] = True
    res = call("gae", args, kw)
    assert np.all(np.isfinite(res["advantages"]))


def test_retrace_without_next_expected_q_raises(rng):
    args, kw = base(rng, "retrace")
    del kw["next_expected_q"]
    with pytest.raises((DataError, ParameterError)) as ei:
        call("retrace", args, kw)
    check_error(ei.value, type(ei.value), "next_expected_q")


def test_discounted_returns_default_zero(rng):
    args, kw = base(rng, "discounted_returns")
    del kw["bootstrap_values"]
    res = call("discounted_returns", args, kw)
    assert np.all(np.isfinite(res["returns"]))
    with pytest.raises(DataError):
        call("discounted_returns", args, kw, missing_bootstrap="error")


@pytest.mark.parametrize("name", ["gae", "td_lambda", "vtrace"])
def test_last_value_with_interior_truncation_raises(name, rng):
    """D5: last_value covers t = T-1 only; the truncation at 7 has no bootstrap."""
    args, kw = base(rng, name)
    del kw["bootstrap_values"]
    with pytest.raises(DataError) as ei:
        call(name, args, kw, last_value=0.5)
    check_error(ei.value, DataError, "truncated" if '"truncated"' in str(ei.value)
                else "bootstrap_values", index="7")  # fmt: skip


@pytest.mark.parametrize("name", ["gae", "td_lambda", "discounted_returns", "vtrace"])
def test_last_value_and_bootstrap_values_are_exclusive(name, rng):
    args, kw = base(rng, name)
    with pytest.raises(ParameterError) as ei:
        call(name, args, kw, last_value=0.5)
    msg = check_error(ei.value, ParameterError, "last_value")
    assert "bootstrap_values" in msg


@pytest.mark.parametrize("name", ["gae", "td_lambda", "discounted_returns", "vtrace"])
@pytest.mark.parametrize("other", ["bootstrap_values", "last_value"])
def test_next_values_excludes_other_forms(name, other, rng):
    args, kw = base(rng, name)
    kw = {k: v for k, v in kw.items() if k != "bootstrap_values"}
    kw[other] = rng.normal(size=T) if other == "bootstrap_values" else 0.5
    with pytest.raises(ParameterError) as ei:
        call(name, args, kw, next_values=rng.normal(size=T))
    msg = check_error(ei.value, ParameterError, "next_values")
    assert other in msg


def test_last_value_non_finite_raises(rng):
    args, kw = base(rng, "gae")
    del kw["bootstrap_values"]
    kw["truncated"] = np.zeros(T, bool)
    with pytest.raises(DataError) as ei:
        call("gae", args, kw, last_value=NAN)
    check_error(ei.value, DataError, "last_value")


# ---------------------------------------------------------------------------
# Warnings (§6)
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "lam", "c_clip", "warns"),
    [("vtrace", 1.0, 1.2, True), ("vtrace", 1.0, 1.0, False), ("vtrace", 0.8, 1.2, False),
     ("retrace", 1.0, 1.5, True), ("retrace", 1.0, 1.0, False)],
)  # fmt: skip
def test_warning_when_not_contractive(name, lam, c_clip, warns, rng):
    args, kw = base(rng, name)
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        call(name, args, kw, gamma=0.95, lam=lam, c_clip=c_clip)
    hits = [w for w in rec if "contractive" in str(w.message)]
    assert bool(hits) == warns, [str(w.message) for w in rec]
    if warns:
        assert "c_clip" in str(hits[0].message)


def test_next_target_probs_rows_not_summing_to_one_warn(rng):
    args, kw = base(rng, "retrace")
    del kw["next_expected_q"]
    probs = rng.dirichlet(np.ones(3), size=T)
    next_q = rng.normal(size=(T, 3))
    want = call("retrace", args, {**kw, "next_expected_q": np.einsum("ta,ta->t", probs, next_q)})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # valid distributions: no warning
        got = call("retrace", args, kw, next_target_probs=probs, next_q=next_q)
    np.testing.assert_allclose(got["retrace_targets"], want["retrace_targets"], rtol=1e-12)
    probs[6] *= 1.01  # a read row that sums to 1.01
    with pytest.warns(Warning):
        call("retrace", args, kw, next_target_probs=probs, next_q=next_q)


# ---------------------------------------------------------------------------
# Shapes and dtypes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "input_name"),
    [("gae", "values"), ("gae", "terminated"), ("gae", "bootstrap_values"),
     ("vtrace", "logp_target"), ("retrace", "next_expected_q"), ("retrace", "v_pi"),
     ("eligibility_traces", "truncated"), ("prefix_sum", "terminated")],
)  # fmt: skip
def test_shape_mismatch(name, input_name, rng):
    args, kw = base(rng, name)
    pos = POS_NAMES[name]
    if input_name in pos:
        args[pos.index(input_name)] = args[pos.index(input_name)][:-1]
    else:
        kw[input_name] = kw[input_name][:-1]
    with pytest.raises(DataError) as ei:
        call(name, args, kw)
    check_error(ei.value, DataError, input_name)


def test_last_value_shape_must_match_rows(rng):
    r, v = rng.normal(size=(2, 3, T))
    flags = {"terminated": np.zeros((3, T), bool)}
    with pytest.raises(DataError) as ei:
        rltscan.gae(r, v, **flags, last_value=np.zeros(4))
    check_error(ei.value, DataError, "last_value")


def test_init_shape_must_match_features(rng):
    x = rng.normal(size=(T, 4))
    with pytest.raises(DataError) as ei:
        rltscan.eligibility_traces(x, terminated=TERM, init=np.zeros(3))
    check_error(ei.value, DataError, "init")


def test_next_target_probs_shape_mismatch(rng):
    args, kw = base(rng, "retrace")
    del kw["next_expected_q"]
    with pytest.raises(DataError) as ei:
        call("retrace", args, kw, next_target_probs=np.full((T, 3), 1 / 3), next_q=np.ones((T, 2)))
    check_error(ei.value, DataError, "next_q")


@pytest.mark.parametrize(
    "bad", [np.array(["a"] * T), np.ones(T, np.complex128)], ids=["str", "complex"]
)
def test_unsupported_dtype(bad, rng):
    args, kw = base(rng, "gae")
    with pytest.raises(DTypeError) as ei:
        call("gae", [bad, args[1]], kw)
    check_error(ei.value, DTypeError, "rewards")


def test_empty_sequence(rng):
    with pytest.raises(DataError) as ei:
        rltscan.discounted_returns(np.zeros(0), terminated=np.zeros(0, bool))
    check_error(ei.value, DataError, "rewards")


# ---------------------------------------------------------------------------
# D13: validation is not an assert; it survives python -O
# ---------------------------------------------------------------------------


def test_validation_survives_python_dash_O():
    code = textwrap.dedent(
        """
        import numpy as np, rltscan
        assert False, "this line must be stripped by -O"
        r = np.ones(5); v = np.ones(5); t = np.zeros(5, bool)
        codes = []
        for kw in ({"gamma": 2.0}, {"lam": -1.0}):
            try:
                rltscan.gae(r, v, terminated=t, last_value=0.0, **kw)
            except rltscan.ParameterError as e:
                codes.append(e.exit_code)
        r[2] = float("nan")
        try:
            rltscan.gae(r, v, terminated=t, last_value=0.0)
        except rltscan.DataError as e:
            codes.append(e.exit_code)
        f = np.array([0, 2, 0, 0, 0])
        try:
            rltscan.prefix_sum(np.ones(5), terminated=f)
        except rltscan.DataError as e:
            codes.append(e.exit_code)
        print(codes)
        """
    )
    out = subprocess.run(
        [sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[2, 2, 4, 4]"


def test_next_target_probs_rows_at_terminal_steps_are_not_checked(rng):
    """§6: only rows that are read must sum to 1; E_pi Q after a terminal step is not."""
    args, kw = base(rng, "retrace")
    del kw["next_expected_q"]
    probs = rng.dirichlet(np.ones(3), size=T)
    next_q = rng.normal(size=(T, 3))
    term = np.asarray(kw["terminated"]).astype(bool).copy()
    term[4] = True
    probs[4] = 0.0  # garbage in an ignored row
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        call("retrace", args, {**kw, "terminated": term}, next_target_probs=probs, next_q=next_q)
