"""The off-policy trace family (``retrace(trace=...)``, ``rltscan retrace --trace``).

Every member is checked against rlax's ``general_off_policy_returns_from_q_and_v``
written out as a float64 loop (per episode segment: rlax's window is one segment,
its discount is γ except 0 after a terminal step), on every backend, with chunks
and carries, flat and batched, and from the command line.
"""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import torch

import rltscan
from tests.conftest import assert_close_to_oracle, is_slow_backend
from tests.io_helpers import run_cli

TRACES = ("retrace", "tree-backup", "q-lambda", "is")
READS = {
    "retrace": ("logp_target", "logp_behavior"),
    "tree-backup": ("logp_target",),
    "q-lambda": (),
    "is": ("logp_target", "logp_behavior"),
}


def trace_coefficients(trace: str, lt, lb, lam: float, c_clip: float = 1.0) -> np.ndarray:
    """c_t of Munos et al. 2016, Table 1 (λ folded in)."""
    if trace == "retrace":
        return lam * np.minimum(c_clip, np.exp(lt - lb))
    if trace == "tree-backup":
        return lam * np.exp(lt)
    if trace == "q-lambda":
        return np.full(len(lt), lam)
    return lam * np.exp(lt - lb)


def rlax_general_returns(q_t, v_t, r_t, discount_t, c_t) -> list[float]:
    """rlax.general_off_policy_returns_from_q_and_v, as a loop (one window of K steps):
    q_t, c_t at times 1..K-1; v_t, r_t, discount_t at 1..K; returns G_0..G_{K-1}."""
    g = r_t[-1] + discount_t[-1] * v_t[-1]
    out = [g]
    for i in reversed(range(len(q_t))):
        g = r_t[i] + discount_t[i] * (v_t[i] - c_t[i] * q_t[i] + c_t[i] * g)
        out.append(g)
    return out[::-1]


def oracle(inp: dict, trace: str, gamma: float, lam: float, c_clip: float = 1.0) -> np.ndarray:
    """Targets of a flat sequence: rlax's formula applied to each episode segment."""
    r, q, ev = inp["rewards"], inp["q_values"], inp["next_expected_q"]
    term, trunc = inp["terminated"], inp["truncated"]
    n = len(r)
    c = trace_coefficients(trace, inp["logp_target"], inp["logp_behavior"], lam, c_clip)
    out = np.empty(n)
    start = 0
    for t in range(n):
        if term[t] or trunc[t] or t == n - 1:
            seg = slice(start, t + 1)
            disc = np.full(t + 1 - start, gamma)
            if term[t]:
                disc[-1] = 0.0
            ev_seg = np.where(disc == 0.0, 0.0, ev[seg])  # NaN after a terminal is not read
            out[seg] = rlax_general_returns(
                q[start + 1 : t + 1], ev_seg, r[seg], disc, c[start + 1 : t + 1]
            )
            start = t + 1
    return out


def make(rng: np.random.Generator, shape: tuple[int, ...], p_done: float, flags: str) -> dict:
    u = rng.random(shape)
    term = u < p_done / 2
    trunc = (u >= p_done / 2) & (u < p_done)
    cast = (lambda x: x.astype(np.uint8)) if flags == "uint8" else (lambda x: x)
    return {
        "rewards": rng.standard_normal(shape),
        "q_values": rng.standard_normal(shape),
        "next_expected_q": np.where(term, np.nan, rng.standard_normal(shape)),
        "logp_target": np.log(rng.uniform(0.05, 1.0, shape)),
        "logp_behavior": np.log(rng.uniform(0.05, 1.0, shape)),
        "terminated": cast(term),
        "truncated": cast(trunc),
    }


