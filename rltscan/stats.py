"""Statistics of what a run computed, gathered while the outputs are produced.

Every engine (whole file, streaming windows, shards on the local or the Ray engine)
feeds the same accumulators, block by block, and merges them; nothing is re-read.

* :class:`Moments`: count, mean, M2 (sum of squared deviations), min, max and the
  number of non-finite entries of a set of values. Two sets merge exactly by Chan,
  Golub & LeVeque's parallel update ("Updating formulae and a pairwise algorithm for
  computing sample variances", 1979) in float64, so the result does not depend on how
  the data was cut into windows or shards beyond float rounding. ``std`` is the
  population standard deviation (numpy's default, ``ddof=0``).
* :class:`Histogram`: a value's *bucket* is the top 16 bits of its float32 pattern
  (a bfloat16 truncation: sign, exponent and 7 mantissa bits), so the buckets are fixed
  before any data is seen and the counts are exact integers: a histogram does not
  depend on windows, shards or order at all. Shown histograms re-bin the buckets into
  equal-width bins between the exact min and max; a bucket spans at most 2^-7 of its
  value, so a value may be counted one bin off near a bin edge (the pictures are
  approximate; the moments are not).
* :class:`Episodes`: per-episode undiscounted returns and lengths of the steps of
  ``rows`` sequences, as a segment that merges with its neighbour in time: the part
  before the first episode end (``head``), the complete episodes inside, the part after
  the last end (``tail``). The data's first step starts an episode; the steps after the
  last end of each sequence are one *open* episode, reported apart, never as an
  episode.

Torch is used only by :class:`OutputAccumulator` (on the device where the outputs live:
per block it queues a few float64 scalars and adds into one bucket tensor, and it
synchronises with the host once, in :meth:`OutputAccumulator.result`). On the host,
where numba loads, one numba kernel (``rltscan.scan.cpu_fused.block_statistics``)
makes a block's moments and buckets in two passes without temporaries: torch's dozen
passes took ~10x the fused scan of a streamed CPU run. Its mean is a sequential
float64 sum, torch's a pairwise one: the two may differ in the last bits (the counts,
min, max and buckets are the same).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

BUCKETS = 1 << 16  # one per top-16-bit float32 pattern
_OFFSET = 1 << 15  # int32 >> 16 is in [-2^15, 2^15): bucket = (bits >> 16) + 2^15
DISPLAY_BINS = 32  # bins of a shown histogram (pictures halve them to fit the width)


# --------------------------------------------------------------------------- moments


@dataclass(frozen=True)
class Moments:
    """Count, mean, M2, min, max of the finite values, and the non-finite count."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    min: float = math.inf
    max: float = -math.inf
    nonfinite: int = 0

    @property
    def std(self) -> float | None:
        return math.sqrt(self.m2 / self.count) if self.count else None

    def merge(self, other: Moments) -> Moments:
        """Both sets together (Chan et al.'s update, float64)."""
        n = self.count + other.count
        if not other.count or not self.count:
            pick = self if self.count else other
            return replace(pick, nonfinite=self.nonfinite + other.nonfinite)
        delta = other.mean - self.mean
        return Moments(
            count=n,
            mean=self.mean + delta * (other.count / n),
            m2=self.m2 + other.m2 + delta * delta * (self.count * other.count / n),
            min=min(self.min, other.min),
            max=max(self.max, other.max),
            nonfinite=self.nonfinite + other.nonfinite,
        )

    @classmethod
    def of(cls, values: Any) -> Moments:
        """The moments of a numpy array (float64), non-finite entries counted apart."""
        x = np.asarray(values, dtype=np.float64).reshape(-1)
        fin = np.isfinite(x)
        bad = int(x.size - fin.sum())
        if bad:
            x = x[fin]
        if not x.size:
            return cls(nonfinite=bad)
        mean = float(x.mean())
        d = x - mean
        return cls(int(x.size), mean, float(d @ d), float(x.min()), float(x.max()), bad)

    def to_json(self) -> dict[str, Any]:
        """What the report shows: count, non-finite, mean, std, min, max (None if empty)."""
        empty = not self.count
        return {
            "count": self.count,
            "nonfinite": self.nonfinite,
            "mean": None if empty else self.mean,
            "std": self.std,
            "min": None if empty else self.min,
            "max": None if empty else self.max,
        }

    def state(self) -> list[float]:
        """Plain numbers for a shard task's JSON result (:meth:`from_state` reverses)."""
        return [self.count, self.mean, self.m2, self.min, self.max, self.nonfinite]

    @classmethod
    def from_state(cls, s: list[float]) -> Moments:
        return cls(int(s[0]), float(s[1]), float(s[2]), float(s[3]), float(s[4]), int(s[5]))


