"""The kernel's look-back on its own, against a float64 composition.

In a real run the look-back meets predecessors in every state (aggregate only,
inclusive, not yet published) depending on timing; under the interpreter programs
run in order, so every predecessor is already inclusive and a whole-kernel test
never composes an aggregate. Here the look-back's words are laid out by hand: per
tile and lane an ``a`` word and a ``b``/inclusive word, each tagged ``epoch*4 +
state`` in its high half (fp64 values take two words, high bits first). A tile looks
back over aggregate-only predecessors, lane by lane, to the nearest inclusive one,
through episode ends, with other settings' slots and older epochs in between.

The words are laid out by hand, so these run the same under the interpreter (CI)
and on a GPU; the whole-kernel look-back tests are in tests/gpu/test_lookback.py.
"""

from __future__ import annotations

import struct

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
tl = triton.language

from rltscan.scan import triton_scan  # noqa: E402

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
