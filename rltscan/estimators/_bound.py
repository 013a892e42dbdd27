"""Calls bound to a shape: an estimator called again on tensors of the same shapes,
dtypes, strides and device, with the same parameters, costs one kernel launch.

The first call of a shape runs the whole front end (``_driver._run``: checks,
normalisation, the ``Problem``) and the fused kernel. When every kernel argument is
either one of the caller's tensors as given (no copy or conversion was needed) or
an output, the launch is kept as a :class:`Bound`, keyed by :func:`call_key`; later
calls with the same key skip the front end and Triton's dispatch: they allocate the
outputs, gather the addresses and call the compiled kernel's launcher. A call that
does not qualify (numpy or CPU inputs, a carry, copies, features, aliased inputs)
takes the whole path every time, with the same results.

Validation on this path is the kernel's screen with its result deferred
(docs/CONVENTIONS.md §5.1): nothing waits for the GPU. The screen sees non-finite
read entries, a missing bootstrap value, and per-step ``discount`` / ``lam_per_step``
entries outside [0, 1]; the first call of a shape checks the same on the host and
names the index.
"""

from __future__ import annotations

import atexit
import functools
import operator
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from rltscan.errors import DataError
from rltscan.estimators.declaration import PER_STEP_PARAMETERS, Declaration

if TYPE_CHECKING:
    from rltscan.scan import triton_scan


@functools.cache
def _ts():  # triton loads with the first GPU call, not with this module
    from rltscan.scan import triton_scan

    return triton_scan


_BACKENDS = ("auto", "triton")
_SCALARS = (float, int, str)
_NUMBERS = (float, int)
_LISTS = (list, tuple)
_IN, _OUT, _FIXED = 0, 1, 2
# per estimator: a training loop has a handful of shapes; a sweep must not grow it
MAX_BOUND = 8


@functools.cache
def _scalar_names(d: Declaration) -> tuple[str, ...]:
    names = tuple(prm.name for prm in d.parameters)
    if d.missing_bootstrap is not None:
        names += ("missing_bootstrap",)
    return names


def call_key(d: Declaration, args: dict[str, Any]) -> tuple | None:
    """What decides a call's launch: None when the call cannot be bound (a carry, a
    non-tensor array, a tensor-valued parameter)."""
    return key_function(d)(args)


@functools.cache
def key_function(d: Declaration) -> CallKey:
    """The :class:`CallKey` of one declaration (one per declaration, made once)."""
    return CallKey(d.inputs, _scalar_names(d))


class CallKey:
    """``key(args)``: per array ``(dtype, shape, strides, device index)`` or None, then
    the controls and the scalars as given (a list of numbers, several settings, as a
    tuple); None when the call cannot be bound.

    Called on every public-function call before anything else (the bound look-up), so
    it is a plain loop with no allocation beyond the key itself."""

    __slots__ = ("_arrays_of", "_scalars_of", "inputs", "scalars")

    def __init__(self, inputs: tuple[str, ...], scalars: tuple[str, ...]) -> None:
        self.inputs, self.scalars = inputs, scalars
        self._arrays_of, self._scalars_of = _getter(inputs), _getter(scalars)

    def __call__(self, a: dict[str, Any]) -> tuple | None:
        if a["carry"] is not None or a["backend"] not in _BACKENDS:
            return None
        key: list[Any] = [a["validate"], a["time_dim"], a["backend"]]
        add = key.append
        for x in self._arrays_of(a):
            if x is None:
                add(None)
            elif type(x) is Tensor:
                try:
                    add((x.dtype, x.shape, x.stride(), x.get_device()))
                except RuntimeError:  # no strides (nested): the front end refuses it
                    return None
            else:
                return None
        for s in self._scalars_of(a):
            if s is None or type(s) in _SCALARS:
                add(s)
            elif type(s) in _LISTS and all(type(x) in _NUMBERS for x in s):
                add(tuple(s))  # several settings; a copy, as the caller may mutate a list
            else:
                return None
        return tuple(key)


