"""Random inputs through every estimator, against the float64 textbook oracles.

Grid: T in {1, 2, 63, 1000, 4097} and longer flat sequences, B in
{flat, 1, 3}, done densities {0, 0.05, 0.5, 1} with ``terminated`` a random subset of
``done`` and some steps carrying both flags; gamma and lambda at 0, 1 and between;
importance ratios on both sides of every clip; all three bootstrap input forms;
fp32 against float64 with the tolerance table of conftest.py, fp64 to 1e-10,
fp16/bf16 inputs (rounded first, so the oracle sees the same numbers).

Ignored slots (next value after a terminal step, bootstrap at interior steps) hold
random *finite* garbage here; NaN/1e6 garbage is test_identities.py's job.
"""

from __future__ import annotations

import numpy as np
import oracles
import pytest
import torch
from cases import DTYPES, ESTIMATORS, make_case, run
from conftest import HAS_CUDA, assert_close_to_oracle, is_slow_backend

import rltscan

# Largest B*T a slow backend gets (interpreted Triton; the reference loop is cheap-ish).
SLOW_LIMIT = {"triton": 300, "reference": 20_000}


def skip_if_too_big(backend: str, steps: int) -> None:
    limit = SLOW_LIMIT.get(backend, 10**12)
    if is_slow_backend(backend) and steps > limit:
        pytest.skip(f"{backend} is slow here (interpreter/loop): {steps} steps > {limit}")


# Interpreted Triton (CI) runs the 63-step cases at 21 steps: under the tests' 2 x 8
# tiles (tests/conftest.py) [3, 21] is still 2 row tiles by 3 time tiles, the last one
# partial, as [3, 63] is 2 by 8, so every kind of tile edge is crossed, at 6 programs a
# call instead of 16 (the interpreter's cost is per program). Flat, 63 -> 21 steps is
# 3 tiles instead of 8. The other backends, and Triton on a GPU, run 63 (ids keep T63).
INTERPRETER_T = {63: 21}


def steps(backend: str, T: int) -> int:
    """``T``, or the shorter length interpreted Triton runs in its place."""
    if backend == "triton" and is_slow_backend(backend):
        return INTERPRETER_T.get(T, T)
    return T


def interpreter_subset(backend: str, keep: bool) -> None:
    """Interpreted Triton (CI) runs only the ``keep`` part of a grid; on a GPU, all of it."""
    if backend == "triton" and is_slow_backend(backend) and not keep:
        pytest.skip("interpreted triton runs a subset of this grid (all of it with -m gpu)")


def check(case, got: dict[str, np.ndarray], dtype: torch.dtype) -> None:
    for key, want in case.expected.items():
        assert key in got, f"missing output {key!r}"
        assert got[key].shape == want.shape, f"{key}: shape {got[key].shape} != {want.shape}"
        assert np.all(np.isfinite(got[key])), f"{key}: non-finite output on finite inputs"
        assert_close_to_oracle(got[key], want, dtype)


SIZES = [(1, None), (1, 3), (2, None), (2, 3), (63, None), (63, 3), (1000, 1), (4097, None)]
DENSITIES = [0.0, 0.05, 0.5, 1.0]


def _grid():
    for T, B in SIZES:
        for p in DENSITIES:
            b = "flat" if B is None else f"B{B}"
            yield pytest.param(T, B, p, id=f"T{T}-{b}-p{p:g}-f32")


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize(("T", "B", "p"), list(_grid()))
def test_matches_oracle_f32(name, T, B, p, backend, rng):
    skip_if_too_big(backend, T * (B or 1))
    interpreter_subset(backend, keep=(B is None) == (p in (0.05, 1.0)))
    case = make_case(name, rng, B=B, T=steps(backend, T), p_done=p, dtype=torch.float32)
    check(case, run(case, backend, dtype=torch.float32), torch.float32)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize(
    ("T", "B", "p"),
    [
        pytest.param(63, 3, 0.05, id="T63-B3-p0.05"),
        pytest.param(1000, 1, 0.5, id="T1000-B1-p0.5"),
        pytest.param(4097, 3, 0.05, id="T4097-B3-p0.05"),
    ],
)
def test_matches_oracle_f64(name, T, B, p, backend, rng):
    skip_if_too_big(backend, T * B)
    case = make_case(name, rng, B=B, T=steps(backend, T), p_done=p, dtype=torch.float64)
    check(case, run(case, backend, dtype=torch.float64), torch.float64)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("dt", ["f16", "bf16", "f32", "f64"])
