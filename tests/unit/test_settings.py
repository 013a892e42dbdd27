"""Several (γ, λ) settings in one pass, and per-step discount / λ columns.

Several settings must equal one call per setting (bit for bit on one backend), chunk
with carries like one setting, and name their file columns ``{output}_g{γ}_l{λ}``.
A per-step γ_t / λ_t is checked against float64 loops written from the definitions
(docs/CONVENTIONS.md §1.7): γ_t and λ_t belong to the transition out of step t.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

import rltscan
from rltscan.scan import triton_scan
from tests.conftest import (
    assert_close_to_oracle,
    is_slow_backend,
    launch_kinds,
    launch_nsets,
)
from tests.io_helpers import run_cli

# where the Triton backend runs: CUDA where there is one, else the CPU under Triton's
# interpreter (tests/conftest.py); tests that hand tensors to the kernel put them here
TRITON_DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def episodes(rng, n: int, p_done: float, flags: str = "bool"):
    u = rng.random(n)
    term, trunc = u < p_done / 2, (u >= p_done / 2) & (u < p_done)
    if flags == "uint8":
        return term.astype(np.uint8), trunc.astype(np.uint8)
    return term, trunc


def base(rng, n: int, p_done: float, flags: str = "bool") -> dict:
    term, trunc = episodes(rng, n, p_done, flags)
    return {
        "rewards": rng.standard_normal(n),
        "values": rng.standard_normal(n),
        "terminated": term,
        "truncated": trunc,
        "bootstrap_values": rng.standard_normal(n),
    }


# --------------------------------------------------------------------------- oracles


def nv_of(inp: dict, t: int) -> float:
    """V(s_{t+1}) as the conventions define it (0 after a terminal step)."""
    n = len(inp["rewards"])
    if inp["terminated"][t]:
        return 0.0
    if inp["truncated"][t] or t == n - 1:
        return float(inp["bootstrap_values"][t])
    return float(inp["values"][t + 1])


def cut(inp: dict, t: int) -> bool:
    return bool(inp["terminated"][t] or inp["truncated"][t] or t == len(inp["rewards"]) - 1)


def gae_oracle(inp, g, lam):
    n = len(inp["rewards"])
    adv = np.zeros(n)
    for t in reversed(range(n)):
        delta = inp["rewards"][t] + g[t] * nv_of(inp, t) - inp["values"][t]
        adv[t] = delta + (0.0 if cut(inp, t) else g[t] * lam[t] * adv[t + 1])
    return adv


def td_lambda_oracle(inp, g, lam):
    n = len(inp["rewards"])
    out = np.zeros(n)
    for t in reversed(range(n)):
        r, nv = inp["rewards"][t], nv_of(inp, t)
        if inp["terminated"][t]:
            out[t] = r
        elif cut(inp, t):
            out[t] = r + g[t] * nv
        else:
            out[t] = r + g[t] * ((1 - lam[t]) * nv + lam[t] * out[t + 1])
    return out


def returns_oracle(inp, g):
    n = len(inp["rewards"])
    out = np.zeros(n)
    for t in reversed(range(n)):
        r = inp["rewards"][t]
        if inp["terminated"][t]:
            out[t] = r
        elif cut(inp, t):
            out[t] = r + g[t] * nv_of(inp, t)
        else:
            out[t] = r + g[t] * out[t + 1]
    return out


def vtrace_oracle(inp, g, lam):
    """Espeholt et al. 2018, eq. 1 recursively, with γ_t, λ_t per step (rho/c clip 1)."""
    n = len(inp["rewards"])
    ratio = np.exp(inp["logp_target"] - inp["logp_behavior"])
    rho, c = np.minimum(1.0, ratio), np.minimum(1.0, ratio)
    vs = np.zeros(n)
    for t in reversed(range(n)):
        v = inp["values"][t]
        delta = rho[t] * (inp["rewards"][t] + g[t] * nv_of(inp, t) - v)
        nxt = 0.0 if cut(inp, t) else g[t] * lam[t] * c[t] * (vs[t + 1] - inp["values"][t + 1])
        vs[t] = v + delta + nxt
    return vs


def retrace_oracle(inp, g, lam):
    n = len(inp["rewards"])
    c = np.minimum(1.0, np.exp(inp["logp_target"] - inp["logp_behavior"]))
    out = np.zeros(n)
    for t in reversed(range(n)):
        r = inp["rewards"][t]
        if inp["terminated"][t]:
            out[t] = r
        elif cut(inp, t):
            out[t] = r + g[t] * inp["next_expected_q"][t]
        else:
            cn = lam[t] * c[t + 1]
            out[t] = r + g[t] * (
                inp["next_expected_q"][t] + cn * (out[t + 1] - inp["q_values"][t + 1])
            )
    return out


# --------------------------------------------------------------------------- several settings

ESTIMATORS = {
    "gae": ("gae", True),
    "td_lambda": ("td_lambda", True),
    "discounted_returns": ("discounted_returns", False),
    "vtrace": ("vtrace", True),
    "retrace": ("retrace", True),
    "eligibility_traces": ("eligibility_traces", True),
}


def inputs_for(fn: str, rng, n: int, p_done: float) -> dict:
    inp = base(rng, n, p_done)
    lp = lambda: np.log(rng.uniform(0.05, 1.0, n))  # noqa: E731
    if fn == "discounted_returns":
        inp.pop("values")
    if fn == "vtrace":
        inp.update(logp_target=lp(), logp_behavior=lp())
    if fn == "retrace":
        inp = {
            "rewards": inp["rewards"],
            "q_values": rng.standard_normal(n),
            "next_expected_q": rng.standard_normal(n),
            "logp_target": lp(),
            "logp_behavior": lp(),
            "terminated": inp["terminated"],
            "truncated": inp["truncated"],
        }
    if fn == "eligibility_traces":
        inp = {"x": rng.standard_normal(n), "terminated": inp["terminated"]}
    return inp


@pytest.mark.parametrize("fn", list(ESTIMATORS))
def test_settings_equal_one_call_each(fn, backend, rng):
    n = 37 if is_slow_backend(backend) else 301
    inp = inputs_for(fn, rng, n, 0.1)
    f = getattr(rltscan, fn)
    has_lam = ESTIMATORS[fn][1]
    gammas, lams = [0.0, 0.9, 1.0], [0.5, 1.0]
    kw = {"gamma": gammas, **({"lam": lams} if has_lam else {})}
    res = f(**inp, **kw, backend=backend)
    combos = [(g, lam) for g in gammas for lam in (lams if has_lam else [None])]
    assert len(res.settings) == len(combos)
    for k, (g, lam) in enumerate(combos):
        one = f(**inp, gamma=g, **({"lam": lam} if has_lam else {}), backend=backend)
        suffix = f"_g{g!r}" + (f"_l{lam!r}" if has_lam else "")
        for name, arr in one.items():
            if backend == "triton":  # one launch for every setting: equal up to rounding
                assert_close_to_oracle(getattr(res, name)[k], arr, torch.float64)
                assert_close_to_oracle(res[name + suffix], arr, torch.float64)
            else:
                assert np.array_equal(getattr(res, name)[k], arr)
                assert np.array_equal(res[name + suffix], arr)
    assert list(res) == [
        o + f"_g{g!r}" + (f"_l{lam!r}" if has_lam else "") for g, lam in combos for o in one
    ]


def test_settings_stack_tensors_and_keep_the_layout(rng):
    inp = {k: torch.as_tensor(np.stack([v, v[::-1].copy()])) for k, v in base(rng, 20, 0.2).items()}
    res = rltscan.gae(**inp, gamma=(0.9, 0.99), lam=0.95, time_dim=1)
    assert isinstance(res.advantages, torch.Tensor) and res.advantages.shape == (2, 2, 20)
    tm = {k: v.t().contiguous() for k, v in inp.items()}
    res_tm = rltscan.gae(**tm, gamma=(0.9, 0.99), lam=0.95, time_dim=0)
    assert res_tm.advantages.shape == (2, 20, 2)
    torch.testing.assert_close(res_tm.advantages.transpose(1, 2), res.advantages)


@pytest.mark.parametrize("p_done", [0.0, 0.3])
def test_settings_chunk_with_carries(p_done, backend, rng):
    n = 31 if is_slow_backend(backend) else 240
    inp = base(rng, n, p_done)
    kw = {"gamma": [0.9, 0.99], "lam": [0.8, 1.0], "backend": backend}
    whole = rltscan.gae(**inp, **kw).advantages
    carry, parts = None, []
    for sl in (slice(n // 2, n), slice(3, n // 2), slice(0, 3)):
        res = rltscan.gae(**{k: v[sl] for k, v in inp.items()}, **kw, carry=carry)
        carry, parts = res.carry, [res.advantages, *parts]
    assert_close_to_oracle(np.concatenate(parts, axis=1), whole, torch.float64)


def test_settings_errors(rng):
    inp = base(rng, 10, 0.2)
    with pytest.raises(rltscan.ParameterError, match="gamma is an empty list"):
        rltscan.gae(**inp, gamma=[])
    with pytest.raises(rltscan.ParameterError, match=r"gamma must be in \[0, 1\], got 1.5"):
        rltscan.gae(**inp, gamma=[0.9, 1.5])
    carry = rltscan.gae(**inp, gamma=[0.9, 0.99]).carry
    with pytest.raises(rltscan.ParameterError, match="same gamma/lam lists"):
        rltscan.gae(**inp, gamma=[0.9, 0.5], carry=carry)
    with pytest.raises(rltscan.ParameterError, match="carry"):
        rltscan.gae(**inp, gamma=0.9, carry=carry)


# --------------------------------------------------------------------------- one launch, K settings
# The Triton kernel runs every setting in one launch (virtual rows: the K settings of a
# data row side by side). Checked against the float64 loop (backend="reference"), one
# call per setting, at the interpreter's tiny tiles (tests/conftest.py: 2 rows x 4
# steps, so a data row's settings also straddle programs).

FUSED = [
    ("gae", None), ("td_lambda", None), ("discounted_returns", None), ("vtrace", None),
    ("retrace", "retrace"), ("retrace", "tree-backup"), ("retrace", "q-lambda"),
    ("retrace", "is"), ("eligibility_traces", None),
]  # fmt: skip
GAMMAS, LAMS = [0.9, 0.99, 0.5, 1.0, 0.0], [0.95, 0.7, 1.0, 0.3, 0.0]


def _arrays(fn: str, trace: str | None, rng, shape, dtype, p_done: float = 0.15) -> dict:
    """Random inputs of one estimator, ``shape`` = (R, T) or (T,), in ``dtype``."""
    f = lambda: torch.as_tensor(rng.standard_normal(shape), dtype=dtype)  # noqa: E731
    lp = lambda: torch.as_tensor(np.log(rng.uniform(0.05, 1.0, shape)), dtype=dtype)  # noqa: E731
    u = rng.random(shape)
    flags = {
        "terminated": torch.as_tensor(u < p_done / 2),
        "truncated": torch.as_tensor((u >= p_done / 2) & (u < p_done)),
    }
    if fn == "eligibility_traces":
        return {"x": f(), **flags}
    if fn == "retrace":
        out = {"rewards": f(), "q_values": f(), "next_expected_q": f(), "v_pi": f(), **flags}
        if trace != "q-lambda":
            out["logp_target"] = lp()
        if trace in ("retrace", "is"):
            out["logp_behavior"] = lp()
        return {**out, "trace": trace}
    out = {"rewards": f(), "values": f(), "bootstrap_values": f(), **flags}
    if fn == "discounted_returns":
        out.pop("values")
    if fn == "vtrace":
        out.update(logp_target=lp(), logp_behavior=lp(), rho_clip=1.5, c_clip=0.9)
    return out


def _time_major(inp: dict) -> dict:
    out = {k: v.t().contiguous() if isinstance(v, torch.Tensor) else v for k, v in inp.items()}
    return {**out, "time_dim": 0}


def _sweep(fn: str, k: int) -> dict:
    """k settings: γ alone for discounted returns, else γ × λ lists of k in total."""
    if fn == "discounted_returns":
        return {"gamma": GAMMAS[:k]}
    if k in (4, 6):
        return {"gamma": GAMMAS[:2], "lam": LAMS[: k // 2]}
    return {"gamma": GAMMAS[:k], "lam": [0.8]}


def _f64(inp: dict) -> dict:
    return {
        k: v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v
        for k, v in inp.items()
    }


def _check_settings(fn: str, inp: dict, res, dtype) -> None:
    f = getattr(rltscan, fn)
    for k, s in enumerate(res.settings):
        want = f(**_f64(inp), **s, backend="reference")
        for name, arr in want.items():
            got = torch.as_tensor(getattr(res, name)[k])
            assert got.dtype == dtype and got.shape == arr.shape, name
            assert_close_to_oracle(got, arr, dtype)


@pytest.mark.parametrize("fn,trace", FUSED, ids=[f"{f}-{t}" for f, t in FUSED])
@pytest.mark.parametrize(
    "k,shape,layout,dtype",
    [
        (1, (13,), "flat", torch.float64),
        (3, (3, 11), "batch-major", torch.float32),
        (5, (21,), "flat", torch.float32),
        (4, (3, 9), "time-major", torch.float64),
        (2, (2, 7), "time-major", torch.float32),
    ],
    ids=["K1-flat-f64", "K3-batch-f32", "K5-flat-f32", "K4-time-f64", "K2-time-f32"],
)
def test_one_launch_matches_the_float64_loop(fn, trace, k, shape, layout, dtype, rng, monkeypatch):
    nsets = launch_nsets(monkeypatch)
    inp = _arrays(fn, trace, rng, shape, dtype)
    if layout == "time-major":
        inp = _time_major(inp)
    res = getattr(rltscan, fn)(**inp, **_sweep(fn, k), backend="triton")
    assert len(res.settings) == k
    assert nsets == [k], "one launch for every setting"
    _check_settings(fn, inp, res, dtype)


@pytest.mark.parametrize("fn,trace", FUSED, ids=[f"{f}-{t}" for f, t in FUSED])
def test_one_launch_chunks_with_carries(fn, trace, rng):
    """Chunks in scan order, each handing on its carry: the whole sequence's results."""
    n, dtype = 19, torch.float64
    inp = _arrays(fn, trace, rng, (2, n), dtype, p_done=0.1)
    sweep = _sweep(fn, 3)
    f = getattr(rltscan, fn)
    whole = f(**inp, **sweep, backend="triton")
    _check_settings(fn, inp, whole, dtype)
    cuts = [slice(0, 5), slice(5, 6), slice(6, 14), slice(14, n)]
    forward = fn == "eligibility_traces"
    order = cuts if forward else cuts[::-1]
    carry, parts = None, {}
    for sl in order:
        piece = {k: v[:, sl] if isinstance(v, torch.Tensor) else v for k, v in inp.items()}
        res = f(**piece, **sweep, backend="triton", carry=carry, time_dim=-1)  # [2, 1] chunks
        carry = res.carry
        parts[sl.start] = res
    for column in whole:  # one column per output and setting
        got = torch.cat([parts[s.start][column] for s in cuts], dim=-1)
        assert_close_to_oracle(got, whole[column], dtype)
    # the carry of the one-launch path is the carry of one call per setting
    one = f(**inp, **sweep, backend="torch")
    for a, b in zip(whole.carry.carries, one.carry.carries, strict=True):
        assert_close_to_oracle(a.y, b.y, dtype)


