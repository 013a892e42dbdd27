"""Identities between the estimators, on random inputs and every backend.

1 GAE + V = TD(lambda)          2 lambda = 1 reductions      3 lambda = 0 reduction
4 on-policy V-trace = GAE       5 Retrace with constant traces = q + GAE
6 traces with gamma*lambda = 1 = prefix sums
7 chunk invariance (every chunk size, shard splits with carries)
8 layout invariance ([B, T], [T, B], flat with row-end cuts)
9 garbage invariance (NaN / 1e6 in every ignored slot changes nothing, raises nothing)
10 reversal duality             11 episode locality
plus hypothesis property tests (linearity of the scan in b, identity 1 and 8 on
drawn shapes and flags, estimators against the oracles on drawn inputs).
"""

from __future__ import annotations

import warnings

import numpy as np
import oracles
import pytest
import torch
from cases import BACKWARD, ESTIMATORS, Case, make_case, random_flags, run
from conftest import assert_close_to_oracle, is_slow_backend
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rltscan

F64 = torch.float64
T_ = torch.from_numpy


def tensors(**arrays):
    return {k: (T_(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v)
            for k, v in arrays.items()}  # fmt: skip


def episode_data(rng, B, T, p=0.1, *, truncations=True):
    term, trunc = random_flags(rng, (B, T), p)
    if not truncations:
        trunc[:] = False
    r, v, boot = rng.normal(size=(3, B, T))
    return term, trunc, r, v, boot


# ---------------------------------------------------------------------------
# 1-3: GAE, TD(lambda), discounted returns
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", ["boot", "last"])
@pytest.mark.parametrize(("gamma", "lam"), [(0.99, 0.95), (1.0, 0.5), (0.9, 0.0), (0.5, 1.0)])
def test_gae_plus_values_is_td_lambda(form, gamma, lam, backend, rng):
    if is_slow_backend(backend) and backend == "triton" and gamma not in (0.99, 0.9):
        pytest.skip("interpreted triton runs a subset of this grid (all of it with -m gpu)")
    term, trunc, r, v, boot = episode_data(rng, 3, 57, truncations=form == "boot")
    kw = tensors(terminated=term, truncated=trunc)
    if form == "boot":
        kw["bootstrap_values"] = T_(boot)
    else:
        kw["last_value"] = T_(boot[:, -1].copy())
    g = rltscan.gae(T_(r), T_(v), **kw, gamma=gamma, lam=lam, backend=backend)
    td = rltscan.td_lambda(T_(r), values=T_(v), **kw, gamma=gamma, lam=lam, backend=backend)
    assert_close_to_oracle(g["advantages"] + T_(v), td["lambda_returns"], F64)
    assert_close_to_oracle(g["value_targets"], td["lambda_returns"], F64)


@pytest.mark.parametrize("form", ["boot", "next"])
def test_lambda_one_reductions(form, backend, rng):
    term, trunc, r, v, boot = episode_data(rng, 3, 57)
    kw = tensors(terminated=term, truncated=trunc)
    kw["bootstrap_values" if form == "boot" else "next_values"] = T_(boot)
    vals = {"values": T_(v)} if form == "boot" else {}
    td = rltscan.td_lambda(T_(r), **vals, **kw, gamma=0.95, lam=1.0, backend=backend)
    ret = rltscan.discounted_returns(T_(r), **vals, **kw, gamma=0.95, backend=backend)
    assert_close_to_oracle(td["lambda_returns"], ret["returns"], F64)
    if form == "next":
        return  # free-form next_values: GAE's sum does not telescope (§4 item 1 note)
    g = rltscan.gae(T_(r), T_(v), **kw, gamma=0.95, lam=1.0, backend=backend)
    assert_close_to_oracle(g["advantages"], ret["returns"] - T_(v), F64)


@pytest.mark.parametrize("form", ["boot", "next"])
def test_lambda_zero_is_one_step_target(form, backend, rng):
    term, trunc, r, v, boot = episode_data(rng, 3, 57, p=0.2)
    kw = tensors(terminated=term, truncated=trunc)
    if form == "boot":
        kw.update(values=T_(v), bootstrap_values=T_(boot))
        nv = np.concatenate([v[:, 1:], boot[:, -1:]], axis=1)
        nv = np.where(trunc, boot, nv)
    else:
        kw["next_values"] = T_(boot)
        nv = boot
    want = np.where(term, r, r + 0.9 * nv)
    td = rltscan.td_lambda(T_(r), **kw, gamma=0.9, lam=0.0, backend=backend)
    assert_close_to_oracle(td["lambda_returns"], want, F64)


# ---------------------------------------------------------------------------
# 4-6: V-trace, Retrace, traces
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(("lam", "rho_clip", "c_clip"), [(1.0, 1.0, 1.0), (0.9, 1.5, 2.0),
                                                       (0.0, 1.0, 1.0)])  # fmt: skip
def test_on_policy_vtrace_is_gae(lam, rho_clip, c_clip, backend, rng):
    term, trunc, r, v, boot = episode_data(rng, 3, 57)
    logp = np.log(rng.uniform(0.05, 1, size=r.shape))
    kw = tensors(terminated=term, truncated=trunc, bootstrap_values=boot)
    g = rltscan.gae(T_(r), T_(v), **kw, gamma=0.97, lam=lam, backend=backend)
    with_warn = 0.97 * lam * c_clip > 1
    # §6: warn when gamma * lam * c_clip > 1 (any Warning subclass will do)
    with pytest.warns(Warning, match="contractive") if with_warn else warnings.catch_warnings():
        if not with_warn:
            warnings.simplefilter("error")  # contractive: no warning expected
        vt = rltscan.vtrace(
            T_(r), T_(v), logp_target=T_(logp), logp_behavior=T_(logp.copy()), **kw,
            gamma=0.97, lam=lam, rho_clip=rho_clip, c_clip=c_clip, backend=backend,
        )  # fmt: skip
    assert_close_to_oracle(vt["vs"], g["value_targets"], F64)
    if lam == 1.0:
        assert_close_to_oracle(vt["pg_advantages"], g["advantages"], F64)


@pytest.mark.parametrize("lam", [0.0, 0.6, 1.0])
def test_retrace_with_constant_traces_is_q_plus_gae(lam, backend, rng):
    term, trunc, r, q, ev = episode_data(rng, 3, 57)
    logp_b = np.log(rng.uniform(0.05, 0.5, size=r.shape))
    logp_t = logp_b + rng.uniform(0.0, 2.0, size=r.shape)  # every ratio >= 1 = c_clip
    ev = np.where(term, np.nan, ev)  # ignored at terminal steps, by both estimators
    kw = tensors(terminated=term, truncated=trunc)
    rt = rltscan.retrace(
        T_(r), T_(q), next_expected_q=T_(ev), logp_target=T_(logp_t), logp_behavior=T_(logp_b),
        **kw, gamma=0.95, lam=lam, c_clip=1.0, backend=backend,
    )  # fmt: skip
    g = rltscan.gae(T_(r), T_(q), next_values=T_(ev), **kw, gamma=0.95, lam=lam, backend=backend)
    assert_close_to_oracle(rt["retrace_targets"], T_(q) + g["advantages"], F64)


@pytest.mark.parametrize("flags", ["episodes", "none"])
def test_traces_with_unit_decay_are_prefix_sums(flags, backend, rng):
    term, trunc, x, _, _ = episode_data(rng, 3, 57, p=0.15)
    kw = tensors(terminated=term, truncated=trunc) if flags == "episodes" else {}
    if flags == "none":
        kw = tensors(terminated=np.zeros_like(term))
    tr = rltscan.eligibility_traces(T_(x), **kw, gamma=1.0, lam=1.0, backend=backend)
    ps = rltscan.prefix_sum(T_(x), **kw, backend=backend)
    assert_close_to_oracle(tr["eligibility_traces"], ps["prefix_sums"], F64)
    if flags == "none":
        assert_close_to_oracle(ps["prefix_sums"], np.cumsum(x, axis=1), F64)


# ---------------------------------------------------------------------------
# 7: chunk invariance
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("reverse", [True, False])
def test_shard_split_with_carries(reverse, backend, rng):
    """Any split of a sequence into shards, scanned in order with the carry passed on."""
    T = 37
    a = np.where(rng.random((2, T)) < 0.15, 0.0, rng.uniform(0.5, 1.0, (2, T)))
    b = rng.normal(size=(2, T))
    init = rng.normal(size=2)
    full = rltscan.linear_scan(T_(a), T_(b), reverse=reverse, init=T_(init), backend=backend)
    splits = range(1, T) if not is_slow_backend(backend) else (1, 5, 18, 36)
    for k in splits:
        if reverse:  # last shard first; its y at the first step is the carry for the one before
            right = rltscan.linear_scan(T_(a[:, k:]), T_(b[:, k:]), reverse=True, init=T_(init),
                                        backend=backend)  # fmt: skip
            left = rltscan.linear_scan(T_(a[:, :k]), T_(b[:, :k]), reverse=True,
                                       init=right[:, 0].clone(), backend=backend)  # fmt: skip
        else:
            left = rltscan.linear_scan(T_(a[:, :k]), T_(b[:, :k]), reverse=False, init=T_(init),
                                       backend=backend)  # fmt: skip
            right = rltscan.linear_scan(T_(a[:, k:]), T_(b[:, k:]), reverse=False,
                                        init=left[:, -1].clone(), backend=backend)  # fmt: skip
        assert_close_to_oracle(torch.cat([left, right], dim=1), full, F64)


def test_forward_estimators_split_with_init_carry(backend, rng):
    """Traces and prefix sums over two windows, the second seeded with the first's last
    output (or 0 when the first window ended with done), equal the whole window."""
    T = 41
    term, trunc, x, _, _ = episode_data(rng, 1, T, p=0.1)
    term, trunc, x = term[0], trunc[0], x[0]
    full_tr = rltscan.eligibility_traces(T_(x), **tensors(terminated=term, truncated=trunc),
                                         gamma=0.9, lam=0.8, backend=backend)  # fmt: skip
    full_ps = rltscan.prefix_sum(T_(x), **tensors(terminated=term, truncated=trunc),
                                 backend=backend)  # fmt: skip
    for k in (1, 7, 20, 40):
        parts_tr, parts_ps = [], []
        carry_tr = carry_ps = None
        for lo, hi in ((0, k), (k, T)):
            kw = tensors(terminated=term[lo:hi], truncated=trunc[lo:hi])
            if lo > 0 and (term[lo - 1] or trunc[lo - 1]):
                carry_tr = carry_ps = 0.0
            kw["time_dim"] = -1  # windows of one step are said to be one
            tr = rltscan.eligibility_traces(T_(x[lo:hi]), **kw, gamma=0.9, lam=0.8,
                                            init=carry_tr, backend=backend)  # fmt: skip
            ps = rltscan.prefix_sum(T_(x[lo:hi]), **kw, init=carry_ps, backend=backend)
            parts_tr.append(tr["eligibility_traces"])
            parts_ps.append(ps["prefix_sums"])
            carry_tr = float(tr["eligibility_traces"][-1])
            carry_ps = float(ps["prefix_sums"][-1])
        assert_close_to_oracle(torch.cat(parts_tr), full_tr["eligibility_traces"], F64)
        assert_close_to_oracle(torch.cat(parts_ps), full_ps["prefix_sums"], F64)


def test_torch_scan_every_chunk_size(rng):
    """§2.4: 'check every chunk size from 1 to T' (torch backend's chunked pass)."""
    from rltscan.scan import torch_scan

    T = 23
    a = torch.from_numpy(np.where(rng.random((3, T)) < 0.2, 0.0, rng.uniform(0.3, 1.0, (3, T))))
    b = torch.from_numpy(rng.normal(size=(3, T)))
    init = torch.from_numpy(rng.normal(size=3))
    for reverse in (True, False):
        want = rltscan.linear_scan(a, b, reverse=reverse, init=init, backend="reference")
        for chunk in range(1, T + 1):
            got = torch_scan._chunked(a, b, reverse=reverse, init=init, chunk=chunk)
            assert_close_to_oracle(got, want, F64)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize(("rows", "chunk"), [(1, 1), (2, 4), (4, 16)])
def test_triton_tile_sizes(name, rows, chunk, rng):
    """Triton tiles of every shape give the oracle's answer: tile edges need the next
    row's value/ratio and the previous row's done, read from memory (§2.4)."""
    from rltscan.scan import triton_scan

    # one-step tiles: every step is a tile edge, so 9 steps (27 programs under the
    # interpreter, not 63) cross as many kinds of edge as 21 do
    T = 9 if chunk == 1 else 21
    case = make_case(name, rng, B=3, T=T, p_done=0.2, dtype=F64)
    with triton_scan.tile_override(rows=rows, chunk=chunk):
        got = run(case, "triton", dtype=torch.float32)
    for key, want in case.expected.items():
        assert_close_to_oracle(got[key], want, torch.float32)


# ---------------------------------------------------------------------------
# 8: layout invariance
# ---------------------------------------------------------------------------


def _flatten_case(case):
    """[B, T] -> one flat sequence of B*T steps with a truncation at each row end."""
    flat = {}
    for k, v in case.arrays.items():
        flat[k] = v.reshape(-1, *v.shape[2:]) if isinstance(v, np.ndarray) else v
    B, T = case.arrays[case.pos[0]].shape[:2]
    if "truncated" in flat:
        ends = np.zeros((B, T), dtype=bool)
        ends[:, -1] = True
        flat["truncated"] = (case.arrays["truncated"] | ends).reshape(-1)
    elif "is_first" in flat:
        starts = case.arrays["is_first"].copy()
        starts[:, 0] = True
        flat["is_first"] = starts.reshape(-1)
    return flat


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("form", ["boot", "next"])
def test_layout_invariance(name, form, backend, rng):
    if form == "next" and name not in ("gae", "td_lambda", "discounted_returns", "vtrace"):
        pytest.skip("only value estimators have bootstrap forms")
    # interpreted Triton: 17 steps, 2 full 8-step tiles and a 1-step one (29: 3 and a
    # 5-step one), each layout's tile edges crossed at about half the programs
    T = 17 if backend == "triton" and is_slow_backend(backend) else 29
    case = make_case(name, rng, B=3, T=T, p_done=0.1, form=form, dtype=F64)
    bt = run(case, backend)
    tb = run(case, backend, layout="tb")
    for key in case.expected:
        np.testing.assert_allclose(tb[key], bt[key], rtol=1e-12, atol=1e-12, err_msg=key)
    flat_arrays = _flatten_case(case)
    args = [T_(flat_arrays[k]) for k in case.pos]
    kwargs = {k: T_(v) for k, v in flat_arrays.items() if k not in case.pos}
    res = getattr(rltscan, name)(*args, **kwargs, **case.params, backend=backend)
    for key in case.expected:
        got = res[key].numpy().reshape(bt[key].shape)
        np.testing.assert_allclose(got, bt[key], rtol=1e-12, atol=1e-12, err_msg=key)


def test_time_major_features(backend, rng):
    """Traces with features: [B, T, D] time on axis 1 vs [T, B, D] with time_dim=0."""
    term, trunc = random_flags(rng, (2, 17), 0.2)
    x = rng.normal(size=(2, 17, 3))
    a = rltscan.eligibility_traces(T_(x), **tensors(terminated=term, truncated=trunc),
                                   gamma=0.9, lam=0.9, backend=backend)  # fmt: skip
    b = rltscan.eligibility_traces(
        T_(x).transpose(0, 1), terminated=T_(term).T, truncated=T_(trunc).T, time_dim=0,
        gamma=0.9, lam=0.9, backend=backend,
    )  # fmt: skip
    want = np.stack([oracles.eligibility_traces(x[i], term[i], trunc[i], gamma=0.9, lam=0.9)
                     for i in range(2)])  # fmt: skip
    assert_close_to_oracle(a["eligibility_traces"], want, F64)
    assert_close_to_oracle(b["eligibility_traces"].transpose(0, 1), want, F64)


# ---------------------------------------------------------------------------
# 9: garbage invariance
# ---------------------------------------------------------------------------


def _garbage_variants(case, fill):
    """A copy of the case's arrays with ``fill`` in every slot that §1.3/§3 ignore."""
    a = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in case.arrays.items()}
    term, trunc = a["terminated"], a["truncated"]
    T = term.shape[-1]
    window_end = np.zeros_like(term)
    window_end[..., -1] = True
    boot = (trunc | window_end) & ~term
    cut = term | trunc | window_end
    if "next_values" in a:  # V(s_{t+1}) is not read after a terminal step
        a["next_values"][term] = fill
    if "bootstrap_values" in a:  # read only where boot_t
        a["bootstrap_values"][~boot] = fill
    if case.name == "retrace":
        a["next_expected_q"][term] = fill
        # the ratio of row t is read only by row t-1, and only when t-1 is not a cut
        unread = np.zeros_like(term)
        unread[..., 0] = True
        unread[..., 1:] = cut[..., : T - 1]
        a["logp_target"][unread] = fill
        a["logp_behavior"][unread] = fill
    return a


