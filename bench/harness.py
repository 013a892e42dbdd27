"""What only the scripts under ``bench/`` use, beside the measuring code they share with
``rltscan bench`` (``rltscan/bench.py``: inputs, calls, the float64 check, ``timed_us``,
the copy floor, the torch.compile baseline): the record of the machine and the code a
result was measured on, the result files, the kernel's own GPU time, host time per call,
and the by-name lookups of an estimator's declaration and bound arguments.

Not part of the installed package: import it from the repository's root
(``from bench import harness``; ``python -m bench.X`` and ``PYTHONPATH=.`` put the root on
the path).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import torch

from rltscan import bench
from rltscan.estimators import declared_module
from rltscan.estimators.declaration import Declaration

# ---------------------------------------------------------------------------
# Estimators by name


def declaration(kind: str) -> Declaration:
    """The declaration of the estimator ``kind`` (its ``Problem.kind``, e.g. "td_lambda")."""
    return declared_module(kind).DECLARATION


def arguments(kind: str, kwargs: dict[str, Any]) -> dict[str, Any]:
    """Every argument of ``rltscan.bench.function(kind)(**kwargs)`` by name, defaults
    filled in (what the function's call key and a bound launch read)."""
    import inspect

    bound = inspect.signature(bench.function(kind)).bind(**kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


# ---------------------------------------------------------------------------
# The record of a run and its result files


def run_record(gpu: str | None = None) -> dict[str, Any]:
    """What a benchmark result file starts with: the GPU (or ``gpu``; the CPU's machine
    name where there is no CUDA) and its driver,
    torch, triton (None where it is not installed) and Python versions, the date, the
    host's CPU count, and the code measured (:func:`code_record`)."""
    try:
        import triton
    except ImportError:
        triton = None
    return {
        "gpu": gpu if gpu is not None else _device_name(),
        "driver": _driver_version(),
        "torch": torch.__version__,
        "triton": None if triton is None else triton.__version__,
        "python": platform.python_version(),
        "date": datetime.date.today().isoformat(),
        "cpus": os.cpu_count(),
        **code_record(),
    }


def _device_name() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return f"CPU ({platform.machine()}, {os.cpu_count()} cores)"


def _driver_version() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def tree_hash(root: str | os.PathLike[str] | None = None) -> str:
    """SHA-256 (first 16 hex digits) over the path and bytes of every ``.py`` and ``.sh``
    file under ``root``'s ``rltscan/`` and ``bench/``, ``bench/results`` and hidden
    folders (``bench/.baselines``, carried to the GPU machine) left out: names the code a
    run measured where the copy on the GPU machine has no git history. Compare with
    ``python -c "from bench import harness; print(harness.tree_hash())"`` at a commit."""
    base = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for sub in ("rltscan", "bench"):
        for path in sorted((base / sub).rglob("*")):
            parts = path.relative_to(base).parts
            if path.suffix not in (".py", ".sh") or parts[:2] == ("bench", "results"):
                continue
            if "__pycache__" in parts or any(p.startswith(".") for p in parts):
                continue
            if path.is_file():
                digest.update("/".join(parts).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def code_record(root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """``tree``: :func:`tree_hash`; ``commit``: ``git rev-parse HEAD`` where ``root`` is
    itself a git checkout's top (else None), and ``dirty``: the paths ``git status``
    lists there."""
    base = Path(root) if root is not None else Path(__file__).resolve().parents[1]
    rec: dict[str, Any] = {"tree": tree_hash(base), "commit": None, "dirty": None}

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(base), *args], capture_output=True, text=True, timeout=30,
            check=True,
        ).stdout  # fmt: skip

    try:
        if Path(git("rev-parse", "--show-toplevel").strip()).resolve() != base.resolve():
            return rec  # a copy inside another repository: its commit is not ours
        rec["commit"] = git("rev-parse", "HEAD").strip()
        rec["dirty"] = [ln[3:] for ln in git("status", "--porcelain").splitlines()]
    except (OSError, subprocess.SubprocessError):
        pass
    return rec


def write_result(
    prefix: str,
    record: dict[str, Any],
    header: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    title: str | None = None,
    caption: str | None = None,
) -> str:
    """A benchmark script's result files: ``prefix.json`` (``record``, every figure) and
    ``prefix.md`` (``title``, ``caption`` and the table of ``rows`` under ``header``, the
    table the README quotes); returns the markdown."""
    with open(prefix + ".json", "w") as fh:
        json.dump(record, fh, indent=1)
    lines = [f"# {title}", ""] if title else []
    if caption:
        lines += [caption, ""]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    text = "\n".join(lines) + "\n"
    with open(prefix + ".md", "w") as fh:
        fh.write(text)
    return text


# ---------------------------------------------------------------------------
# Timers beside ``rltscan.bench.timed_us``


def kernel_us(fn: Callable[[], Any], n: int = 20) -> float:
    """Mean GPU time of the fused kernel per call of ``fn`` (torch profiler, CUDA events)."""
    fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
    return sum(e.device_time_total for e in prof.key_averages() if "_scan_kernel" in e.key) / n


def host_us(
    fn: Callable[[], Any], n: int = 1000, *, best_of: int = 1, waited: bool = False
) -> float:
    """Host time per call of ``fn`` in a loop of ``n`` calls, the best of ``best_of``
    loops: without waiting for the device (launch overhead), or with ``waited`` the
    loop including the wait for the device at its end (what a loop of calls pays: the
    larger of host and device time per call, once the queue fills)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(best_of):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        if waited:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
        torch.cuda.synchronize()
    return best / n * 1e6
