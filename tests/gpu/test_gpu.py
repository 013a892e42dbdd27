"""The Triton kernel at real sizes on a CUDA GPU (``pytest -m gpu`` on the device).

Oracles: the float64 loop (``reference``) up to ~2e5 steps; above that the
vectorised torch backend in float64 (itself checked against the loop in the CPU
suite). Flat sequences reach 2^26 steps and odd lengths; both layouts; tile
shapes must not change results beyond float rounding.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rltscan
from bench import harness
from rltscan import bench
from rltscan.scan import triton_scan
from tests.conftest import assert_close_to_oracle, launch_kinds, launch_nsets

pytestmark = pytest.mark.gpu

KINDS = bench.ESTIMATOR_ORDER


def _run(kind, inputs, **kw):
    return bench.call(kind, inputs, validate=False, **kw)


def _f64(inputs):
    return {
        k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
        for k, v in inputs.items()
    }


def _check(got, want, dtype=torch.float32):
    for k, w in want.items():
        assert torch.isfinite(got[k]).all(), k
        assert_close_to_oracle(got[k], w, dtype)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "shape,ep", [((200_003,), 1000.0), ((200_003,), 7.0), ((3, 70_001), 500.0), ((517, 129), 40.0)]
)
def test_triton_matches_float64_loop(kind, shape, ep):
    inputs = bench.make_inputs(kind, shape, ep_len=ep, device="cuda", seed=len(shape) + int(ep))
    got = _run(kind, inputs, backend="triton")
    want = _run(
        kind,
        {k: (v.cpu() if isinstance(v, torch.Tensor) else v) for k, v in _f64(inputs).items()},
        backend="reference",
    )
    _check({k: v.cpu() for k, v in got.items()}, want)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "shape,layout,ep",
    [
        (((1 << 26) + 4097,), "flat", 1000.0),
        (((1 << 24) + 3,), "flat", 10.0),
        ((16, 131_071), "batch-major", 3000.0),
        ((4096, 129), "time-major", 50.0),
        ((1001, 999), "time-major", 200.0),
        ((5, 1_000_003), "batch-major", 1e9),  # almost no episode ends: long look-backs
    ],
)
def test_triton_large(kind, shape, layout, ep):
    inputs = bench.to_layout(
        bench.make_inputs(kind, shape, ep_len=ep, device="cuda", seed=7), layout == "time-major"
    )
    got = _run(kind, inputs, backend="triton")
    want = _run(kind, _f64(inputs), backend="torch")
    _check(got, want)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    "tiles", [(1, 16, 1), (4, 64, 2), (2, 1024, 4), (32, 128, 4), (1, 1024, 4), (1, 2048, 16)]
)
def test_tile_shape_invariance(kind, tiles):
    """Any tile shape gives the float64 result within the §2.6 tolerance. Tiles change the
    order of the float32 sums (and the look-back's order depends on timing), so two tile
    shapes agree up to rounding, not bit for bit: 16-step tiles on prefix sums of 300-step
    episodes differed by 1.3e-5 once, which a fixed 1e-5 between the two did not allow."""
    inputs = bench.make_inputs(kind, (7, 5003), ep_len=300.0, device="cuda", seed=3)
    want = _run(kind, _f64(inputs), backend="torch")
    _check(_run(kind, inputs, backend="triton"), want)
    rows, chunk, warps = tiles
    with triton_scan.tile_override(rows=rows, chunk=chunk, num_warps=warps):
        forced = _run(kind, inputs, backend="triton")
    _check(forced, want)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_dtypes(kind, dtype):
    inputs = bench.make_inputs(kind, (3, 40_001), ep_len=100.0, device="cuda", seed=11)
    cast = {
        k: (v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
        for k, v in inputs.items()
    }
    got = _run(kind, cast, backend="triton")
    want = _run(kind, _f64(cast), backend="torch")
    out_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    for k in want:
        assert got[k].dtype == out_dtype
    _check(got, want, torch.float64 if dtype == torch.float64 else torch.float32)


def test_repeated_calls_reuse_workspace():
    """Epoch-tagged flags: many launches on one workspace stay correct."""
    inputs = bench.make_inputs("gae", (1 << 20,), ep_len=1e6, device="cuda", seed=5)
    first = _run("gae", inputs, backend="triton")
    for _ in range(50):
        again = _run("gae", inputs, backend="triton")
    for k in first:
        assert torch.equal(first[k], again[k])


def test_numpy_inputs_with_triton_backend_come_back_as_numpy():
    rng = np.random.default_rng(0)
    r = rng.standard_normal(1000).astype(np.float32)
    term = rng.random(1000) < 0.01
    out = bench.call("returns", {"rewards": r, "terminated": term}, backend="triton")
    assert isinstance(out["returns"], np.ndarray)


# ---------------------------------------------------------------------------
# Issue 12: bound calls, deferred validation, custom ops, CUDA graphs

FAST_SHAPES = [(4096, 128), (3, 5000), (1 << 20) + 3]


def _oracle(kind, inp):
    inp64 = {
        k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
        for k, v in inp.items()
    }
    return bench.call(kind, inp64, backend="torch", validate=False)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", FAST_SHAPES, ids=str)
@pytest.mark.parametrize("validate", [False, True])
def test_bound_calls_match_the_float64_solve(kind, shape, validate):
    """The second call of a shape takes the bound launch; fresh data each time."""
    shape = shape if isinstance(shape, tuple) else (shape,)
    for seed in range(3):
        inp = bench.make_inputs(kind, shape, ep_len=50.0, device="cuda", seed=seed)
        got = bench.call(kind, inp, validate=validate)
        want = _oracle(kind, inp)
        for k in want:
            assert_close_to_oracle(got[k], want[k], torch.float32)
        if triton_scan.fused(kind):  # (return_to_go runs the generic path: never bound)
            b = _bound_for(kind, inp, validate=validate)
            assert b is not None and b.direct, "the repeated call took the whole path"
    rltscan.synchronize()


def _bound_for(kind, inp, **kw):
    """The bound launch later calls with ``inp``'s shapes take (None: the whole path)."""
    from rltscan.estimators import _bound

    d = harness.declaration(kind)
    key = _bound.call_key(d, harness.arguments(kind, bench.call_kwargs(kind, inp, **kw)))
    return None if key is None else _bound.lookup(d, key)


@pytest.mark.parametrize("kind", ["gae", "vtrace", "returns"])
def test_direct_launch_equals_tritons_dispatch(kind, monkeypatch):
    inp = bench.to_layout(bench.make_inputs(kind, (64, 3000), ep_len=30.0, device="cuda"), True)
    bench.call(kind, inp, validate=False)
    direct = bench.call(kind, inp, validate=False)
    assert triton_scan._COMPILED, "the direct launcher was never used"
    monkeypatch.setattr(triton_scan, "DIRECT", False)
    plain = bench.call(kind, inp, validate=False)
    for k in direct:
        assert torch.equal(direct[k], plain[k])


def test_deferred_validation_raises_at_the_next_call_and_at_synchronize():
    inp = bench.make_inputs("gae", (256, 128), ep_len=50.0, device="cuda")
    bench.call("gae", inp)  # bind the shape
    rltscan.synchronize()
    bad = dict(inp, rewards=inp["rewards"].clone())
    bad["rewards"][7, 9] = float("nan")
    bench.call("gae", bad)  # returns at once: the screen is read later
    with pytest.raises(rltscan.DataError, match=r"earlier gae call .* NaN or Inf") as e:
        rltscan.synchronize()
    assert "\n" not in str(e.value)
    bench.call("gae", bad)
    torch.cuda.synchronize()
    with pytest.raises(rltscan.DataError, match="earlier gae call"):
        bench.call("gae", inp)  # the next call raises it
    rltscan.synchronize()  # reported once
    # host inputs stay synchronous and exact
    with pytest.raises(rltscan.DataError, match=r'"rewards" has NaN or Inf at index \(7, 9\)'):
        bench.call("gae", {k: (v.cpu() if isinstance(v, torch.Tensor) else v)
                           for k, v in bad.items()}, backend="triton")  # fmt: skip


@pytest.mark.parametrize("shape", [(512, 128), (4, 9000)], ids=str)
def test_custom_op_under_cuda_graph_capture(shape):
    import rltscan.ops as ops

    inp = bench.make_inputs("gae", shape, ep_len=40.0, device="cuda")
    static = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inp.items()}

    def step():
        return ops.gae(static["rewards"], static["values"], terminated=static["terminated"],
                       truncated=static["truncated"], last_value=static["last_value"],
                       missing_bootstrap="zero", gamma=0.99, lam=0.95)  # fmt: skip

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        step()  # warm up (compile, bind) off the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = step()
    for seed in (1, 2, 3):
        fresh = bench.make_inputs("gae", shape, ep_len=40.0, device="cuda", seed=seed)
        for k, v in fresh.items():
            if isinstance(v, torch.Tensor):
                static[k].copy_(v)
        g.replay()
        torch.cuda.synchronize()
        want = _oracle("gae", fresh)
        for k in want:
            assert_close_to_oracle(out[k], want[k], torch.float32)
    rltscan.synchronize()