def call(inp: dict, trace: str, **kw) -> rltscan.Result:
    args = {k: v for k, v in inp.items() if not k.startswith("logp_") or k in READS[trace]}
    return rltscan.retrace(**args, trace=trace, **kw)


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("p_done", [0.0, 0.05, 0.5])
@pytest.mark.parametrize("gamma,lam", [(0.97, 0.9), (1.0, 1.0), (0.0, 0.5), (0.9, 0.0)])
def test_matches_rlax_semantics(trace, p_done, gamma, lam, backend, rng):
    flags = "uint8" if rng.random() < 0.5 else "bool"
    for _ in range(2 if is_slow_backend(backend) else 4):  # several seeds per case
        n = int(rng.integers(1, 41 if is_slow_backend(backend) else 400))
        inp = make(rng, (n,), p_done, flags)
        got = call(inp, trace, gamma=gamma, lam=lam, backend=backend, time_dim=-1).retrace_targets
        assert_close_to_oracle(got, oracle(inp, trace, gamma, lam), torch.float64)


@pytest.mark.parametrize("trace", TRACES)
def test_batched_time_major_and_float32(trace, backend, rng):
    steps = 23 if is_slow_backend(backend) else 257
    inp = make(rng, (3, steps), 0.1, "bool")
    want = np.stack([oracle({k: v[b] for k, v in inp.items()}, trace, 0.95, 0.8) for b in range(3)])
    got = call(inp, trace, gamma=0.95, lam=0.8, backend=backend, time_dim=1).retrace_targets
    assert_close_to_oracle(got, want, torch.float64)
    tm = {k: np.ascontiguousarray(v.T) for k, v in inp.items()}  # a real [T, B] buffer
    got = call(tm, trace, gamma=0.95, lam=0.8, backend=backend, time_dim=0).retrace_targets
    assert_close_to_oracle(got.T, want, torch.float64)
    f32 = {k: (v.astype(np.float32) if v.dtype == np.float64 else v) for k, v in inp.items()}
    got = call(f32, trace, gamma=0.95, lam=0.8, backend=backend, time_dim=1).retrace_targets
    assert got.dtype == np.float32
    want32 = np.stack(
        [oracle({k: v[b].astype(np.float64) for k, v in f32.items()}, trace, 0.95, 0.8)
         for b in range(3)]
    )  # fmt: skip
    assert_close_to_oracle(got, want32, torch.float32)


@pytest.mark.parametrize("trace", TRACES)
@pytest.mark.parametrize("p_done", [0.0, 0.2])
def test_chunks_with_carries_equal_the_whole(trace, p_done, backend, rng):
    steps = 29 if is_slow_backend(backend) else 311
    inp = make(rng, (2, steps), p_done, "bool")
    whole = call(inp, trace, gamma=0.9, lam=0.95, backend=backend, time_dim=1).retrace_targets
    cuts = sorted({1, steps - 1, *rng.choice(np.arange(2, steps - 1), 3, replace=False).tolist()})
    bounds = list(zip([0, *cuts], [*cuts, steps], strict=True))
    carry, parts = None, {}
    for t0, t1 in reversed(bounds):  # backward: from the last chunk
        part = {k: v[:, t0:t1] for k, v in inp.items()}
        res = call(part, trace, gamma=0.9, lam=0.95, backend=backend, time_dim=1, carry=carry)
        carry, parts[t0] = res.carry, res.retrace_targets
    got = np.concatenate([parts[t0] for t0, _ in bounds], axis=1)
    assert_close_to_oracle(got, whole, torch.float64)


def test_retrace_is_the_default_and_clips_at_c_clip(rng):
    inp = make(rng, (50,), 0.1, "bool")
    default = rltscan.retrace(**inp, gamma=0.9, lam=0.9).retrace_targets
    assert np.array_equal(default, call(inp, "retrace", gamma=0.9, lam=0.9).retrace_targets)
    clipped = call(inp, "retrace", gamma=0.9, lam=0.9, c_clip=0.5).retrace_targets
    assert_close_to_oracle(clipped, oracle(inp, "retrace", 0.9, 0.9, 0.5), torch.float64)


