"""The fused CPU backend (``backend="cpu"``): one numba pass per estimator call.

For GAE, discounted returns, TD(λ) and V-trace with scalar γ and λ, the kernel reads
the raw columns (rewards, values, the bootstrap source, the 1-byte flags, V-trace's
log-probabilities), forms the coefficients of docs/CONVENTIONS.md §3 and solves the
backward recurrence in the same loop: each input is read once and each output
written once, with no ``(a, b)`` temporaries. Any other problem (another estimator,
a per-step ``discount`` or ``lam_per_step`` column) has its module build ``(a, b)``
with torch and runs :func:`linear_scan` here, the plain recurrence. The fused kernel
has one entry, :func:`run`, on numpy views: :func:`solve` hands it a torch problem's
columns, ``rltscan.estimators.host`` a file run's numpy blocks without importing torch.

Precision: the recurrence and the coefficients are accumulated in float64 whatever
the input dtype and rounded once to the output dtype, so float32 results agree with
the torch backend to float32 rounding (tests/unit/test_cpu_fused.py compares both with the
float64 oracles of tests/oracles.py).

Layout: ``[R, T]`` views are read through their strides (no copy). A row-major view
(time stride 1: ``[B, T]``, a flat file) runs one row after the other with the carry
in a register; a time-major view (``[T, B]`` buffers) walks time outermost and the
rows innermost, so every step reads contiguous memory. Rows are split among
:func:`threads` Python threads (the kernels release the GIL); one row is one
sequential chain and runs on one core.

Measured (bench/cpu_fused.py, bench/results/cpu-fused-2core-2026-12-05/: the 2-core
development machine, shared, ``taskset -c 0,1``; the 16-core device could not be
started): one flat float32 sequence, one thread, 1e6-1e8 steps: GAE 4.4-7.9 ns/step
(torch CPU backend 25-45), returns 3.8-5.7 (16-40), V-trace 11-15 (27-118).
What was not reached, and the measured cause:

- GAE ≤ 5 ns/step per core holds in cache (1e6 steps) but not from memory (7.6-7.9 at
  1e7-1e8). A minimal GAE loop (one bootstrap form, no carry) measured 2.9-4.2 ns
  beside this kernel's 5.8-7.8 at 1e7 in the same process: the general kernel's
  bootstrap-form branches and carry bookkeeping cost about 2x. Specialising it per
  (kind, form) with numba's literal dispatch was tried and measured no faster on the
  loaded machine; per-kind kernels are what is left to try;
- one flat sequence cannot use a second core: the recurrence is one dependency chain,
  and a two-pass chunked split reads and writes every step twice, which costs more
  than a second core gives on a memory-bound loop at 2 cores. Rows ([64, T/64]) are
  split over threads: 1.7-1.8x at 2 threads.

A streamed HDF5 run in place took 2.39 s at 5e7 steps against 4.21 s before, in the same
rounds (bench/results/cpu-stream-2core-2026-12-07-b/: 1.17x its I/O floor then, 2.06x
before; 1.70x and 1.56x against faster floors in later runs, -c/ and -e/) since it stopped
importing torch (``rltscan.estimators.host``) and HDF5's chunk cache; what is left on
its path is numba's CPU target (its first block waits until ~0.75 s), h5py's reads on
the reader thread, and this kernel and :func:`block_statistics` on the main one.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numba
import numpy as np

from rltscan.scan import CPU_FUSED

if TYPE_CHECKING:  # torch loads with a torch problem only: a numpy one never needs it
    from torch import Tensor

# Estimator kind -> the fused kernel's code; the Problem columns the kernel reads.
_KINDS = {kind: code for code, kind in enumerate(CPU_FUSED)}
_READS = {
    "rewards",
    "values",
    "next_values",
    "bootstrap_values",
    "terminated",
    "truncated",
    "logp_target",
    "logp_behavior",
}
_FLAGS = ("terminated", "truncated")
# How nv_t is formed (estimators' Problem.nv_mode, docs/CONVENTIONS.md §1.2).
_NV = {"next": 0, "boot": 1, "last": 2, "none": 3}


def fused(p: Any) -> bool:
    """Whether the fused kernel solves the ``Problem`` ``p`` (else :func:`solve` takes
    the generic path): a fused kind reading only columns the kernel knows, and, when the
    sequence continues, a carry that holds the next chunk's first value where it is read."""
    if p.kind not in _KINDS or any(name not in _READS for name in p.cols):
        return False
    c = p.carry
    reads_next = "values" in p.cols and p.nv_mode != "next"
    return c is None or c.next_value is not None or not reads_next