def test_half_precision_inputs(name, dt, backend, rng):
    """fp16/bf16 inputs are upcast on load and computed in fp32 (D12)."""
    interpreter_subset(backend, keep=dt in ("f16", "bf16"))
    dtype = DTYPES[dt]
    case = make_case(name, rng, B=3, T=steps(backend, 63), p_done=0.05, dtype=dtype)
    got = run(case, backend, dtype=dtype)
    check(case, got, torch.float64 if dtype == torch.float64 else torch.float32)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("dt", ["f16", "bf16", "f32", "f64"])
def test_output_dtype(name, dt, backend, rng):
    """fp32 out for fp16/bf16/fp32 in, fp64 out for fp64 in (D12; fp64 kept on every path)."""
    dtype = DTYPES[dt]
    case = make_case(name, rng, B=2, T=9, p_done=0.3, dtype=dtype)
    want = torch.float64 if dtype == torch.float64 else torch.float32
    args = [torch.as_tensor(case.arrays[k]).to(dtype) for k in case.pos]
    kwargs = {
        k: torch.as_tensor(v) if v.dtype == bool else torch.as_tensor(v).to(dtype)
        for k, v in case.arrays.items()
        if k not in case.pos
    }
    res = getattr(rltscan, name)(*args, **kwargs, **case.params, backend=backend)
    for key in case.expected:
        assert isinstance(res[key], torch.Tensor)
        assert res[key].dtype == want, f"{key}: {dt} in, {res[key].dtype} out"
        assert tuple(res[key].shape) == case.expected[key].shape


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("dt", ["f32", "f64"])
def test_numpy_in_numpy_out(name, dt, backend, rng):
    dtype = DTYPES[dt]
    case = make_case(name, rng, B=3, T=40, p_done=0.1, dtype=dtype)
    got = run(case, backend, dtype=dtype, container="numpy")
    check(case, got, dtype)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("T", [1, 63, 1000])
def test_time_major_matches_oracle(name, T, backend, rng):
    """[T, B] buffers with time_dim=0 (passed as strided views, no copy by the caller)."""
    skip_if_too_big(backend, 3 * T)
    case = make_case(name, rng, B=3, T=steps(backend, T), p_done=0.05, dtype=torch.float32)
    check(case, run(case, backend, dtype=torch.float32, layout="tb"), torch.float32)


# ---------------------------------------------------------------------------
# Bootstrap input forms (docs/CONVENTIONS.md §1.2)
# ---------------------------------------------------------------------------

BOOTSTRAPPED = ("gae", "td_lambda", "discounted_returns", "vtrace")


@pytest.mark.parametrize("name", BOOTSTRAPPED)
@pytest.mark.parametrize("form", ["next", "boot", "last", "zero"])
@pytest.mark.parametrize(
    ("T", "B", "p"),
    [
        pytest.param(63, 3, 0.05, id="T63-B3-p0.05"),
        pytest.param(200, None, 0.3, id="T200-flat-p0.3"),
        pytest.param(1000, 3, 0.01, id="T1000-B3-p0.01"),
    ],
)
def test_bootstrap_forms(name, form, T, B, p, backend, rng):
    skip_if_too_big(backend, T * (B or 1))
    interpreter_subset(backend, keep=T == 63)
    case = make_case(name, rng, B=B, T=steps(backend, T), p_done=p, form=form,
                     dtype=torch.float32)  # fmt: skip
    check(case, run(case, backend, dtype=torch.float32), torch.float32)