def test_custom_op_in_inductor_fullgraph():
    import rltscan.ops as ops

    inp = bench.make_inputs("vtrace", (1024, 256), ep_len=40.0, device="cuda")

    def f(x):
        o = ops.vtrace(x["rewards"], x["values"], logp_target=x["logp_target"],
                       logp_behavior=x["logp_behavior"], terminated=x["terminated"],
                       truncated=x["truncated"], last_value=x["last_value"],
                       missing_bootstrap="zero", lam=1.0)  # fmt: skip
        return o["vs"] * 2 + 1

    got = torch.compile(f, fullgraph=True)(inp)
    want = _oracle("vtrace", inp)["vs"] * 2 + 1
    assert_close_to_oracle(got, want, torch.float32)


def test_prepare_call_repeats_and_refuses_another_shape():
    inp = bench.make_inputs("gae", (128, 64), ep_len=40.0, device="cuda")
    kw = {k: v for k, v in inp.items() if k != "missing_bootstrap"}
    prepared = rltscan.prepare_call(rltscan.gae, **kw, missing_bootstrap="zero", lam=0.95)
    for seed in (4, 5):
        fresh = bench.make_inputs("gae", (128, 64), ep_len=40.0, device="cuda", seed=seed)
        got = prepared(**{k: fresh[k] for k in kw})
        want = _oracle("gae", fresh)
        assert_close_to_oracle(got.advantages, want["advantages"], torch.float32)
    other = bench.make_inputs("gae", (128, 65), ep_len=40.0, device="cuda")
    with pytest.raises(rltscan.DataError, match="differs from the prepared call"):
        prepared(**{k: other[k] for k in kw})