def test_one_launch_init_and_features(rng):
    """Eligibility traces with a trailing feature axis and an init per sequence."""
    x = torch.as_tensor(rng.standard_normal((3, 10, 2)))
    term = torch.as_tensor(rng.random((3, 10)) < 0.2)
    init = torch.as_tensor(rng.standard_normal((3, 2)))
    res = rltscan.eligibility_traces(
        x, terminated=term, init=init, gamma=[0.9, 0.5, 1.0], lam=0.8, backend="triton"
    )
    assert res.eligibility_traces.shape == (3, 3, 10, 2)
    for k, s in enumerate(res.settings):
        want = rltscan.eligibility_traces(x, terminated=term, init=init, **s, backend="reference")
        assert_close_to_oracle(res.eligibility_traces[k], want.eligibility_traces, torch.float64)


def test_one_launch_numpy_in_numpy_out_and_validation(rng):
    inp = base(rng, 17, 0.2)
    res = rltscan.gae(**inp, gamma=[0.9, 0.99, 0.8], lam=0.9, backend="triton")
    assert isinstance(res.advantages, np.ndarray) and res.advantages.shape == (3, 17)
    _check_settings("gae", {k: torch.as_tensor(v) for k, v in inp.items()}, res, torch.float64)
    inp["rewards"][6] = np.nan
    with pytest.raises(rltscan.DataError, match=r'"rewards" has NaN or Inf at index 6,'):
        rltscan.gae(**inp, gamma=[0.9, 0.99, 0.8], lam=0.9, backend="triton")