def merge_all(parts: Iterable[Moments]) -> Moments:
    out = Moments()
    for part in parts:
        out = out.merge(part)
    return out


# --------------------------------------------------------------------------- histograms


def buckets_of(values: np.ndarray) -> np.ndarray:
    """The bucket of each value (numpy; the same as :class:`OutputAccumulator`'s)."""
    bits = np.ascontiguousarray(values, dtype=np.float32).reshape(-1).view(np.int32)
    return (bits >> 16).astype(np.int64) + _OFFSET


def bucket_values(buckets: np.ndarray) -> np.ndarray:
    """The smallest-magnitude float value of each bucket (float64)."""
    bits = ((np.asarray(buckets, dtype=np.int64) - _OFFSET) << 16).astype(np.int32)
    return bits.view(np.float32).astype(np.float64)


@dataclass(frozen=True)
class Histogram:
    """Exact counts per bucket (only the non-empty ones)."""

    counts: Mapping[int, int] = field(default_factory=dict)

    def merge(self, other: Histogram) -> Histogram:
        out = dict(self.counts)
        for k, v in other.counts.items():
            out[k] = out.get(k, 0) + v
        return Histogram(out)

    @classmethod
    def of(cls, values: np.ndarray) -> Histogram:
        x = np.asarray(values, dtype=np.float64).reshape(-1)
        keys, n = np.unique(buckets_of(x[np.isfinite(x)]), return_counts=True)
        return cls(dict(zip(keys.tolist(), n.tolist(), strict=True)))

    @classmethod
    def from_dense(cls, counts: np.ndarray) -> Histogram:
        (keys,) = np.nonzero(counts)
        return cls(dict(zip(keys.tolist(), counts[keys].tolist(), strict=True)))

    def bins(self, lo: float, hi: float, n: int = DISPLAY_BINS) -> dict[str, Any]:
        """Equal-width bins over ``[lo, hi]`` (the exact min and max): ``edges`` (n+1)
        and ``counts`` (n). Each bucket is placed by its value, clipped to the range."""
        if not self.counts or not (math.isfinite(lo) and math.isfinite(hi)):
            return {"edges": [], "counts": []}
        if hi <= lo:
            return {"edges": [lo, hi], "counts": [int(sum(self.counts.values()))]}
        keys = np.fromiter(self.counts.keys(), dtype=np.int64)
        weights = np.fromiter(self.counts.values(), dtype=np.int64)
        v = np.clip(bucket_values(keys), lo, hi)
        idx = np.minimum(((v - lo) / (hi - lo) * n).astype(np.int64), n - 1)
        counts = np.bincount(idx, weights=weights, minlength=n).astype(np.int64)
        edges = np.linspace(lo, hi, n + 1)
        return {"edges": edges.tolist(), "counts": counts.tolist()}

    def state(self) -> list[list[int]]:
        return [[int(k), int(v)] for k, v in sorted(self.counts.items())]

    @classmethod
    def from_state(cls, s: list[list[int]]) -> Histogram:
        return cls({int(k): int(v) for k, v in s})


# --------------------------------------------------------------------------- one output


@dataclass(frozen=True)
class OutputStats:
    """Moments and histogram of one output column."""

    moments: Moments = field(default_factory=Moments)
    histogram: Histogram = field(default_factory=Histogram)

    def merge(self, other: OutputStats) -> OutputStats:
        return OutputStats(self.moments.merge(other.moments), self.histogram.merge(other.histogram))

    @classmethod
    def of(cls, values: np.ndarray) -> OutputStats:
        return cls(Moments.of(values), Histogram.of(values))

    def to_json(self) -> dict[str, Any]:
        m = self.moments
        return {**m.to_json(), "histogram": self.histogram.bins(m.min, m.max)}

    def state(self) -> dict[str, Any]:
        return {"moments": self.moments.state(), "histogram": self.histogram.state()}

    @classmethod
    def from_state(cls, s: Mapping[str, Any]) -> OutputStats:
        return cls(Moments.from_state(s["moments"]), Histogram.from_state(s["histogram"]))


