"""Chunks with carries (docs/CONVENTIONS.md §2.4, "shards are chunks too").

A long sequence cut into pieces, each processed with the ``carry`` of its
neighbour in scan order (backward estimators from the last piece, forward ones
from the first), must give the unchunked result: a chunk boundary is not a cut.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rltscan
from rltscan.estimators import DECLARATIONS
from tests.conftest import assert_close_to_oracle, is_slow_backend

BY_KIND = {d.name: d for d in DECLARATIONS.values()}  # every declared estimator
KINDS = list(BY_KIND)
REVERSE = {k: d.reverse for k, d in BY_KIND.items()}


def make(kind: str, shape: tuple[int, ...], rng: np.random.Generator, p_done: float) -> dict:
    """Random ``[..., T]`` inputs; bootstrap values only where read, NaN elsewhere."""
    u = rng.random(shape)
    term = u < p_done / 2
    trunc = (u >= p_done / 2) & (u < p_done)
    trunc[..., -1] |= ~term[..., -1]  # the true window end is bootstrapped

    def f():
        return rng.standard_normal(shape)

    boot = np.where(trunc & ~term, f(), np.nan)
    if kind not in ("gae", "td_lambda", "returns", "vtrace", "retrace", "traces", "prefix_sum"):
        d = BY_KIND[kind]  # a declared estimator: its required inputs, flags, bootstraps
        out = {n: f() for n in d.float_inputs if n in d.required}
        out.update({k: v for k, v in (("terminated", term), ("truncated", trunc)) if k in d.inputs})
        if "bootstrap_values" in d.inputs:
            out["bootstrap_values"] = boot
        return out
    if kind in ("traces", "prefix_sum"):
        return {"x": f(), "terminated": term, "truncated": trunc}
    base = {"rewards": f(), "terminated": term, "truncated": trunc}
    lp = lambda: np.log(rng.uniform(0.05, 1.0, shape))  # noqa: E731
    if kind == "returns":
        return {**base, "bootstrap_values": boot}
    if kind == "retrace":
        ev = np.where(term, np.nan, f())
        return {**base, "q_values": f(), "next_expected_q": ev, "logp_target": lp(),
                "logp_behavior": lp(), "v_pi": f()}  # fmt: skip
    out = {**base, "values": f(), "bootstrap_values": boot}
    if kind == "vtrace":
        out.update(logp_target=lp(), logp_behavior=lp(), rho_clip=1.3, c_clip=0.9)
    return out


def call(kind: str, inputs: dict, **kw) -> rltscan.Result:
    d = BY_KIND[kind]
    fn = getattr(rltscan, d.function_name)
    params = {"gamma": 0.97} if "gamma" in d.params else {}
    if kind in ("gae", "td_lambda", "traces", "retrace"):
        params["lam"] = 0.9
    return fn(**inputs, **params, **kw)


def chunked(kind: str, inputs: dict, cuts: list[int], time_dim: int, **kw) -> dict:
    steps = inputs["terminated"].shape[time_dim]
    bounds = list(zip([0, *cuts], [*cuts, steps], strict=True))
    order = bounds[::-1] if REVERSE[kind] else bounds
    carry, pieces = None, {}
    for t0, t1 in order:
        part = {
            k: (np.take(v, range(t0, t1), axis=time_dim) if isinstance(v, np.ndarray) else v)
            for k, v in inputs.items()
        }
        res = call(kind, part, carry=carry, time_dim=time_dim, **kw)
        carry = res.carry
        pieces[t0] = dict(res)
    keys = pieces[0].keys()
    return {k: np.concatenate([pieces[t0][k] for t0, _ in bounds], axis=time_dim) for k in keys}


LAYOUTS, P_DONE = ["flat", "batch-major", "time-major"], [0.0, 0.1, 0.6]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("p_done", P_DONE)
def test_chunked_equals_whole(kind, layout, p_done, backend, rng):
    # interpreted Triton (CI): a Latin square, each (kind, layout), (kind, p_done) and
    # (layout, p_done) pair once; the whole grid on a GPU
    square = (KINDS.index(kind) + LAYOUTS.index(layout) + P_DONE.index(p_done)) % 3 == 0
    if backend == "triton" and is_slow_backend(backend) and not square:
        pytest.skip("interpreted triton runs a subset of this grid (all of it with -m gpu)")
    steps = 37 if is_slow_backend(backend) else 301
    shape = (steps,) if layout == "flat" else (3, steps)
    time_dim = 0 if layout in ("flat", "time-major") else 1
    inputs = make(kind, shape, rng, p_done)
    if layout == "time-major":  # a real [T, B] buffer
        inputs = {
            k: (np.ascontiguousarray(v.T) if isinstance(v, np.ndarray) else v)
            for k, v in inputs.items()
        }
    whole = dict(call(kind, inputs, time_dim=time_dim, backend=backend))
    cuts = sorted(rng.choice(np.arange(1, steps), size=4, replace=False).tolist())
    cuts = sorted({*cuts, 1, steps - 1})  # one-step chunks at both ends
    got = chunked(kind, inputs, cuts, time_dim, backend=backend)
    for k, want in whole.items():
        assert np.isfinite(got[k]).all(), k
        assert_close_to_oracle(got[k], want, torch.float64)


def test_carry_must_come_from_the_same_estimator(rng):
    inputs = make("gae", (20,), rng, 0.1)
    carry = call("td_lambda", {k: v for k, v in inputs.items()}).carry
    with pytest.raises(rltscan.ParameterError, match="carry comes from 'td_lambda'"):
        call("gae", inputs, carry=carry)


def test_carry_excludes_last_value(rng):
    inputs = make("gae", (20,), rng, 0.1)
    carry = call("gae", inputs).carry
    inputs.pop("bootstrap_values")
    with pytest.raises(rltscan.ParameterError, match="last_value"):
        call("gae", inputs, carry=carry, last_value=0.5)


def test_carry_rows_must_match(rng):
    a = make("traces", (3, 20), rng, 0.1)
    b = make("traces", (2, 20), rng, 0.1)
    with pytest.raises(rltscan.DataError, match="carry holds 3 sequences"):
        call("traces", b, carry=call("traces", a).carry)


def test_unchunked_call_never_computes_a_carry(rng, monkeypatch):
    from rltscan.estimators import _driver as est  # where the carry is built

    def boom(*a, **k):
        raise AssertionError("carry computed eagerly")

    monkeypatch.setattr(est, "carry_out", boom)
    res = call("gae", make("gae", (20,), rng, 0.1))
    assert set(res) == {"advantages", "value_targets"}
