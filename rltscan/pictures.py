"""Pictures of distributions: one-line histograms for the terminal, PNG figures.

Pure functions over the JSON-ready histograms of :mod:`rltscan.stats` (``{"edges":
[...], "counts": [...]}``). The terminal form is a sparkline of unicode blocks (an
ASCII ramp where the output cannot encode them), narrowed to the width it is given by
merging neighbouring bins (exact: counts add). ``--plot PATH.png`` draws the same
histograms with matplotlib, an optional extra imported only inside :func:`plot`.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import Any

from rltscan.errors import ParameterError

BLOCKS = "▁▂▃▄▅▆▇█"
ASCII_RAMP = ".:-=+*#@"
PLOT_HINT = "pip install 'rltscan[plot]'"


def can_encode(encoding: str | None) -> bool:
    """Whether a stream in ``encoding`` can show the unicode blocks."""
    try:
        BLOCKS.encode(encoding or "ascii")
    except (UnicodeEncodeError, LookupError):
        return False
    return True


def narrowed(counts: Sequence[int], width: int) -> list[int]:
    """``counts`` with neighbouring bins added until at most ``width`` remain."""
    out = list(counts)
    while len(out) > max(width, 1):
        out = [sum(out[i : i + 2]) for i in range(0, len(out), 2)]
    return out


def sparkline(counts: Sequence[int], width: int, *, unicode: bool = True) -> str:
    """One character per bin: blank for an empty bin, else one of 8 heights (a bin
    with any count shows at least the lowest)."""
    ramp = BLOCKS if unicode else ASCII_RAMP
    bins = narrowed(counts, width)
    top = max(bins, default=0)
    if top <= 0:
        return ""
    chars = []
    for c in bins:
        if c <= 0:
            chars.append(" ")
        else:
            chars.append(ramp[min(len(ramp) - 1, math.ceil(c / top * len(ramp)) - 1)])
    return "".join(chars)


def number(value: float | None) -> str:
    """A short number for labels: ``-3.21``, ``1.2e+06``, ``-``."""
    if value is None:
        return "-"
    if value == int(value) and abs(value) < 1e6:
        return str(int(value))
    return format(value, ".3g")


def histogram_line(
    label: str, histogram: Mapping[str, Any], width: int, *, unicode: bool = True
) -> str:
    """``label  lo ▁▃█▅▂ hi``, at most ``width`` characters (the sparkline gets the rest,
    at least 8 characters)."""
    edges, counts = histogram.get("edges") or [], histogram.get("counts") or []
    if not counts:
        return f"{label}  (no finite values)"
    lo, hi = number(edges[0]), number(edges[-1])
    room = max(8, width - len(label) - len(lo) - len(hi) - 4)
    return f"{label}  {lo} {sparkline(counts, room, unicode=unicode)} {hi}"


def distributions(statistics: Mapping[str, Any] | None) -> list[tuple[str, Mapping[str, Any]]]:
    """``(title, histogram)`` of every distribution in a ``statistics`` object: the
    outputs, then episode lengths and returns."""
    if not statistics:
        return []
    out = [(name, s["histogram"]) for name, s in (statistics.get("outputs") or {}).items()]
    episodes = statistics.get("episodes")
    if episodes:
        out.append(("episode length", episodes["length"]["histogram"]))
        if episodes.get("return"):
            out.append(("episode return", episodes["return"]["histogram"]))
    return out


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only, no display
        import matplotlib.pyplot as plt
    except ImportError:
        raise ParameterError(
            "--plot needs matplotlib, which is not installed", f"run {PLOT_HINT}"
        ) from None
    return plt


def require() -> None:
    """Stop before any work when ``--plot`` is asked for and matplotlib is missing."""
    _pyplot()


def plot(path: str, statistics: Mapping[str, Any] | None, *, title: str) -> None:
    """One bar chart per distribution of ``statistics`` into one PNG at ``path``."""
    plt = _pyplot()
    items = distributions(statistics)
    if not items:
        raise ParameterError(
            "--plot has nothing to draw (no outputs and no episode ends are known)",
            "pass a file with episode-end flags, or drop --plot",
        )
    cols = min(2, len(items))
    rows = math.ceil(len(items) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6 * cols, 3.2 * rows), squeeze=False)
    for ax, (name, hist) in zip(axes.flat, items, strict=False):
        edges, counts = hist.get("edges") or [], hist.get("counts") or []
        if counts:
            widths = [(b - a) or 1.0 for a, b in itertools.pairwise(edges)]
            ax.bar(edges[:-1], counts, width=widths, align="edge", edgecolor="none")
        ax.set_title(name)
        ax.set_ylabel("count")
    for ax in list(axes.flat)[len(items) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, plt, path)


def plot_series(
    path: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    floor: Sequence[tuple[float, float]] = (),
    title: str,
    xlabel: str,
    ylabel: str,
) -> None:
    """Lines of ``(x, y)`` points on log-log axes, plus a dashed ``floor`` line (the
    benchmark's throughput against size, with the copy floor)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, points in series.items():
        pts = sorted(points)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
    if floor:
        pts = sorted(floor)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "k--", label="copy floor")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if series or floor:
        ax.legend(fontsize=7)
    fig.tight_layout()
    _save(fig, plt, path)


def _save(fig: Any, plt: Any, path: str) -> None:
    try:
        fig.savefig(path, dpi=110)
    except OSError as err:
        raise ParameterError(
            f"--plot could not write {path} ({err.strerror or err})",
            "pass a path in a writable directory",
        ) from None
    finally:
        plt.close(fig)