def test_the_settings_fallback_solves_each_setting(rng):
    """A settings Problem on a backend without the one-launch path: one solve each."""
    from rltscan.estimators._problem import Problem
    from rltscan.estimators._solve import solve

    r, v = (torch.as_tensor(rng.standard_normal((2, 9)), device=TRITON_DEVICE) for _ in range(2))
    term = torch.as_tensor(rng.random((2, 9)) < 0.2, device=TRITON_DEVICE)
    settings = ({"gamma": 0.9, "lam": 0.8}, {"gamma": 0.5, "lam": 1.0})
    p = Problem(
        kind="gae", reverse=True, cols={"rewards": r, "values": v, "terminated": term},
        dtype=torch.float64, params=dict(settings[0]), nv_mode="none", missing_zero=True,
        settings=settings,
    )  # fmt: skip
    out = solve(p, "torch")
    assert out["advantages"].shape == (2, 2, 9)
    fused = solve(p, "triton")
    for k, s in enumerate(settings):
        want = rltscan.gae(
            r.cpu(), v.cpu(), terminated=term.cpu(), **s, missing_bootstrap="zero",
            backend="reference",
        )  # fmt: skip
        assert_close_to_oracle(out["advantages"][k].cpu(), want.advantages, torch.float64)
        assert_close_to_oracle(fused["advantages"][k].cpu(), want.advantages, torch.float64)


