"""``run()``: load → estimate → save, timing every stage; ``inspect()``: what a file holds.

The CLI is a thin layer over these two functions; Python users get the same
behaviour, errors and :class:`~rltscan.report.RunReport`.
"""

from __future__ import annotations

import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, NamedTuple

import numpy as np

from rltscan.errors import (
    BackendUnavailableError,
    MissingBootstrapError,
    OutputRefusedError,
    ParameterError,
    RltscanError,
)
from rltscan.io import open_input
from rltscan.io import writeback as wb
from rltscan.io.atomic import reset_committed
from rltscan.io.columns import ALIASES, quoted
from rltscan.io.layout import prepare
from rltscan.report import OutputInfo, RunReport, Stage

if TYPE_CHECKING:  # torch loads where a run computes; planning, inspect and --help need none
    import torch

Progress = Callable[[str, bool], None]  # (stage, started) -> None; the CLI draws it

TERMINAL_RULE = "terminated wins over truncated; ends of data and of episodes are truncations"


def _estimators() -> dict[str, Any]:
    """CLI command → the estimator's declaration (torch-free; ``.function`` loads torch)."""
    from rltscan.estimators import DECLARATIONS

    return DECLARATIONS


def _version() -> str:
    import rltscan

    return rltscan.__version__


def check_params(params: Mapping[str, float | None]) -> None:
    """Parameter ranges (docs/CONVENTIONS.md §5), checked before any file is opened: the
    declared ranges (the one table, ``declaration.check_params``), named as options."""
    from rltscan.estimators.declaration import check_params as declared

    declared(params, options=True)


def _check_device(device: str) -> None:
    if device not in ("auto", "cpu", "cuda") and not device.startswith("cuda:"):
        raise ParameterError(f'--device must be auto, cpu or cuda, got "{device}"')


def _no_gpu(device: str) -> BackendUnavailableError:
    return BackendUnavailableError(
        f"--device {device} was asked for but no CUDA GPU is available; pass --device cpu"
    )


def resolve_device(device: str) -> torch.device:
    """``auto`` → CUDA when available, else CPU; ``cuda`` without a GPU is an error."""
    import torch

    _check_device(device)
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise _no_gpu(device)
    return torch.device(device)


class PlannedDevice(NamedTuple):
    """The device a dry run reports, named without importing torch (``str`` as torch's)."""

    type: str
    index: int | None = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"


def planned_device(device: str) -> Any:
    """What :func:`resolve_device` would answer, without importing torch when it can.

    A dry run computes nothing, so it asks torch only when torch is already loaded or
    cannot be read without loading it (a ROCm build, an unreadable install). Otherwise
    a CPU build of torch means no GPU, and a CUDA build asks the driver how many
    devices it sees (``cuDeviceGetCount``, honouring ``CUDA_VISIBLE_DEVICES``).
    """
    _check_device(device)
    if "torch" in sys.modules:
        return resolve_device(device)
    if device == "cpu":
        return PlannedDevice("cpu")
    cuda = _cuda_available_without_torch()
    if cuda is None:
        return resolve_device(device)
    if device == "auto":
        return PlannedDevice("cuda" if cuda else "cpu")
    if not cuda:
        raise _no_gpu(device)
    index = device.partition(":")[2]
    return PlannedDevice("cuda", int(index) if index.isdigit() else None)