@pytest.mark.parametrize("name", ["gae", "td_lambda", "discounted_returns", "vtrace", "retrace"])
@pytest.mark.parametrize("form", ["boot", "next"])
@pytest.mark.parametrize("fill", [float("nan"), 1e6, float("inf")], ids=["nan", "1e6", "inf"])
def test_garbage_in_ignored_slots(name, form, fill, backend, rng):
    if form == "next" and name == "retrace":
        pytest.skip("retrace has one bootstrap form (next_expected_q)")
    if is_slow_backend(backend) and backend == "triton" and not np.isnan(fill):
        pytest.skip("interpreted triton runs a subset of this grid (all of it with -m gpu)")
    case = make_case(name, rng, B=3, T=40, p_done=0.25, form=form, dtype=F64)
    base = run(case, backend)
    dirty = dict(case.__dict__)
    dirty["arrays"] = _garbage_variants(case, fill)
    got = run(Case(**dirty), backend)  # validate=True: garbage in ignored slots must not raise
    for key in case.expected:
        assert np.all(np.isfinite(got[key])), f"{key}: garbage leaked into the outputs"
        np.testing.assert_array_equal(got[key], base[key], err_msg=key)
        assert_close_to_oracle(got[key], case.expected[key], F64)


# ---------------------------------------------------------------------------
# 10: reversal duality
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("T", [1, 2, 17, 300])
def test_reversal_duality(T, backend, rng):
    a = np.where(rng.random((2, T)) < 0.1, 0.0, rng.uniform(0.0, 1.0, (2, T)))
    b = rng.normal(size=(2, T))
    init = rng.normal(size=2)
    back = rltscan.linear_scan(T_(a), T_(b), reverse=True, init=T_(init), backend=backend)
    fwd = rltscan.linear_scan(T_(a[:, ::-1].copy()), T_(b[:, ::-1].copy()), reverse=False,
                              init=T_(init), backend=backend)  # fmt: skip
    assert_close_to_oracle(back, fwd.flip(-1), F64)


