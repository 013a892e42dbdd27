"""Random test cases for the estimators: inputs for ``rltscan`` plus the oracle's answer.

A ``Case`` holds float64 numpy inputs in ``[B, T]`` (or flat ``[T]``) layout, the
scalar parameters, and the expected outputs from ``tests/oracles.py``. ``run`` feeds
it to the library in a chosen container (numpy / torch), dtype and layout
(batch-major, time-major) and returns the outputs back in ``[B, T]`` float64.

Inputs are quantised to the requested dtype BEFORE the oracle runs, so an fp16 case
compares the library against the exact float64 answer for the fp16 inputs it got.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import oracles
import torch

import rltscan
from rltscan.estimators import DECLARATIONS

# Every declared estimator, by public function name, in the CLI's order: a new module is
# tested as soon as it exists (its cases come from ``generic_case`` and its oracle in
# ``oracles.ORACLES`` unless a hand-written branch of ``make_case`` knows it better).
DECLARED = {d.function_name: d for d in DECLARATIONS.values()}
ESTIMATORS = tuple(DECLARED)
BACKWARD = tuple(n for n, d in DECLARED.items() if d.reverse)
FORMS = ("next", "boot", "last")  # the three bootstrap input forms of docs/CONVENTIONS.md §1.2

DTYPES = {
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "f64": torch.float64,
}
FLAG_KEYS = ("terminated", "truncated", "is_first")
PER_ROW_KEYS = ("last_value", "init")  # [B] arrays: one value per sequence, no time axis


@dataclasses.dataclass
class Case:
    name: str
    pos: list[str]  # names of positional array arguments, in order
    arrays: dict[str, Any]  # float64 / bool numpy arrays, [B, T] or [T] (features last)
    params: dict[str, Any]  # scalars and non-array keywords
    expected: dict[str, np.ndarray]


def quantize(x: np.ndarray, dtype: torch.dtype) -> np.ndarray:
    """Round float64 values to ``dtype`` and back (NaN/inf survive)."""
    return torch.as_tensor(np.asarray(x, dtype=np.float64)).to(dtype).double().numpy()


def random_flags(
    rng: np.random.Generator, shape: tuple[int, ...], p_done: float, *, both: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """done ~ Bernoulli(p); terminated is a random subset of done, the rest truncated.

    With ``both``, a random part of the terminated steps also carries ``truncated``
    (Gymnasium allows it; terminated wins, D2).
    """
    done = rng.random(shape) < p_done
    terminated = done & (rng.random(shape) < 0.5)
    truncated = done & ~terminated
    if both:
        truncated |= terminated & (rng.random(shape) < 0.5)
    return terminated, truncated


def _rows(x: np.ndarray | None) -> np.ndarray | None:
    """[T] -> [1, T] for the per-row oracle."""
    if x is None:
        return None
    return x[None] if np.ndim(x) == 1 else x


def _unrows(d: dict[str, np.ndarray], flat: bool) -> dict[str, np.ndarray]:
    return {k: (v[0] if flat else v) for k, v in d.items()}


def _nv_rows(
    term,
    trunc,
    *,
    values=None,
    next_values=None,
    bootstrap_values=None,
    last_value=None,
    missing="error",
):
    """Per-row ``oracles.next_state_values`` (last_value is one number per row)."""
    out = []
    for i in range(len(term)):
        nv = oracles.next_state_values(
            term[i],
            trunc[i],
            values=None if values is None else values[i],
            next_values=None if next_values is None else next_values[i],
            bootstrap_values=None if bootstrap_values is None else bootstrap_values[i],
            last_value=None if last_value is None else last_value[i],
            missing_bootstrap=missing,
        )
        out.append(nv)
    return out


def _bootstrap_inputs(rng, form, term, trunc, values, dtype):
    """Arrays for one bootstrap form. Ignored slots hold random finite garbage."""
    shape = term.shape
    rows = _rows(term).shape[0]
    kw: dict[str, Any] = {}
    if form == "next":
        kw["next_values"] = quantize(rng.normal(size=shape), dtype)
    elif form == "boot":
        kw["bootstrap_values"] = quantize(rng.normal(size=shape), dtype)
    elif form == "last":
        lv = quantize(rng.normal(size=rows), dtype)
        kw["last_value"] = float(lv[0]) if term.ndim == 1 else lv
    elif form == "zero":
        kw["missing_bootstrap"] = "zero"
    else:
        raise ValueError(form)
    last = kw.get("last_value")
    nv = _nv_rows(
        _rows(term),
        _rows(trunc),
        values=_rows(values),
        next_values=_rows(kw.get("next_values")),
        bootstrap_values=_rows(kw.get("bootstrap_values")),
        last_value=None if last is None else np.atleast_1d(last),
        missing="zero" if form == "zero" else "error",
    )
    return kw, nv


def make_case(
    name: str,
    rng: np.random.Generator,
    *,
    B: int | None,
    T: int,
    p_done: float,
    form: str = "boot",
    dtype: torch.dtype = torch.float64,
    gamma: float = 0.97,
    lam: float = 0.9,
    both: bool = True,
    D: int | None = None,
    **extra: Any,
) -> Case:
    """A random case for estimator ``name``; ``B=None`` means one flat sequence.

    ``form`` picks the bootstrap input form ("next", "boot", "last", "zero"); with
    "last", interior truncations are removed (they would need a bootstrap).
    ``extra`` overrides estimator parameters (rho_clip, c_clip, pg_rho_clip, init, ...).
    """
    shape = (T,) if B is None else (B, T)
    term, trunc = random_flags(rng, shape, p_done, both=both)
    if form == "last":
        trunc = np.zeros(shape, dtype=bool)
    q = lambda x: quantize(x, dtype)  # noqa: E731
    rewards = q(rng.normal(size=shape))
    values = q(rng.normal(size=shape))
    arrays: dict[str, Any] = {"terminated": term, "truncated": trunc}
    params: dict[str, Any] = {}
    R = _rows

    if name in ("gae", "td_lambda", "discounted_returns", "vtrace"):
        kw, nv = _bootstrap_inputs(rng, form, term, trunc, values, dtype)
        for k, v in kw.items():
            (arrays if isinstance(v, np.ndarray) else params)[k] = v
        if name == "discounted_returns" and form == "zero":
            params.pop("missing_bootstrap")  # "zero" is its default
        arrays["rewards"] = rewards
        if name in ("gae", "vtrace") or form != "next":
            arrays["values"] = values
        params["gamma"] = gamma
        if name != "discounted_returns":
            params["lam"] = lam
        rows = []
        for i in range(R(term).shape[0]):
            args = (R(term)[i], R(trunc)[i])
            r, v = R(rewards)[i], R(values)[i]
            if name == "gae":
                rows.append(oracles.gae(r, v, nv[i], *args, gamma=gamma, lam=lam))
            elif name == "td_lambda":
                g = oracles.td_lambda(r, nv[i], *args, gamma=gamma, lam=lam)
                rows.append({"lambda_returns": g})
            elif name == "discounted_returns":
                rows.append({"returns": oracles.discounted_returns(r, nv[i], *args, gamma=gamma)})
        if name == "vtrace":
            logp_b = q(np.log(rng.uniform(0.05, 1.0, size=shape)))
            logp_t = q(logp_b + rng.normal(scale=0.8, size=shape))
            arrays["logp_target"], arrays["logp_behavior"] = logp_t, logp_b
            vparams = {"rho_clip": 1.0, "c_clip": 1.0, "pg_rho_clip": None}
            vparams.update({k: extra.pop(k) for k in list(extra) if k in vparams})
            params.update({k: v for k, v in vparams.items() if v is not None})
            for i in range(R(term).shape[0]):
                ratios = oracles.ratios_from_logp(R(logp_t)[i], R(logp_b)[i])
                rows.append(
                    oracles.vtrace(
                        R(rewards)[i],
                        R(values)[i],
                        nv[i],
                        ratios,
                        R(term)[i],
                        R(trunc)[i],
                        gamma=gamma,
                        lam=lam,
                        **vparams,
                    )
                )
        pos = ["rewards", "values"] if name in ("gae", "vtrace") else ["rewards"]
        expected = _stack(rows, B is None)

    elif name == "retrace":
        A = 3
        probs = rng.dirichlet(np.ones(A), size=shape)
        next_q = rng.normal(size=(*shape, A))
        ev = q(np.einsum("...a,...a->...", probs, next_q))
        ev = np.where(term, np.nan if extra.pop("nan_garbage", False) else ev, ev)
        logp_b = q(np.log(rng.uniform(0.05, 1.0, size=shape)))
        logp_t = q(logp_b + rng.normal(scale=0.8, size=shape))
        v_pi = q(rng.normal(size=shape))
        arrays.update(
            rewards=rewards,
            q_values=values,
            next_expected_q=ev,
            logp_target=logp_t,
            logp_behavior=logp_b,
            v_pi=v_pi,
        )
        c_clip = extra.pop("c_clip", 1.0)
        params.update(gamma=gamma, lam=lam, c_clip=c_clip)
        rows = []
        for i in range(R(term).shape[0]):
            ratios = oracles.ratios_from_logp(R(logp_t)[i], R(logp_b)[i])
            rows.append(
                oracles.retrace(
                    R(rewards)[i],
                    R(values)[i],
                    R(ev)[i],
                    ratios,
                    R(term)[i],
                    R(trunc)[i],
                    gamma=gamma,
                    lam=lam,
                    c_clip=c_clip,
                    v_pi=R(v_pi)[i],
                )
            )
        pos = ["rewards", "q_values"]
        expected = _stack(rows, B is None)

    elif name == "eligibility_traces":
        xshape = shape if D is None else (*shape, D)
        x = q(rng.normal(size=xshape))
        init = extra.pop("init", None)
        arrays["x"] = x
        params.update(gamma=gamma, lam=lam)
        if init is not None:
            params["init"] = init
        out = [
            oracles.eligibility_traces(xi, ti, tri, gamma=gamma, lam=lam, init=init)
            for xi, ti, tri in zip(_rows_x(x, B), R(term), R(trunc), strict=True)
        ]
        pos = ["x"]
        expected = {"eligibility_traces": out[0] if B is None else np.stack(out)}

    elif name == "prefix_sum":
        mode = extra.pop("mode", "flags")
        xshape = shape if D is None else (*shape, D)
        x = q(rng.normal(size=xshape))
        init = extra.pop("init", None)
        arrays = {"x": x}
        if init is not None:
            params["init"] = init
        if mode == "flags":
            arrays.update(terminated=term, truncated=trunc)
            out = [
                oracles.prefix_sum(xi, ti, tri, init=init)
                for xi, ti, tri in zip(_rows_x(x, B), R(term), R(trunc), strict=True)
            ]
        elif mode == "is_first":
            first = rng.random(shape) < p_done
            arrays["is_first"] = first
            out = [
                oracles.prefix_sum(xi, is_first=fi, init=init)
                for xi, fi in zip(_rows_x(x, B), R(first), strict=True)
            ]
        else:  # no flags at all: a plain cumulative sum per row
            out = [oracles.prefix_sum(xi, init=init) for xi in _rows_x(x, B)]
        pos = ["x"]
        expected = {"prefix_sums": out[0] if B is None else np.stack(out)}
    else:
        return generic_case(name, rng, shape, term, trunc, form=form, dtype=dtype, D=D,
                            params={"gamma": gamma, "lam": lam, **extra})  # fmt: skip
    if extra:
        raise TypeError(f"unused case parameters {sorted(extra)}")
    return Case(name, pos, arrays, params, expected)


def generic_case(
    name: str,
    rng: np.random.Generator,
    shape: tuple[int, ...],
    term: np.ndarray,
    trunc: np.ndarray,
    *,
    form: str,
    dtype: torch.dtype,
    D: int | None,
    params: dict[str, Any],
) -> Case:
    """A case built from the estimator's declaration: its required float inputs random,
    its flags, the bootstrap form asked for (when it reads V(s_t+1)), and its declared
    parameters (``params`` overrides those it declares, e.g. γ and λ; the rest are the
    defaults). The expected outputs come from ``oracles.ORACLES[name]``, called per
    sequence with the row's arrays, ``nv`` (when it bootstraps) and the parameters."""
    d = DECLARED[name]
    flat = len(shape) == 1
    oracle = oracles.ORACLES[name]  # KeyError: add the estimator's oracle to tests/oracles.py
    arrays: dict[str, Any] = {k: v for k, v in (("terminated", term), ("truncated", trunc))
                              if k in d.inputs}  # fmt: skip
    for n in d.float_inputs:
        if n in d.required or (n == "values" and form != "next"):
            wide = d.features and n == d.inputs[0] and D is not None
            arrays[n] = quantize(rng.normal(size=(*shape, D) if wide else shape), dtype)
    kw: dict[str, Any] = {}
    nv = None
    if any(i in d.inputs for i in ("next_values", "bootstrap_values", "last_value")):
        kw, nv = _bootstrap_inputs(rng, form, term, trunc, arrays.get("values"), dtype)
        if kw.get("missing_bootstrap") == d.missing_bootstrap:
            kw.pop("missing_bootstrap")
    values = {p.name: params.get(p.name, p.default) for p in d.parameters}
    values = {k: v for k, v in values.items() if v is not None}
    case_params = {**values, **{k: v for k, v in kw.items() if not isinstance(v, np.ndarray)}}
    arrays.update({k: v for k, v in kw.items() if isinstance(v, np.ndarray)})
    rows = []
    for i in range(1 if flat else shape[0]):
        row = {k: (v if flat else v[i]) for k, v in arrays.items()}
        rows.append(oracle(**row, **({"nv": nv[i]} if nv is not None else {}), **values))
    pos = [n for n in d.signature[: d.positional] if n in arrays]
    return Case(name, pos, arrays, case_params, _stack(rows, flat))