def _cuda_available_without_torch() -> bool | None:
    """``torch.cuda.is_available()`` from torch's build record and the driver; None: ask torch."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
        where = spec.submodule_search_locations if spec else None
        text = (Path(next(iter(where))) / "version.py").read_text() if where else ""
    except (ImportError, OSError, ValueError, StopIteration):
        return None
    build = {
        m.group(1): m.group(2).strip()
        for m in re.finditer(r"^(cuda|hip)\b[^=\n]*=\s*(.+)$", text, flags=re.MULTILINE)
    }
    if build.get("hip", "None") != "None" or "cuda" not in build:
        return None  # ROCm, or a record this code does not know: torch answers
    if build["cuda"] == "None":
        return False  # a CPU build of torch sees no GPU
    return _driver_device_count() > 0


def _driver_device_count() -> int:
    """Devices the CUDA driver reports (0 without a driver), through ``libcuda``."""
    import ctypes

    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return 0
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return 0
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return 0
    return int(count.value)


def _sync(device: Any) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


class _Clock:
    """Collects :class:`Stage` timings; synchronises the GPU before reading the clock."""

    def __init__(self, device: Any, progress: Progress | None) -> None:
        self.device = device
        self.stages: list[Stage] = []
        self.progress = progress

    @contextmanager
    def stage(self, name: str, *, bytes: int = 0, steps: int = 0) -> Any:
        box: dict[str, int] = {"bytes": bytes, "steps": steps}
        if self.progress:
            self.progress(name, True)
        _sync(self.device)
        start = time.perf_counter()
        try:
            yield box
            _sync(self.device)
        finally:
            if self.progress:
                self.progress(name, False)
        self.stages.append(Stage(name, time.perf_counter() - start, box["bytes"], box["steps"]))

    def skip(self, name: str) -> None:
        self.stages.append(Stage(name, 0.0, skipped=True))


def _to_device(kwargs: Mapping[str, Any], device: torch.device) -> dict[str, Any]:
    """numpy → torch on ``device``: zero-copy on CPU, pinned + non_blocking to CUDA."""
    import torch

    out: dict[str, Any] = {}
    for key, value in kwargs.items():
        if not isinstance(value, np.ndarray):
            out[key] = value
            continue
        with warnings.catch_warnings():  # Arrow buffers are read-only; nothing writes them
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            tensor = torch.from_numpy(np.ascontiguousarray(value))
        if device.type == "cuda":
            tensor = tensor.pin_memory().to(device, non_blocking=True)
        out[key] = tensor
    return out


def _params_used(spec: Any, given: Mapping[str, Any]) -> dict:
    """Every parameter of the estimator with the value that will be used (defaults filled)."""
    defaults = spec.defaults()
    return {n: given[n] if given.get(n) is not None else defaults.get(n) for n in spec.params}


def refuse_reading_outputs(
    names: list[str] | tuple[str, ...], roles: Mapping[str, str], estimator: str
) -> None:
    """An output may never replace a column the estimator reads, even with --overwrite."""
    read_columns = set(roles.values())
    for name in names:
        if name in read_columns:
            raise OutputRefusedError(
                f'output "{name}" would overwrite input column "{name}" that {estimator} reads, '
                "even with --overwrite; pass --prefix P"
            )


def refuse_clash(source: Any, target: wb.Target, names: list[str]) -> None:
    """Outputs that already exist at the target need --overwrite (or a --prefix)."""
    clash = wb.existing(source, target, names)
    if clash:
        raise OutputRefusedError(
            f'{target.describe()} already has "{clash[0]}"; pass --overwrite or --prefix P'
            if target.kind != "file"
            else f"{clash[0]} already exists; pass --overwrite to replace it"
        )


def call_options(
    spec: Any, params: Mapping[str, float], missing_bootstrap: str | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(keyword arguments for every call, the parameters as used)`` (defaults filled).

    ``spec`` is the estimator's :class:`~rltscan.estimators.declaration.Declaration`:
    its declared defaults are the function's (tests/test_declarations.py checks it).
    """
    call: dict[str, Any] = dict(params)
    takes_missing = spec.missing_bootstrap is not None
    if missing_bootstrap is not None and takes_missing:
        call["missing_bootstrap"] = missing_bootstrap
    used = _params_used(spec, params)
    if takes_missing:
        used["missing_bootstrap"] = call.get("missing_bootstrap", spec.missing_bootstrap)
    return call, used


def provenance(
    spec: Any, estimator: str, used: Mapping[str, Any], roles: Mapping[str, str], layout: str
) -> dict[str, Any]:
    """What is recorded beside the outputs (HDF5 attributes, Parquet metadata)."""
    return {
        "estimator": spec.name,
        "command": estimator,
        "params": dict(used),
        "source_columns": dict(roles),
        "rltscan_version": _version(),
        "terminal_rule": TERMINAL_RULE,
        "layout": layout,
    }


def _backend_name(backend: str, device: Any) -> str:
    if backend != "auto":
        return backend
    return "triton" if device.type == "cuda" else "torch"