@pytest.mark.parametrize("name", ["gae", "td_lambda", "vtrace"])
def test_last_value_with_missing_zero_and_interior_truncations(name, backend, rng):
    """last_value covers only the window end; with "zero", interior truncations bootstrap 0."""
    T, B = 80, 3
    case = make_case(name, rng, B=B, T=T, p_done=0.1, form="boot", dtype=torch.float64)
    last = rng.normal(size=B)
    arrays = {k: v for k, v in case.arrays.items() if k != "bootstrap_values"}
    nv = [
        oracles.next_state_values(
            arrays["terminated"][i], arrays["truncated"][i], values=arrays["values"][i],
            last_value=last[i], missing_bootstrap="zero",
        )
        for i in range(B)
    ]  # fmt: skip
    term, trunc = arrays["terminated"], arrays["truncated"]
    assert (trunc[:, :-1] & ~term[:, :-1]).any(), "case must contain an interior truncation"
    r, v = arrays["rewards"], arrays["values"]
    g, lam = case.params["gamma"], case.params["lam"]
    rows = []
    for i in range(B):
        if name == "gae":
            rows.append(oracles.gae(r[i], v[i], nv[i], term[i], trunc[i], gamma=g, lam=lam))
        elif name == "td_lambda":
            lr = oracles.td_lambda(r[i], nv[i], term[i], trunc[i], gamma=g, lam=lam)
            rows.append({"lambda_returns": lr})
        else:
            ratios = oracles.ratios_from_logp(arrays["logp_target"][i], arrays["logp_behavior"][i])
            rows.append(
                oracles.vtrace(
                    r[i], v[i], nv[i], ratios, term[i], trunc[i], gamma=g, lam=lam,
                    rho_clip=case.params["rho_clip"], c_clip=case.params["c_clip"],
                )
            )  # fmt: skip
    kwargs = {k: torch.from_numpy(x) for k, x in arrays.items() if k not in case.pos}
    res = getattr(rltscan, name)(
        *[torch.from_numpy(arrays[k]) for k in case.pos], **kwargs, **case.params,
        last_value=torch.from_numpy(last), missing_bootstrap="zero", backend=backend,
    )  # fmt: skip
    for key in rows[0]:
        want = np.array([row[key] for row in rows], dtype=np.float64)
        assert_close_to_oracle(res[key], want, torch.float64)


# ---------------------------------------------------------------------------
# Parameters at and between their limits
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("gamma", [0.0, 0.9, 0.999, 1.0])
@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_gamma_lambda_limits(name, gamma, lam, backend, rng):
    if name == "discounted_returns" and lam != 1.0:
        pytest.skip("discounted returns have no lambda (covered by the lam=1.0 row)")
    interpreter_subset(backend, keep=(gamma, lam) in ((0.0, 0.0), (1.0, 1.0), (0.999, 0.5)))
    case = make_case(name, rng, B=3, T=steps(backend, 63), p_done=0.05, dtype=torch.float32,
                     gamma=gamma, lam=lam)  # fmt: skip
    check(case, run(case, backend, dtype=torch.float32), torch.float32)


@pytest.mark.filterwarnings("ignore:.*not contractive")  # c_clip > 1 rows warn by design (§6)
@pytest.mark.parametrize("rho_clip", [0.5, 1.0, 1.5])
@pytest.mark.parametrize("c_clip", [0.7, 1.0, 1.3])
@pytest.mark.parametrize("pg_rho_clip", [None, 0.8, 2.0])
def test_vtrace_clips(rho_clip, c_clip, pg_rho_clip, backend, rng):
    """Log-ratios ~ N(0, 0.8): ratios fall on both sides of every clip."""
    interpreter_subset(backend, keep=pg_rho_clip is None or rho_clip == c_clip)
    case = make_case(
        "vtrace", rng, B=3, T=steps(backend, 63), p_done=0.05, dtype=torch.float64, gamma=0.95,
        lam=0.9, rho_clip=rho_clip, c_clip=c_clip, pg_rho_clip=pg_rho_clip,
    )  # fmt: skip
    ratio = np.exp(case.arrays["logp_target"] - case.arrays["logp_behavior"])
    for clip in (rho_clip, c_clip, pg_rho_clip or rho_clip):
        assert (ratio < clip).any() and (ratio > clip).any()
    check(case, run(case, backend, dtype=torch.float64), torch.float64)


@pytest.mark.filterwarnings("ignore:.*not contractive")  # c_clip > 1 rows warn by design (§6)
@pytest.mark.parametrize("c_clip", [0.5, 1.0, 1.5])
@pytest.mark.parametrize("lam", [0.0, 0.8, 1.0])
def test_retrace_clips(c_clip, lam, backend, rng):
    interpreter_subset(backend, keep=lam == 0.8 or c_clip == 1.0)
    case = make_case(
        "retrace", rng, B=3, T=steps(backend, 63), p_done=0.05, dtype=torch.float64, gamma=0.95,
        lam=lam, c_clip=c_clip,
    )  # fmt: skip
    check(case, run(case, backend, dtype=torch.float64), torch.float64)