def from_parts(parts: Iterable[Mapping[str, Mapping[str, Any]]]) -> dict[str, OutputStats]:
    """The statistics of outputs computed in pieces (one file's walk, a dataset's shards)
    from each piece's :meth:`OutputAccumulator.parts`, given in scan order: the blocks'
    moments are folded in that one order, so a file run whole, in windows or in shards
    on the same block grid gives the same bits (tests/engines/test_one_executor.py)."""
    blocks: dict[str, list[Moments]] = {}
    histograms: dict[str, Histogram] = {}
    for part in parts:
        for name, p in part.items():
            blocks.setdefault(name, []).extend(Moments.from_state(r) for r in p["blocks"])
            h = Histogram.from_state(p["histogram"])
            histograms[name] = histograms[name].merge(h) if name in histograms else h
    return {name: OutputStats(merge_all(rows), histograms[name]) for name, rows in blocks.items()}


class OutputAccumulator:
    """Feeds on each block's outputs where they live (CPU or GPU tensors).

    Per block and output it queues one small float64 tensor (count, mean, M2, min, max,
    non-finite of the block) and adds the block's buckets into one int64 tensor; on a
    GPU nothing waits for the device. :meth:`result` copies them to the host once and
    merges the blocks in float64."""

    def __init__(self) -> None:
        self._moments: dict[str, list[Any]] = {}
        self._buckets: dict[str, Any] = {}

    def add(self, outputs: Mapping[str, Any]) -> None:
        """One block's outputs: torch tensors, or numpy arrays (a CPU run on numpy:
        without torch where numba loads)."""
        for name, value in outputs.items():
            if not math.prod(value.shape):  # no steps
                continue
            # (asked only for host blocks: a GPU run never imports numba for this)
            on_host = isinstance(value, np.ndarray) or not value.is_cuda
            fused = _cpu_statistics() if on_host else None
            if fused is not None:
                self._add_fused(fused, name, value)
                continue
            import torch

            tensor = torch.from_numpy(value) if isinstance(value, np.ndarray) else value
            x = tensor.detach().reshape(-1)
            self._moments.setdefault(name, []).append(block_moments(x, select=x.is_cuda))
            self._add_buckets(name, x)

    def _add_fused(self, fused: Any, name: str, value: Any) -> None:
        """A host block (numpy, or a CPU tensor) in one numba pass (moments and buckets)
        and one for M2."""
        if not isinstance(value, np.ndarray):
            import torch

            if value.dtype not in (torch.float32, torch.float64):
                value = value.to(torch.float32)  # exact for the narrower floats (bfloat16)
            value = value.detach().contiguous().numpy()
        x = np.ascontiguousarray(value).reshape(-1)
        if x.dtype not in (np.float32, np.float64):
            x = x.astype(np.float32)  # exact for the narrower floats
        hist = self._buckets.get(name)
        if hist is None:
            hist = self._buckets[name] = np.zeros(BUCKETS, dtype=np.int64)
        self._moments.setdefault(name, []).append(np.array(fused(x, hist), dtype=np.float64))

    def _add_buckets(self, name: str, x: Any) -> None:
        import torch

        fin = torch.isfinite(x)
        bits = x.to(torch.float32).view(torch.int32)
        idx = (bits >> 16).to(torch.int64) + _OFFSET
        hist = self._buckets.get(name)
        if hist is None:
            hist = self._buckets[name] = torch.zeros(BUCKETS, dtype=torch.int64, device=x.device)
        hist.index_add_(0, idx, fin.to(torch.int64))  # non-finite entries add 0

    def parts(self) -> dict[str, dict[str, Any]]:
        """Per output, each block's moments in the order added and the bucket counts, as
        plain JSON (one copy to the host): what :func:`from_parts` folds."""
        return {
            name: {
                "blocks": _on_host(rows).tolist(),
                "histogram": Histogram.from_dense(_on_host([self._buckets[name]])[0]).state(),
            }
            for name, rows in self._moments.items()
        }

    def result(self) -> dict[str, OutputStats]:
        """The statistics so far, per output."""
        return from_parts([self.parts()])