@wb.guarded  # the write-back rules: checks, lock, identity (README "Write-back rules")
def run(
    estimator: str,
    input: str,
    *,
    output: str | None = None,
    to: str | None = None,
    prefix: str = "",
    overwrite: bool = False,
    dry_run: bool = False,
    params: Mapping[str, float | None] | None = None,
    columns: Mapping[str, str | None] | None = None,
    layout: str | None = None,
    group: str | None = None,
    dones_mean: str | None = None,
    ends_are: str | None = None,
    missing_bootstrap: str | None = None,
    device: str = "auto",
    backend: str = "auto",
    stdin: BinaryIO | None = None,
    stdout: BinaryIO | None = None,
    progress: Progress | None = None,
    chunk_steps: int | None = None,
    block_steps: int | None = None,
    engine: str | None = None,
    ray_address: str | None = None,
    workers: int | None = None,
    order_by: str | None = None,
    ignore: tuple[str, ...] | list[str] = (),
    break_links: bool = False,
) -> RunReport:
    """Compute ``estimator`` (a CLI command name, e.g. ``"gae"``) over ``input``.

    Results go into the input (default), into ``output`` (a new file), or to
    ``stdout`` when ``output == "-"``. Raises :class:`~rltscan.errors.RltscanError`
    subclasses for every user-facing problem.

    HDF5 arrays and Parquet files written back to their own format are streamed:
    read, computed and written ``chunk_steps`` steps at a time with the recurrence
    carried across (:mod:`rltscan.stream`), so memory does not grow with the file.
    ``block_steps`` is the size of one estimator call; for a given ``block_steps``
    the results are bit-identical whatever ``chunk_steps`` is.

    A directory or glob of Parquet files (or, with ``engine``, a Minari Parquet
    dataset) is a sharded dataset (:mod:`rltscan.shards`): ``engine="local"`` (the
    default) runs its shards in this process, ``engine="ray"`` on Ray Data
    (``ray_address``, ``workers``); both give identical outputs, written to each
    shard in place or to the directory ``output``. ``order_by`` orders the shards
    by the first value of a column instead of by file name.

    ``ignore`` names columns that look like a role (a flag, an id, a value) but must
    not be used. ``dry_run`` plans: it resolves every column, reads only the flag
    columns and the reference column, checks the rest from the file's metadata, and
    computes and writes nothing.
    """
    ignore = tuple(ignore)
    specs = _estimators()
    if estimator not in specs:
        raise ParameterError(f'unknown estimator "{estimator}"; pick one of: {quoted(specs)}')
    spec = specs[estimator]
    params = {k: v for k, v in (params or {}).items() if v is not None}
    unknown = [k for k in params if k not in spec.params]
    if unknown:
        raise ParameterError(
            f'{estimator} takes no parameter "{unknown[0]}"; its parameters: {quoted(spec.params)}'
        )
    check_params(params)
    if missing_bootstrap not in (None, "error", "zero"):
        raise ParameterError(
            f'--missing-bootstrap must be "error" or "zero", got "{missing_bootstrap}"'
        )
    for name, value in (("--chunk-steps", chunk_steps), ("--block-steps", block_steps)):
        if value is not None and value < 1:
            raise ParameterError(f"{name} must be a positive number of steps, got {value}")
    if engine is not None and engine not in ("local", "ray"):
        raise ParameterError(f'--engine must be local or ray, got "{engine}"')
    from rltscan.io.shards import is_sharded

    if is_sharded(input, engine):
        from rltscan import shards

        reset_committed()
        return shards.run_sharded(
            estimator,
            spec,
            input,
            _Clock(PlannedDevice("cpu"), progress),  # (shards run on their own devices)
            output=output,
            to=to,
            prefix=prefix,
            overwrite=overwrite,
            dry_run=dry_run,
            params=params,
            overrides=dict(columns or {}),
            dones_mean=dones_mean,
            ends_are=ends_are,
            missing_bootstrap=missing_bootstrap,
            device=device,
            backend=backend,
            chunk_steps=chunk_steps,
            block_steps=block_steps,
            engine=engine,
            ray_address=ray_address,
            workers=workers,
            order_by=order_by,
            ignore=ignore,
        )
    if engine == "ray" or workers is not None or ray_address is not None or order_by is not None:
        raise ParameterError(
            f"{input} is one file; --engine ray, --workers, --ray-address and --order-by take "
            "a directory or glob of Parquet shards (or a Minari Parquet dataset)"
        )
    dev = planned_device(device) if dry_run else resolve_device(device)
    clock = _Clock(dev, progress)
    reset_committed()
    overrides = dict(columns or {})

    with clock.stage("detect"):
        source = open_input(
            input, group=group, layout=layout, rewards=overrides.get("rewards"), stdin=stdin
        )
    try:
        return _run(
            estimator,
            spec,
            source,
            clock,
            dev,
            output=output,
            to=to,
            prefix=prefix,
            overwrite=overwrite,
            dry_run=dry_run,
            params=params,
            overrides=overrides,
            dones_mean=dones_mean,
            ends_are=ends_are,
            missing_bootstrap=missing_bootstrap,
            backend=backend,
            stdout=stdout,
            chunk_steps=chunk_steps,
            block_steps=block_steps,
            ignore=ignore,
        )
    finally:
        source.close()