def test_reversal_duality_of_estimators(backend, rng):
    """Discounted returns of a sequence = reversed traces (gamma*lam = gamma) of the reversed
    sequence, with the episodes' ends becoming starts (flags shifted by one)."""
    T = 50
    term = rng.random(T) < 0.15
    term[-1] = False
    r = rng.normal(size=T)
    ret = rltscan.discounted_returns(T_(r), terminated=T_(term), gamma=0.9, backend=backend)
    # reversed: step T-1-t starts an episode where step t terminated; flag it one step earlier
    rev_term = np.zeros(T, dtype=bool)
    rev_term[:-1] = term[::-1][1:]
    tr = rltscan.eligibility_traces(T_(r[::-1].copy()), terminated=T_(rev_term), gamma=0.9,
                                    lam=1.0, backend=backend)  # fmt: skip
    assert_close_to_oracle(ret["returns"], tr["eligibility_traces"].flip(0), F64)


# ---------------------------------------------------------------------------
# 11: episode locality
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ESTIMATORS)
def test_episode_locality(name, backend, rng):
    """Perturbing one step's non-flag input changes outputs only inside its episode, and
    only at earlier-or-equal (backward) / later-or-equal (forward) steps."""
    # interpreted Triton: 30 steps (4 tiles of 8, ~4 episodes), half the programs a run
    T = 30 if backend == "triton" and is_slow_backend(backend) else 60
    case = make_case(name, rng, B=None, T=T, p_done=0.12, dtype=F64)
    base = run(case, backend)
    term = case.arrays.get("terminated", np.zeros(T, bool))
    trunc = case.arrays.get("truncated", np.zeros(T, bool))
    ends = term | trunc
    if "is_first" in case.arrays:
        ends = np.zeros(T, bool)
    episode = np.concatenate([[0], np.cumsum(ends)[:-1]])
    backward = name in BACKWARD
    steps = rng.choice(T, size=2 if is_slow_backend(backend) else 6, replace=False)
    for j in steps:
        for key, arr in case.arrays.items():
            if key in ("terminated", "truncated", "is_first") or not isinstance(arr, np.ndarray):
                continue
            changed = dict(case.arrays)
            changed[key] = arr.copy()
            changed[key][j] = changed[key][j] + 0.75
            out = run(Case(case.name, case.pos, changed, case.params, case.expected), backend)
            same_ep = episode == episode[j]
            allowed = same_ep & ((np.arange(T) <= j) if backward else (np.arange(T) >= j))
            for out_key in out:
                diff = out[out_key] != base[out_key]
                if diff.ndim > 1:
                    diff = diff.any(axis=tuple(range(1, diff.ndim)))
                bad = np.flatnonzero(diff & ~allowed)
                assert bad.size == 0, (
                    f"changing {key}[{j}] changed {out_key} at {bad.tolist()} (episode of "
                    f"step {j}: {np.flatnonzero(same_ep).tolist()})"
                )
            if key in ("rewards", "x"):
                # the perturbed step's own output must move (the test can fail both ways)
                first_key = next(iter(out))
                assert np.any(out[first_key][j] != base[first_key][j])