def _on_host(rows: list[Any]) -> np.ndarray:
    """Rows of numpy arrays or tensors (on one device) stacked as one numpy array (one
    copy from a GPU)."""
    if isinstance(rows[0], np.ndarray):
        return np.stack(rows)
    import torch

    return torch.stack(rows).cpu().numpy()


@functools.cache
def _cpu_statistics() -> Any:
    """The numba statistics kernel (``cpu_fused.block_statistics``: ~30x torch's passes
    on the host), or None where numba cannot load (torch's passes then)."""
    from rltscan.scan import numba_missing

    if numba_missing() is not None:
        return None
    from rltscan.scan import cpu_fused

    return cpu_fused.block_statistics


def block_moments(x: Any, *, select: bool) -> Any:
    """``[count, mean, M2, min, max, nonfinite]`` of a 1-D tensor, float64, on its device.

    ``select=True`` (GPU) switches non-finite entries off with selects, so the host never
    waits; ``select=False`` (CPU, where asking is free) drops them only when there are any.
    """
    import torch

    n_all = x.numel()
    fin = torch.isfinite(x)
    if select:
        n = fin.sum().to(torch.float64)
        x64 = torch.where(fin, x, 0).to(torch.float64)
        mean = x64.sum() / n.clamp(min=1)
        d = torch.where(fin, x64 - mean, 0)
        lo = torch.where(fin, x, math.inf).min().to(torch.float64)
        hi = torch.where(fin, x, -math.inf).max().to(torch.float64)
        return torch.stack([n, mean, d @ d, lo, hi, n_all - n])
    good = int(fin.sum())
    if good < n_all:
        x = x[fin]
    if not good:
        return torch.tensor([0, 0.0, 0.0, math.inf, -math.inf, n_all], dtype=torch.float64)
    x64 = x.to(torch.float64)
    mean = x64.mean()
    d = x64 - mean
    lo, hi = torch.aminmax(x64)
    count = torch.tensor(float(good), dtype=torch.float64)
    return torch.stack([count, mean, d @ d, lo, hi, torch.tensor(float(n_all - good))])


# --------------------------------------------------------------------------- episodes


