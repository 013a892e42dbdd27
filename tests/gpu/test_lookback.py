"""The kernel's look-back on its own, against a float64 composition.

In a real run the look-back meets predecessors in every state (aggregate only,
inclusive, not yet published) depending on timing; under the interpreter programs
run in order, so every predecessor is already inclusive and a whole-kernel test
never composes an aggregate. Here the look-back's words are laid out by hand: per
tile and lane an ``a`` word and a ``b``/inclusive word, each tagged ``epoch*4 +
state`` in its high half (fp64 values take two words, high bits first). A tile looks
back over aggregate-only predecessors, lane by lane, to the nearest inclusive one or
to an episode end, with other settings' slots and older epochs in between.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
tl = triton.language

import rltscan  # noqa: E402
from rltscan import bench  # noqa: E402
from rltscan.scan import triton_scan  # noqa: E402
from tests.conftest import assert_close_to_oracle  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
EPOCH = 5
AGG, INC = EPOCH * 4 + 1, EPOCH * 4 + 2


@triton.jit
def _probe(ws, bnd, out, slot, k, epoch, ROWS: tl.constexpr, NSET: tl.constexpr,
           WIDE: tl.constexpr):  # fmt: skip
    offs_r = tl.arange(0, ROWS)
    carry = triton_scan._lookback(
        ws, slot, k, tl.load(bnd + offs_r), epoch, offs_r, ROWS, NSET, WIDE
    )
    tl.store(out + offs_r, carry)


@triton.jit
def _reader(ws, val, tag, ROWS: tl.constexpr, WIDE: tl.constexpr):
    offs_r = tl.arange(0, ROWS)
    x, t = triton_scan._read(ws + offs_r, offs_r >= 0, ROWS, WIDE)
    tl.store(val + offs_r, x)
    tl.store(tag + offs_r, t)


def _words(x: float, tag: int, wide: bool) -> list[int]:
    """The words the kernel publishes for ``x`` with ``tag`` (as signed int64)."""
    if wide:
        bits = struct.unpack("<Q", struct.pack("<d", x))[0]
        halves = [bits >> 32, bits & 0xFFFFFFFF]
    else:
        halves = [struct.unpack("<I", struct.pack("<f", x))[0]]
    return [struct.unpack("<q", struct.pack("<Q", (tag << 32) | h))[0] for h in halves]


class Layout:
    """Hand-laid look-back words: ``set(slot, lane, which, x, tag)``."""

    def __init__(self, n_slots: int, rows: int, wide: bool) -> None:
        self.rows, self.wide = rows, wide
        self.per = 2 if wide else 1
        self.ws = np.zeros(n_slots * 2 * self.per * rows, dtype=np.int64)

    def set(self, slot: int, lane: int, which: str, x: float, tag: int) -> None:
        base = slot * 2 * self.per * self.rows + (which == "b") * self.per * self.rows
        for i, w in enumerate(_words(x, tag, self.wide)):
            self.ws[base + i * self.rows + lane] = w


def _run(layout: Layout, slot: int, k: int, boundary, nset: int = 1):
    dtype = torch.float64 if layout.wide else torch.float32
    ws = torch.as_tensor(layout.ws).to(DEVICE)
    bnd = torch.as_tensor(np.asarray(boundary), dtype=dtype).to(DEVICE)
    out = torch.zeros(layout.rows, dtype=dtype, device=DEVICE)
    _probe[(1,)](ws, bnd, out, slot, k, EPOCH, ROWS=layout.rows, NSET=nset, WIDE=layout.wide)
    return out.cpu().numpy().astype(np.float64)


def _walk(chain, boundary_lane):
    """The look-back's definition for one lane, in float64: ``chain`` lists the
    predecessors nearest first as ("inc", y) or ("agg", a, b)."""
    acc_a, acc_b = 1.0, 0.0
    for item in chain:
        if item[0] == "inc":
            return acc_b + acc_a * item[1]
        _, a, b = item
        acc_b, acc_a = acc_b + acc_a * b, acc_a * a
        if acc_a == 0.0:
            return acc_b
    raise AssertionError("a chain ends at an inclusive tile")


@pytest.mark.parametrize("wide", [False, True], ids=["fp32", "fp64"])
@pytest.mark.parametrize("nset", [1, 3])
def test_each_lane_walks_to_its_own_inclusive_or_episode_end(wide, nset, rng):
    """Four lanes of one tile, each with another history: an inclusive predecessor at
    once, aggregates then an inclusive tile dozens back, an episode end (a = 0) with
    aggregates and then an inclusive value behind it, and an inclusive value written
    over an aggregate (its ``a`` word still tagged as an aggregate). Other settings'
    slots in between hold junk of this epoch: only every ``nset``-th slot belongs to
    this setting.

    Behind an episode end the walk goes on to an inclusive value and applies the
    aggregates forward (the carry has the chain's bits however programs were
    scheduled: ``_lookback``); the episode end's ``fma(0, carry, b)`` is ``b``, so
    what lies behind it does not change the carry. Those words are this launch's
    (every tile of a launch publishes), finite as a validated run's are."""
    rows, depth, s = 4, 40, nset - 1
    pid = depth + 2
    slot = pid * nset + s
    lay = Layout((pid + 1) * nset, rows, wide)
    dt = np.float64 if wide else np.float32
    chains = {lane: [] for lane in range(rows)}
    for m in range(1, depth + 1):  # predecessor m tiles back
        j = (pid - m) * nset + s
        for other in range(nset):
            if other != s:  # another setting's slot: must never be read
                for lane in range(rows):
                    lay.set((pid - m) * nset + other, lane, "a", np.nan, AGG)
                    lay.set((pid - m) * nset + other, lane, "b", np.nan, INC)
        for lane in range(rows):
            a, b, y = (float(dt(v)) for v in (rng.uniform(0.5, 1), rng.normal(), rng.normal()))
            if (lane, m) in ((0, 1), (1, depth), (3, 7)):
                lay.set(j, lane, "a", a, AGG)  # (3: the aggregate it published first)
                lay.set(j, lane, "b", y, INC)
                chains[lane].append(("inc", y))
            elif lane == 2 and m == 12:
                lay.set(j, lane, "a", 0.0, AGG)
                lay.set(j, lane, "b", b, AGG)
                chains[lane].append(("agg", 0.0, b))
            elif lane == 2 and m > 12:  # behind the episode end: aggregates, then
                lay.set(j, lane, "a", a, AGG)  # an inclusive value (m = 20)
                lay.set(j, lane, "b", y if m == 20 else b, INC if m == 20 else AGG)
            else:
                lay.set(j, lane, "a", a, AGG)
                lay.set(j, lane, "b", b, AGG)
                chains[lane].append(("agg", a, b))
    boundary = rng.normal(size=rows)
    got = _run(lay, slot, pid, boundary, nset)
    want = [_walk(chains[lane], boundary[lane]) for lane in range(rows)]
    tol = 1e-12 if wide else 2e-5
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("wide", [False, True], ids=["fp32", "fp64"])
def test_the_first_tile_of_a_row_takes_the_boundary(wide, rng):
    lay = Layout(4, 2, wide)
    for lane in range(2):  # the previous row's tiles: never read from a row's start
        for j in range(3):
            lay.set(j, lane, "b", np.nan, INC)
    boundary = rng.normal(size=2)
    got = _run(lay, 3, 0, boundary)
    np.testing.assert_allclose(got, boundary, rtol=1e-6)