def _run(
    estimator: str,
    spec: Any,
    source: Any,
    clock: _Clock,
    dev: Any,
    *,
    output: str | None,
    to: str | None,
    prefix: str,
    overwrite: bool,
    dry_run: bool,
    params: dict[str, float],
    overrides: dict[str, str | None],
    dones_mean: str | None,
    ends_are: str | None,
    missing_bootstrap: str | None,
    backend: str,
    stdout: BinaryIO | None,
    chunk_steps: int | None = None,
    block_steps: int | None = None,
    ignore: tuple[str, ...] = (),
) -> RunReport:
    target = wb.plan_target(source, output, to)
    if wb.streamable(source, target):
        from rltscan import api_stream

        return api_stream.run_streamed(
            estimator,
            spec,
            source,
            clock,
            dev,
            target=target,
            prefix=prefix,
            overwrite=overwrite,
            dry_run=dry_run,
            params=params,
            overrides=overrides,
            dones_mean=dones_mean,
            ends_are=ends_are,
            missing_bootstrap=missing_bootstrap,
            backend=backend,
            chunk_steps=chunk_steps,
            block_steps=block_steps,
            ignore=ignore,
        )
    if target.kind == "stdout" and stdout is None and not dry_run:
        import sys

        stdout = sys.stdout.buffer
    options, used = call_options(spec, params, missing_bootstrap)
    with clock.stage("plan" if dry_run else "read") as box:
        prepared = prepare(
            source,
            arguments=spec.inputs,
            required=spec.required,
            overrides=overrides,
            dones_mean=dones_mean,  # type: ignore[arg-type]
            ends_are=ends_are,  # type: ignore[arg-type]
            ignore=ignore,
            bootstrap=used.get("missing_bootstrap"),
            flags_only=dry_run,
        )
        box["bytes"], box["steps"] = prepared.bytes_read, prepared.steps

    names = [prefix + n for n in _output_names(spec, prepared)]
    if not dry_run and not overwrite:
        refuse_clash(source, target, names)
    refuse_reading_outputs(names, prepared.roles, estimator)
    if dry_run:
        return plan_report(estimator, spec, source, target, prepared, names, used, clock, dev)
    call: dict[str, Any] = {**prepared.kwargs, **options}
    call["time_dim"] = prepared.time_dim
    call["backend"] = backend
    in_bytes = sum(v.nbytes for v in prepared.kwargs.values() if isinstance(v, np.ndarray))

    with clock.stage("to device", bytes=in_bytes, steps=prepared.steps):
        tensors = _to_device(call, dev)
    with _cli_bootstrap_hint():
        if dev.type == "cuda":
            with clock.stage("warm-up", steps=prepared.steps):
                spec.function(**tensors)
        else:
            clock.skip("warm-up")
        with clock.stage("scan", steps=prepared.steps) as box:
            result = spec.function(**tensors)
            produced = {prefix + k: v for k, v in dict(result).items() if v is not None}
            out_bytes = sum(int(v.numel() * v.element_size()) for v in produced.values())
            box["bytes"] = in_bytes + out_bytes
    with clock.stage("from device", bytes=out_bytes, steps=prepared.steps):
        arrays = {k: v.detach().cpu().numpy() for k, v in produced.items()}

    metadata = provenance(spec, estimator, used, prepared.roles, source.layout)
    written = False
    if dry_run:
        clock.skip("write")
    else:
        with clock.stage("write", steps=prepared.steps) as box:
            box["bytes"] = wb.write(
                source,
                prepared,
                target,
                arrays,
                metadata=metadata,
                overwrite=overwrite,
                stdout=stdout,
            )
        written = True

    outputs = [
        OutputInfo(name, _shape(a, prepared), str(a.dtype), _location(source, target, name))
        for name, a in arrays.items()
    ]
    return RunReport(
        command=estimator,
        input=source.where,
        output=target.describe(),
        format=source.format if source.backend is None else f"{source.format}/{source.backend}",
        layout=source.layout,
        device=str(dev),
        backend=getattr(result, "backend", None) or _backend_name(backend, dev),
        dtype=prepared.dtype,
        steps=prepared.steps,
        episodes=prepared.episodes,
        sequences=prepared.sequences,
        params=used,
        columns=dict(prepared.roles),
        outputs=outputs,
        stages=clock.stages,
        counts=prepared.counts,
        notes=[*prepared.notes, *assumption_notes(prepared.counts, used, source.layout)],
        dry_run=dry_run,
        written=written,
        rltscan_version=_version(),
    )