class Bound:
    """One estimator launch bound to its shapes (see the module docstring)."""

    def __init__(
        self,
        d: Declaration,
        launch: triton_scan.Launch,
        slots: list[tuple[int, Any]],
        outputs: list[tuple[str, tuple[int, ...], tuple[int, ...], torch.dtype]],
        device: torch.device,
        deferred: bool,
        per_step: tuple[str, ...] = (),
        settings: tuple[dict[str, float], ...] | None = None,
    ) -> None:
        self.declaration = d
        self.settings = settings  # several (γ, λ) in this one launch: outputs [K, ...]
        self.launch = launch
        self.device = device
        self.deferred = deferred
        self.outputs = outputs
        self.per_step = per_step
        self._names = tuple(name for name, *_ in outputs)
        # the launch alone (pointers gathered, the launcher called): what run() adds to
        # the output allocations; profilers (bench/host_path.py) time it on its own
        self.firing = Firing(slots, launch, device)
        self.direct = self.firing.direct is not None  # (else Triton's dispatch)

    def run(self, args: dict[str, Any]) -> dict[str, Tensor]:
        """Launch on ``args`` (the public function's arguments); the outputs, by name."""
        check_deferred(self.device)
        outs = self._allocate()
        self.firing.fire(args, outs, self._check_id())
        return dict(zip(self._names, outs, strict=True))

    def _allocate(self) -> list[Tensor]:
        dev = self.device
        return [torch.empty_strided(s, st, dtype=dt, device=dev) for _, s, st, dt in self.outputs]

    def _check_id(self) -> int:
        if not self.deferred:
            return 0
        check_id = _ts().next_check_id(self.device)
        note_check(check_id, self.declaration.name, self.outputs[0][1], self.device, self.per_step)
        return check_id

    def fixed(self, args: dict[str, Any]) -> tuple[Callable[[], None], dict[str, Tensor]]:
        """``(again, outputs)``: ``again()`` launches on ``args``' arrays as they are then
        into ``outputs``, allocated here once (the addresses never change: the
        cheapest launch, and one a CUDA graph can capture)."""
        dev, outs = self.device, self._allocate()
        check_id, firing = self._check_id, self.firing
        fire, slow, direct = firing.fire, firing.slow, firing.direct
        ptrs = None if direct is None else firing.pointers(args, outs)
        if ptrs is None or any(p % 16 for p in ptrs):

            def again() -> None:
                check_deferred(dev)
                fire(args, outs, check_id())

        else:  # every address is known: the launcher alone

            def again() -> None:
                check_deferred(dev)
                cid = check_id()
                if not direct(list(ptrs), cid):
                    slow(args, outs, cid)

        return again, dict(zip(self._names, outs, strict=True))


def _getter(keys: tuple | list) -> Callable[[Any], tuple]:
    """``operator.itemgetter(*keys)`` that always returns a tuple (also for 0 or 1 key)."""
    if len(keys) > 1:
        return operator.itemgetter(*keys)
    if keys:
        k = keys[0]
        return lambda x: (x[k],)
    return lambda x: ()


_data_ptr = Tensor.data_ptr


