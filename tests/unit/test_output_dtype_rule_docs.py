"""The outputs' dtype rule as README and docs/CONVENTIONS.md §6 state it: float32 unless
a per-step value input is float64 or a 4- or 8-byte integer. Flags do not count: an
int64 ``terminated`` (common in Parquet files) leaves the outputs float32, which the
docs' earlier "unless an input is ... a 4- or 8-byte integer" said otherwise."""

from __future__ import annotations

import torch

import rltscan

B, T = 2, 5


def test_int64_or_float64_flags_do_not_make_float64_outputs():
    r = torch.randn(B, T)
    for flags in (torch.zeros(B, T, dtype=torch.int64), torch.zeros(B, T, dtype=torch.float64)):
        out = rltscan.discounted_returns(r, terminated=flags, gamma=0.9)
        assert out.returns.dtype == torch.float32


def test_a_per_step_value_input_of_float64_or_int64_makes_float64_outputs():
    term = torch.zeros(B, T, dtype=torch.bool)
    r64 = rltscan.discounted_returns(torch.ones(B, T, dtype=torch.int64), terminated=term)
    d64 = rltscan.discounted_returns(
        torch.randn(B, T), terminated=term, discount=torch.full((B, T), 0.9, dtype=torch.float64)
    )
    assert r64.returns.dtype == d64.returns.dtype == torch.float64
    lv64 = rltscan.discounted_returns(
        torch.randn(B, T), terminated=term, last_value=torch.zeros(B, dtype=torch.float64)
    )
    assert lv64.returns.dtype == torch.float32  # a per-sequence value does not count


def test_the_docs_say_flags_do_not_count():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    readme = " ".join((root / "README.md").read_text().split())
    conventions = " ".join((root / "docs" / "CONVENTIONS.md").read_text().split())
    assert "unless an input is float64 or a 4- or 8-byte integer" not in readme
    assert "float32 unless an input is float64" not in conventions
    assert "flags do not count" in readme and "flags do not count" in conventions
