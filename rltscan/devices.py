"""Which device a run computes on, named without importing torch where it can.

``resolve_device`` answers for a run that computes (it imports torch);
``planned_device`` answers for a plan (a dry run), from torch's build record and the
CUDA driver, so ``--dry-run`` stays torch-free.
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from rltscan.errors import BackendUnavailableError, ParameterError

if TYPE_CHECKING:
    import torch


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


def run_device(device: str) -> Any:
    """The device a computing run uses. The CPU is named without importing torch where
    torch's build record and the driver settle it (:func:`planned_device`'s answer), so
    a CPU run opens and plans its file before torch is needed (the CLI loads torch
    meanwhile on a thread, :mod:`rltscan.preload`); a GPU is torch's device."""
    _check_device(device)
    if device == "cpu" or (device == "auto" and _cuda_available_without_torch() is False):
        return PlannedDevice("cpu")
    return resolve_device(device)


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
