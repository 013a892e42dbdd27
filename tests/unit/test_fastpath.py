"""The call path of issue 12 on the CPU: stop-gradient on every backend, the deferred
validation board (through the interpreter), prepared calls refusing what they cannot
bind. The bound launch itself needs CUDA: tests/gpu/test_gpu.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import rltscan
from rltscan.estimators import _bound
from rltscan.scan import triton_scan
from tests import oracles
from tests.conftest import HAS_CUDA, assert_close_to_oracle


def _gae_inputs(rng, shape=(3, 11)):
    r = torch.as_tensor(rng.normal(size=shape), dtype=torch.float32)
    v = torch.as_tensor(rng.normal(size=shape), dtype=torch.float32)
    term = torch.as_tensor(rng.random(shape) < 0.2)
    trunc = torch.as_tensor(rng.random(shape) < 0.1) & ~term
    lv = torch.as_tensor(rng.normal(size=shape[:-1]), dtype=torch.float32)
    return r, v, term, trunc, lv


@pytest.mark.parametrize("backend", ["reference", "torch", "triton"])
def test_inputs_that_require_grad_give_constant_outputs(backend, rng):
    r, v, term, trunc, lv = _gae_inputs(rng)
    v.requires_grad_(True)
    res = rltscan.gae(r, v, terminated=term, truncated=trunc, last_value=lv,
                      bootstrap_values=None, missing_bootstrap="zero", backend=backend)  # fmt: skip
    assert not res.advantages.requires_grad and not res.value_targets.requires_grad
    want = rltscan.gae(r, v.detach(), terminated=term, truncated=trunc, last_value=lv,
                       missing_bootstrap="zero", backend="reference")  # fmt: skip
    assert_close_to_oracle(res.advantages, want.advantages, torch.float32)


def test_deferred_board_counts_hits_and_names_the_call(rng):
    """check="defer": the kernel's screen lands on the board; the host reads it later."""
    r, v, term, trunc, lv = _gae_inputs(rng, (2, 9))
    trunc[:] = False  # (interior truncations would need bootstrap values)
    r[1, 4] = math.nan
    p = _problem(r, v, term, trunc, lv)
    device = p.device
    triton_scan.deferred_hit(device)  # drain an earlier test's hit
    _, suspicious, fired = triton_scan.solve(p, ("advantages", "value_targets"), check="defer")
    assert not suspicious and fired.check_id > 0
    hit = triton_scan.deferred_hit(device)  # the interpreter has finished: it is there
    assert hit == fired.check_id
    assert triton_scan.deferred_hit(device) is None  # reported once
    _bound.note_check(hit, "gae", (2, 9), device)
    err = _bound.deferred_error(hit)
    assert isinstance(err, rltscan.DataError)
    assert f"gae call (#{hit}, shape (2, 9)" in str(err) and "\n" not in str(err)
    # clean data: no hit
    r[1, 4] = 0.0
    triton_scan.solve(_problem(r, v, term, trunc, lv), ("advantages", "value_targets"),
                      check="defer")  # fmt: skip
    assert triton_scan.deferred_hit(device) is None


def test_deferred_missing_bootstrap_is_a_hit(rng):
    r, v, term, trunc, _ = _gae_inputs(rng, (2, 9))
    trunc[0, 3], term[0, 3] = True, False
    p = _problem(r, v, term, trunc, None)
    triton_scan.deferred_hit(p.device)
    _, _, fired = triton_scan.solve(p, ("advantages", "value_targets"), check="defer")
    assert triton_scan.deferred_hit(p.device) == fired.check_id


def _problem(r, v, term, trunc, lv):
    from rltscan import bench

    kw = {"rewards": r, "values": v, "terminated": term, "truncated": trunc}
    if lv is not None:
        kw["last_value"] = lv
    captured = {}
    from rltscan.estimators import _driver as est  # the module whose _run calls solve

    orig = est.solve

    def grab(p, backend, **k):
        captured["p"] = p
        return orig(p, "torch")

    est.solve = grab
    try:
        bench.call("gae", kw, validate=False, backend="torch")
    finally:
        est.solve = orig
    return captured["p"]


def test_synchronize_without_kernels_is_a_no_op():
    rltscan.synchronize()


@pytest.mark.skipif(HAS_CUDA, reason="CPU tensors are prepared only where there is no CUDA")
def test_prepare_call_refuses_cpu_tensors_with_one_line(rng):
    r, v, term, _, lv = _gae_inputs(rng)
    with pytest.raises(rltscan.ParameterError, match="cannot be prepared") as e:
        rltscan.prepare_call(rltscan.gae, rewards=r, values=v, terminated=term, last_value=lv)
    assert "\n" not in str(e.value)


def test_prepare_call_refuses_a_non_estimator():
    with pytest.raises(rltscan.ParameterError, match="not an rltscan estimator"):
        rltscan.prepare_call(print, x=1)