def _rows_x(x: np.ndarray, B: int | None) -> list[np.ndarray]:
    return [x] if B is None else list(x)


def _stack(rows: list[dict], flat: bool) -> dict[str, np.ndarray]:
    out = {k: np.array([np.asarray(r[k], dtype=np.float64) for r in rows]) for k in rows[0]}
    return _unrows(out, flat)


# ---------------------------------------------------------------------------
# Running a case through the library
# ---------------------------------------------------------------------------


def convert(x: Any, *, container: str, dtype: torch.dtype, flag: bool = False) -> Any:
    """A float64/bool numpy array as the library input (numpy or torch, given dtype)."""
    if not isinstance(x, np.ndarray):
        return x
    if flag:
        t = torch.as_tensor(x.astype(bool))
        return t if container == "torch" else t.numpy()
    t = torch.as_tensor(x).to(dtype)
    if container == "torch":
        return t
    if dtype == torch.bfloat16:  # numpy has no bfloat16: pass a tensor anyway
        return t
    return t.numpy()


def to_time_major(x: Any) -> Any:
    """[B, T, ...] -> [T, B, ...] as a non-contiguous view (strides, no copy)."""
    if isinstance(x, torch.Tensor):
        return x.transpose(0, 1)
    return np.swapaxes(x, 0, 1)