def solve(
    p: Any,
    coefficients: Callable[[Any], tuple[Tensor, Tensor]],
    finalize: Callable[[Any, Tensor], dict[str, Tensor]],
    outputs: tuple[str, ...],
) -> dict[str, Tensor]:
    """Run an ``estimators`` ``Problem`` of torch columns on the CPU: the fused kernel
    (:func:`run`, on numpy views of the columns) where :func:`fused`, else
    ``coefficients`` → :func:`linear_scan` → ``finalize``. Returns ``{output: [R, T]}``
    in ``p.dtype``."""
    import torch

    if not fused(p):
        a, b = coefficients(p)
        init = None if p.boundary is None else p.boundary.to(p.dtype)
        return finalize(p, linear_scan(a.to(p.dtype), b.to(p.dtype), reverse=p.reverse, init=init))
    rows = p.shape[0]
    cols = {
        name: _host(x.view(torch.uint8) if name in _FLAGS else p.col(name))
        for name, x in p.cols.items()
    }
    c = p.carry
    out = run(
        p,
        cols,
        _np_dtype(p.dtype),
        outputs,
        last_value=_per_row(p.last_value, rows),
        boundary=_per_row(p.boundary, rows),
        next_value=_per_row(None if c is None else c.next_value, rows),
    )
    return {name: torch.from_numpy(y) for name, y in out.items()}


def run(
    p: Any,
    cols: Mapping[str, np.ndarray],
    dtype: np.dtype,
    outputs: tuple[str, ...],
    *,
    last_value: np.ndarray,
    boundary: np.ndarray,
    next_value: np.ndarray,
) -> dict[str, np.ndarray]:
    """The fused kernel on a :func:`fused` ``Problem`` ``p`` (its kind, bootstrap form,
    parameters and carry), given its columns as numpy ``[R, T]`` views: floats in
    ``dtype`` (the compute dtype), flags as uint8; ``last_value``, ``boundary`` (the
    carry's y, else init) and ``next_value`` (the carry's) as float64 ``[R]`` (zeros when
    absent). Returns ``{output: [R, T]}`` in ``dtype``, laid out as the inputs (a
    time-major problem writes contiguously). The one entry of both the torch problems
    (:func:`solve`) and the numpy ones of a torch-free run (``rltscan.estimators.host``)."""
    ref = cols["rewards"]
    rows, steps = ref.shape
    time_major = ref.strides[1] != ref.itemsize and rows > 1
    if time_major:
        outs = [np.empty((steps, rows), dtype=dtype).T for _ in outputs]
    else:
        outs = [np.empty((rows, steps), dtype=dtype) for _ in outputs]
    dummy2 = np.zeros((1, 1), dtype=dtype)
    flag_dummy = np.zeros((1, 1), dtype=np.uint8)

    def col(name: str) -> np.ndarray:
        return cols.get(name, dummy2)

    def flag(name: str) -> np.ndarray:
        return cols.get(name, flag_dummy)

    src = "next_values" if p.nv_mode == "next" else "bootstrap_values"
    params = p.params
    gamma, lam = float(params["gamma"]), float(params.get("lam", 1.0))
    clips = [float(params.get(k, 1.0)) for k in ("rho_clip", "c_clip", "pg_rho_clip")]
    args = (
        _KINDS[p.kind],
        col("rewards"),
        col("values"),
        "values" in cols,
        col(src),
        flag("terminated"),
        flag("truncated"),
        "truncated" in cols,
        col("logp_target"),
        col("logp_behavior"),
        last_value,
        boundary,
        next_value,
        p.carry is not None,
        _NV[p.nv_mode],
        0.0 if p.missing_zero else math.nan,
        gamma,
        lam,
        clips[0],
        clips[1],
        clips[2],
        outs[0],
        outs[1] if len(outs) > 1 else dummy2,
    )
    _split(rows, lambda r0, r1: _fused(r0, r1, time_major, *args))
    return dict(zip(outputs, outs, strict=True))