@dataclass(frozen=True)
class Episodes:
    """Episodes of ``rows`` sequences over a contiguous run of steps (see the module doc).

    Per row: ``ended`` (an episode ends inside), ``head_len``/``head_sum`` (the steps up
    to and including the first end; all steps when none ends), ``tail_len``/``tail_sum``
    (the steps after the last end). ``lengths`` and ``returns`` hold the episodes that
    both start and end inside (``returns`` is None when the rewards are not known)."""

    steps: int
    ended: tuple[bool, ...]
    head_len: tuple[int, ...]
    head_sum: tuple[float, ...]
    tail_len: tuple[int, ...]
    tail_sum: tuple[float, ...]
    lengths: OutputStats = field(default_factory=OutputStats)
    returns: OutputStats | None = field(default_factory=OutputStats)

    def then(self, later: Episodes) -> Episodes:
        """This segment followed in time by ``later`` (the same rows)."""
        e1, e2 = np.array(self.ended, bool), np.array(later.ended, bool)
        h1l, h1s = np.array(self.head_len), np.array(self.head_sum, np.float64)
        t1l, t1s = np.array(self.tail_len), np.array(self.tail_sum, np.float64)
        h2l, h2s = np.array(later.head_len), np.array(later.head_sum, np.float64)
        t2l, t2s = np.array(later.tail_len), np.array(later.tail_sum, np.float64)
        # an episode open at our end that `later` closes: both have an end
        joined = e1 & e2
        lengths = self.lengths.merge(later.lengths)
        returns = None
        if self.returns is not None and later.returns is not None:
            returns = self.returns.merge(later.returns)
        if joined.any():
            lengths = lengths.merge(OutputStats.of((t1l + h2l)[joined]))
            if returns is not None:
                returns = returns.merge(OutputStats.of((t1s + h2s)[joined]))
        head_len = np.where(e1, h1l, h1l + h2l)
        head_sum = np.where(e1, h1s, h1s + h2s)
        # without an end in `later`, all of it (its head) extends our tail; a row with
        # no end at all keeps a zero tail (its steps are all in the head)
        tail_len = np.where(e2, t2l, np.where(e1, t1l + h2l, 0))
        tail_sum = np.where(e2, t2s, np.where(e1, t1s + h2s, 0.0))
        return Episodes(
            steps=self.steps + later.steps,
            ended=tuple((e1 | e2).tolist()),
            head_len=tuple(head_len.tolist()),
            head_sum=tuple(head_sum.tolist()),
            tail_len=tuple(tail_len.tolist()),
            tail_sum=tuple(tail_sum.tolist()),
            lengths=lengths,
            returns=returns,
        )

    def finished(self) -> dict[str, Any]:
        """The data's start starts an episode; its end leaves one open episode per row
        that has steps after its last end. JSON-ready (the report's ``episodes``)."""
        e = np.array(self.ended, bool)
        lengths, returns = self.lengths, self.returns
        if e.any():  # each row's head is a complete episode from the data's first step
            lengths = lengths.merge(OutputStats.of(np.array(self.head_len)[e]))
            if returns is not None:
                returns = returns.merge(OutputStats.of(np.array(self.head_sum)[e]))
        open_len = np.where(e, np.array(self.tail_len), np.array(self.head_len))
        open_sum = np.where(e, np.array(self.tail_sum), np.array(self.head_sum))
        is_open = open_len > 0
        return {
            "complete": lengths.moments.count,
            "length": lengths.to_json(),
            "return": None if returns is None else returns.to_json(),
            "open": {
                "count": int(is_open.sum()),
                "steps": int(open_len[is_open].sum()),
                "return": None if returns is None else float(open_sum[is_open].sum()),
            },
        }

    def state(self) -> dict[str, Any]:
        return {
            "steps": self.steps,
            "ended": list(self.ended),
            "head_len": list(self.head_len),
            "head_sum": list(self.head_sum),
            "tail_len": list(self.tail_len),
            "tail_sum": list(self.tail_sum),
            "lengths": self.lengths.state(),
            "returns": None if self.returns is None else self.returns.state(),
        }

    @classmethod
    def from_state(cls, s: Mapping[str, Any]) -> Episodes:
        return cls(
            steps=int(s["steps"]),
            ended=tuple(bool(v) for v in s["ended"]),
            head_len=tuple(int(v) for v in s["head_len"]),
            head_sum=tuple(float(v) for v in s["head_sum"]),
            tail_len=tuple(int(v) for v in s["tail_len"]),
            tail_sum=tuple(float(v) for v in s["tail_sum"]),
            lengths=OutputStats.from_state(s["lengths"]),
            returns=None if s["returns"] is None else OutputStats.from_state(s["returns"]),
        )


def episodes_of(ends: np.ndarray, rewards: np.ndarray | None) -> Episodes:
    """The :class:`Episodes` segment of ``ends`` (bool ``[rows, T]``: an episode ends
    after this step) and ``rewards`` (the same shape, or None)."""
    ends = np.asarray(ends, dtype=bool)
    if ends.ndim == 1:
        ends = ends[None, :]
        rewards = None if rewards is None else np.asarray(rewards)[None, :]
    rows, n = ends.shape
    r = None if rewards is None else np.asarray(rewards, dtype=np.float64).reshape(rows, n)
    # cut every row into pieces after each end and at the row's last step
    flat_ends = ends.reshape(-1)
    # a row's last step closes its last piece (not an episode)
    last = np.union1d(np.flatnonzero(flat_ends), np.arange(n - 1, rows * n, n))
    starts = np.concatenate([[0], last[:-1] + 1])
    lens = last - starts + 1
    sums = None if r is None else np.add.reduceat(r.reshape(-1), starts)
    row = starts // n
    at_row_start = starts % n == 0
    closed = flat_ends[last]  # the piece ends with an episode end
    inner = closed & ~at_row_start
    ended = np.zeros(rows, bool)
    ended[row[closed]] = True
    head_len = np.full(rows, n, dtype=np.int64)  # no end: the whole row is the head
    head_sum = np.zeros(rows)
    if r is not None and not ended.all():  # a row with no end: its head is all of it
        head_sum[~ended] = r[~ended].sum(axis=1)
    # a row with an end: its first piece runs from its start to its first end (closed)
    first = closed & at_row_start
    head_len[row[first]] = lens[first]
    if sums is not None:
        head_sum[row[first]] = sums[first]
    tail = ~closed & ~at_row_start  # after the last end, up to the row's end
    tail_len = np.zeros(rows, dtype=np.int64)
    tail_sum = np.zeros(rows)
    tail_len[row[tail]] = lens[tail]
    if sums is not None:
        tail_sum[row[tail]] = sums[tail]
    return Episodes(
        steps=rows * n,
        ended=tuple(ended.tolist()),
        head_len=tuple(head_len.tolist()),
        head_sum=tuple(head_sum.tolist()),
        tail_len=tuple(tail_len.tolist()),
        tail_sum=tuple(tail_sum.tolist()),
        lengths=OutputStats.of(lens[inner]),
        returns=None if sums is None else OutputStats.of(sums[inner]),
    )