@pytest.mark.parametrize("wide", [False, True], ids=["fp32", "fp64"])
def test_a_word_reads_as_not_there_when_stale_or_torn(wide):
    """A reader accepts a value only with its tag; fp64 halves of two different
    publications (a read between the two stores) give tag -1."""
    rows = 4
    lay = Layout(1, rows, wide)
    lay.set(0, 0, "a", 1.5, AGG)
    lay.set(0, 1, "a", -2.25, INC - 4)  # an older epoch
    lay.set(0, 2, "a", 3.0, INC)
    if wide:  # lane 3: the high half of one publication, the low half of another
        lay.set(0, 3, "a", 7.0, AGG)
        lay.ws[rows + 3] = _words(7.000001, INC, True)[1]
    else:
        lay.set(0, 3, "a", 0.0, 0)  # never written
    ws = torch.as_tensor(lay.ws).to(DEVICE)
    dtype = torch.float64 if wide else torch.float32
    val = torch.zeros(rows, dtype=dtype, device=DEVICE)
    tag = torch.zeros(rows, dtype=torch.int32, device=DEVICE)
    _reader[(1,)](ws, val, tag, ROWS=rows, WIDE=wide)
    assert tag.tolist() == [AGG, INC - 4, INC, -1 if wide else 0]
    assert val.tolist()[:3] == [1.5, -2.25, 3.0]


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
