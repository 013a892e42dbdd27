"""The one driver behind every public estimator function (docs/CONVENTIONS.md §8).

A public function (:mod:`rltscan.estimators.functions`) hands its arguments here
unless its call is bound (:mod:`rltscan.estimators._bound`): :func:`front_end` reads
and checks them (:func:`_begin`: a TensorDict, γ/λ tensors, dones, the required
arrays, the parameter ranges), takes the estimator module's own rules and the
bootstrap form (:func:`_finish`), brings every array to ``[R, T]`` and hands a
``Problem`` to the chosen backend (:func:`_run`), or runs every (γ, λ) setting of a
list (:func:`_finish_settings`). Under ``torch.compile`` the public functions call
:func:`as_op` instead: the estimator as one custom op (:mod:`rltscan.ops`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import torch

from rltscan.dones import contradicted, contradiction, shift_starts
from rltscan.errors import AmbiguousInputError, DataError, ParameterError
from rltscan.estimators import DECLARATIONS, declared_module
from rltscan.estimators import _bound as bound
from rltscan.estimators._arguments import (
    Ends,
    ends_of,
    from_tensordict,
    is_tensordict,
    tensor_parameters,
)
from rltscan.estimators._carry import Carry, carry_out
from rltscan.estimators._checks import check_params, warn_not_contractive
from rltscan.estimators._frame import (
    Frame,
    check_shape,
    compute_device,
    compute_dtype,
    flag_column,
    float_column,
    per_row,
    said,
    time_axis,
)
from rltscan.estimators._problem import (
    NV_NONE,
    ArrayLike,
    Problem,
    missing_zero,
    prepared_call,
)
from rltscan.estimators._result import RESULTS, Result
from rltscan.estimators._solve import solve
from rltscan.estimators.declaration import (
    FLAG_INPUTS,
    PER_STEP_OF,
    SWEEPABLE,
    Declaration,
    is_sweep,
    settings_of,
    sweep_refusal,
)
from rltscan.scan import host_tensor, resolve_backend

MODULES: dict[str, ModuleType] = {d.name: declared_module(d.name) for d in DECLARATIONS.values()}


# ---------------------------------------------------------------------------
# The shared driver


def _device_of(*xs: Any) -> torch.device:
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x.device
    return torch.device("cpu")


def _run(
    kind: str,
    *,
    ref: str,
    floats: dict[str, ArrayLike | None],
    flags: dict[str, ArrayLike | None],
    reads: dict[str, str],
    params: dict[str, float],
    time_dim: int | None,
    backend: str,
    validate: bool,
    nv_mode: str = NV_NONE,
    missing_zero: bool = False,
    last_value: ArrayLike | None = None,
    init: ArrayLike | None = None,
    features: bool = False,
    carry: Carry | None = None,
    bind: Callable[..., None] | None = None,
    outputs: dict[str, Any] | None = None,
    settings: tuple[dict[str, float], ...] | None = None,
    ends: Ends | None = None,
    to_host: bool = False,
) -> dict[str, Any]:
    """Normalise, validate, solve, and map the outputs back to the user's layout.

    ``bind(fired, result, device, deferred)`` is offered the fused launch when the
    call may be bound (``bound.build``); ``outputs`` (user layout) skip the solve: a
    bound call's carry is built from them. ``settings``: several (γ, λ) in one solve
    (the outputs gain a leading axis, the carry is a :class:`SettingsCarry`).
    ``ends``: episode ends given as dones or episode starts (terminated/truncated are
    derived from them here, on ``[R, T]`` rows). ``to_host``: the caller's inputs were
    numpy arrays moved to the device (``_on_compute_device``), so the outputs go back
    to the host: the screen is read here, as for any numpy call, not deferred."""
    given = {k: v for k, v in floats.items() if v is not None}
    if ends is not None:
        flags = {**flags, ends.name: ends.flags}
    user_device = _device_of(*given.values(), *flags.values(), last_value, init)
    device = compute_device(backend, user_device)
    if device.type == "cuda":
        bound.check_deferred(device)  # an earlier call's screen hit (no sync)
    as_numpy = not isinstance(given[ref], torch.Tensor)
    tensors = {k: float_column(k, v, device) for k, v in given.items()}
    flag_t = {k: flag_column(k, v, device, validate) for k, v in flags.items() if v is not None}

    # the step shape comes from the flags when x carries trailing feature axes
    main = tensors[ref]
    step_src = next(iter(flag_t.values())) if (features and flag_t) else main
    given_shape = tuple(step_src.shape)
    td, squeeze = time_axis(given_shape, time_dim, ref)
    step_shape = given_shape[:-1] if squeeze else given_shape
    if step_shape[td] == 0:
        raise DataError(
            f'"{ref}" has no steps (its time axis, {said(time_dim)}, has length 0)',
            "pass data, or the time_dim that names its time axis",
            column=ref,
        )
    feature_shape: tuple[int, ...] = ()
    if features:
        if tuple(main.shape[: len(step_shape)]) != step_shape:
            check_shape(ref, main, given_shape, next(iter(flag_t)), time_dim)
        feature_shape = tuple(main.shape[len(step_shape) :])
        _refuse_two_time_axes(ref, tuple(main.shape), given_shape, time_dim, td, feature_shape)
    for name, t in {**tensors, **flag_t}.items():
        want = (*step_shape, *feature_shape) if (features and name == ref) else given_shape
        if name == "values" and "last_value" in MODULES[kind].DECLARATION.inputs:
            _refuse_one_more_value(tuple(t.shape), want, td, ref, time_dim)
        if name in ("q_values", "v_pi") and tuple(t.shape[:-1]) == want and t.shape[-1] > 1:
            raise DataError(
                f'"{name}" has shape {tuple(t.shape)}: "{ref}" {want} and one more axis '
                f"of {t.shape[-1]} (one value per action?)",
                "pass Q(s_t, a_t) per step (q.gather(-1, actions[..., None])[..., 0])"
                if name == "q_values"
                else "pass E_π Q(s_t, ·) per step ((probs * q).sum(-1))",
                column=name,
            )
        check_shape(name, t, want, ref, time_dim)

    frame = Frame(step_shape, td, feature_shape, as_numpy, user_device, squeeze and not features)
    flat_frame = Frame(step_shape, td, squeeze=squeeze)
    layout = f' (the axes of "{ref}" {given_shape} but time, {said(time_dim)})'
    nfeat = math.prod(feature_shape)
    cols = {k: frame.rows(v) if k == ref else flat_frame.rows(v) for k, v in tensors.items()}
    for k, v in flag_t.items():
        cols[k] = flat_frame.rows(v)
    starts0 = None  # sequences whose step 0 starts an episode (forward kinds, starts)
    if ends is not None:
        starts0 = _flags_from_ends(cols, ends, flat_frame, device, layout, validate, carry, kind)
        flag_t.pop(ends.name)
        flag_t.update({k: cols[k] for k in ("terminated", "truncated") if k in cols})
    if features and nfeat != 1:
        # features become extra rows sharing their sequence's flags (a copy; traces only;
        # no features: no rows)
        for k in [*flag_t, *(n for n in tensors if n != ref)]:
            r, t = cols[k].shape
            cols[k] = cols[k].unsqueeze(0).expand(nfeat, r, t).reshape(nfeat * r, t)
        if starts0 is not None:
            starts0 = starts0.unsqueeze(0).expand(nfeat, -1).reshape(-1)

    carry = _check_carry(kind, carry, last_value, init, len(next(iter(cols.values()))), device)
    init_rows = per_row("init", init, frame, device, layout=layout)
    if starts0 is not None:
        carry, init_rows = _reset_at_step_0(starts0, carry, init_rows)
    p = Problem(
        kind=kind,
        reverse=MODULES[kind].REVERSE,
        cols=cols,
        dtype=compute_dtype(t.dtype for t in tensors.values()),
        params=params,
        nv_mode=nv_mode,
        missing_zero=missing_zero,
        last_value=per_row("last_value", last_value, flat_frame, device, layout=layout),
        init=init_rows,
        carry=carry,
        settings=settings,
    )
    if outputs is not None:
        out = {k: frame.rows(v) for k, v in outputs.items()}
        return {"_carry_fn": functools.partial(carry_out, p, out)}
    # results that stay on the GPU are not waited for: the kernel's screen is read
    # by a later call (docs/CONVENTIONS.md §5.1); results bound for the host are
    # synchronous anyway and raise here
    on_host = as_numpy or to_host
    defer = validate and device.type == "cuda" and user_device == device and not on_host
    fired: list[Any] = []
    out = solve(
        p, backend, validate=validate, reads=reads, frame=frame, defer=defer,
        on_launch=fired.append,
    )  # fmt: skip
    if fired and defer:
        per_step = tuple(c for c in PER_STEP_OF if c in p.cols)
        bound.note_check(fired[0].check_id, kind, frame.step_shape, device, per_step)
    if settings is not None:
        result = {k: _stacked_output(frame, v) for k, v in out.items()}
        carry_fn = functools.partial(_settingscarry_out, p, out)
    else:
        result = {k: frame.output(v) for k, v in out.items()}
        carry_fn = functools.partial(carry_out, p, out)
    stays = device.type in BIND_DEVICES and user_device == device and not on_host
    if fired and bind is not None and stays:
        bind(fired[0], result, device, defer)
    result["_carry_fn"] = carry_fn
    return result


def _refuse_two_time_axes(
    ref: str,
    x_shape: tuple[int, ...],
    flag_shape: tuple[int, ...],
    time_dim: int | None,
    td: int,
    feature_shape: tuple[int, ...],
) -> None:
    """A negative ``time_dim`` beside ``x`` with trailing feature axes counts from the
    flags' end; counted from ``x``'s own end (numpy's and TorchRL's reading) it may name
    another axis of the flags' shape (``x [B, T, D]``, flags ``[B, T]``, ``time_dim=-2``:
    B or T). Both readings fit the shapes and give different numbers: refused."""
    if not feature_shape or time_dim is None or time_dim >= 0:
        return
    other = len(x_shape) + int(time_dim)
    if 0 <= other < len(flag_shape) and other != td:
        raise AmbiguousInputError(
            f"time_dim={time_dim} names axis {td} of the flags {flag_shape} but axis {other} "
            f'of "{ref}" {x_shape} (trailing feature axes {feature_shape})',
            f"pass time_dim={td} if time is axis {td}, or time_dim={other} if it is axis {other}",
        )


def _refuse_one_more_value(
    shape: tuple[int, ...], want: tuple[int, ...], td: int, ref: str, time_dim: int | None
) -> None:
    """``values`` of ``shape`` with one more step than the rewards (V(s_0) … V(s_T), as
    CleanRL and SB3 compute it before splitting off the bootstrap) is refused with that
    split as the fix."""
    more = tuple(n + (i == td) for i, n in enumerate(want))
    if shape == more:
        raise DataError(
            f'"values" has shape {shape}, one step more than "{ref}" {want} on the time axis '
            f"({said(time_dim)}): V of the state after the last step too?",
            f"pass its first {want[td]} steps as values and its last as last_value (one per "
            "sequence)",
            column="values",
        )


# where a call may be bound (the kernel on a GPU; a test adds "cpu" to run the bound path
# through Triton's interpreter)
BIND_DEVICES: tuple[str, ...] = ("cuda",)


def _flags_from_ends(
    cols: dict[str, torch.Tensor],
    ends: Ends,
    frame: Frame,
    device: torch.device,
    layout: str,
    validate: bool,
    carry: Carry | None,
    kind: str,
) -> torch.Tensor | None:
    """``terminated``/``truncated`` rows from the dones or episode starts in ``cols``
    (replaced there), by the rules of :mod:`rltscan.dones` (docs/CONVENTIONS.md §1.4).

    Returns, for a forward kind given episode starts, the rows whose step 0 starts an
    episode (``starts[:, 0]``, which no flag of this chunk holds); else None."""
    mark = cols.pop(ends.name)
    mark = mark if mark.dtype == torch.bool else mark != 0
    starts0 = None
    if ends.meaning == "starts" and not MODULES[kind].REVERSE:
        starts0 = mark[:, 0].clone()
    known = None  # the steps whose end the dones say: all but, from starts, the last one
    if ends.meaning == "ended":
        ended = mark
    else:
        if ends.last is None and carry is not None and MODULES[kind].REVERSE:
            raise ParameterError(
                "with carry=, the last step's end is the next chunk's first episode start",
                "pass last_dones= (that chunk's first episode_starts)",
            )
        last = per_row(
            "last_dones", ends.last, frame, device, layout=layout, flag=True, validate=validate
        )
        ended = shift_starts(mark, -1, None if last is None else last != 0)
        if last is None:
            known = torch.ones_like(ended)
            known[:, -1] = False
    term, trunc = cols.get("terminated"), cols.get("truncated")
    term = None if term is None else (term if term.dtype == torch.bool else term != 0)
    trunc = None if trunc is None else (trunc if trunc.dtype == torch.bool else trunc != 0)
    if validate:
        _refuse_contradiction(ends, contradicted(ended, term, trunc, known), term, frame)
    if ends.kind == "terminal":  # an end a truncation flag explains stays a truncation
        new = ended if trunc is None else ended & ~trunc
        cols["terminated"] = new if term is None else new | term
    else:  # terminated wins where both are set (§1.1)
        cols["truncated"] = ended if trunc is None else ended | trunc
    return starts0


def _refuse_contradiction(
    ends: Ends, bad: torch.Tensor | None, term: torch.Tensor | None, frame: Frame
) -> None:
    """A step that ``terminated``/``truncated`` end and the dones do not (``bad``, rows
    ``[R, T]``) is refused, named at its first (the rule of :func:`rltscan.dones.contradicted`,
    checked with ``validate=True``: one device sync, as for flags that are not bool)."""
    if bad is None or not bool(bad.any()):
        return
    r, t = (int(i) for i in torch.nonzero(bad)[0].tolist())
    flag = "terminated" if term is not None and bool(term[r, t]) else "truncated"
    raise DataError(
        contradiction(flag, ends.name, ends.meaning, "index {index}"),  # type: ignore[arg-type]
        f"pass {ends.name}= or terminated=/truncated=, not both (or correct the one that is wrong)",
        column=flag,
        index=frame.user_index(r, t),
        time_axis=frame.time_dim,
    )


def _reset_at_step_0(
    starts0: torch.Tensor, carry: Carry | None, init: torch.Tensor | None
) -> tuple[Carry | None, torch.Tensor | None]:
    """A forward kind's boundary where step 0 starts an episode (``starts0``, per row):
    nothing crosses into it. The previous chunk's last step ended its episode there
    (the carry's ``prev_done``), and ``init`` (the value before step 0) is 0 there."""
    if carry is not None:
        done = starts0 if carry.prev_done is None else carry.prev_done | starts0
        return dataclasses.replace(carry, prev_done=done), init
    if init is not None:
        mask = starts0.reshape(-1, *[1] * (init.ndim - 1))  # [R] or [R, K] (settings)
        init = torch.where(mask, torch.zeros((), dtype=init.dtype, device=init.device), init)
    return carry, init


def _stacked_output(frame: Frame, y: torch.Tensor) -> torch.Tensor:
    """``[K, R, T]`` -> ``[K, *user shape]``: every setting's block mapped back as one
    output would be, as one view where the blocks line up (else stacked)."""
    views = [frame.back(y[k]) for k in range(y.shape[0])]
    v0 = views[0]
    if y.dtype == v0.dtype and all(
        v.stride() == v0.stride()
        and v.storage_offset() == v0.storage_offset() + k * y.stride(0)
        and v.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
        for k, v in enumerate(views)
    ):
        out = y.as_strided(
            (y.shape[0], *v0.shape), (y.stride(0), *v0.stride()), v0.storage_offset()
        )
    else:
        out = torch.stack(views)
    return out if frame.device is None else out.to(frame.device)


def _settingscarry_out(p: Problem, out: dict[str, Any]) -> SettingsCarry:
    """Each setting's carry, as one call per setting would hand it on (§2.4)."""
    carries = []
    for k, s in enumerate(p.settings):
        one = dataclasses.replace(p, params={**p.params, **s}, settings=None, carry=None)
        carries.append(carry_out(one, {name: v[k] for name, v in out.items()}))
    return SettingsCarry(tuple(carries), p.settings)


def _check_carry(
    kind: str,
    carry: Carry | None,
    last_value: Any,
    init: Any,
    rows: int,
    device: torch.device,
) -> Carry | None:
    if carry is None:
        return None
    if not isinstance(carry, Carry) or carry.estimator != kind:
        got = getattr(carry, "estimator", type(carry).__name__)
        raise ParameterError(
            f"carry comes from {got!r}, not {kind!r}; pass the .carry of this estimator's "
            "result for the neighbouring chunk"
        )
    if carry.rows != rows:
        raise DataError(
            f"carry holds {carry.rows} sequences but this chunk has {rows}",
            "pass the chunks of one batch with the same sequences and the same time_dim",
        )
    if last_value is not None:
        raise ParameterError(
            '"last_value" bootstraps the window end, but a chunk with a carry does not end '
            'the window; pass "bootstrap_values" or "next_values" for truncations'
        )
    if init is not None:
        raise ParameterError('"init" and carry were both given; the carry is the initial value')
    return dataclasses.replace(
        carry,
        **{
            f.name: host_tensor(v).to(device)  # a torch-free run's numpy carry too
            for f in dataclasses.fields(carry)
            if isinstance(v := getattr(carry, f.name), (torch.Tensor, np.ndarray))
        },
    )


# ---------------------------------------------------------------------------
# Public API: one function per declaration, one driver for all


def _begin(d: Declaration, args: dict[str, Any]) -> dict[str, Any]:
    """The arguments read and checked (docs/CONVENTIONS.md §8): a TensorDict's arrays
    taken out (``args["_write"]`` puts the results back), γ/λ tensors as numbers or
    per-step columns, dones as ``args["_ends"]``, the required arrays present, the
    parameters in range (a ``None`` default filled from its fallback)."""
    if not isinstance(args["validate"], (bool, np.bool_)):  # None would check nothing
        raise ParameterError(
            f"validate must be True or False, got {args['validate']!r}",
            "pass validate=True (check every read entry, the default) or validate=False",
        )
    if is_tensordict(args[d.inputs[0]]):
        args, args["_write"] = from_tensordict(d, args)
    args = tensor_parameters(d, args)
    if "terminated" in d.inputs:
        args["_ends"] = ends_of(d, args)
    for name in d.required:
        if args.get(name) is None and name not in d.derivable:
            if name == "terminated" and args.get("_ends") is not None:
                continue
            also = " (or dones with dones_mean, or episode_starts)" if name == "terminated" else ""
            raise ParameterError(f'{d.function_name} needs "{name}"{also}', f"pass {name}=")
    args.update(d.with_fallbacks({prm.name: args[prm.name] for prm in d.parameters}))
    scalars = {prm.name: args[prm.name] for prm in d.parameters if prm.choices is None}
    for name in SWEEPABLE:  # several settings: each value checked as one would be
        if name in scalars and is_sweep(scalars[name]):
            values = list(scalars.pop(name))
            for v in values:
                check_params(**{name: v})
            refused = sweep_refusal(values)
            if refused is not None:
                raise ParameterError(f"{name} {refused}")
    check_params(**scalars)
    for prm in d.parameters:  # word parameters (Retrace's trace)
        refused = prm.violation(args[prm.name]) if prm.choices is not None else None
        if refused is not None:
            raise ParameterError(f"{prm.name} {refused[0]}", refused[1])
    misused = d.misused(args)
    if misused is not None:
        raise ParameterError(misused)
    for column, param in PER_STEP_OF.items():  # a per-step column replaces its scalar
        if args.get(column) is not None:
            given = args[param]
            if is_sweep(given) or float(given) != float(d.defaults()[param]):
                raise ParameterError(
                    f'"{column}" gives {param} per step; drop {param}={given!r} or the column'
                )
            if args["validate"]:
                _check_unit_column(column, args[column])
    return args


def _check_unit_column(name: str, x: Any) -> None:
    """A per-step γ_t or λ_t: every entry in [0, 1] (NaN refused), named at the first bad."""
    t = x if isinstance(x, torch.Tensor) else host_tensor(np.asarray(x))
    if t.dtype.is_complex:
        raise DataError(f'"{name}" has dtype {t.dtype}; pass real numbers in [0, 1]')
    bad = ~((t >= 0) & (t <= 1))
    if bool(bad.any()):
        where = tuple(int(i) for i in torch.nonzero(bad)[0])
        raise DataError(
            f'"{name}" must be in [0, 1] at every step; index {where} is {float(t[where])!r}',
            f"pass per-step values in [0, 1] as {name}",
        )


def _check_unread_values(d: Declaration, args: dict[str, Any]) -> None:
    """``values`` that the estimator accepts but never reads (discounted returns: V(s_t+1)
    comes only from the bootstrap form) still have the rewards' shape: a misshapen one is
    a mistake to name, not an argument to drop."""
    ref = d.inputs[0]
    want, shape = tuple(np.shape(args[ref])), tuple(np.shape(args["values"]))
    if shape != want:
        td, _ = time_axis(want, args["time_dim"], ref)
        _refuse_one_more_value(shape, want, td, ref, args["time_dim"])
        raise DataError(
            f'"values" has shape {shape} but "{ref}" has {want}',
            f"pass per-step arrays of one shape, with time on the axis {said(args['time_dim'])} "
            "names (discounted_returns reads no values: bootstrap_values, next_values or "
            "last_value give V(s_t+1))",
            column="values",
        )


def _finish(
    d: Declaration,
    args: dict[str, Any],
    key: tuple | None = None,
    outputs: dict[str, Any] | None = None,
    settings: tuple[dict[str, float], ...] | None = None,
) -> Result:
    """Everything after the parameters: the module's own argument rules, the bootstrap
    form, then normalise, validate and solve (``_run``). ``key`` (``bound.call_key``):
    the call may be bound for later calls of its shape; ``outputs``, ``settings``: see
    ``_run`` (with ``settings``, ``args`` holds the first setting's γ and λ)."""
    unread = [i for i in d.inputs if i not in d.inputs_for(args) and args.get(i) is not None]
    if unread:  # a word parameter (Retrace's trace) leaves this input unread
        words = ", ".join(f"{p}={args[p]!r}" for p in dict.fromkeys(c[0] for c in d.choice_inputs))
        raise ParameterError(
            f'"{unread[0]}" is not read with {words}; drop it, or pick the option that reads it'
        )
    if "values" not in d.inputs and args.get("values") is not None:
        _check_unread_values(d, args)
    args, nv_mode = prepared_call(d, MODULES[d.name], args)
    floats = d.float_inputs
    out = _run(
        d.name,
        ref=d.inputs[0],
        floats={n: args[n] for n in floats},
        flags={n: args[n] for n in d.inputs if n in FLAG_INPUTS},
        reads={n: d.read_rule(n) for n in floats},
        params={
            prm.name: args[prm.name] if prm.choices else float(args[prm.name])
            for prm in d.parameters
        },
        time_dim=args["time_dim"],
        backend=args["backend"],
        validate=args["validate"],
        carry=args["carry"],
        nv_mode=nv_mode,
        missing_zero=d.missing_bootstrap is not None and missing_zero(args["missing_bootstrap"]),
        last_value=args.get("last_value"),
        init=args.get("init"),
        features=d.features,
        bind=None if key is None else functools.partial(_bind, d, args, key, settings),
        outputs=outputs,
        settings=settings,
        ends=args.get("_ends"),
        to_host=args.get("_to_host", False),
    )
    # (with ``outputs``, ``out`` holds only the carry: the outputs are those given)
    result = RESULTS[d.name](**(outputs or {}), **out)
    write = args.get("_write")
    if write is not None and outputs is None:
        write(result)  # a TensorDict: TorchRL's output keys
    return result


def _bind(
    d: Declaration,
    args: dict[str, Any],
    key: tuple,
    settings: tuple[dict[str, float], ...] | None,
    fired: Any,
    result: dict[str, Any],
    device: torch.device,
    deferred: bool,
) -> None:
    b = bound.build(d, args, fired, result, device, deferred, settings)
    if b is not None:
        bound.remember(key, b)


def bound_call(d: Declaration, b: bound.Bound, args: dict[str, Any]) -> Result:
    """A call through its :class:`bound.Bound`: one launch; the carry on demand."""
    out = b.run(args)
    if b.settings is not None:  # several settings: the carry is the whole call's again
        lists = {n: tuple(args[n]) for n in SWEEPABLE if type(args.get(n)) is list}
        carry_fn = functools.partial(_settings_carry_later, d, {**args, **lists})
        return RESULTS[d.name](**out, _carry_fn=carry_fn, settings=b.settings)
    return RESULTS[d.name](**out, _carry_fn=functools.partial(_carry_later, d, args, out))


def _carry_later(d: Declaration, args: dict[str, Any], outputs: dict[str, Any]) -> Carry | None:
    """A bound call's carry: the front end runs now (not on every call) and builds it
    from the outputs."""
    return _finish(d, _begin(d, dict(args)), outputs=outputs).carry


def _settings_carry_later(d: Declaration, args: dict[str, Any]) -> SettingsCarry:
    """A bound settings call's carry: the call runs again unbound (the same launch, so
    the same numbers) and hands on its carries; asked for only where chunks follow."""
    return front_end(d, dict(args), None).carry


# ---------------------------------------------------------------------------
# Several settings in one pass (gamma=[0.9, 0.99], lam=[...])


@dataclasses.dataclass(frozen=True)
class SettingsCarry:
    """The carries of a call with several settings, one per setting, in their order."""

    carries: tuple[Carry, ...]
    settings: tuple[dict[str, float], ...]

    def joined(self) -> Carry:
        """One carry for a launch of every setting: ``y`` per sequence and setting
        (``[R, K]``); the rest is the data's, the same in every setting."""
        first = self.carries[0]
        return dataclasses.replace(first, y=torch.stack([c.y for c in self.carries], dim=1))


def _one_launch(d: Declaration, args: dict[str, Any]) -> bool:
    """Whether every setting runs in one kernel launch: the Triton backend and an
    estimator with a fused prologue (a per-step column runs one launch per setting)."""
    if any(args.get(c) is not None for c in PER_STEP_OF):
        return False
    arrays = [args[n] for n in d.inputs if isinstance(args.get(n), torch.Tensor)]
    if not arrays:
        return False
    device = compute_device(args["backend"], arrays[0].device)
    if resolve_backend(args["backend"], device) != "triton":
        return False
    from rltscan.scan import triton_scan

    return triton_scan.fused(d.name)


def sweeps(d: Declaration, args: dict[str, Any]) -> bool:
    return any(is_sweep(args.get(n)) for n in SWEEPABLE) or isinstance(
        args.get("carry"), SettingsCarry
    )


def _finish_settings(d: Declaration, args: dict[str, Any], key: tuple | None = None) -> Result:
    """Every (γ, λ) combination from one copy of the inputs on the compute device; the
    outputs stacked on a new leading axis (``Result.settings`` says which is which).
    ``key``: a one-launch call may be bound for later calls of its shape and settings."""
    settings = settings_of(d, args)
    carry = args["carry"]
    if settings is None or (
        carry is not None and (not isinstance(carry, SettingsCarry) or carry.settings != settings)
    ):
        raise ParameterError(
            "carry does not come from a call with these settings; pass the .carry of the "
            "neighbouring chunk computed with the same gamma/lam lists"
        )
    if d.contraction_warning:
        top = max(s["gamma"] * s["lam"] for s in settings)
        warn_not_contractive(top, 1.0, float(args["c_clip"]), d.function_name)
    as_numpy, args = _on_compute_device(d, args)
    if _one_launch(d, args):
        first = {**args, **settings[0], "carry": None if carry is None else carry.joined()}
        res = _finish(d, first, key, settings=settings)
        outputs = {o: getattr(res, o) for o in d.outputs if getattr(res, o) is not None}
        if as_numpy:
            outputs = {o: v.cpu().numpy() for o, v in outputs.items()}
        return RESULTS[d.name](**outputs, _carry_fn=lambda: res.carry, settings=settings)
    results = [
        _finish(d, {**args, **s, "carry": None if carry is None else carry.carries[k]})
        for k, s in enumerate(settings)
    ]
    outputs = {}
    for o in d.outputs:
        if getattr(results[0], o) is None:
            continue
        stacked = torch.stack([getattr(r, o) for r in results])
        outputs[o] = stacked.cpu().numpy() if as_numpy else stacked

    def carry_fn() -> SettingsCarry:
        return SettingsCarry(tuple(r.carry for r in results), settings)

    return RESULTS[d.name](**outputs, _carry_fn=carry_fn, settings=settings)


def _on_compute_device(d: Declaration, args: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
    """Numpy inputs as tensors on the device that computes (copied there once, not once
    per setting); and whether the results go back to numpy."""
    arrays = [n for n in (*d.inputs, *d.extra_arguments) if args.get(n) is not None]
    if not arrays or isinstance(args[arrays[0]], torch.Tensor):
        return False, args
    device = compute_device(args["backend"], _device_of(*(args[n] for n in arrays)))
    moved = {**args, "_to_host": True}  # (read by _run: the screen is not deferred)
    for n in arrays:
        if not isinstance(args[n], torch.Tensor):
            moved[n] = host_tensor(np.asarray(args[n])).to(device)
    return True, moved


def front_end(d: Declaration, args: dict[str, Any], key: tuple | None) -> Result:
    """A call that is not bound: every setting of a list in one pass, or the arguments
    read and checked, then solved (``key``: the call may be bound for later calls of
    its shape). ``args`` are the public function's arguments (its ``locals()``)."""
    if any(n in d.params for n in SWEEPABLE) and sweeps(d, args):  # gamma=[...]
        return _finish_settings(d, _begin(d, args), key)
    args = _begin(d, args)
    if d.contraction_warning:
        gamma, lam, c_clip = (float(args[n]) for n in ("gamma", "lam", "c_clip"))
        warn_not_contractive(gamma, lam, c_clip, d.function_name)
    return _finish(d, args, key)


def as_op(d: Declaration, args: dict[str, Any]) -> Result:
    """The call as one ``rltscan::estimate`` custom op (:mod:`rltscan.ops`): what a public
    function does while ``torch.compile`` traces it, so the graph does not break at the
    front end's host checks (they run inside the op). Tensors only, no carry, one
    setting; the result has no ``.carry``."""
    from rltscan import ops  # imported here: its module imports torch._dynamo (~1 s)

    return RESULTS[d.name](**ops.call(d, args))