def run(
    case: Case,
    backend: str,
    *,
    dtype: torch.dtype = torch.float64,
    container: str = "torch",
    layout: str = "bt",
    validate: bool = True,
) -> dict[str, np.ndarray]:
    """Call the library on ``case``; outputs as float64 numpy in the case's own layout.

    ``layout``: "bt" passes arrays as they are (time last); "tb" passes [T, B]
    transposed views with ``time_dim=0`` and transposes the outputs back.
    """
    kwargs: dict[str, Any] = {}
    args: list[Any] = []
    for k, v in case.arrays.items():
        conv = convert(v, container=container, dtype=dtype, flag=k in FLAG_KEYS)
        if layout == "tb" and isinstance(v, np.ndarray) and k not in PER_ROW_KEYS:
            conv = to_time_major(conv)
        if k in case.pos:
            continue
        kwargs[k] = conv
    for k in case.pos:
        conv = convert(case.arrays[k], container=container, dtype=dtype)
        args.append(to_time_major(conv) if layout == "tb" else conv)
    params = dict(case.params)
    # said, not defaulted: the grid has T = 1 and T = B, which time_dim=None refuses
    params["time_dim"] = 0 if layout == "tb" else -1
    res = getattr(rltscan, case.name)(*args, **kwargs, **params, backend=backend, validate=validate)
    out = {}
    for k in case.expected:
        got = res[k]
        if container == "torch" or dtype == torch.bfloat16:
            assert isinstance(got, torch.Tensor), f"{k}: torch in, {type(got).__name__} out"
            arr = got.detach().to(torch.float64).numpy()
        else:
            assert isinstance(got, np.ndarray), f"{k}: numpy in, {type(got).__name__} out"
            arr = got.astype(np.float64)
        if layout == "tb":
            arr = np.swapaxes(arr, 0, 1)
        out[k] = arr
    return out


def case_id(T: int, B: int | None, p: float, dtype: str, *more: Any) -> str:
    parts = [f"T{T}", "flat" if B is None else f"B{B}", f"p{p:g}", dtype, *map(str, more)]
    return "-".join(parts)


def finite_where_expected(got: np.ndarray, want: np.ndarray) -> bool:
    """Outputs are finite wherever the oracle's are (the inputs are all finite)."""
    return bool(np.all(np.isfinite(got[np.isfinite(want)])))