# --------------------------------------------------------------------------- per-step γ_t, λ_t


@pytest.mark.parametrize("p_done", [0.0, 0.1, 0.5])
@pytest.mark.parametrize("flags", ["bool", "uint8"])
def test_per_step_discount_and_lambda_match_the_definitions(p_done, flags, backend, rng):
    for _ in range(2):
        n = int(rng.integers(1, 40 if is_slow_backend(backend) else 300))
        inp = base(rng, n, p_done, flags)
        g = rng.uniform(0, 1, n)
        g[rng.random(n) < 0.1] = 0.0
        g[rng.random(n) < 0.1] = 1.0
        lam = rng.uniform(0, 1, n)
        step = {"discount": g, "lam_per_step": lam, "backend": backend}
        got = rltscan.gae(**inp, **step)
        assert_close_to_oracle(got.advantages, gae_oracle(inp, g, lam), torch.float64)
        got = rltscan.td_lambda(**inp, **step).lambda_returns
        assert_close_to_oracle(got, td_lambda_oracle(inp, g, lam), torch.float64)
        no_v = {k: v for k, v in inp.items() if k != "values"}
        got = rltscan.discounted_returns(**no_v, discount=g, backend=backend).returns
        assert_close_to_oracle(got, returns_oracle(inp, g), torch.float64)
        lp = lambda n=n: np.log(rng.uniform(0.05, 1.0, n))  # noqa: E731
        vt = {**inp, "logp_target": lp(), "logp_behavior": lp()}
        got = rltscan.vtrace(**vt, **step).vs
        assert_close_to_oracle(got, vtrace_oracle(vt, g, lam), torch.float64)
        rt = {
            "rewards": inp["rewards"], "q_values": rng.standard_normal(n),
            "next_expected_q": rng.standard_normal(n), "logp_target": lp(),
            "logp_behavior": lp(), "terminated": inp["terminated"], "truncated": inp["truncated"],
        }  # fmt: skip
        got = rltscan.retrace(**rt, **step).retrace_targets
        assert_close_to_oracle(got, retrace_oracle(rt, g, lam), torch.float64)


def test_constant_columns_equal_the_scalars(rng):
    inp = base(rng, 50, 0.2)
    want = rltscan.gae(**inp, gamma=0.93, lam=0.7).advantages
    got = rltscan.gae(**inp, discount=np.full(50, 0.93), lam_per_step=np.full(50, 0.7))
    np.testing.assert_allclose(got.advantages, want, rtol=1e-12, atol=1e-12)


