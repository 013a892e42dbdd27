"""Calls bound to a shape: an estimator called again on tensors of the same shapes,
dtypes, strides and device, with the same parameters, costs one kernel launch.

The first call of a shape runs the whole front end (``functions._run``: checks,
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
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

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
def key_function(d: Declaration) -> Callable[[dict[str, Any]], tuple | None]:
    """``call_key`` for one declaration as straight-line generated code: per array
    ``(dtype, shape, strides, device index)`` or None, then the scalars as given."""
    lines = [
        "def key(a):",
        "    if a['carry'] is not None or a['backend'] not in B:",
        "        return None",
    ]
    parts = ["a['validate']", "a['time_dim']", "a['backend']"]
    for i, n in enumerate(d.inputs):
        lines += [
            f"    x = a.get({n!r})",
            "    if x is None:",
            f"        k{i} = None",
            "    elif type(x) is T:",
            f"        k{i} = (x.dtype, x.shape, x.stride(), x.get_device())",
            "    else:",
            "        return None",
        ]
        parts.append(f"k{i}")
    for i, n in enumerate(_scalar_names(d)):
        lines += [
            f"    s{i} = a[{n!r}]",
            f"    if s{i} is not None and type(s{i}) not in S:",
            "        return None",
        ]
        parts.append(f"s{i}")
    lines.append(f"    return ({', '.join(parts)},)")
    ns: dict[str, Any] = {"B": _BACKENDS, "T": Tensor, "S": (float, int, str)}
    exec(compile("\n".join(lines) + "\n", f"<rltscan.call_key.{d.name}>", "exec"), ns)
    return ns["key"]


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
    ) -> None:
        self.declaration = d
        self.launch = launch
        self.device = device
        self.deferred = deferred
        self.outputs = outputs
        self.per_step = per_step
        self._names = tuple(name for name, *_ in outputs)
        # the launch alone (pointers gathered, the launcher called): what run() adds to
        # the output allocations; profilers (bench/host_path.py) time it on its own
        self.firing = _firing(slots, launch, device)
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
        check_id, (fire, slow, pointers, direct) = self._check_id, self.firing
        ptrs = None if pointers is None else pointers(args, outs)
        if direct is None or ptrs is None or any(p % 16 for p in ptrs):

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


class _Firing(NamedTuple):
    fire: Callable[[dict, list, int], None]  # (args, outs, check_id): the launch
    slow: Callable[[dict, list, int], None]  # the same through Launch.fire
    pointers: Callable[[dict, list], list[int]] | None  # the launcher's pointer arguments
    direct: triton_scan.Direct | None  # the compiled kernel's launcher


def _firing(
    slots: list[tuple[int, Any]], launch: triton_scan.Launch, device: torch.device
) -> _Firing:
    """The launch on a call's arrays (``args``, ``outs``), as generated code.

    With the compiled kernel's launcher (``Launch.direct``) the pointers are read once
    each as integers (the fixed buffer's address is a constant) and checked for 16-byte
    alignment, Triton's specialisation; an unaligned array or an installed launch hook
    takes ``Launch.fire`` with the tensors, as does every call without a launcher."""
    items, fixed, ptrs = [], [], []  # the tensors (for Launch.fire), and as integers
    reads: dict[str, str] = {}  # each array's address is read once
    for kind, what in slots:
        if kind == _FIXED:
            items.append(f"f[{len(fixed)}]")
            ptrs.append(str(what.data_ptr()))  # a fixed buffer: its address is a constant
            fixed.append(what)
            continue
        item = f"a[{what!r}]" if kind == _IN else f"o[{what}]"
        items.append(item)
        ptrs.append(reads.setdefault(item, f"x{len(reads)}"))
    ns: dict[str, Any] = {"f": tuple(fixed), "launch": launch, "dev": device}
    src = f"def slow(a, o, cid):\n    launch.fire([{', '.join(items)}], dev, cid)\n"
    direct = launch.direct(device)
    if direct is not None and any(t.data_ptr() % 16 for t in fixed):
        direct = None
    if direct is None:
        src += "fire = slow\n"
    else:
        ns["direct"] = direct
        lines = [f"    {v} = {item}.data_ptr()" for item, v in reads.items()]
        src += "def pointers(a, o):\n" + "\n".join(lines) + f"\n    return [{', '.join(ptrs)}]\n"
        lines += [
            f"    if ({' | '.join(reads.values())}) & 15 or not direct([{', '.join(ptrs)}], cid):",
            "        slow(a, o, cid)",
        ]
        src += "def fire(a, o, cid):\n" + "\n".join(lines) + "\n"
    exec(compile(src, "<rltscan.bound>", "exec"), ns)  # built from slot kinds alone
    return _Firing(ns["fire"], ns["slow"], ns.get("pointers"), direct)


def build(
    d: Declaration,
    args: dict[str, Any],
    fired: triton_scan.Fired,
    outputs: dict[str, Tensor],
    device: torch.device,
    deferred: bool,
) -> Bound | None:
    """A :class:`Bound` for this call, when each kernel argument is one of the caller's
    tensors as given, an output, or a fixed buffer (the error word); else None."""
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
    slots: list[tuple[int, Any]] = []
    for i, t in enumerate(fired.tensors):
        p = t.data_ptr()
        if i == _ts().ERR_SLOT and fired.launch.check:
            slots.append((_FIXED, t))
        elif p in out_ptr:
            slots.append((_OUT, out_ptr[p]))
        elif p in by_ptr and _same_view(t, args[by_ptr[p]]):
            slots.append((_IN, by_ptr[p]))
        else:
            return None  # a copy or conversion: the front end must run every time
    meta = [(k, tuple(o.shape), tuple(o.stride()), o.dtype) for k, o in out_list]
    per_step = tuple(n for n in PER_STEP_PARAMETERS if args.get(n) is not None)
    return Bound(d, fired.launch, slots, meta, device, deferred, per_step)


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