def linear_scan(a: Tensor, b: Tensor, *, reverse: bool, init: Tensor | None = None) -> Tensor:
    """Solve ``y_t = a_t * y_{t±1} + b_t`` for ``[R, T]`` CPU tensors of one float dtype
    (accumulated in float64); ``init`` is the ``[R]`` boundary value (0 when None)."""
    import torch

    rows, steps = b.shape
    time_major = b.stride(1) != 1 and rows > 1
    y = torch.empty((steps, rows), dtype=b.dtype).t() if time_major else torch.empty_like(b)
    args = (_host(a), _host(b), _per_row(init, rows), reverse, _host(y))
    _split(rows, lambda r0, r1: _scan(r0, r1, time_major, *args))
    return y


def _np_dtype(dtype: Any) -> np.dtype:
    """A torch float dtype's numpy twin (float64, else float32)."""
    return np.dtype(np.float64 if str(dtype) == "torch.float64" else np.float32)


def _host(t: Tensor) -> np.ndarray:
    """A CPU tensor as a numpy view (strides kept; the kernels read them)."""
    return t.detach().numpy()


def _per_row(x: Tensor | None, rows: int) -> np.ndarray:
    """A per-row value as float64 ``[R]`` (zeros when absent)."""
    import torch

    if x is None:
        return np.zeros(rows)
    return x.detach().to(torch.float64).reshape(-1).expand(rows).contiguous().numpy()


# (process, threads) -> the pool: a forked child (a Ray worker) starts its own, since
# the parent's worker threads do not exist in it
_POOL: dict[tuple[int, int], ThreadPoolExecutor] = {}