def assumption_notes(counts: Mapping[str, int], used: Mapping[str, Any], layout: str) -> list[str]:
    """The defaults that changed numbers in this run, as report notes (never silent)."""
    notes = []
    open_ends = counts.get("open_ends", 0)
    if open_ends:
        what = (
            "the data ends with no flag"
            if layout in ("flat", "episodes")
            else f"{open_ends} sequence(s) end with no flag"
        )
        notes.append(f"{what}: treated as a truncation (bootstrapped from V(s_t+1))")
    zero = counts.get("zero_bootstraps", 0)
    if zero:
        notes.append(
            f"{zero} truncation(s) had no bootstrap value V(s_t+1) and used 0 "
            f"(--missing-bootstrap {used.get('missing_bootstrap', 'zero')}); "
            "pass --next-values KEY to bootstrap them"
        )
    return notes


def plan_report(
    estimator: str,
    spec: Any,
    source: Any,
    target: wb.Target,
    prepared: Any,
    names: list[str],
    used: Mapping[str, Any],
    clock: _Clock,
    dev: Any,
) -> RunReport:
    """The report of a dry run: what would be computed and written, from the plan alone."""
    ref = np.dtype(prepared.dtype)
    dtype = str(ref) if ref.kind == "f" and ref.itemsize >= 4 else "float32"
    shape = _planned_shape(source, prepared)
    outputs = [OutputInfo(n, shape, dtype, _location(source, target, n)) for n in names]
    return RunReport(
        command=estimator,
        input=source.where,
        output=target.describe(),
        format=source.format if source.backend is None else f"{source.format}/{source.backend}",
        layout=source.layout,
        device=str(dev),
        backend="none (dry run)",
        dtype=prepared.dtype,
        steps=prepared.steps,
        episodes=prepared.episodes,
        sequences=prepared.sequences,
        params=dict(used),
        columns=dict(prepared.roles),
        outputs=outputs,
        stages=clock.stages,
        counts=prepared.counts,
        notes=[*prepared.notes, *assumption_notes(prepared.counts, used, source.layout)],
        dry_run=True,
        written=False,
        rltscan_version=_version(),
    )


def _planned_shape(source: Any, prepared: Any) -> tuple[int, ...]:
    if prepared.lengths:
        return (len(prepared.lengths), -1)
    if source.layout == "flat":
        return (prepared.steps,)
    per = prepared.steps // max(prepared.sequences, 1)
    if source.layout == "time-major":
        return (per, prepared.sequences)
    return (prepared.sequences, per)


def _output_names(spec: Any, prepared: Any) -> list[str]:
    """The outputs this call will produce (Retrace's advantages only with v_pi)."""
    names = list(spec.outputs)
    if "v_pi" in spec.inputs and "v_pi" not in prepared.kwargs and "advantages" in names:
        names.remove("advantages")
    return names


def _shape(array: np.ndarray, prepared: Any) -> tuple[int, ...]:
    if prepared.lengths:
        return (len(prepared.lengths), -1)  # one (T_i,) dataset per episode
    return tuple(int(d) for d in array.shape)


def _location(source: Any, target: wb.Target, name: str) -> str:
    if target.kind == "stdout":
        return f"stdout column {name}"
    if source.format in ("hdf5", "minari") and (
        target.kind == "inplace" or target.format == "hdf5"
    ):
        group = source.group.rstrip("/")
        if source.episode_keys:
            return f"{target.path}:{group}/<episode>/{name}"
        return f"{target.path}:{group}/{name}"
    return f"{target.path} column {name}"