# ---------------------------------------------------------------------------
# Hypothesis properties (vectorised backend, plus the reference loop)
# ---------------------------------------------------------------------------

HYP = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@st.composite
def episodes(draw, max_t=70):
    B = draw(st.integers(1, 3))
    T = draw(st.integers(1, max_t))
    p = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0]))
    seed = draw(st.integers(0, 2**31 - 1))
    gamma = draw(st.sampled_from([0.0, 0.5, 0.9, 0.99, 1.0]))
    lam = draw(st.sampled_from([0.0, 0.3, 0.95, 1.0]))
    return B, T, p, seed, gamma, lam


@pytest.mark.parametrize("hyp_backend", ["torch", "reference"])
@HYP
@given(data=episodes())
def test_property_gae_plus_values_is_td_lambda(hyp_backend, data):
    B, T, p, seed, gamma, lam = data
    rng = np.random.default_rng(seed)
    term, trunc, r, v, boot = episode_data(rng, B, T, p)
    kw = tensors(terminated=term, truncated=trunc, bootstrap_values=boot)
    kw["time_dim"] = -1  # [B, T] said: T = 1 and T = B draws are time_dim=None refusals
    g = rltscan.gae(T_(r), T_(v), **kw, gamma=gamma, lam=lam, backend=hyp_backend)
    td = rltscan.td_lambda(T_(r), values=T_(v), **kw, gamma=gamma, lam=lam, backend=hyp_backend)
    assert_close_to_oracle(g["value_targets"], td["lambda_returns"], F64)


