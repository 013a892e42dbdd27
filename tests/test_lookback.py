"""The kernel's look-back on its own, against a float64 composition.

In a real run the look-back meets predecessors in every state (aggregate only,
inclusive, not yet published) depending on timing; under the interpreter programs
run in order, so every predecessor is already inclusive and a whole-kernel test
never composes an aggregate. Here the workspace is laid out by hand: a tile looks
back over aggregate-only predecessors (up to a hundred of them), to the nearest
inclusive one or to an episode end, and must publish its own inclusive value.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

triton = pytest.importorskip("triton")
tl = triton.language

from rltscan.scan import triton_scan  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
W = 32  # predecessors: the cases place the nearest inclusive tile W apart


@triton.jit
def _probe(ws, flags, agg, bnd, out, pid, k, epoch, ROWS: tl.constexpr):
    offs_r = tl.arange(0, ROWS)
    carry = triton_scan._lookback(
        ws, flags, pid, k,
        tl.load(agg + offs_r), tl.load(agg + ROWS + offs_r), tl.load(bnd + offs_r),
        epoch, offs_r, ROWS,
    )  # fmt: skip
    tl.store(out + offs_r, carry)


def _run(pid, k, states, a, b, y, agg_a, agg_b, boundary, epoch=5):
    """states[j]: 1 aggregate, 2 inclusive, for the predecessors j < pid."""
    rows = a.shape[1]
    n = pid + 1
    ws = torch.zeros(n, 3 * rows, dtype=torch.float64)
    ws[:pid] = torch.as_tensor(np.concatenate([a, b, y], axis=1))
    flags = torch.zeros(n, dtype=torch.int32)
    flags[:pid] = torch.as_tensor(states, dtype=torch.int32) + epoch * 4
    agg = torch.as_tensor(np.concatenate([agg_a, agg_b]), dtype=torch.float64)
    bnd = torch.as_tensor(boundary, dtype=torch.float64)
    out = torch.zeros(rows, dtype=torch.float64)
    ws, flags, agg, bnd, out = (t.to(DEVICE) for t in (ws, flags, agg, bnd, out))
    _probe[(1,)](ws, flags, agg, bnd, out, pid, k, epoch, ROWS=rows)
    return out.cpu().numpy(), ws.cpu().numpy()[pid], int(flags[pid])


def _want(pid, k, states, a, b, y, boundary):
    """Walk back one tile at a time, in float64: the look-back's definition."""
    acc_a, acc_b = np.ones(a.shape[1]), np.zeros(a.shape[1])
    if k == 0:
        return np.asarray(boundary, dtype=np.float64)
    for j in range(pid - 1, pid - k - 1, -1):
        if states[j] == 2:
            return acc_b + acc_a * y[j]
        acc_b, acc_a = acc_b + acc_a * b[j], acc_a * a[j]
        if not np.any(acc_a):
            return acc_b
    raise AssertionError("the row's first tile is always inclusive")


@pytest.mark.parametrize("rows", [1, 4])
@pytest.mark.parametrize(
    "case",
    ["nearest-inclusive", "inclusive-in-first-window", "inclusive-windows-back",
     "episode-end", "row-start", "first-tile"],
)  # fmt: skip
def test_the_windowed_look_back_composes_like_a_walk(rows, case, rng):
    pid = 3 * W + 7
    k = pid - 2  # this row's tiles begin at pid - k = 2: tiles 0, 1 belong to another row
    a = rng.uniform(0.5, 1.0, size=(pid, rows))
    b = rng.normal(size=(pid, rows))
    y = rng.normal(size=(pid, rows))
    states = [1] * pid
    states[0] = states[1] = 1  # another row's tiles, never to be read past this row's start
    states[2] = 2  # the row's first tile
    if case == "nearest-inclusive":
        states[pid - 1] = 2
    elif case == "inclusive-in-first-window":
        states[pid - 9] = 2
    elif case == "inclusive-windows-back":
        states[pid - 2 * W - 3] = 2
    elif case == "episode-end":
        a[pid - W - 5] = 0.0  # every row resets there; tiles further back are junk
        b[: pid - W - 5] = np.nan
        y[: pid - W - 5] = np.nan
    elif case == "first-tile":
        k = 0
    agg_a, agg_b = rng.uniform(0.5, 1.0, rows), rng.normal(size=rows)
    boundary = rng.normal(size=rows)
    got, own, flag = _run(pid, k, states, a, b, y, agg_a, agg_b, boundary)
    want = _want(pid, k, states, a, b, y, boundary)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(own[2 * rows :], agg_b + agg_a * want, rtol=1e-12, atol=1e-12)
    assert flag == 5 * 4 + 2, "the tile did not publish its inclusive value"