def threads() -> int:
    """Threads the rows are split over: ``torch.get_num_threads()`` where torch is loaded
    (the user's setting), else the cores this process may run on. Only the speed depends
    on it: each row is one chain, computed alike on any thread."""
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch.get_num_threads()
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _split(rows: int, run: Callable[[int, int], None]) -> None:
    """Run ``run(r0, r1)`` over row ranges on :func:`threads` threads (the kernels
    release the GIL); one range on this thread when there is one row or one thread."""
    n = min(rows, threads())
    if n <= 1:
        run(0, rows)
        return
    key = (os.getpid(), n)
    pool = _POOL.get(key)
    if pool is None:
        pool = _POOL[key] = ThreadPoolExecutor(max_workers=n, thread_name_prefix="cpu_fused")
    bounds = [rows * k // n for k in range(n + 1)]
    futures = [pool.submit(run, bounds[k], bounds[k + 1]) for k in range(n)]
    for f in futures:
        f.result()


# ---------------------------------------------------------------------------
# Kernels. Each walks rows ``[r0, r1)`` one after the other along time, with the carry
# in a register; a time-major view is walked in tiles of ``_TILE`` steps (every row's
# share of a tile, then the next tile), so the cache lines a tile reads serve all its
# rows. The step is written inline: as a called function with its two dozen array
# arguments it measured 10-20x slower, and a single loop over (row, step) pairs 1.7x.

# Time steps per tile of a time-major walk: 2048 steps of 16 rows of 6 columns stay in L2.
_TILE = 2048

_JIT = {"cache": True, "nogil": True, "fastmath": False}


@numba.njit(**_JIT)
def _fused(
    r0, r1, time_major, kind, rew, val, has_val, src, term, trunc, has_trunc, lt, lb,
    lastv, y0, nxt0, cont, mode, miss, gamma, lam, rho_clip, c_clip, pg_clip, out0, out1,
):  # fmt: skip
    """Backward fused steps (docs/CONVENTIONS.md §3). Kinds: 0 GAE, 1 returns, 2 TD(λ),
    3 V-trace; ``mode``: how nv_t is formed (``_NV``)."""
    steps = rew.shape[1]
    ys = y0.copy()
    vsn = nxt0 + y0 if cont else np.zeros_like(y0)  # V-trace's vs_{t+1} past the chunk
    gl = gamma * lam
    tile = _TILE if time_major else steps
    for hi in range(steps, 0, -tile):
        for r in range(r0, r1):
            y, vs_next = ys[r], vsn[r]
            for t in range(hi - 1, max(hi - tile, 0) - 1, -1):
                ended = term[r, t] != 0
                cut = ended or (has_trunc and trunc[r, t] != 0) or (t == steps - 1 and not cont)
                boot = cut and not ended
                # nv_t (§1.2): the explicit source, else V_{t+1}, else the bootstrap form at a cut
                if mode == 0:
                    nv = np.float64(src[r, t])
                elif boot:
                    if mode == 1:
                        nv = np.float64(src[r, t])
                    elif mode == 2 and t == steps - 1:
                        nv = lastv[r]
                    else:
                        nv = miss
                elif not has_val:
                    nv = 0.0
                elif t + 1 < steps:
                    nv = np.float64(val[r, t + 1])
                else:
                    nv = nxt0[r]
                nvt = 0.0 if ended else nv
                x = np.float64(rew[r, t])
                if kind == 0:
                    v = np.float64(val[r, t])
                    y = x + gamma * nvt - v + (0.0 if cut else gl * y)
                    out0[r, t] = y
                    out1[r, t] = y + v
                elif kind == 1:
                    y = (x + gamma * nv if boot else x) + (0.0 if cut else gamma * y)
                    out0[r, t] = y
                elif kind == 2:
                    w = gamma if boot else gamma * (1.0 - lam)
                    y = x + w * nvt + (0.0 if cut else gl * y)
                    out0[r, t] = y
                else:
                    v = np.float64(val[r, t])
                    # one exp for the three clips: min(clip, ratio) equals torch's
                    # exp(min(log ratio, log clip)) to rounding (§2.6)
                    ratio = math.exp(np.float64(lt[r, t]) - np.float64(lb[r, t]))
                    rho = min(ratio, rho_clip)
                    c = lam * min(ratio, c_clip)
                    y = rho * (x + gamma * nvt - v) + (0.0 if cut else gamma * c * y)
                    vs = v + y
                    target = nvt if cut else vs_next
                    out0[r, t] = vs
                    out1[r, t] = min(ratio, pg_clip) * (x + gamma * target - v)
                    vs_next = vs
            ys[r], vsn[r] = y, vs_next


def block_statistics(x: np.ndarray, buckets: np.ndarray) -> list[float]:
    """``[count, mean, M2, min, max, nonfinite]`` of a 1-D float array (the finite
    entries, float64; ``rltscan.stats.block_moments``'s row) in two passes over ``x``,
    no temporaries; each finite entry's bucket (the top 16 bits of its float32 pattern,
    ``rltscan.stats.buckets_of``) is counted into ``buckets`` (int64, 2^16) in the first.
    The mean is a sequential float64 sum, so it may differ from torch's pairwise sum in
    the last bits."""
    if x.dtype != np.float32:
        with np.errstate(over="ignore"):  # past float32's range: the ±inf bucket, as torch's
            bits = x.astype(np.float32).view(np.uint32)
    else:
        bits = x.view(np.uint32)
    return list(_statistics(x, bits, buckets))


@numba.njit(**_JIT)
def _statistics(x, bits, buckets):
    n = 0
    total = 0.0
    lo, hi = math.inf, -math.inf
    for i in range(x.size):
        if not np.isfinite(x[i]):
            continue
        # int32 bits >> 16, plus 2^15 (stats._OFFSET), from the unsigned pattern
        buckets[(bits[i] >> 16) ^ 0x8000] += 1
        v = np.float64(x[i])
        n += 1
        total += v
        lo = min(lo, v)
        hi = max(hi, v)
    mean = total / n if n else 0.0
    m2 = 0.0
    for i in range(x.size):
        if np.isfinite(x[i]):
            d = np.float64(x[i]) - mean
            m2 += d * d
    return float(n), mean, m2, lo, hi, float(x.size - n)


@numba.njit(**_JIT)
def _scan(r0, r1, time_major, a, b, y0, reverse, out):
    """``y_t = a_t * y_{t±1} + b_t`` over rows ``[r0, r1)`` (float64 carry)."""
    steps = b.shape[1]
    ys = y0.copy()
    tile = _TILE if time_major else steps
    for k in range(0, steps, tile):
        lo, hi = (max(steps - k - tile, 0), steps - k) if reverse else (k, min(k + tile, steps))
        for r in range(r0, r1):
            y = ys[r]
            for j in range(hi - lo):
                t = hi - 1 - j if reverse else lo + j
                y = np.float64(a[r, t]) * y + np.float64(b[r, t])
                out[r, t] = y
            ys[r] = y