def test_call_key_is_none_for_what_cannot_be_bound(rng):
    from rltscan.estimators import DECLARATIONS

    d = next(x for x in DECLARATIONS.values() if x.name == "gae")
    r, v, term, _, lv = _gae_inputs(rng)
    base = dict(rewards=r, values=v, terminated=term, truncated=None, next_values=None,
                bootstrap_values=None, last_value=lv, gamma=0.99, lam=0.95,
                missing_bootstrap="error", carry=None, time_dim=-1, backend="auto",
                validate=True)  # fmt: skip
    for n in d.inputs:
        base.setdefault(n, None)
    assert _bound.call_key(d, base) is not None
    assert _bound.call_key(d, {**base, "rewards": r.numpy()}) is None
    assert _bound.call_key(d, {**base, "gamma": np.float64(0.9)}) is None
    assert _bound.call_key(d, {**base, "backend": "torch"}) is None
    k1 = _bound.call_key(d, base)
    k2 = _bound.call_key(d, {**base, "rewards": r.t().contiguous().t()})
    assert k1 != k2  # another layout is another launch
    # several settings: a list of numbers is kept as a tuple (a copy), other lists unbound
    gammas = [0.9, 0.99]
    k3 = _bound.call_key(d, {**base, "gamma": gammas})
    assert k3 is not None and k3 == _bound.call_key(d, {**base, "gamma": (0.9, 0.99)})
    gammas[0] = 0.5  # changed in place after the call: not the key that was kept
    assert _bound.call_key(d, {**base, "gamma": gammas}) != k3
    assert _bound.call_key(d, {**base, "gamma": [np.float64(0.9)]}) is None
    assert _bound.call_key(d, {**base, "gamma": torch.tensor([0.9, 0.99])}) is None


def test_oracle_is_importable():
    assert hasattr(oracles, "__name__")


# ---------------------------------------------------------------------------
# The bound launch itself, built from a call on the interpreter (CPU): the key, the
# slots, its Firing. On CUDA the same Bound fires through the compiled
# kernel's launcher (tests/gpu/test_gpu.py).


def _bind_on_cpu(kind, inp, monkeypatch):
    """A :class:`_bound.Bound` for ``inp``'s shapes, as a CUDA call would build it."""
    from bench import harness
    from rltscan import bench
    from rltscan.estimators import _driver as est  # the module whose _run calls solve

    fired = []
    orig = est.solve

    def spy(p, backend, **kw):
        hand_on = kw["on_launch"]
        kw["on_launch"] = lambda f: (fired.append(f), hand_on(f))
        return orig(p, backend, **kw)

    monkeypatch.setattr(est, "solve", spy)
    fn, d = bench.function(kind), harness.declaration(kind)
    kw = bench.call_kwargs(kind, inp, backend="triton", validate=False)
    res = fn(**kw)
    monkeypatch.setattr(est, "solve", orig)
    args = harness.arguments(kind, kw)
    outs = {k: getattr(res, k) for k in d.outputs if getattr(res, k) is not None}
    b = _bound.build(d, args, fired[0], outs, torch.device("cpu"), False)
    return d, fn, b


FUSED_KINDS = ("gae", "returns", "vtrace", "td_lambda", "retrace", "traces", "prefix_sum")
BIND_CASES = [
    *((k, None) for k in FUSED_KINDS),
    ("gae", "discount"),
    ("vtrace", "lam_per_step"),
    ("returns", "discount"),
]


@pytest.mark.parametrize("time_major", [False, True], ids=["batch-major", "time-major"])
@pytest.mark.parametrize(("kind", "per_step"), BIND_CASES, ids=str)
def test_a_bound_launch_computes_fresh_data_like_the_whole_path(
    kind, per_step, time_major, monkeypatch
):
    from bench import harness
    from rltscan import bench

    shape = (3, 21)

    def inputs(seed):
        inp = bench.make_inputs(kind, shape, ep_len=9.0, device="cpu", seed=seed)
        if per_step is not None:
            g = torch.Generator().manual_seed(100 + seed)
            inp[per_step] = torch.rand(shape, generator=g)
            if per_step == "discount" and kind != "returns":
                inp.pop("gamma", None)
        inp = bench.to_layout(inp, time_major)
        if time_major:
            inp["time_dim"] = 0
        return inp

    d, fn, b = _bind_on_cpu(kind, inputs(0), monkeypatch)
    assert b is not None, "this call would take the whole front end every time on CUDA"
    assert b.per_step == (() if per_step is None else (per_step,))
    fixed = None
    for seed in (1, 2):
        kw = bench.call_kwargs(kind, inputs(seed), backend="triton", validate=False)
        a = harness.arguments(kind, kw)
        assert _bound.lookup(d, _bound.call_key(d, a)) is None  # CPU calls are never kept
        got = b.run(a)
        as64 = {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
                for k, v in kw.items()}  # fmt: skip
        want = dict(fn(**{**as64, "backend": "torch"}))
        want = {k: v for k, v in want.items() if v is not None and k in got}
        assert set(got) == set(want)
        for k in want:
            assert got[k].shape == want[k].shape
            assert_close_to_oracle(got[k], want[k], torch.float32)
        # the fixed form: the first arrays, refilled in place, into fixed outputs
        if fixed is None:
            prepared = a
            again, fixed = b.fixed(prepared)
        else:
            for n, v in kw.items():
                if isinstance(v, torch.Tensor):
                    prepared[n].copy_(v)
        again()
        for k in want:
            assert_close_to_oracle(fixed[k], want[k], torch.float32)