def test_identities_between_members(rng):
    """IS with μ = π is Q(λ); tree-backup with π(a|s) = 1 is Q(λ); Retrace never
    exceeds IS's trace (c̄ = 1)."""
    inp = make(rng, (80,), 0.1, "bool")
    same = {**inp, "logp_behavior": inp["logp_target"]}
    q_lam = call(inp, "q-lambda", gamma=0.9, lam=0.7).retrace_targets
    np.testing.assert_allclose(call(same, "is", gamma=0.9, lam=0.7).retrace_targets, q_lam)
    certain = {**inp, "logp_target": np.zeros(80)}
    np.testing.assert_allclose(call(certain, "tree-backup", gamma=0.9, lam=0.7).retrace_targets,
                               q_lam)  # fmt: skip


def test_each_member_reads_only_its_inputs(rng):
    inp = make(rng, (12,), 0.1, "bool")
    with pytest.raises(rltscan.ParameterError, match='"logp_target" is not read with'):
        rltscan.retrace(**inp, trace="q-lambda")
    with pytest.raises(rltscan.ParameterError, match='"logp_behavior" is not read with'):
        rltscan.retrace(**inp, trace="tree-backup")
    without = {k: v for k, v in inp.items() if k != "logp_behavior"}
    with pytest.raises(rltscan.ParameterError, match='trace="is" needs "logp_behavior"'):
        rltscan.retrace(**without, trace="is")
    with pytest.raises(rltscan.ParameterError, match="trace must be one of"):
        rltscan.retrace(**inp, trace="tb")
    with pytest.raises(rltscan.ParameterError, match='c_clip applies only with trace="retrace"'):
        call(inp, "is", c_clip=2.0)
    # non-finite log-probabilities that a member does not read are never looked at
    nan_lp = {**inp, "logp_target": np.full(12, np.nan), "logp_behavior": np.full(12, np.nan)}
    assert np.isfinite(call(nan_lp, "q-lambda").retrace_targets).all()


def _write(path, inp: dict) -> None:
    with h5py.File(path, "w") as f:
        for k, v in inp.items():
            name = {"terminated": "terminals", "truncated": "timeouts"}.get(k, k)
            f[name] = np.nan_to_num(v.astype(np.float32)) if v.dtype == np.float64 else v


def test_cli_trace_option_writes_each_member(tmp_path, rng):
    inp = make(rng, (40,), 0.1, "bool")
    inp["truncated"][-1] = True
    path = tmp_path / "offpolicy.h5"
    _write(path, inp)
    with h5py.File(path) as f:
        stored = {k: f[k][()] for k in f}
    read = {
        "rewards": stored["rewards"].astype(np.float64),
        "q_values": stored["q_values"].astype(np.float64),
        "next_expected_q": stored["next_expected_q"].astype(np.float64),
        "logp_target": stored["logp_target"].astype(np.float64),
        "logp_behavior": stored["logp_behavior"].astype(np.float64),
        "terminated": stored["terminals"],
        "truncated": stored["timeouts"],
    }
    for trace in TRACES:
        prefix = trace.replace("-", "_") + "_"
        r = run_cli("retrace", str(path), "--trace", trace, "--prefix", prefix,
                    "--backend", "torch", in_process=trace != TRACES[0])  # fmt: skip
        assert r.returncode == 0, r.stderr
        with h5py.File(path) as f:
            got = f[prefix + "retrace_targets"][()]
            assert f[prefix + "retrace_targets"].attrs["trace"] == trace
        want = oracle(read, trace, 0.99, 1.0)
        assert_close_to_oracle(got, want, torch.float32)
    with h5py.File(path) as f:  # the inputs are untouched
        for k, v in stored.items():
            assert np.array_equal(f[k][()], v, equal_nan=True)


def test_cli_refuses_bad_trace_words(tmp_path, rng):
    path = tmp_path / "offpolicy.h5"
    _write(path, make(rng, (10,), 0.1, "bool"))
    r = run_cli("retrace", str(path), "--trace", "treebackup")
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: --trace must be one of retrace,")
    r = run_cli("retrace", str(path), "--trace", "is", "--c-clip", "2", in_process=True)
    assert r.returncode == 2
    assert "--c-clip applies only with --trace retrace" in r.stderr
