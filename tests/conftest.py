"""Shared fixtures: backends, tolerances, seeded generators.

Without CUDA (CI) the Triton backend runs through Triton's interpreter, which
must be switched on before triton is first imported; tiles are forced small so
the multi-tile, multi-program and look-back paths run at small sizes.
"""

from __future__ import annotations

import importlib.util
import os
import zlib

import numpy as np
import pytest
import torch

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")

HAS_NUMBA = importlib.util.find_spec("numba") is not None
# the fused CPU backend needs numba (an optional extra, in the test extra so CI runs it)
BACKENDS = [
    "reference",
    "torch",
    "triton",
    pytest.param("cpu", marks=pytest.mark.skipif(not HAS_NUMBA, reason="numba not installed")),
]

# docs/CONVENTIONS.md §2.6: rtol 1e-5, atol 1e-5 * max(1, max|out|) for fp32 against float64.
RTOL = {
    torch.float64: 1e-10,
    torch.float32: 1e-5,
    torch.float16: 1e-5,  # inputs are rounded to fp16 first; the oracle sees the same values
    torch.bfloat16: 1e-5,
}


def tolerance(dtype: torch.dtype, want: torch.Tensor) -> dict[str, float]:
    scale = max(1.0, float(want.abs().max())) if want.numel() else 1.0
    rtol = RTOL[dtype]
    return {"rtol": rtol, "atol": rtol * scale}


def assert_close_to_oracle(got, want, dtype: torch.dtype) -> None:
    """Compare an output with a float64 oracle at the tolerance of ``dtype``'s compute."""
    g = torch.as_tensor(np.asarray(got) if not isinstance(got, torch.Tensor) else got)
    w = torch.as_tensor(np.asarray(want) if not isinstance(want, torch.Tensor) else want)
    g, w = g.detach().cpu().double(), w.detach().cpu().double()
    torch.testing.assert_close(g, w, **tolerance(dtype, w), equal_nan=False)


@pytest.fixture
def tol():
    """dtype -> kwargs builder: ``tol(dtype, want)``, rtol/atol per docs/CONVENTIONS.md §2.6."""
    return tolerance


def is_slow_backend(backend: str) -> bool:
    """The reference loop and the interpreted Triton kernel: keep their inputs small."""
    return backend == "reference" or (backend == "triton" and not HAS_CUDA)


@pytest.fixture(params=BACKENDS)
def backend(request) -> str:
    return request.param


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A generator seeded from the test id: reproducible, different per test."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def _small_triton_tiles():
    """Force tiny Triton tiles under the interpreter so multi-tile paths are exercised
    (2 rows x 8 steps: a 37-step test has 5 tiles in time; 4 steps cost 40% more
    interpreter time and cover nothing more)."""
    if HAS_CUDA:
        yield
        return
    from rltscan.scan import triton_scan

    with triton_scan.tile_override(rows=2, chunk=8):
        yield


def pytest_collection_modifyitems(config, items):
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (run with -m gpu on the device)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def torch_rollout(g: torch.Generator, shape: tuple[int, ...], trunc_rate: float) -> tuple:
    """(rewards, values, terminated, truncated, bootstrap_values) drawn from ``g``: about
    one step in ten terminated, ``trunc_rate`` of the rest truncated."""
    r = torch.randn(shape, generator=g)
    v = torch.randn(shape, generator=g)
    term = torch.rand(shape, generator=g) < 0.1
    trunc = (torch.rand(shape, generator=g) < trunc_rate) & ~term
    boot = torch.randn(shape, generator=g)
    return r, v, term, trunc, boot


def _record_launches(monkeypatch: pytest.MonkeyPatch, pick) -> list:
    """``pick(consts)`` of every kernel launch through ``Launch.fire`` from now on (a
    bound call's direct launches do not pass there)."""
    from rltscan.scan import triton_scan

    seen: list = []
    orig = triton_scan.Launch.fire

    def fire(self, *a, **kw):
        seen.append(pick(dict(self.consts)))
        return orig(self, *a, **kw)

    monkeypatch.setattr(triton_scan.Launch, "fire", fire)
    return seen


def launch_kinds(monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """The (KIND, HAS_DISC, HAS_LAMT) of every kernel launch through ``Launch.fire``
    from now on (a bound call's direct launches do not pass there)."""
    return _record_launches(monkeypatch, lambda c: (c["KIND"], c["HAS_DISC"], c["HAS_LAMT"]))


def launch_nsets(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The NSET (settings in one launch) of every kernel launch through ``Launch.fire``
    from now on."""
    return _record_launches(monkeypatch, lambda c: c["NSET"])