def episode_inputs(
    kwargs: Mapping[str, Any], time_dim: int, *, x_is_rewards: bool
) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``(ends [rows, T], rewards [rows, T] or None)`` from an estimator's prepared
    arguments, or None when no episode-end flag is known. The rewards are the
    ``rewards`` argument, else ``x`` when it is the rewards column (``x_is_rewards``)."""
    term, trunc = kwargs.get("terminated"), kwargs.get("truncated")
    flags = [np.asarray(f, dtype=bool) for f in (term, trunc) if isinstance(f, np.ndarray)]
    if not flags:
        return None
    ends = flags[0] if len(flags) == 1 else flags[0] | flags[1]
    rewards = kwargs.get("rewards")
    if rewards is None and x_is_rewards:
        rewards = kwargs.get("x")
    if not isinstance(rewards, np.ndarray) or rewards.shape != ends.shape:
        rewards = None
    if time_dim == 0 and ends.ndim == 2:  # [T, B] -> [B, T]
        ends = ends.T
        rewards = None if rewards is None else rewards.T
    return ends, rewards


def prepared_episode_inputs(
    prepared: Any, columns: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray | None] | None:
    """:func:`episode_inputs` of a :class:`~rltscan.io.layout.Prepared` (a file, a window,
    a shard); ``columns`` are the user's column choices (an ``x`` column given by the
    user is not the rewards)."""
    return episode_inputs(prepared.kwargs, prepared.time_dim, x_is_rewards=not columns.get("x"))


def episodes_from(prepared: Any, columns: Mapping[str, Any]) -> Episodes | None:
    """The :class:`Episodes` of a :class:`~rltscan.io.layout.Prepared` (see
    :func:`prepared_episode_inputs`)."""
    found = prepared_episode_inputs(prepared, columns)
    return None if found is None else episodes_of(*found)


class EpisodeCollector:
    """Episode segments of windows or shards arriving in any order, keyed by their first
    step; :meth:`result` joins them in time order."""

    def __init__(self) -> None:
        self._parts: dict[int, Episodes] = {}

    def add(self, start: int, part: Episodes | None) -> None:
        if part is not None:
            self._parts[start] = part

    def add_prepared(self, start: int, prepared: Any, columns: Mapping[str, Any]) -> None:
        self.add(start, episodes_from(prepared, columns))

    def add_inputs(self, start: int, found: tuple[np.ndarray, np.ndarray | None] | None) -> None:
        """The episodes of :func:`prepared_episode_inputs`' answer (None: no flags)."""
        self.add(start, None if found is None else episodes_of(*found))

    def joined(self) -> Episodes | None:
        out = None
        for start in sorted(self._parts):
            part = self._parts[start]
            out = part if out is None else out.then(part)
        return out


# --------------------------------------------------------------------------- the summary


HISTOGRAM_METHOD = (
    "exact counts per bfloat16 bucket (top 16 bits of the float32 value), re-binned into "
    f"{DISPLAY_BINS} equal bins between the exact min and max: approximate near bin edges"
)


def summary(outputs: Mapping[str, OutputStats], episodes: Episodes | None) -> dict[str, Any]:
    """The report's ``statistics`` object (JSON-ready; README "Statistics and pictures")."""
    return {
        "outputs": {name: s.to_json() for name, s in outputs.items()},
        "episodes": None if episodes is None else episodes.finished(),
        "histogram_method": HISTOGRAM_METHOD,
    }