def test_the_launcher_path_hands_on_the_pointers_launch_fire_reads(monkeypatch, rng):
    """The firing through the compiled launcher (CUDA only), run on the CPU: a
    stand-in launcher records the integer pointers and check id it is handed and
    declines, so ``Launch.fire`` runs with the tensors; both must name the same memory,
    per call and for the fixed form."""
    from bench import harness
    from rltscan import bench

    handed, fired = [], []

    def stand_in(self, device):
        def launch(ptrs, check_id):
            handed.append((list(ptrs), check_id))
            return False  # as with a profiler's hook: Launch.fire launches instead

        return launch

    orig_fire = triton_scan.Launch.fire

    def fire(self, tensors, device, check_id=0):
        fired.append(([t.data_ptr() for t in tensors], check_id))
        return orig_fire(self, tensors, device, check_id)

    monkeypatch.setattr(triton_scan.Launch, "direct", stand_in)
    monkeypatch.setattr(triton_scan.Launch, "fire", fire)
    inp = bench.make_inputs("vtrace", (3, 21), ep_len=9.0, device="cpu")
    _, _, b = _bind_on_cpu("vtrace", inp, monkeypatch)
    assert b is not None and b.direct
    fresh = bench.make_inputs("vtrace", (3, 21), ep_len=9.0, device="cpu", seed=3)
    a = harness.arguments("vtrace", bench.call_kwargs("vtrace", fresh, backend="triton",
                                                    validate=False))  # fmt: skip
    handed.clear(), fired.clear()
    out = b.run(a)
    assert handed == fired and len(handed) == 1
    assert {p for p in handed[0][0]} >= {fresh["rewards"].data_ptr(), out["vs"].data_ptr()}
    again, fixed = b.fixed(a)
    handed.clear(), fired.clear()
    again()
    again()
    assert handed == fired and len(handed) == 2
    assert fixed["pg_advantages"].data_ptr() in handed[1][0]


def test_a_tile_override_drops_bound_launches_and_keeps_none(monkeypatch):
    """A launch kept for reuse carries the tiles it was made with: under a tile override
    (the tile-invariance tests, the tile sweep) it must not run in place of the forced
    tiles, and nothing made under the override may be kept."""
    from rltscan import bench

    inp = bench.make_inputs("gae", (3, 21), ep_len=9.0, device="cpu")
    d, _, b = _bind_on_cpu("gae", inp, monkeypatch)
    assert b is not None
    _bound.forget()
    with monkeypatch.context() as m:  # the default tiles (on the CPU the suite forces some)
        m.setattr(triton_scan, "tiles_forced", lambda: False)
        _bound.remember(("k",), b)
        assert _bound.lookup(d, ("k",)) is b
    with triton_scan.tile_override(rows=2, chunk=8):
        assert _bound.lookup(d, ("k",)) is None, "a launch with other tiles was kept"
        _bound.remember(("k",), b)
        assert _bound.lookup(d, ("k",)) is None, "a launch with forced tiles was kept"
    _bound.forget()


def test_a_workspace_lease_shares_the_streams_epoch_and_ends_with_its_buffers():
    """A repeated launch (``Direct``) keeps the look-back scratch's addresses and the
    stream's epoch cell: every launch on the stream, leased or not, must still get a
    new epoch, and a replaced buffer must end every lease (a stale address would be
    written by the kernel)."""
    ws = triton_scan._Workspace()
    dev = torch.device("cpu")
    lease, e1 = ws.lease(dev, 16, stream=7)
    stream, gen, ws_ptr, cell = lease
    assert (stream, cell[0]) == (7, e1)
    cell[0] += 1  # what Direct does for its next launch
    _, e3 = ws.get(dev, 16, 7)
    assert e3 == e1 + 2, "a plain launch reused a leased launch's epoch"
    assert ws.generation == gen
    buf, _ = ws.get(dev, 1 << 17, 7)  # a larger launch: new scratch
    assert ws.generation != gen and buf.data_ptr() != ws_ptr
    other, _ = ws.lease(dev, 16, stream=8)
    assert other[3] is not cell, "two streams share an epoch"
