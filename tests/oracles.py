"""Textbook oracles: one plain loop per estimator, written from the papers (docs/CONVENTIONS.md §3).

These loops are deliberately *not* written in terms of the scan coefficients
``(a_t, b_t)``: each one follows the paper's own definition with explicit branches
on ``terminated``, ``truncated`` and the window end, so a wrong coefficient in the
library cannot hide behind a correct scan. Most estimators have two forms:

- a step-by-step form (the recursive definition of the paper), O(T), used on large
  random inputs;
- a direct form (sum over future steps, or the lambda-mixture of n-step returns),
  O(T * episode length), used on small inputs and cross-checked against the first.

Every function takes ONE sequence as plain Python sequences (lists, 1-D numpy
arrays) and uses plain Python arithmetic, so it runs in float64 or, for the spec
check, in exact ``fractions.Fraction``. ``per_row`` applies a 1-D oracle to each
row of ``[B, T]`` arrays.

Conventions (docs/CONVENTIONS.md §1): flags describe the END of step t. A step is the
last of its episode *segment* ("cut") when it terminated, was truncated, or is the
last step of the window (D3). Terminated wins over truncated (D2).

Sources: Schulman et al. 2016 (GAE, eq. 16); Sutton & Barto 2018 §12.1 (lambda
returns), §12.2 (accumulating traces); Espeholt et al. 2018 (IMPALA, eq. 1 and
Remark 1); Munos et al. 2016 (Retrace, eq. 4 / the recursive Q_ret form).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Num = Any  # float or fractions.Fraction


class MissingBootstrap(Exception):
    """A step needs V(s_{t+1}) and no input form supplies it."""


# Public function name -> the oracle ``tests/cases.generic_case`` calls for one sequence:
# ``oracle(**row_arrays, [nv=...,] **params) -> {output: values}``. An estimator added as
# one module registers its oracle here (``@oracle("name")``); the hand-written case
# builders of the first seven call their oracles directly.
ORACLES: dict[str, Callable[..., dict[str, Any]]] = {}


def oracle(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        ORACLES[name] = fn
        return fn

    return register


# ---------------------------------------------------------------------------
# Section 1.3: the effective next-state value, built by explicit branches.
# ---------------------------------------------------------------------------


def next_state_values(
    terminated: Sequence[bool],
    truncated: Sequence[bool] | None = None,
    *,
    values: Sequence[Num] | None = None,
    next_values: Sequence[Num] | None = None,
    bootstrap_values: Sequence[Num] | None = None,
    last_value: Num | None = None,
    missing_bootstrap: str = "error",
) -> list[Num | None]:
    """V(s_{t+1}) for the true successor of each step; ``None`` where never read.

    - terminated step: the successor is terminal, nothing is read (None);
    - truncated step, or the last step of the window: a bootstrap is needed; it comes
      from ``next_values``, ``bootstrap_values`` or (window end only) ``last_value``;
    - otherwise the successor is the next row: ``next_values[t]`` or ``values[t+1]``.
    """
    n = len(terminated)
    trunc = [False] * n if truncated is None else [bool(x) for x in truncated]
    out: list[Num | None] = []
    for t in range(n):
        if terminated[t]:
            out.append(None)
            continue
        needs_bootstrap = trunc[t] or t == n - 1
        if not needs_bootstrap:
            out.append(next_values[t] if next_values is not None else values[t + 1])
        elif next_values is not None:
            out.append(next_values[t])
        elif bootstrap_values is not None:
            out.append(bootstrap_values[t])
        elif last_value is not None and t == n - 1:
            out.append(last_value)
        elif missing_bootstrap == "zero":
            out.append(0)
        else:
            raise MissingBootstrap(f"step {t} needs a bootstrap value")
    return out


def _ends(terminated: Sequence[bool], truncated: Sequence[bool] | None) -> list[bool]:
    """True where the step is the last of its segment (done or window end)."""
    n = len(terminated)
    trunc = [False] * n if truncated is None else truncated
    return [bool(terminated[t]) or bool(trunc[t]) or t == n - 1 for t in range(n)]


def _segment_end(ends: list[bool], t: int) -> int:
    k = t
    while not ends[k]:
        k += 1
    return k


# ---------------------------------------------------------------------------
# 3.1 GAE
# ---------------------------------------------------------------------------


def td_errors(rewards, values, nv, terminated, gamma) -> list[Num]:
    """delta_t = r_t + gamma * V(s_{t+1}) - V(s_t), with V(terminal) = 0."""
    out = []
    for t in range(len(rewards)):
        if terminated[t]:
            out.append(rewards[t] - values[t])
        else:
            out.append(rewards[t] + gamma * nv[t] - values[t])
    return out


def gae(rewards, values, nv, terminated, truncated=None, *, gamma, lam) -> dict[str, list]:
    """Step-by-step GAE: A_t = delta_t + gamma*lam*A_{t+1} inside an episode segment."""
    n = len(rewards)
    delta = td_errors(rewards, values, nv, terminated, gamma)
    ends = _ends(terminated, truncated)
    adv: list[Num] = [0.0] * n
    for t in reversed(range(n)):
        if ends[t]:
            adv[t] = delta[t]  # no credit flows in from beyond a cut
        else:
            adv[t] = delta[t] + gamma * lam * adv[t + 1]
    return {"advantages": adv, "value_targets": [adv[t] + values[t] for t in range(n)]}


def gae_sum(rewards, values, nv, terminated, truncated=None, *, gamma, lam) -> dict[str, list]:
    """Direct GAE: A_t = sum_{k=t..K} (gamma*lam)^(k-t) delta_k, K = segment end."""
    n = len(rewards)
    delta = td_errors(rewards, values, nv, terminated, gamma)
    ends = _ends(terminated, truncated)
    adv = []
    for t in range(n):
        total, weight = 0, 1
        for k in range(t, _segment_end(ends, t) + 1):
            total = total + weight * delta[k]
            weight = weight * gamma * lam
        adv.append(total)
    return {"advantages": adv, "value_targets": [adv[t] + values[t] for t in range(n)]}


# ---------------------------------------------------------------------------
# 3.3 Discounted returns
# ---------------------------------------------------------------------------


def discounted_returns(rewards, nv, terminated, truncated=None, *, gamma) -> list[Num]:
    """Step-by-step reward-to-go: G_t = r_t + gamma * G_{t+1}, bootstrapped at cuts."""
    n = len(rewards)
    ends = _ends(terminated, truncated)
    out: list[Num] = [0.0] * n
    for t in reversed(range(n)):
        if terminated[t]:
            out[t] = rewards[t]
        elif ends[t]:
            out[t] = rewards[t] + gamma * nv[t]
        else:
            out[t] = rewards[t] + gamma * out[t + 1]
    return out


def discounted_returns_sum(rewards, nv, terminated, truncated=None, *, gamma) -> list[Num]:
    """Direct form: sum_{k=t..K} gamma^(k-t) r_k (+ gamma^(K-t+1) V(s_{K+1}) if not terminal)."""
    n = len(rewards)
    ends = _ends(terminated, truncated)
    out = []
    for t in range(n):
        end = _segment_end(ends, t)
        total, weight = 0, 1
        for k in range(t, end + 1):
            total = total + weight * rewards[k]
            weight = weight * gamma
        if not terminated[end]:
            total = total + weight * nv[end]
        out.append(total)
    return out


# ---------------------------------------------------------------------------
# 3.2 TD(lambda)
# ---------------------------------------------------------------------------


def td_lambda(rewards, nv, terminated, truncated=None, *, gamma, lam) -> list[Num]:
    """Recursive lambda-return (Sutton & Barto eq. 12.18 form, with bootstraps at cuts).

    G_t = r_t + gamma * ((1 - lam) * V(s_{t+1}) + lam * G_{t+1})   inside a segment
    G_t = r_t + gamma * V(s_{t+1})                                  truncation / window end
    G_t = r_t                                                       termination
    """
    n = len(rewards)
    ends = _ends(terminated, truncated)
    out: list[Num] = [0.0] * n
    for t in reversed(range(n)):
        if terminated[t]:
            out[t] = rewards[t]
        elif ends[t]:
            out[t] = rewards[t] + gamma * nv[t]
        else:
            out[t] = rewards[t] + gamma * ((1 - lam) * nv[t] + lam * out[t + 1])
    return out


def td_lambda_mixture(rewards, nv, terminated, truncated=None, *, gamma, lam) -> list[Num]:
    """Definition: (1-lam) sum_n lam^(n-1) G_t^(n), the last n-step return taking the rest.

    G_t^(n) = r_t + ... + gamma^(n-1) r_{t+n-1} + gamma^n V(s_{t+n}); every n-step
    return stops at the segment end K and bootstraps there (0 after a termination).
    """
    n_steps = len(rewards)
    ends = _ends(terminated, truncated)
    out = []
    for t in range(n_steps):
        end = _segment_end(ends, t)
        longest = end - t + 1  # the n-step return with n = longest is the full return
        total = 0
        rsum, disc = 0, 1
        for n in range(1, longest + 1):
            k = t + n - 1
            rsum = rsum + disc * rewards[k]
            disc = disc * gamma
            if n < longest:
                g_n = rsum + disc * nv[k]
                total = total + (1 - lam) * lam ** (n - 1) * g_n
            else:
                g_full = rsum if terminated[k] else rsum + disc * nv[k]
                total = total + lam ** (n - 1) * g_full
        out.append(total)
    return out


# ---------------------------------------------------------------------------
# 3.4 V-trace
# ---------------------------------------------------------------------------


def ratios_from_logp(logp_target, logp_behavior) -> list[float]:
    """pi/mu per step in float64 (exp(-inf) = 0 is a legal ratio)."""
    return [
        math.exp(float(lt) - float(lb)) for lt, lb in zip(logp_target, logp_behavior, strict=True)
    ]


def _vtrace_pg(rewards, values, nv, ratios, terminated, ends, vs, gamma, pg_clip) -> list:
    """V-trace's policy-gradient advantages from its targets ``vs`` (the recursive form's;
    :func:`vtrace_sum` writes them its own way):
    rho_s (r_s + gamma vs_{s+1} - V(x_s)) inside an episode, the raw next-state value at
    truncations / the window end (D7), no bootstrap at a termination."""
    pg = []
    for s in range(len(rewards)):
        if terminated[s]:
            target = rewards[s]
        elif ends[s]:
            target = rewards[s] + gamma * nv[s]
        else:
            target = rewards[s] + gamma * vs[s + 1]
        pg.append(min(pg_clip, ratios[s]) * (target - values[s]))
    return pg


def vtrace(
    rewards,
    values,
    nv,
    ratios,
    terminated,
    truncated=None,
    *,
    gamma,
    lam=1.0,
    rho_clip=1.0,
    c_clip=1.0,
    pg_rho_clip=None,
) -> dict[str, list]:
    """IMPALA V-trace, Remark 1: vs_s - V(x_s) = delta_s + gamma c_s (vs_{s+1} - V(x_{s+1})).

    Beyond a cut the target is the bootstrap itself (vs_{s+1} - V = 0): it enters once,
    inside delta at the cut step. pg uses vs_{s+1} inside an episode and the raw
    next-state value at truncations / the window end (D7).
    """
    n = len(rewards)
    pg_clip = rho_clip if pg_rho_clip is None else pg_rho_clip
    ends = _ends(terminated, truncated)
    vs: list[Num] = [0.0] * n
    for s in reversed(range(n)):
        rho = min(rho_clip, ratios[s])
        c = lam * min(c_clip, ratios[s])
        if terminated[s]:
            delta = rho * (rewards[s] - values[s])
        else:
            delta = rho * (rewards[s] + gamma * nv[s] - values[s])
        if ends[s]:
            vs[s] = values[s] + delta
        else:
            vs[s] = values[s] + delta + gamma * c * (vs[s + 1] - values[s + 1])
    pg = _vtrace_pg(rewards, values, nv, ratios, terminated, ends, vs, gamma, pg_clip)
    return {"vs": vs, "pg_advantages": pg}


def vtrace_sum(
    rewards,
    values,
    nv,
    ratios,
    terminated,
    truncated=None,
    *,
    gamma,
    lam=1.0,
    rho_clip=1.0,
    c_clip=1.0,
    pg_rho_clip=None,
) -> dict[str, list]:
    """IMPALA eq. (1): vs_s = V(x_s) + sum_{t=s..K} gamma^(t-s) (prod_{i=s..t-1} c_i) delta_t."""
    n = len(rewards)
    pg_clip = rho_clip if pg_rho_clip is None else pg_rho_clip
    ends = _ends(terminated, truncated)
    delta = []
    for t in range(n):
        rho = min(rho_clip, ratios[t])
        nxt = 0 if terminated[t] else gamma * nv[t]
        delta.append(rho * (rewards[t] + nxt - values[t]))
    vs = []
    for s in range(n):
        total, weight = 0, 1
        for t in range(s, _segment_end(ends, s) + 1):
            total = total + weight * delta[t]
            weight = weight * gamma * lam * min(c_clip, ratios[t])
        vs.append(values[s] + total)
    # IMPALA eq. (4) written from the successor's value, independently of _vtrace_pg (the
    # recursive form's): v_{s+1} is vs_{s+1} inside an episode, the raw next-state value
    # where it ends by truncation, 0 where it terminates
    successor = [0.0 if terminated[s] else nv[s] if ends[s] else vs[s + 1] for s in range(n)]
    pg = [
        min(pg_clip, ratios[s]) * (rewards[s] + gamma * successor[s] - values[s]) for s in range(n)
    ]
    return {"vs": vs, "pg_advantages": pg}


# ---------------------------------------------------------------------------
# 3.5 Retrace(lambda)
# ---------------------------------------------------------------------------


def expected_q(probs: Sequence[Sequence[Num]], q: Sequence[Sequence[Num]]) -> list[Num]:
    """E_{a~pi(.|s)} Q(s, a) per row of [T, A] arrays."""
    out = []
    for p_row, q_row in zip(probs, q, strict=True):
        total = 0
        for p, v in zip(p_row, q_row, strict=True):
            total = total + p * v
        out.append(total)
    return out


def retrace(
    rewards,
    q,
    ev_next,
    ratios,
    terminated,
    truncated=None,
    *,
    gamma,
    lam=1.0,
    c_clip=1.0,
    v_pi=None,
) -> dict[str, list]:
    """Munos et al. 2016, recursive form of Q_ret:

    Q_ret_t = r_t + gamma * (E_pi Q(s_{t+1}, .) + c_{t+1} (Q_ret_{t+1} - Q(s_{t+1}, a_{t+1})))
    with c_{t+1} = lam * min(c_clip, pi/mu at t+1); at a cut the next row is another
    episode (or absent), so Q_ret_t = r_t + gamma * E_pi Q(s_{t+1}, .) (truncation,
    window end) or r_t (termination).
    """
    n = len(rewards)
    ends = _ends(terminated, truncated)
    out: list[Num] = [0.0] * n
    for t in reversed(range(n)):
        if terminated[t]:
            out[t] = rewards[t]
        elif ends[t]:
            out[t] = rewards[t] + gamma * ev_next[t]
        else:
            c_next = lam * min(c_clip, ratios[t + 1])
            out[t] = rewards[t] + gamma * (ev_next[t] + c_next * (out[t + 1] - q[t + 1]))
    res = {"retrace_targets": out}
    if v_pi is not None:
        res["advantages"] = [out[t] - v_pi[t] for t in range(n)]
    return res


def retrace_sum(
    rewards,
    q,
    ev_next,
    ratios,
    terminated,
    truncated=None,
    *,
    gamma,
    lam=1.0,
    c_clip=1.0,
    v_pi=None,
) -> dict[str, list]:
    """Munos et al. 2016 eq. (4) (the operator applied to Q, evaluated on the sample path):

    Q_ret_t = Q(s_t, a_t) + sum_{k=t..K} gamma^(k-t) (prod_{i=t+1..k} c_i) delta_k,
    delta_k = r_k + gamma * E_pi Q(s_{k+1}, .) - Q(s_k, a_k)  (no next term if terminal).
    """
    n = len(rewards)
    ends = _ends(terminated, truncated)
    delta = []
    for k in range(n):
        nxt = 0 if terminated[k] else gamma * ev_next[k]
        delta.append(rewards[k] + nxt - q[k])
    out = []
    for t in range(n):
        total, weight = 0, 1
        for k in range(t, _segment_end(ends, t) + 1):
            if k > t:
                weight = weight * gamma * lam * min(c_clip, ratios[k])
            total = total + weight * delta[k]
        out.append(q[t] + total)
    res = {"retrace_targets": out}
    if v_pi is not None:
        res["advantages"] = [out[t] - v_pi[t] for t in range(n)]
    return res


# ---------------------------------------------------------------------------
# 3.6 / 3.7 forward estimators
# ---------------------------------------------------------------------------


def _episode_starts(terminated, truncated, is_first=None) -> list[bool]:
    """True where step t begins a new episode: the previous step ended one (D1)."""
    n = len(terminated) if terminated is not None else len(is_first)
    if is_first is not None:
        return [bool(x) for x in is_first]
    trunc = [False] * n if truncated is None else truncated
    return [t > 0 and (bool(terminated[t - 1]) or bool(trunc[t - 1])) for t in range(n)]


def eligibility_traces(x, terminated, truncated=None, *, gamma, lam, init=None) -> np.ndarray:
    """Accumulating trace (Sutton & Barto §12.2): z_t = gamma*lam*z_{t-1} + x_t, reset at starts.

    ``x`` is [T] or [T, D]; ``init`` (scalar or [D]) is z_{-1}, decayed into step 0.
    """
    arr = np.asarray(x, dtype=np.float64)
    starts = _episode_starts(terminated, truncated)
    prev = np.zeros(arr.shape[1:]) + (0.0 if init is None else np.asarray(init, dtype=np.float64))
    out = np.empty_like(arr)
    for t in range(arr.shape[0]):
        if starts[t]:  # noqa: SIM108 (explicit branch on purpose: this is the oracle)
            z = arr[t].copy()  # a fresh episode starts with an empty trace
        else:
            z = gamma * lam * prev + arr[t]
        out[t] = z
        prev = z
    return out


def prefix_sum(x, terminated=None, truncated=None, *, is_first=None, init=None) -> np.ndarray:
    """Inclusive episodic running sum: S_t = x_t + S_{t-1}, restarting at episode starts."""
    arr = np.asarray(x, dtype=np.float64)
    n = arr.shape[0]
    if terminated is None and is_first is None:
        starts = [False] * n
    else:
        term = [False] * n if terminated is None else terminated
        starts = _episode_starts(term, truncated, is_first)
    prev = np.zeros(arr.shape[1:]) + (0.0 if init is None else np.asarray(init, dtype=np.float64))
    out = np.empty_like(arr)
    for t in range(n):
        s = arr[t].copy() if starts[t] else prev + arr[t]
        out[t] = s
        prev = s
    return out


# ---------------------------------------------------------------------------
# Return-to-go (Decision Transformer, Chen et al. 2021 §3)
# ---------------------------------------------------------------------------


@oracle("return_to_go")
def return_to_go(rewards, terminated, truncated=None, *, scale=1) -> dict[str, list]:
    """R_t = (r_t + r_{t+1} + ... + r_end) / scale, end = the last step of t's episode."""
    ends = _ends(terminated, truncated)
    out = [0.0] * len(rewards)
    total = 0.0  # r_t + ... + r_end, summed from the episode's end (linear, not quadratic)
    for t in reversed(range(len(rewards))):
        total = rewards[t] + (0.0 if ends[t] else total)
        out[t] = total / scale
    return {"returns_to_go": out}


# ---------------------------------------------------------------------------
# Batching helper
# ---------------------------------------------------------------------------


def per_row(
    fn: Callable[..., Any], *row_args: Any, row_kwargs: dict | None = None, **kwargs: Any
) -> Any:
    """Apply a one-sequence oracle to each row of [B, T] arrays (None args pass through).

    ``row_kwargs`` are keyword arguments that are split by row too (e.g. ``v_pi``,
    per-row ``init``). Returns a dict of [B, T] float64 arrays (or one array).
    """
    row_kwargs = row_kwargs or {}
    batch = next(len(a) for a in row_args if a is not None)
    rows = []
    for i in range(batch):
        args = [None if a is None else a[i] for a in row_args]
        kws = {k: (None if v is None else v[i]) for k, v in row_kwargs.items()}
        rows.append(fn(*args, **kws, **kwargs))
    if isinstance(rows[0], dict):
        return {k: np.array([np.asarray(r[k], dtype=np.float64) for r in rows]) for k in rows[0]}
    return np.array([np.asarray(r, dtype=np.float64) for r in rows])
