"""The kernel's look-back in whole launches on a GPU: every tile publishes its
inclusive value, tiles of several steps a thread match float64, and inputs that are
NaN where an estimator never reads them stay out of the results. The look-back's
words laid out by hand are in tests/unit/test_lookback_words.py (they run in CI).
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

import rltscan
from rltscan import bench
from rltscan.scan import triton_scan
from tests.conftest import assert_close_to_oracle

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("kind", ["gae", "vtrace", "traces"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["fp32", "fp64"])
def test_every_tile_publishes_its_inclusive_value(kind, dtype):
    """After a launch every tile's b word holds, tagged inclusive with that launch's
    epoch, the y at its last step in scan order (its first step backward)."""
    n, chunk = 300, 64
    inp = bench.make_inputs(kind, (n,), ep_len=90.0, device=DEVICE, seed=2)
    inp = {k: (v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
           for k, v in inp.items()}  # fmt: skip
    with triton_scan.tile_override(rows=1, chunk=chunk, num_warps=1):
        out = bench.call(kind, inp, backend="triton", validate=False)
    y = out["vs"] - inp["values"] if kind == "vtrace" else next(iter(out.values()))
    device = y.device  # (the launch's key: "cuda:0", not "cuda")
    words, epoch = triton_scan._WS.get(device, 1, triton_scan._stream_id(device))
    epoch -= 1  # (get() handed out the next epoch: the launch had the one before)
    wide = dtype == torch.float64
    per = 2 if wide else 1
    ws = words.cpu().numpy()
    n_tiles = -(-n // chunk)
    reverse = kind != "traces"
    for k in range(n_tiles):
        tb = n_tiles - 1 - k if reverse else k
        step = tb * chunk if reverse else min(n, (tb + 1) * chunk) - 1
        b_words = ws[k * 2 * per + per : k * 2 * per + 2 * per]
        assert all(int(w) >> 32 == epoch * 4 + 2 for w in b_words), (k, b_words)
        if wide:
            hi, lo = (int(w) & 0xFFFFFFFF for w in b_words)
            got = struct.unpack("<d", struct.pack("<Q", (hi << 32) | lo))[0]
        else:
            got = struct.unpack("<f", struct.pack("<I", int(b_words[0]) & 0xFFFFFFFF))[0]
        np.testing.assert_allclose(got, float(y[step]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", bench.ESTIMATOR_ORDER)
@pytest.mark.parametrize("tiles", [(1, 64, 1, 2), (2, 64, 1, 4), (1, 256, 1, 8), (2, 128, 1, 8),
                                   (2, 16, 1, 1)],
                         ids=lambda t: f"per{t[3]}")  # fmt: skip
@pytest.mark.parametrize("shape", [(701,), (3, 300)], ids=["flat", "batched"])
def test_tiles_of_several_steps_a_thread_match_float64(kind, tiles, shape):
    """The aggregate is taken out of the registers of the thread that holds it (2, 4
    or 8 steps a thread); the suite's tiny default tiles hold one."""
    rows, chunk, warps, per = tiles
    assert triton_scan.Tiles(rows, chunk, warps).per_thread(True) == per
    inp = bench.make_inputs(kind, shape, ep_len=150.0, device=DEVICE, seed=len(shape))
    want = bench.call(kind, {k: (v.double() if isinstance(v, torch.Tensor) and
                                 v.is_floating_point() else v) for k, v in inp.items()},
                      backend="torch", validate=False)  # fmt: skip
    with triton_scan.tile_override(rows=rows, chunk=chunk, num_warps=warps):
        got = bench.call(kind, inp, backend="triton", validate=False)
    for k, w in want.items():
        assert_close_to_oracle(got[k], w, torch.float32)


def _ignored_entries_case(name: str) -> tuple[list, dict]:
    """Inputs with NaN exactly where ``name`` never reads (docs/CONVENTIONS.md §1.2):
    next_values at terminal steps (returns: also where no bootstrap is needed),
    E_π Q at terminal steps, and log π at the first step of an episode (Retrace's
    trace reads it at t+1, never past a cut)."""
    n = 600
    g = torch.Generator().manual_seed(7)
    r, v, nv, q, ev, vpi, lt, lb = torch.randn(8, n, generator=g)
    lt, lb = -lt.abs(), -lb.abs()
    term = torch.zeros(n, dtype=torch.bool)
    term[[10, 40, 300]] = True
    trunc = torch.zeros(n, dtype=torch.bool)
    trunc[[25, 511]] = True
    flags = {"terminated": term.to(DEVICE), "truncated": trunc.to(DEVICE)}
    nv[[10, 40, 300]] = float("nan")
    if name == "discounted_returns":
        nv[4] = float("nan")
        return [r], {"next_values": nv, "gamma": 0.9, **flags}
    if name == "retrace":
        ev[[10, 40, 300]] = float("nan")
        lt[[11, 26, 41, 301, 512]] = float("nan")
        kw = {"next_expected_q": ev, "logp_target": lt, "logp_behavior": lb, "v_pi": vpi}
        return [r, q], {**kw, "gamma": 0.9, "lam": 0.9, **flags}
    kw = {"next_values": nv, "gamma": 0.9, "lam": 0.9 if name != "vtrace" else 1.0}
    if name == "vtrace":
        kw |= {"logp_target": lt, "logp_behavior": lb}
    if name == "td_lambda":
        return [r], {"values": v, **kw, **flags}
    return [r, v], {**kw, **flags}


@pytest.mark.parametrize("name", ["gae", "td_lambda", "discounted_returns", "vtrace", "retrace"])
def test_columns_read_at_every_step_screen_only_what_is_used(name, monkeypatch):
    """The kernel reads its dense columns (and V, log π at t+1) at every step, before the
    flags arrive, and drops what the estimator ignores: its validation screen does not
    fire on NaN there (the host validator, which it would call, is not reached), and the
    results match the torch backend (8 steps a thread, several tiles)."""

    def screen_fired(*a, **k):
        raise AssertionError("the kernel's screen fired on an entry the estimator ignores")

    args, kw = _ignored_entries_case(name)
    args = [a.to(DEVICE) for a in args]
    kw = {k: (x.to(DEVICE) if isinstance(x, torch.Tensor) else x) for k, x in kw.items()}
    f = getattr(rltscan, name)
    want = dict(f(*args, **kw, backend="torch"))
    monkeypatch.setattr("rltscan.estimators._solve.validate_contents", screen_fired)
    with triton_scan.tile_override(rows=1, chunk=256, num_warps=1):
        got = dict(f(*args, **kw, backend="triton", validate=True))
    assert got.keys() == want.keys()
    for k in want:
        assert torch.isfinite(torch.as_tensor(got[k])).all(), k
        assert_close_to_oracle(got[k], want[k], torch.float32)
