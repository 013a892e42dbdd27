"""The generic GPU path (issue 11 item 1): an estimator with no fused prologue in the
Triton kernel builds its ``(a, b)`` with torch (its module's ``coefficients``), runs the
kernel's plain linear-scan mode (``a``, ``b`` in, ``y`` out, with the boundary value or
the carry), then its ``finalize``. Here every declared estimator is forced onto that
path (the interpreter in CI, tiny tiles so the look-back between tiles runs) and
checked against its oracle and the float64 reference; chunked runs with carries give
the whole-sequence result, as on the fused path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cases import ESTIMATORS, make_case, run
from conftest import assert_close_to_oracle
from test_chunks import KINDS, call, chunked, make

from rltscan.scan import triton_scan

F64 = torch.float64


@pytest.fixture
def generic_only(monkeypatch):
    """No kind is fused: everything takes the generic path."""
    monkeypatch.setattr(triton_scan, "fused", lambda kind: False)

    def no_fused_launch(*a, **k):
        raise AssertionError("the fused kernel ran on the generic path")

    monkeypatch.setattr(triton_scan, "solve", no_fused_launch)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
def test_generic_path_matches_oracle_and_reference(name, dtype, generic_only, rng):
    case = make_case(name, rng, B=3, T=21, p_done=0.2, dtype=F64)
    got = run(case, "triton", dtype=dtype)
    ref = run(case, "reference", dtype=F64)
    for key, want in case.expected.items():
        assert_close_to_oracle(got[key], want, dtype)
        if dtype == F64:
            np.testing.assert_allclose(got[key], ref[key], rtol=1e-12, atol=1e-12, err_msg=key)


@pytest.mark.parametrize("kind", KINDS)
def test_generic_path_chunks_with_carries(kind, generic_only, rng):
    inputs = make(kind, (2, 23), rng, 0.15)
    whole = dict(call(kind, inputs, time_dim=1, backend="reference"))
    got = chunked(kind, inputs, [1, 9, 22], 1, backend="triton")
    for k, want in whole.items():
        assert np.isfinite(got[k]).all(), k
        assert_close_to_oracle(got[k], want, F64)


def test_generic_path_names_a_bad_entry(generic_only, rng):
    """Validation on the generic path is the host check: same error as elsewhere."""
    import rltscan

    r = rng.normal(size=10)
    r[4] = np.nan
    with pytest.raises(rltscan.DataError, match='"rewards" has NaN or Inf at index 4'):
        rltscan.gae(r, rng.normal(size=10), terminated=np.zeros(10, bool), last_value=0.0,
                    backend="triton")  # fmt: skip


def test_only_fused_kinds_have_kernel_slots():
    """The kernel knows its fused kinds by name and imports no estimator (no cycle)."""
    import sys

    assert triton_scan.fused("gae") and not triton_scan.fused("no_such_kind")
    source = sys.modules["rltscan.scan.triton_scan"].__file__
    with open(source, encoding="utf-8") as fh:
        assert "rltscan.estimators" not in fh.read()