class Firing:
    """The launch on a call's arrays (``args``, ``outs``).

    ``slots`` says where each kernel argument comes from: an input by name (``_IN``), an
    output by position (``_OUT``), or a fixed buffer (``_FIXED``, the error word). With
    the compiled kernel's launcher (``Launch.direct``) the pointers are read as
    integers (a fixed buffer's address is a constant) and checked for 16-byte
    alignment, Triton's specialisation; an unaligned array or an installed launch hook
    takes ``Launch.fire`` with the tensors (:meth:`slow`), as does every call without
    a launcher."""

    __slots__ = (
        "_device", "_fixed", "_ins", "_ins_of", "_launch", "_outs", "_outs_of", "_pick",
        "_slots", "direct",
    )  # fmt: skip

    def __init__(
        self, slots: list[tuple[int, Any]], launch: triton_scan.Launch, device: torch.device
    ) -> None:
        self._launch, self._device, self._slots = launch, device, tuple(slots)
        # each array's address is read once: the inputs by name, the outputs by position,
        # then the fixed buffers' addresses (constants); _order maps them to the slots
        self._ins = tuple(dict.fromkeys(w for k, w in slots if k == _IN))
        self._outs = tuple(dict.fromkeys(w for k, w in slots if k == _OUT))
        fixed = [t for k, t in slots if k == _FIXED]
        self._fixed = tuple(t.data_ptr() for t in fixed)
        where = {
            **{(_IN, n): i for i, n in enumerate(self._ins)},
            **{(_OUT, j): len(self._ins) + i for i, j in enumerate(self._outs)},
        }
        base, order, nfixed = len(self._ins) + len(self._outs), [], 0
        for k, w in slots:
            if k == _FIXED:
                order.append(base + nfixed)
                nfixed += 1
            else:
                order.append(where[k, w])
        self._ins_of = _getter(self._ins)
        self._outs_of = _getter(self._outs)
        self._pick = _getter(order)
        direct = launch.direct(device)
        if direct is not None and any(p % 16 for p in self._fixed):
            direct = None
        self.direct: triton_scan.Direct | None = direct  # the compiled kernel's launcher

    def slow(self, a: dict[str, Any], o: list[Tensor], cid: int) -> None:
        """The launch through ``Launch.fire``, with the tensors."""
        tensors = [w if k == _FIXED else (a[w] if k == _IN else o[w]) for k, w in self._slots]
        self._launch.fire(tensors, self._device, cid)

    def _read(self, a: dict[str, Any], o: list[Tensor]) -> list[int]:
        """The addresses, once each: inputs, outputs, fixed buffers (C-level loops: this
        runs on every bound call)."""
        return [*map(_data_ptr, self._ins_of(a)), *map(_data_ptr, self._outs_of(o)), *self._fixed]

    def pointers(self, a: dict[str, Any], o: list[Tensor]) -> list[int]:
        """The launcher's pointer arguments, as integers, in the kernel's order."""
        return [*self._pick(self._read(a, o))]

    def fire(self, a: dict[str, Any], o: list[Tensor], cid: int) -> None:
        """The launch: the launcher on the pointers when every one is aligned, else
        :meth:`slow`."""
        direct = self.direct
        if direct is None:
            self.slow(a, o, cid)
            return
        read = [*map(_data_ptr, self._ins_of(a)), *map(_data_ptr, self._outs_of(o)), *self._fixed]
        if functools.reduce(operator.or_, read) & 15 or not direct([*self._pick(read)], cid):
            self.slow(a, o, cid)


def build(
    d: Declaration,
    args: dict[str, Any],
    fired: triton_scan.Fired,
    outputs: dict[str, Tensor],
    device: torch.device,
    deferred: bool,
    settings: tuple[dict[str, float], ...] | None = None,
) -> Bound | None:
    """A :class:`Bound` for this call, when each kernel argument is one of the caller's
    tensors as given, an output, or a fixed buffer (the error word; the (γ, λ) table of
    ``settings``, which the key's scalars decide); else None."""
    by_ptr: dict[int, str] = {}
    for n in d.inputs:
        x = args.get(n)
        if isinstance(x, Tensor):
            if x.data_ptr() in by_ptr:
                return None  # aliased inputs: a later call may not alias them the same way
            by_ptr[x.data_ptr()] = n
    out_list = list(outputs.items())
    out_ptr = {o.data_ptr(): i for i, (_, o) in enumerate(out_list)}
    if len(out_ptr) != len(out_list) or set(out_ptr) & set(by_ptr):
        return None
    fixed = {_ts().SETTINGS_SLOT} if settings is not None else set()
    if fired.launch.check:
        fixed.add(_ts().ERR_SLOT)
    slots: list[tuple[int, Any]] = []
    for i, t in enumerate(fired.tensors):
        p = t.data_ptr()
        if i in fixed:
            slots.append((_FIXED, t))
        elif p in out_ptr:
            slots.append((_OUT, out_ptr[p]))
        elif p in by_ptr and _same_view(t, args[by_ptr[p]]):
            slots.append((_IN, by_ptr[p]))
        else:
            return None  # a copy or conversion: the front end must run every time
    meta = [(k, tuple(o.shape), tuple(o.stride()), o.dtype) for k, o in out_list]
    per_step = tuple(n for n in PER_STEP_PARAMETERS if args.get(n) is not None)
    return Bound(d, fired.launch, slots, meta, device, deferred, per_step, settings)