@pytest.mark.parametrize("name", ["vtrace", "retrace"])
def test_target_logp_minus_inf_is_ratio_zero(name, backend, rng):
    """log pi = -inf (ratio 0) is legal (§6): traces and rho become 0, nothing NaN."""
    case = make_case(name, rng, B=2, T=50, p_done=0.1, dtype=torch.float64, gamma=0.9, lam=0.9)
    where = rng.random((2, 50)) < 0.2
    case.arrays["logp_target"] = np.where(where, -np.inf, case.arrays["logp_target"])
    a = case.arrays
    rows = []
    for i in range(2):
        ratios = oracles.ratios_from_logp(a["logp_target"][i], a["logp_behavior"][i])
        assert min(ratios) == 0.0
        if name == "vtrace":
            nv = oracles.next_state_values(
                a["terminated"][i], a["truncated"][i], values=a["values"][i],
                bootstrap_values=a["bootstrap_values"][i],
            )  # fmt: skip
            rows.append(
                oracles.vtrace(
                    a["rewards"][i], a["values"][i], nv, ratios, a["terminated"][i],
                    a["truncated"][i], gamma=0.9, lam=0.9, rho_clip=1.0, c_clip=1.0,
                )
            )  # fmt: skip
        else:
            rows.append(
                oracles.retrace(
                    a["rewards"][i], a["q_values"][i], a["next_expected_q"][i], ratios,
                    a["terminated"][i], a["truncated"][i], gamma=0.9, lam=0.9, c_clip=1.0,
                    v_pi=a["v_pi"][i],
                )
            )  # fmt: skip
    case.expected = {k: np.array([r[k] for r in rows]) for k in rows[0]}
    check(case, run(case, backend, dtype=torch.float64), torch.float64)


# ---------------------------------------------------------------------------
# Flags: both on one step, all done, dtypes of flags
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ESTIMATORS)
def test_both_flags_on_every_done_step(name, backend, rng):
    """terminated wins over truncated (D2): no bootstrap read, trace cut."""
    case = make_case(name, rng, B=3, T=steps(backend, 63), p_done=0.3, dtype=torch.float64)
    if "terminated" in case.arrays:
        term = case.arrays["terminated"]
        both = term & (rng.random(term.shape) < 0.9)
        assert both.any()
        case.arrays["truncated"] = case.arrays["truncated"] | both
        # expected values do not depend on truncated where terminated is set
    check(case, run(case, backend, dtype=torch.float64), torch.float64)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("flag_dtype", ["bool", "uint8", "int64", "float32"])
def test_flag_dtypes(name, flag_dtype, backend, rng):
    """Flags as bool, uint8, 0/1 integers or 0/1 floats give the same result (§6)."""
    case = make_case(name, rng, B=2, T=30, p_done=0.2, dtype=torch.float64)
    args = [torch.from_numpy(case.arrays[k]) for k in case.pos]
    kwargs = {}
    for k, v in case.arrays.items():
        if k in case.pos:
            continue
        t = torch.from_numpy(v)
        kwargs[k] = t.to(getattr(torch, flag_dtype)) if v.dtype == bool else t
    res = getattr(rltscan, name)(*args, **kwargs, **case.params, backend=backend)
    for key, want in case.expected.items():
        assert_close_to_oracle(res[key], want, torch.float64)


# ---------------------------------------------------------------------------
# Forward estimators: init, features, prefix-sum modes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("T", [1, 63, 1000])
@pytest.mark.parametrize("D", [None, 4])
@pytest.mark.parametrize("init", ["none", "scalar", "vector"])
def test_eligibility_traces_features_and_init(T, D, init, backend, rng):
    skip_if_too_big(backend, T * (D or 1))
    if init == "vector" and D is None:
        pytest.skip("a [D] init needs features")
    init_value = {
        "none": None,
        "scalar": float(rng.normal()),
        "vector": rng.normal(size=D) if D else None,
    }[init]
    case = make_case(
        "eligibility_traces", rng, B=None, T=T, p_done=0.05, D=D, dtype=torch.float64,
        gamma=0.95, lam=0.9, init=init_value,
    )  # fmt: skip
    if isinstance(init_value, np.ndarray):
        case.params["init"] = torch.from_numpy(init_value)
    check(case, run(case, backend, dtype=torch.float64), torch.float64)


@pytest.mark.parametrize("mode", ["flags", "is_first", "none"])
@pytest.mark.parametrize(("T", "B"), [(1, None), (63, 3), (1000, None)])
@pytest.mark.parametrize("init", [None, -1.25])
def test_prefix_sum_modes(mode, T, B, init, backend, rng):
    skip_if_too_big(backend, T * (B or 1))
    T = steps(backend, T)
    case = make_case(
        "prefix_sum", rng, B=B, T=T, p_done=0.1, dtype=torch.float64, mode=mode, init=init
    )
    check(case, run(case, backend, dtype=torch.float64), torch.float64)


