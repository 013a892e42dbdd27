"""Float64 loops for the producer audits (tests/formats/test_audit_*.py): GAE, TD(λ) and
discounted returns of ONE flat sequence, written from docs/CONVENTIONS.md §3 with
explicit branches (independent of the scan's coefficients).

``nv[t]`` is V(s_{t+1}) of the true successor of step t: read only where the step is
not terminal; ``None`` (or NaN) there means no bootstrap value, counted as 0 (what
``--missing-bootstrap zero`` computes)."""

from __future__ import annotations

import math

import numpy as np


def _nv(x: float | None) -> float:
    return 0.0 if x is None or math.isnan(float(x)) else float(x)


def _back(rt: float, boot: float, terminal: bool, cut: bool, gamma: float, lam: float, nxt: float):
    """One step of a λ-return, backwards from the next step's ``nxt`` (``lam=1``: the
    discounted return; ``(1 - 1) * boot`` adds an exact 0, the bootstrap being finite)."""
    if terminal:
        return rt
    if cut:
        return rt + gamma * boot
    return rt + gamma * ((1 - lam) * boot + lam * nxt)


def estimates(r, v, nv, term, trunc, gamma: float, lam: float) -> dict[str, np.ndarray]:
    """``advantages``, ``value_targets``, ``lambda_returns`` and ``returns`` (the last
    with the same bootstraps); ``v`` may be None for returns only."""
    n = len(r)
    adv = np.zeros(n)
    lret = np.zeros(n)
    ret = np.zeros(n)
    a_next = g_next = d_next = 0.0
    for t in range(n - 1, -1, -1):
        terminal = bool(term[t])
        cut = terminal or bool(trunc[t]) or t == n - 1
        rt = float(r[t])
        boot = 0.0 if terminal else _nv(nv[t])
        if v is not None:
            vt = float(v[t])
            delta = rt - vt if terminal else rt + gamma * boot - vt
            a_next = delta if cut else delta + gamma * lam * a_next
            adv[t] = a_next
            lret[t] = g_next = _back(rt, boot, terminal, cut, gamma, lam, g_next)
        ret[t] = d_next = _back(rt, boot, terminal, cut, gamma, 1.0, d_next)
    out = {"returns": ret}
    if v is not None:
        out |= {"advantages": adv, "value_targets": adv + np.asarray(v, float),
                "lambda_returns": lret}  # fmt: skip
    return out


def episode_ends(lengths: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Episodes of ``lengths`` laid end to end: the first terminated, the second
    truncated, the third terminated, any after cut by the end of the data. Returns each
    episode's last row and the ``terminated`` and ``truncated`` flags."""
    n = sum(lengths)
    ends = np.cumsum(lengths) - 1
    term = np.zeros(n, bool)
    trunc = np.zeros(n, bool)
    term[ends[[0, 2]]] = True
    trunc[ends[1]] = True
    return ends, term, trunc


def one_line_error(stderr: str) -> str:
    """The refusal's one line (``error: ...``), checked to be the only line and no traceback."""
    lines = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    return lines[0]