def _same_view(kernel_arg: Tensor, user: Tensor) -> bool:
    """The kernel reads the caller's tensor itself (a view of its storage, same dtype)."""
    return kernel_arg.dtype == user.dtype and kernel_arg.data_ptr() == user.data_ptr()


# per declaration, its recent bound calls, newest first: a key is compared with ==
# (short-circuiting tuple equality), which is cheaper than hashing it on every call
_BOUND: dict[str, list[tuple[tuple, Bound]]] = {}


def lookup(d: Declaration, key: tuple) -> Bound | None:
    for k, b in _BOUND.get(d.name, ()):
        if k == key:
            return b
    return None


def remember(key: tuple, b: Bound) -> None:
    ts = _ts()
    if ts.tiles_forced():  # a test's or bench's tile shape: not what the key says
        return
    ts.on_tile_override(forget)
    recent = _BOUND.setdefault(b.declaration.name, [])
    recent.insert(0, (key, b))
    del recent[MAX_BOUND:]


def forget() -> None:
    """Drop every bound call (tests; called when a tile override begins)."""
    _BOUND.clear()


# ---------------------------------------------------------------------------
# Deferred validation: which call a hit on the device's board belongs to

_RING = 4096
_CALLS: list[tuple[int, str, tuple[int, ...], str, tuple[str, ...]] | None] = [None] * _RING


def note_check(
    check_id: int,
    kind: str,
    shape: tuple[int, ...],
    device: torch.device,
    per_step: tuple[str, ...] = (),
) -> None:
    """Remember what the launch ``check_id`` was (``per_step``: its γ_t / λ_t columns),
    to name it if its screen hits."""
    _CALLS[check_id % _RING] = (check_id, kind, shape, str(device), per_step)
    if not _AT_EXIT:
        _AT_EXIT.append(atexit.register(_report_at_exit))


_AT_EXIT: list[Any] = []


def _report_at_exit() -> None:
    """A hit that no later call raised is said on stderr when the process ends (one line)."""
    try:
        synchronize()
    except DataError as err:
        print(f"rltscan: error: {err}", file=sys.stderr)
    except Exception:  # the CUDA context may be gone at exit: nothing to add
        pass


def check_deferred(device: torch.device) -> None:
    """Raise the deferred validation error of an earlier call on ``device`` whose kernel
    has finished with a hit (a host memory read; nothing waits)."""
    hit = _ts().deferred_hit(device)
    if hit is not None:
        raise deferred_error(hit)


def deferred_error(check_id: int) -> DataError:
    rec = _CALLS[check_id % _RING]
    per_step: tuple[str, ...] = ()
    if rec is not None and rec[0] == check_id:
        _, kind, shape, dev, per_step = rec
        call = f"an earlier {kind} call (#{check_id}, shape {shape} on {dev})"
    else:
        call = f"an earlier validated call (#{check_id})"
    unit = f", a {' or '.join(per_step)} entry outside [0, 1]" if per_step else ""
    return DataError(
        f"{call} read NaN or Inf in an entry it uses{unit}, or needed a bootstrap value "
        "that was not given; its results are not valid (checked on the GPU after it "
        "returned)",
        "fix or mask the data; run that call with validate=True on the CPU copy "
        '(backend="torch") to name the input and index, or call rltscan.synchronize() '
        "right after it to raise there (docs/CONVENTIONS.md §5.1)",
    )


def synchronize(device: torch.device | str | int | None = None) -> None:
    """Wait for the GPU and raise the deferred validation error of any earlier call
    (docs/CONVENTIONS.md §5.1). ``device``: one device, or every device used (None)."""
    if "rltscan.scan.triton_scan" not in sys.modules:
        return  # nothing ran on the kernel
    devices = _ts().deferred_devices()
    if device is not None:
        want = torch.device(device) if not isinstance(device, int) else torch.device("cuda", device)
        devices = [d for d in devices if d == want or (want.index is None and d.type == want.type)]
    for dev in devices:
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        check_deferred(dev)