# --------------------------------------------------------------------------- inspect


def inspect(
    path: str,
    *,
    group: str | None = None,
    layout: str | None = None,
    columns: Mapping[str, str | None] | None = None,
    dones_mean: str | None = None,
    ends_are: str | None = None,
    stdin: BinaryIO | None = None,
    ignore: tuple[str, ...] | list[str] = (),
    missing_bootstrap: str | None = None,
) -> dict[str, Any]:
    """What ``path`` holds: layout, columns and their roles, flag counts, and for each
    estimator whether it can run (and if not, what it still needs).

    Each estimator is planned exactly as ``run(..., dry_run=True)`` plans it (the same
    resolver, the same missing-bootstrap rule), so "ready" means the run will go."""
    overrides = dict(columns or {})
    source = open_input(
        path, group=group, layout=layout, rewards=overrides.get("rewards"), stdin=stdin
    )
    try:
        cache: dict[str, Any] = {}
        read = source.read

        def cached(name: str) -> Any:
            if name not in cache:
                cache[name] = read(name)
            return cache[name]

        source.read = cached
        info: dict[str, Any] = {
            "input": source.where,
            "format": source.format
            if source.backend is None
            else f"{source.format}/{source.backend}",
            "layout": source.layout,
            "group": source.group if source.format == "hdf5" else None,
            "steps": None,
            "episodes": None,
            "sequences": None,
            "counts": {},
            "notes": [],
        }
        roles: dict[str, str] = {}
        estimators: dict[str, Any] = {}
        for command, spec in _estimators().items():
            _, used = call_options(spec, {}, missing_bootstrap)
            try:
                prepared = prepare(
                    source,
                    arguments=spec.inputs,
                    required=spec.required,
                    overrides=overrides,
                    dones_mean=dones_mean,  # type: ignore[arg-type]
                    ends_are=ends_are,  # type: ignore[arg-type]
                    ignore=tuple(ignore),
                    bootstrap=used.get("missing_bootstrap"),
                    strict=False,
                    flags_only=True,
                )
            except RltscanError as err:
                estimators[command] = {"ready": False, "needs": _needs(err)}
                continue
            estimators[command] = {"ready": True, "needs": ""}  # bootstraps checked too
            roles.update(prepared.roles)
            if info["steps"] is None or command == "gae":
                info.update(
                    steps=prepared.steps,
                    episodes=prepared.episodes,
                    sequences=prepared.sequences,
                    counts=prepared.counts,
                    notes=[
                        *prepared.notes,
                        *assumption_notes(prepared.counts, used, source.layout),
                    ],
                )
        by_column: dict[str, list[str]] = {}
        for role, name in roles.items():
            by_column.setdefault(name, []).append(role)
        info["columns"] = [
            {
                "name": c.name,
                "shape": list(c.shape),
                "dtype": c.dtype,
                "role": ", ".join(by_column.get(c.name, [])) or None,
            }
            for c in source.describe_columns()
        ]
        if info["steps"] is None:  # nothing can run yet: say at least how big it is
            info["steps"] = source.steps or _column_steps(source)
            info["sequences"] = 1 if source.layout == "flat" else None
        info["roles"] = roles
        info["estimators"] = estimators
        return info
    finally:
        source.close()


def _column_steps(source: Any) -> int | None:
    """Steps from the first rewards-like column's shape (episodes: the lengths)."""
    if source.episode_lengths:
        return int(sum(source.episode_lengths))
    for name in ALIASES["rewards"]:
        info = source.columns.get(name)
        if info is not None and info.shape:
            dims = 1 if source.layout == "flat" else 2
            return int(np.prod(info.shape[:dims]))
    return None


def _needs(err: RltscanError) -> str:
    """What is missing, from the error's fields: ``a "q_values" column (--q-values KEY)``,
    else its fix, else the whole message."""
    if err.column is not None and err.option is not None:
        return f'a "{err.column}" column ({err.option})'
    return err.fix or str(err)


@contextmanager
def _cli_bootstrap_hint() -> Iterator[None]:
    """Say the file-level fix (column options) instead of the Python argument names."""
    try:
        yield
    except MissingBootstrapError as e:
        raise e.replace(
            fix="pass --next-values KEY (or --last-values KEY for a [T, B] buffer), "
            "or --missing-bootstrap zero to treat it as 0",
        ) from None
