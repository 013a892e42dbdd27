"""The host statistics kernel (rltscan.scan.cpu_fused.block_statistics) against torch's
passes (stats.block_moments and the bucket index_add): the same counts, min, max and
buckets, the mean and M2 to float64 rounding, for every float dtype a CPU run makes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rltscan import stats

pytest.importorskip("numba")
from rltscan.scan import cpu_fused


def _torch_row(x: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    acc = stats.OutputAccumulator()
    x = x.reshape(-1)
    row = stats.block_moments(x, select=False).numpy()
    acc._add_buckets("y", x)
    return row, acc._buckets["y"].numpy()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
@pytest.mark.parametrize("case", ["plain", "nonfinite", "all-nan", "huge"])
def test_kernel_equals_torch_passes(dtype: torch.dtype, case: str) -> None:
    rng = np.random.default_rng(7)
    x = torch.from_numpy(rng.standard_normal(5000) * 40 - 3).to(dtype)
    if case == "nonfinite":
        x[[0, 17, 4999]] = float("nan")
        x[[3, 9]] = float("inf")
        x[11] = -float("inf")
    elif case == "all-nan":
        x[:] = float("nan")
    elif case == "huge" and dtype == torch.float64:
        x[[1, 2]] = torch.tensor([1e300, -1e39], dtype=dtype)  # finite, past float32
    want_row, want_buckets = _torch_row(x)
    got_buckets = np.zeros(stats.BUCKETS, np.int64)
    arr = (x if dtype != torch.float16 else x.float()).numpy()
    got = np.array(cpu_fused.block_statistics(arr, got_buckets))
    np.testing.assert_array_equal(got_buckets, want_buckets)
    np.testing.assert_array_equal(got[[0, 3, 4, 5]], want_row[[0, 3, 4, 5]])  # n, min, max, bad
    np.testing.assert_allclose(got[[1, 2]], want_row[[1, 2]], rtol=1e-12, atol=1e-300)


def test_accumulator_takes_the_kernel_on_the_host() -> None:
    """A CPU block goes through the kernel (one pass), and the report's numbers match
    the torch passes' to rounding, non-finite entries counted apart."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal(100_000).astype(np.float32)
    x[::997] = np.nan
    acc = stats.OutputAccumulator()
    for a in range(0, x.size, 30_000):
        acc.add({"y": x[a : a + 30_000]})
    got = acc.result()["y"]
    want = stats.OutputStats.of(x)
    assert got.histogram == want.histogram
    g, w = got.moments, want.moments
    assert (g.count, g.nonfinite, g.min, g.max) == (w.count, w.nonfinite, w.min, w.max)
    np.testing.assert_allclose([g.mean, g.std], [w.mean, w.std], rtol=1e-12)
