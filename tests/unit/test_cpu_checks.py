"""The finite-sum screen of the content checks (estimators/_checks.finite_sum): host
columns summed by numpy through their strides, an overflowing sum falling through to
the entry-by-entry check, a NaN anywhere caught."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import rltscan
from rltscan.errors import DataError
from rltscan.estimators._checks import finite_sum


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_finite_sum_on_strided_views(dtype: torch.dtype) -> None:
    x = torch.from_numpy(np.random.default_rng(0).standard_normal((64, 33))).to(dtype)
    view = x.t()  # time-major: not contiguous
    assert finite_sum(view)
    view[5, 7] = float("nan")
    assert not finite_sum(view)


def test_overflowing_sum_falls_through_to_the_entries() -> None:
    """No numpy warning reaches the user: the overflow only sends the column on."""
    warnings.simplefilter("error")
    r = torch.full((1, 8), 3e38, dtype=torch.float32)  # finite entries, sum overflows
    assert not finite_sum(r)
    kw = {
        "gamma": 0.9,
        "lam": 0.9,
        "last_value": 0.0,
        "terminated": torch.zeros_like(r, dtype=bool),
    }
    out = rltscan.gae(r, torch.zeros_like(r), **kw)
    assert out["advantages"].shape == r.shape
    r[0, 3] = float("nan")
    with pytest.raises(DataError, match="rewards"):
        rltscan.gae(r, torch.zeros_like(r), **kw)