# ---------------------------------------------------------------------------
# Issue 13: several (γ, λ) settings in one launch (virtual rows), at real sizes

SETTINGS_FN = {
    "gae": "gae", "td_lambda": "td_lambda", "returns": "discounted_returns",
    "vtrace": "vtrace", "retrace": "retrace", "traces": "eligibility_traces",
}  # fmt: skip


def _sweep(kind):
    if kind == "returns":
        return {"gamma": [0.9, 0.99, 0.999]}
    return {"gamma": [0.9, 0.99, 0.999], "lam": [0.95]}


@pytest.mark.parametrize("kind", list(SETTINGS_FN))
@pytest.mark.parametrize(
    "shape,layout,dtype",
    [
        (((1 << 22) + 7,), "flat", torch.float32),
        ((517, 1029), "batch-major", torch.float32),
        ((4096, 129), "time-major", torch.float32),
        ((3, 40_001), "batch-major", torch.float64),
    ],
    ids=["flat-2^22+7", "517x1029", "time-major-4096x129", "fp64"],
)
def test_settings_in_one_launch_match_float64(kind, shape, layout, dtype, monkeypatch):
    from rltscan.estimators import _bound

    nsets = launch_nsets(monkeypatch)

    inputs = bench.make_inputs(kind, shape, ep_len=300.0, device="cuda", seed=13)
    inputs = {
        k: (v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
        for k, v in inputs.items()
    }
    inputs = bench.to_layout(inputs, layout == "time-major")
    f = getattr(rltscan, SETTINGS_FN[kind])
    _bound.forget()
    res = f(**inputs, **_sweep(kind), validate=False)
    again = f(**inputs, **_sweep(kind), validate=False)  # bound where the scalar call is
    assert nsets[0] == 3 and set(nsets) == {3}, "every setting in one launch"
    assert again.settings == res.settings
    for name in res:
        assert torch.equal(again[name], res[name]), name
    for k, s in enumerate(res.settings):
        want = f(**_f64(inputs), **s, backend="torch", validate=False)
        for name, w in want.items():
            got = getattr(res, name)[k]
            assert got.dtype == dtype and torch.isfinite(got).all(), name
            assert_close_to_oracle(got, w, dtype)
    rltscan.synchronize()


@pytest.mark.parametrize("kind", list(SETTINGS_FN))
@pytest.mark.parametrize("sweep", [False, True], ids=["one-setting", "k3"])
@pytest.mark.parametrize(
    "shape,dtype",
    [
        (((1 << 22) + 7,), torch.float32),
        ((37, 70_001), torch.float32),
        (((1 << 20) + 3,), torch.float64),
    ],
    ids=["flat-2^22+7", "37x70001", "fp64-flat"],
)
def test_repeated_calls_are_bit_identical(kind, sweep, shape, dtype):
    """Rows of many tiles join by the look-back, whose walk depends on which programs
    finished first; the carry it returns must not (docs/CONVENTIONS.md §2.6: the same
    call gives the same bits). Sparse episode ends keep walks long."""
    inputs = bench.make_inputs(kind, shape, ep_len=50_000.0, device="cuda", seed=29)
    inputs = {
        k: (v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
        for k, v in inputs.items()
    }
    f = getattr(rltscan, SETTINGS_FN[kind])
    params = _sweep(kind) if sweep else {k: v[-1] for k, v in _sweep(kind).items()}
    first = f(**inputs, **params, validate=False)
    for _ in range(12):
        again = f(**inputs, **params, validate=False)
        for name in first:
            assert torch.equal(again[name], first[name]), name


@pytest.mark.parametrize("kind", list(SETTINGS_FN))
def test_settings_calls_are_bound_like_one_setting(kind):
    """A repeated call with the same (γ, λ) lists costs one launch, as a scalar call
    does; its results and carries equal the unbound call's; a list changed in place
    after a call is a new call, not the bound one."""
    from rltscan.estimators import _bound

    inputs = bench.make_inputs(kind, (256, 1001), ep_len=300.0, device="cuda", seed=3)
    f = getattr(rltscan, SETTINGS_FN[kind])
    _bound.forget()
    f(**inputs, gamma=0.9, validate=False)
    scalar_bound = sum(len(v) for v in _bound._BOUND.values()) == 1
    _bound.forget()
    lists = {k: list(v) for k, v in _sweep(kind).items()}
    first = f(**inputs, **lists, validate=False)
    assert (sum(len(v) for v in _bound._BOUND.values()) == 1) == scalar_bound
    again = f(**inputs, **lists, validate=False)
    assert again.settings == first.settings
    for name in first:
        assert torch.equal(again[name], first[name]), name
    for c1, c2 in zip(first.carry.carries, again.carry.carries, strict=True):
        assert torch.equal(c1.y, c2.y)
    lists["gamma"][0] = 0.5  # in place: the bound call must not answer for it
    changed = f(**inputs, **lists, validate=False)
    one = f(**inputs, **{k: v[0] for k, v in lists.items()}, validate=False)
    for name in one:
        torch.testing.assert_close(changed[name][0], one[name], rtol=1e-5, atol=1e-5)
    rltscan.synchronize()


@pytest.mark.parametrize("kind", ["gae", "vtrace", "retrace", "traces"])
def test_settings_chunks_with_carries_on_the_gpu(kind):
    n = (1 << 21) + 5
    inputs = bench.make_inputs(kind, (n,), ep_len=5e4, device="cuda", seed=17)
    f = getattr(rltscan, SETTINGS_FN[kind])
    whole = f(**inputs, **_sweep(kind), validate=False)
    cuts = [slice(0, 1_000_003), slice(1_000_003, n)]
    order = cuts if kind == "traces" else cuts[::-1]
    carry, parts = None, {}
    for sl in order:
        piece = {k: v[sl] if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        res = f(**piece, **_sweep(kind), carry=carry, validate=False)
        carry, parts[sl.start] = res.carry, res
    for column in whole:
        got = torch.cat([parts[s.start][column] for s in cuts])
        assert_close_to_oracle(got, whole[column].double(), torch.float32)


# ---------------------------------------------------------------------------
# Issue 13 part 2: per-step γ_t / λ_t fused into the kernel's prologue (HAS_DISC, HAS_LAMT)

STEP_CASES = [
    ("gae", None), ("td_lambda", None), ("returns", None), ("vtrace", None),
    ("retrace", "retrace"), ("retrace", "tree-backup"), ("retrace", "q-lambda"),
    ("retrace", "is"),
]  # fmt: skip
STEP_IDS = [f"{k}-{t}" if t else k for k, t in STEP_CASES]


def _step_inputs(kind, trace, shape, dtype, seed, which="both", ep=300.0):
    """bench inputs plus γ_t (some exact 0 and 1) and λ_t columns, in ``dtype``."""
    inputs = bench.make_inputs(kind, shape, ep_len=ep, device="cuda", seed=seed)
    if trace is not None:
        inputs["trace"] = trace
        if trace in ("tree-backup", "q-lambda"):
            inputs.pop("logp_behavior")
        if trace == "q-lambda":
            inputs.pop("logp_target")
    g = torch.Generator(device="cuda").manual_seed(seed + 1)
    disc = torch.rand(shape, generator=g, device="cuda")
    u = torch.rand(shape, generator=g, device="cuda")
    disc = torch.where(u < 0.05, 0.0, torch.where(u > 0.95, 1.0, disc))
    lam = torch.rand(shape, generator=g, device="cuda")
    if kind == "returns" or which == "discount":
        inputs["discount"] = disc
    elif which == "lam":
        inputs["lam_per_step"] = lam
    else:
        inputs.update(discount=disc, lam_per_step=lam)
    return {
        k: (v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
        for k, v in inputs.items()
    }


@pytest.mark.parametrize("kind,trace", STEP_CASES, ids=STEP_IDS)
@pytest.mark.parametrize(
    "shape,layout,dtype,which",
    [
        (((1 << 22) + 7,), "flat", torch.float32, "both"),
        ((517, 1029), "batch-major", torch.float32, "both"),
        ((4096, 129), "time-major", torch.float32, "both"),
        ((3, 40_001), "batch-major", torch.float64, "both"),
        ((1001, 999), "time-major", torch.float64, "discount"),
        ((16, 131_071), "batch-major", torch.float32, "lam"),
    ],
    ids=["flat-2^22+7", "517x1029", "time-major-4096x129", "fp64", "tm-f64-disc", "16x131071-lam"],
)
def test_per_step_columns_fused_match_float64(
    kind, trace, shape, layout, dtype, which, monkeypatch
):
    from rltscan.estimators import _bound

    inputs = bench.to_layout(
        _step_inputs(kind, trace, shape, dtype, 19, which), layout == "time-major"
    )
    f = getattr(rltscan, SETTINGS_FN[kind])
    seen = launch_kinds(monkeypatch)
    _bound.forget()
    first = f(**inputs, validate=False)
    got = f(**inputs, validate=False)  # a second call of the shape: the bound launch
    assert sum(len(v) for v in _bound._BOUND.values()) == 1, "the repeated call was not bound"
    for name in first:
        assert torch.equal(getattr(first, name), getattr(got, name)), name
    assert seen and {k for k, *_ in seen} == {triton_scan.KINDS[kind]}, "fused, not LINEAR"
    want = f(**_f64(inputs), backend="torch", validate=False)
    for name, w in want.items():
        g = getattr(got, name)
        assert g.dtype == dtype and torch.isfinite(g).all(), name
        assert_close_to_oracle(g, w, dtype)
    rltscan.synchronize()


@pytest.mark.parametrize("kind,trace", STEP_CASES, ids=STEP_IDS)
def test_per_step_columns_chunks_with_carries_on_the_gpu(kind, trace):
    n = (1 << 21) + 5
    inputs = _step_inputs(kind, trace, (n,), torch.float32, 23, ep=5e4)
    f = getattr(rltscan, SETTINGS_FN[kind])
    whole = f(**inputs, validate=False)
    cuts = [slice(0, 1_000_003), slice(1_000_003, n)]
    carry, parts = None, {}
    for sl in cuts[::-1]:
        piece = {k: v[sl] if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        res = f(**piece, carry=carry, validate=False)
        carry, parts[sl.start] = res.carry, res
    want = f(**_f64(inputs), backend="torch", validate=False)
    for column in whole:
        got = torch.cat([parts[s.start][column] for s in cuts])
        assert_close_to_oracle(got, whole[column].double(), torch.float32)
        assert_close_to_oracle(got, want[column], torch.float32)


@pytest.mark.parametrize("kind,trace", [("gae", None), ("vtrace", None), ("retrace", "is")])
@pytest.mark.parametrize("tiles", [(1, 16, 1), (4, 64, 2), (32, 128, 4), (1, 1024, 4)])
def test_per_step_tile_shape_invariance(kind, trace, tiles):
    inputs = _step_inputs(kind, trace, (7, 5003), torch.float32, 29)
    f = getattr(rltscan, SETTINGS_FN[kind])
    want = f(**_f64(inputs), backend="torch", validate=False)
    rows, chunk, warps = tiles
    with triton_scan.tile_override(rows=rows, chunk=chunk, num_warps=warps):
        forced = f(**inputs, validate=False)
    for name, w in want.items():
        assert_close_to_oracle(getattr(forced, name), w, torch.float32)


def test_per_step_validation_on_the_gpu():
    inputs = _step_inputs("gae", None, (256, 128), torch.float32, 31)
    bad = dict(inputs, discount=inputs["discount"].clone())
    bad["discount"][7, 9] = float("nan")
    with pytest.raises(rltscan.DataError, match=r'"discount" must be in \[0, 1\].*\(7, 9\)'):
        rltscan.gae(**bad)
    bad["discount"][7, 9] = 1.5
    with pytest.raises(rltscan.DataError, match=r'"discount" must be in \[0, 1\].*\(7, 9\)'):
        rltscan.gae(**bad)
    rltscan.synchronize()


def test_a_bound_per_step_call_screens_the_unit_interval_on_the_gpu():
    """A bound call skips the front end's [0, 1] check of γ_t: the kernel's screen
    reports it at the next call or at synchronize, naming the column."""
    inputs = _step_inputs("gae", None, (256, 300), torch.float32, 31, which="discount")
    rltscan.gae(**inputs)  # binds the shape (the front end checks this call)
    rltscan.synchronize()
    bad = dict(inputs, discount=inputs["discount"].clone())
    bad["discount"][3, 7] = 1.5
    assert _bound_for("gae", bad, time_dim=None) is not None  # called as rltscan.gae(**bad)
    rltscan.gae(**bad)  # returns at once
    with pytest.raises(rltscan.DataError, match=r"discount entry outside \[0, 1\]"):
        rltscan.synchronize()
    bad["discount"][3, 7] = float("nan")
    rltscan.gae(**bad)
    with pytest.raises(rltscan.DataError, match="earlier gae call"):
        rltscan.synchronize()


@pytest.mark.parametrize("kind", ["gae", "vtrace", "returns"])
@pytest.mark.parametrize("shape", [(4096, 128), (8, 20_000)], ids=str)  # the second looks back
@pytest.mark.parametrize("validate", [False, True])
def test_a_prepared_call_again_refills_in_place(kind, shape, validate):
    """``prepared()``: the prepared arrays as they are now, into the same outputs."""
    inp = bench.make_inputs(kind, shape, ep_len=40.0, device="cuda")
    kw = bench.call_kwargs(kind, inp)
    prepared = rltscan.prepare_call(bench.function(kind), **kw, validate=validate)
    outs = prepared.outputs
    for seed in (6, 7):
        fresh = bench.make_inputs(kind, shape, ep_len=40.0, device="cuda", seed=seed)
        for k, v in kw.items():
            if isinstance(v, torch.Tensor):
                v.copy_(fresh[k])
        res = prepared()
        assert res is outs
        want = _oracle(kind, fresh)
        for k in want:
            assert getattr(res, k).data_ptr() == getattr(outs, k).data_ptr()
            assert_close_to_oracle(getattr(res, k), want[k], torch.float32)
    rltscan.synchronize()
    if validate:
        kw["rewards"][0, 3] = float("nan")
        prepared()
        with pytest.raises(rltscan.DataError, match="NaN or Inf"):
            rltscan.synchronize()


def test_a_prepared_call_again_replays_in_a_cuda_graph():
    inp = bench.make_inputs("gae", (1024, 256), ep_len=40.0, device="cuda")
    kw = bench.call_kwargs("gae", inp)
    prepared = rltscan.prepare_call(rltscan.gae, **kw)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        prepared()  # warm up off the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = prepared()
    for seed in (8, 9):
        fresh = bench.make_inputs("gae", (1024, 256), ep_len=40.0, device="cuda", seed=seed)
        for k, v in kw.items():
            if isinstance(v, torch.Tensor):
                v.copy_(fresh[k])
        g.replay()
        torch.cuda.synchronize()
        want = _oracle("gae", fresh)
        assert_close_to_oracle(out.advantages, want["advantages"], torch.float32)
    rltscan.synchronize()