@pytest.mark.parametrize("name", ESTIMATORS)
@HYP
@given(data=episodes(), form=st.sampled_from(["boot", "next", "last", "zero"]))
def test_property_matches_oracle_any_layout(name, data, form):
    B, T, p, seed, gamma, lam = data
    rng = np.random.default_rng(seed)
    case = make_case(name, rng, B=B, T=T, p_done=p, form=form, dtype=F64, gamma=gamma, lam=lam)
    layout = "tb" if seed % 2 else "bt"
    got = run(case, "torch", layout=layout)
    for key, want in case.expected.items():
        assert_close_to_oracle(got[key], want, F64)


@HYP
@given(
    T=st.integers(1, 200),
    reverse=st.booleans(),
    alpha=st.floats(-3, 3),
    beta=st.floats(-3, 3),
    seed=st.integers(0, 2**31 - 1),
)
def test_property_scan_is_linear_in_b(T, reverse, alpha, beta, seed):
    rng = np.random.default_rng(seed)
    a = T_(np.where(rng.random((2, T)) < 0.1, 0.0, rng.uniform(0, 1, (2, T))))
    b1, b2 = T_(rng.normal(size=(2, T))), T_(rng.normal(size=(2, T)))
    scan = lambda b: rltscan.linear_scan(a, b, reverse=reverse, backend="torch")  # noqa: E731
    assert_close_to_oracle(scan(alpha * b1 + beta * b2), alpha * scan(b1) + beta * scan(b2), F64)