def test_per_step_chunks_with_carries(backend, rng):
    n = 30 if is_slow_backend(backend) else 200
    inp = {**base(rng, n, 0.1), "discount": rng.uniform(0, 1, n), "lam_per_step": rng.random(n)}
    whole = rltscan.gae(**inp, backend=backend).advantages
    carry, parts = None, []
    for sl in (slice(n // 2, n), slice(0, n // 2)):
        res = rltscan.gae(**{k: v[sl] for k, v in inp.items()}, backend=backend, carry=carry)
        carry, parts = res.carry, [res.advantages, *parts]
    assert_close_to_oracle(np.concatenate(parts), whole, torch.float64)


def test_per_step_rules(rng):
    inp = base(rng, 10, 0.2)
    with pytest.raises(rltscan.ParameterError, match='"discount" gives gamma per step'):
        rltscan.gae(**inp, discount=np.full(10, 0.9), gamma=0.5)
    with pytest.raises(rltscan.ParameterError, match='"lam_per_step" gives lam per step'):
        rltscan.gae(**inp, lam_per_step=np.full(10, 0.9), lam=[0.5, 0.9])
    bad = np.full(10, 0.9)
    bad[4] = 1.5
    with pytest.raises(rltscan.DataError, match="discount"):
        rltscan.gae(**inp, discount=bad)
    bad[4] = np.nan
    with pytest.raises(rltscan.DataError, match="discount"):
        rltscan.gae(**inp, discount=bad)


# --------------------------------------------------------------------------- the command line


def _h5(path, inp: dict, **extra) -> dict:
    names = {"terminated": "terminals", "truncated": "timeouts"}
    with h5py.File(path, "w") as f:
        for k, v in {**inp, **extra}.items():
            if k != "bootstrap_values":
                f[names.get(k, k)] = v
    with h5py.File(path) as f:
        return {k: f[k][()] for k in f}


def test_cli_several_settings_in_one_run(tmp_path, rng):
    inp = base(rng, 64, 0.1)
    inp["truncated"][:] = False  # every end a termination: no bootstrap needed
    inp["terminated"][-1] = True
    path = tmp_path / "buf.h5"
    _h5(path, inp)
    r = run_cli(
        "gae", str(path), "--gamma", "0.9,0.99,0.999", "--lam", "0.95", "--backend", "torch"
    )
    assert r.returncode == 0, r.stderr
    with h5py.File(path) as f:
        for g in (0.9, 0.99, 0.999):
            got = f[f"advantages_g{g}_l0.95"][()]
            want = rltscan.gae(
                inp["rewards"], inp["values"], terminated=inp["terminated"],
                truncated=inp["truncated"], gamma=g, lam=0.95, backend="torch",
            ).advantages  # fmt: skip
            assert_close_to_oracle(got, want, torch.float64)
            assert f"value_targets_g{g}_l0.95" in f
        assert "advantages" not in f
    r = run_cli("gae", str(path), "--lam", "0.9,0.9", in_process=True)
    assert r.returncode == 2
    assert r.stderr.strip() == "error: --lam lists 0.9 twice; pass each value once"
    r = run_cli("gae", str(path), "--gamma", "0.9,nope", in_process=True)
    assert r.returncode == 2
    assert (
        'error: --gamma must be a number or a comma-separated list of numbers, got "0.9,nope"'
        in (r.stderr)
    )


def test_cli_discount_column_is_never_guessed(tmp_path, rng):
    inp = base(rng, 40, 0.1)
    inp["truncated"][:] = False  # every end a termination: no bootstrap needed
    inp["terminated"][-1] = True
    g = rng.uniform(0.5, 1.0, 40)
    path = tmp_path / "rlds.h5"
    _h5(path, inp, discount=g)
    r = run_cli("gae", str(path))
    assert r.returncode == 2
    assert "pass --discount discount to use it, or --ignore discount" in r.stderr
    r = run_cli("gae", str(path), "--discount", "discount", "--gamma", "0.9", in_process=True)
    assert r.returncode == 2 and "drop one of them" in r.stderr
    r = run_cli("gae", str(path), "--discount", "discount", "--backend", "torch", in_process=True)
    assert r.returncode == 0, r.stderr
    with h5py.File(path) as f:
        got = f["advantages"][()]
        assert f["advantages"].attrs["gamma"] == "column discount"
    assert_close_to_oracle(got, gae_oracle(inp, g, np.full(40, 0.95)), torch.float32)
    r = run_cli("gae", str(path), "--ignore", "discount", "--prefix", "fixed_",
                "--backend", "torch", in_process=True)  # fmt: skip
    assert r.returncode == 0, r.stderr


# -------------------------------------------------------------------- per-step γ_t, λ_t fused
# The fused prologues read γ_t and λ_t as two more columns (HAS_DISC, HAS_LAMT). Checked
# against float64 loops per row, written from §1.7 and §3: every output, every trace of
# the Retrace family, both layouts, fp32 and fp64, chunks with carries, either column
# alone; and that these calls take the fused kernel, not the generic LINEAR mode.

STEP_FUSED = [
    ("gae", None), ("td_lambda", None), ("discounted_returns", None), ("vtrace", None),
    ("retrace", "retrace"), ("retrace", "tree-backup"), ("retrace", "q-lambda"),
    ("retrace", "is"),
]  # fmt: skip
STEP_IDS = [f"{f}-{t}" if t else f for f, t in STEP_FUSED]
KIND_OF = {
    f: triton_scan.KINDS["returns" if f == "discounted_returns" else f] for f, _ in STEP_FUSED
}


def _trace_ratio(trace: str, lt, lb):
    """c_t / λ of each member of the family (docs/CONVENTIONS.md §3.5), c̄ = 1."""
    if trace == "retrace":
        return np.minimum(1.0, np.exp(lt - lb))
    if trace == "tree-backup":
        return np.exp(lt)
    if trace == "is":
        return np.exp(lt - lb)
    return np.ones_like(lt)


def _row_oracle(fn: str, trace: str | None, row: dict, g, lam) -> dict:
    """Every output of one sequence (1-D numpy float64 inputs), γ_t = g, λ_t = lam."""
    n = len(row["rewards"])
    if fn == "gae":
        adv = gae_oracle(row, g, lam)
        return {"advantages": adv, "value_targets": adv + row["values"]}
    if fn == "td_lambda":
        return {"lambda_returns": td_lambda_oracle(row, g, lam)}
    if fn == "discounted_returns":
        return {"returns": returns_oracle(row, g)}
    if fn == "vtrace":  # rho_clip 1.5, c_clip 0.9, pg_rho_clip = rho_clip (see _arrays)
        lr = row["logp_target"] - row["logp_behavior"]
        rho, c = np.minimum(1.5, np.exp(lr)), np.minimum(0.9, np.exp(lr))
        vs, pg = np.zeros(n), np.zeros(n)
        for t in reversed(range(n)):
            v = row["values"][t]
            delta = rho[t] * (row["rewards"][t] + g[t] * nv_of(row, t) - v)
            nxt = 0.0 if cut(row, t) else g[t] * lam[t] * c[t] * (vs[t + 1] - row["values"][t + 1])
            vs[t] = v + delta + nxt
        for t in range(n):
            target = nv_of(row, t) if cut(row, t) else vs[t + 1]
            pg[t] = rho[t] * (row["rewards"][t] + g[t] * target - row["values"][t])
        return {"vs": vs, "pg_advantages": pg}
    zeros = np.zeros(n)
    ratio = _trace_ratio(trace, row.get("logp_target", zeros), row.get("logp_behavior", zeros))
    out = np.zeros(n)
    for t in reversed(range(n)):
        r, ev = row["rewards"][t], row["next_expected_q"][t]
        if row["terminated"][t]:
            out[t] = r
        elif cut(row, t):
            out[t] = r + g[t] * ev
        else:  # c_{t+1} = λ_t · ratio_{t+1}
            cn = lam[t] * ratio[t + 1]
            out[t] = r + g[t] * (ev + cn * (out[t + 1] - row["q_values"][t + 1]))
    return {"retrace_targets": out, "advantages": out - row["v_pi"]}


def _oracle_2d(fn, trace, inp: dict, g, lam) -> dict:
    """``_row_oracle`` per row of [R, T] tensors; γ_t / λ_t None: the scalar defaults."""
    arrays = {k: v.double().numpy() if v.is_floating_point() else v.numpy()
              for k, v in inp.items() if isinstance(v, torch.Tensor)}  # fmt: skip
    shape = arrays["rewards"].shape
    default_lam = {"gae": 0.95, "td_lambda": 0.95}.get(fn, 1.0)
    g = np.full(shape, 0.99) if g is None else g.double().numpy()
    lam = np.full(shape, default_lam) if lam is None else lam.double().numpy()
    rows = [
        _row_oracle(fn, trace, {k: a[i] for k, a in arrays.items()}, g[i], lam[i])
        for i in range(shape[0])
    ]
    return {k: np.stack([o[k] for o in rows]) for k in rows[0]}


def _step_columns(rng, shape, dtype, which: str) -> dict:
    g = rng.uniform(0, 1, shape)
    g[rng.random(shape) < 0.1] = 0.0
    g[rng.random(shape) < 0.1] = 1.0
    cols = {"discount": torch.as_tensor(g, dtype=dtype)}
    cols["lam_per_step"] = torch.as_tensor(rng.uniform(0, 1, shape), dtype=dtype)
    keep = {"both": cols, "discount": ["discount"], "lam": ["lam_per_step"]}[which]
    return {k: cols[k] for k in keep}


def _step_case(fn, trace, rng, shape, dtype, which, p_done=0.15):
    inp = _arrays(fn, trace, rng, shape, dtype, p_done)
    if fn == "discounted_returns":
        which = "discount"  # returns take no λ
    return inp, _step_columns(rng, shape, dtype, which)


@pytest.mark.parametrize("fn,trace", STEP_FUSED, ids=STEP_IDS)
@pytest.mark.parametrize(
    "shape,layout,dtype,which",
    [
        ((3, 13), "batch-major", torch.float32, "both"),
        ((3, 13), "batch-major", torch.float64, "both"),
        ((2, 11), "time-major", torch.float32, "both"),
        ((2, 11), "time-major", torch.float64, "discount"),
        ((17,), "flat", torch.float64, "lam"),
    ],
    ids=["batch-f32", "batch-f64", "time-f32", "time-f64-discount-only", "flat-f64-lam-only"],
)
def test_per_step_columns_run_fused_and_match_float64_loops(
    fn, trace, shape, layout, dtype, which, rng, monkeypatch
):
    inp, step = _step_case(fn, trace, rng, shape, dtype, which)
    seen = launch_kinds(monkeypatch)
    call = {**inp, **step}
    if layout == "time-major":
        call = _time_major(call)
    res = getattr(rltscan, fn)(**call, backend="triton")
    kind = KIND_OF[fn]
    assert seen == [(kind, "discount" in step, "lam_per_step" in step)], "one fused launch"
    rows = lambda x: x if x.ndim > 1 else x[None]  # noqa: E731
    inp2 = {k: rows(v) if isinstance(v, torch.Tensor) else v for k, v in inp.items()}
    want = _oracle_2d(fn, trace, inp2, *(rows(step[c]) if c in step else None
                                        for c in ("discount", "lam_per_step")))  # fmt: skip
    for name, w in want.items():
        got = torch.as_tensor(getattr(res, name))
        assert got.dtype == dtype, name
        if layout == "time-major":
            got = got.t()
        assert_close_to_oracle(rows(got), w, dtype)


@pytest.mark.parametrize("fn,trace", STEP_FUSED, ids=STEP_IDS)
def test_per_step_columns_chunk_with_carries_on_the_kernel(fn, trace, rng, monkeypatch):
    """Chunks in scan order (one of a single step) give the whole sequence's results: no
    chunk needs γ or λ of its neighbour's first step (they belong to step t, §1.7)."""
    n, dtype = 19, torch.float64
    inp, step = _step_case(fn, trace, rng, (2, n), dtype, "both", p_done=0.1)
    seen = launch_kinds(monkeypatch)
    f = getattr(rltscan, fn)
    call = {**inp, **step}
    want = _oracle_2d(fn, trace, inp, step["discount"], step.get("lam_per_step"))
    carry, parts = None, {}
    cuts = [slice(0, 5), slice(5, 6), slice(6, 14), slice(14, n)]
    for sl in cuts[::-1]:
        piece = {k: v[:, sl] if isinstance(v, torch.Tensor) else v for k, v in call.items()}
        res = f(**piece, backend="triton", carry=carry, time_dim=-1)  # [2, 1] chunks
        carry, parts[sl.start] = res.carry, res
    assert {s[0] for s in seen} == {KIND_OF[fn]}
    for name, w in want.items():
        got = torch.cat([torch.as_tensor(getattr(parts[s.start], name)) for s in cuts], dim=-1)
        assert_close_to_oracle(got, w, dtype)


def test_the_kernel_path_choice(rng):
    """``_solve.triton_fused``: a fused kind with every per-step column it was given
    read by its prologue; a column its prologue does not read sends it to LINEAR."""
    from rltscan.estimators._problem import Problem
    from rltscan.estimators._solve import triton_fused

    r = torch.as_tensor(rng.standard_normal((2, 5)))
    g = torch.full((2, 5), 0.9, dtype=torch.float64)

    def problem(kind, **cols):
        return Problem(kind=kind, reverse=True, cols={"rewards": r, **cols},
                       dtype=torch.float64, params={"gamma": 0.99, "lam": 0.95})  # fmt: skip

    for kind in ("gae", "td_lambda", "returns", "vtrace", "retrace"):
        assert triton_fused(problem(kind))
        assert triton_fused(problem(kind, discount=g))
        assert triton_fused(problem(kind, discount=g, lam_per_step=g))
    assert not triton_fused(problem("traces", discount=g))  # no slot: the generic path
    assert not triton_fused(problem("prefix_sum", lam_per_step=g))
    assert not triton_fused(problem("no_such_kind"))


def test_per_step_with_several_lambdas_runs_one_fused_launch_per_setting(rng, monkeypatch):
    """γ_t with λ = [...]: excluded from the settings launch (NSET stays 1), each setting
    one fused launch."""
    inp = _arrays("gae", None, rng, (2, 9), torch.float64)
    g = _step_columns(rng, (2, 9), torch.float64, "discount")["discount"]
    nsets = launch_nsets(monkeypatch)
    seen = launch_kinds(monkeypatch)
    res = rltscan.gae(**inp, discount=g, lam=[0.5, 0.9], backend="triton")
    assert nsets == [1, 1] and seen == [(triton_scan.KINDS["gae"], True, False)] * 2
    for k, lam in enumerate((0.5, 0.9)):
        want = _oracle_2d("gae", None, inp, g, torch.full((2, 9), lam, dtype=torch.float64))
        assert_close_to_oracle(res.advantages[k], want["advantages"], torch.float64)


def test_per_step_validation_on_the_triton_backend(rng):
    """A NaN in γ_t is named by the front end; past it (a Problem solved directly) the
    kernel's screen sees a NaN in either column, and the host check names it."""
    from rltscan.estimators import declared_module
    from rltscan.estimators._frame import Frame
    from rltscan.estimators._problem import Problem
    from rltscan.estimators._solve import solve

    inp = base(rng, 12, 0.2)
    g = np.full(12, 0.9)
    g[5] = np.nan
    with pytest.raises(rltscan.DataError, match=r'"discount" must be in \[0, 1\].*\(5,\) is nan'):
        rltscan.gae(**inp, discount=g, backend="triton")
    lam = np.full(12, 0.9)
    lam[7] = 1.5
    with pytest.raises(rltscan.DataError, match=r'"lam_per_step" must be in \[0, 1\]'):
        rltscan.vtrace(**inp, logp_target=np.zeros(12), logp_behavior=np.zeros(12),
                       lam_per_step=lam, backend="triton")  # fmt: skip

    r = torch.as_tensor(rng.standard_normal((1, 12)), device=TRITON_DEVICE)
    term = torch.zeros((1, 12), dtype=torch.bool, device=TRITON_DEVICE)
    term[0, -1] = True
    for kind, column in [("returns", "discount"), ("gae", "discount"), ("gae", "lam_per_step")]:
        col = torch.full((1, 12), 0.9, dtype=torch.float64, device=TRITON_DEVICE)
        cols = {"rewards": r, "terminated": term, column: col}
        if kind == "gae":
            cols["values"] = r.clone()
        p = Problem(kind=kind, reverse=True, cols=cols, dtype=torch.float64,
                    params={"gamma": 0.99, "lam": 0.95}, missing_zero=True)  # fmt: skip
        outputs = declared_module(kind).OUTPUTS
        _, suspicious, _ = triton_scan.solve(p, outputs, check=True)
        assert not suspicious, (kind, column)
        col[0, 4] = np.nan  # an interior step: for returns γ_t reaches only a_t there
        _, suspicious, _ = triton_scan.solve(p, outputs, check=True)
        assert suspicious, (kind, column)
        d = declared_module(kind).DECLARATION
        reads = {n: d.read_rule(n) for n in d.float_inputs}
        with pytest.raises(rltscan.DataError, match=rf'"{column}" has NaN or Inf at index 4'):
            solve(p, "triton", validate=True, reads=reads, frame=Frame((12,), 0))


def test_per_step_columns_are_part_of_the_bound_key(rng):
    """A per-step γ_t / λ_t column is an array of the key like any other: a call with
    one never reuses the launch of a call without (the kernel reads it in a slot)."""
    import inspect

    from rltscan.estimators import _bound, declared_module

    d = declared_module("gae").DECLARATION
    inp = {k: torch.as_tensor(v) for k, v in base(rng, 8, 0.2).items()}

    def args(**extra):
        a = inspect.signature(rltscan.gae).bind(**inp, **extra, backend="triton")
        a.apply_defaults()
        return dict(a.arguments)

    g = torch.full((8,), 0.9, dtype=torch.float64)
    keys = {_bound.call_key(d, args(**x)) for x in ({}, {"discount": g}, {"lam_per_step": g})}
    assert None not in keys and len(keys) == 3


def _hit(device: torch.device) -> int | None:
    """The deferred check's hit once the device is idle (on a GPU the board is written
    when the kernel finishes; the interpreter runs it before returning)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return triton_scan.deferred_hit(device)


@pytest.mark.parametrize("column", ["discount", "lam_per_step"])
@pytest.mark.parametrize("bad", [1.5, -0.25, np.nan, np.inf])
def test_the_kernel_screen_refuses_per_step_values_outside_the_unit_interval(column, bad, rng):
    """What a bound call relies on (it skips the front end's [0, 1] check): the kernel's
    screen flags γ_t or λ_t outside [0, 1] at any step, read by a later call."""
    from rltscan.estimators import declared_module
    from rltscan.estimators._problem import Problem

    r = torch.as_tensor(rng.standard_normal((2, 12)), device=TRITON_DEVICE)
    term = torch.zeros((2, 12), dtype=torch.bool, device=TRITON_DEVICE)
    term[:, -1] = True
    col = torch.full((2, 12), 0.9, dtype=torch.float64, device=TRITON_DEVICE)
    cols = {"rewards": r, "values": r.clone(), "terminated": term, column: col}
    p = Problem(kind="gae", reverse=True, cols=cols, dtype=torch.float64,
                params={"gamma": 0.99, "lam": 0.95}, missing_zero=True)  # fmt: skip
    outputs = declared_module("gae").OUTPUTS
    _hit(p.device)  # drain an earlier test's hit
    triton_scan.solve(p, outputs, check="defer")
    assert _hit(p.device) is None
    for where in [(0, 0), (1, 11), (0, 5)]:  # first step, last step (a terminal), inside
        col.fill_(0.9)
        col[where] = bad
        _, _, fired = triton_scan.solve(p, outputs, check="defer")
        assert _hit(p.device) == fired.check_id, where
    col.fill_(1.0)
    col[0, 3] = 0.0  # the ends of the interval are allowed
    triton_scan.solve(p, outputs, check="defer")
    assert _hit(p.device) is None


@pytest.mark.parametrize(
    ("fn", "kind", "sweep"),
    [
        ("gae", "gae", {"gamma": [0.9, 0.99, 0.999], "lam": [0.95, 0.5]}),
        ("retrace", "retrace", {"gamma": [0.9, 0.99], "lam": [1.0, 0.7]}),
    ],
)
def test_a_bound_settings_call_equals_the_whole_path(fn, kind, sweep, monkeypatch):
    """A repeated settings call takes its bound launch (on a GPU; here through the
    interpreter): on fresh data it gives the whole path's results bit for bit, its
    settings and its carries."""
    from rltscan import bench
    from rltscan.estimators import _bound, _driver

    monkeypatch.setattr(_driver, "BIND_DEVICES", ("cuda", "cpu"))
    # the interpreter's forced tiles hold for the whole test: the bound launch may keep them
    monkeypatch.setattr(triton_scan, "tiles_forced", lambda: False)
    f = getattr(rltscan, fn)
    first, fresh = (
        bench.make_inputs(kind, (3, 37), ep_len=10.0, device="cpu", seed=s) for s in (1, 2)
    )
    _bound.forget()
    try:
        f(**first, **sweep, backend="triton", validate=False)
        assert sum(len(v) for v in _bound._BOUND.values()) == 1, "the call was not bound"
        got = f(**fresh, **sweep, backend="triton", validate=False)
        _bound.forget()
        want = f(**fresh, **sweep, backend="triton", validate=False)
    finally:
        _bound.forget()
    assert got.settings == want.settings
    for name in want:
        assert torch.equal(got[name], want[name]), name
    for a, b in zip(got.carry.carries, want.carry.carries, strict=True):
        assert torch.equal(a.y, b.y)