def test_prefix_sum_without_flags_is_cumsum(backend, rng):
    """STYLE §6: prefix sums with no dones are a plain cumulative sum."""
    x = rng.normal(size=(3, 257))
    res = rltscan.prefix_sum(torch.from_numpy(x), backend=backend)
    assert_close_to_oracle(res["prefix_sums"], np.cumsum(x, axis=1), torch.float64)


# ---------------------------------------------------------------------------
# Long flat sequences: many chunks, episodes longer and shorter than a chunk
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize(
    ("T", "p", "gamma", "lam"),
    [
        pytest.param(30_011, 0.0, 0.999, 0.99, id="T30011-p0"),
        pytest.param(30_011, 0.0005, 1.0, 1.0, id="T30011-p0.0005-g1-l1"),
        pytest.param(65_537, 0.01, 0.99, 0.95, id="T65537-p0.01"),
    ],
)
def test_long_flat_sequence(name, T, p, gamma, lam, backend, rng):
    if backend != "torch":
        pytest.skip("long sequences run on the vectorised path (and triton with -m gpu)")
    case = make_case(name, rng, B=None, T=T, p_done=p, dtype=torch.float32, gamma=gamma, lam=lam)
    check(case, run(case, backend, dtype=torch.float32), torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize(
    ("T", "B"),
    [pytest.param(1_000_003, None, id="T1000003-flat"), pytest.param(1000, 512, id="T1000-B512")],
)
def test_gpu_large(name, T, B):
    """Real sizes on the GPU with the Triton kernel (pytest -m gpu on the device)."""
    assert HAS_CUDA
    rng = np.random.default_rng(T + (B or 0))
    case = make_case(name, rng, B=B, T=T, p_done=0.001, dtype=torch.float32)
    args = [torch.as_tensor(case.arrays[k]).float().cuda() for k in case.pos]
    kwargs = {
        k: torch.as_tensor(v).cuda() if v.dtype == bool else torch.as_tensor(v).float().cuda()
        for k, v in case.arrays.items()
        if k not in case.pos
    }
    res = getattr(rltscan, name)(*args, **kwargs, **case.params, backend="triton")
    for key, want in case.expected.items():
        assert res[key].is_cuda
        assert_close_to_oracle(res[key], want, torch.float32)


# ---------------------------------------------------------------------------
# The oracles' two forms agree (direct definition vs recursion), no library involved
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(20))
def test_oracle_forms_agree(seed):
    rng = np.random.default_rng(seed)
    T = int(rng.integers(1, 40))
    p = [0.0, 0.1, 0.5, 1.0][seed % 4]
    term, trunc = (rng.random(T) < p), (rng.random(T) < p)
    r, v, bv = rng.normal(size=(3, T))
    g, lam = [(0.0, 0.0), (1.0, 1.0), (0.9, 0.7), (0.99, 0.0), (0.5, 1.0)][seed % 5]
    nv = oracles.next_state_values(term, trunc, values=v, bootstrap_values=bv)
    ratios = np.exp(rng.normal(scale=0.8, size=T))
    close = lambda x, y: np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-12)  # noqa: E731
    close(oracles.gae(r, v, nv, term, trunc, gamma=g, lam=lam)["advantages"],
          oracles.gae_sum(r, v, nv, term, trunc, gamma=g, lam=lam)["advantages"])  # fmt: skip
    close(oracles.td_lambda(r, nv, term, trunc, gamma=g, lam=lam),
          oracles.td_lambda_mixture(r, nv, term, trunc, gamma=g, lam=lam))  # fmt: skip
    close(oracles.discounted_returns(r, nv, term, trunc, gamma=g),
          oracles.discounted_returns_sum(r, nv, term, trunc, gamma=g))  # fmt: skip
    kw = {"gamma": g, "lam": lam, "rho_clip": 1.2, "c_clip": 0.9, "pg_rho_clip": 1.1}
    a = oracles.vtrace(r, v, nv, ratios, term, trunc, **kw)
    b = oracles.vtrace_sum(r, v, nv, ratios, term, trunc, **kw)
    close(a["vs"], b["vs"])
    close(a["pg_advantages"], b["pg_advantages"])
    ev = np.where(term, np.nan, rng.normal(size=T))
    kw = {"gamma": g, "lam": lam, "c_clip": 0.9}
    close(oracles.retrace(r, v, ev, ratios, term, trunc, **kw)["retrace_targets"],
          oracles.retrace_sum(r, v, ev, ratios, term, trunc, **kw)["retrace_targets"])  # fmt: skip
