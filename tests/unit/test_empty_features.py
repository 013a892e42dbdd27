"""Empty arrays are exact: ``x`` with a feature axis of length 0 beside its flags (traces
and prefix sums, docs/CONVENTIONS.md §8.1) gives empty outputs of ``x``'s shape on every
backend, as zero sequences (``[0, T]``) do. Before, the CPU backends raised torch's
"size of tensor a (2) must match the size of tensor b (0)": the flags were not expanded
to the (zero) feature rows."""

from __future__ import annotations

import pytest
import torch

import rltscan

CASES = {  # x shape, flags shape
    "[B, T, 0]": ((2, 5, 0), (2, 5)),
    "[B, T, 0, 3]": ((2, 5, 0, 3), (2, 5)),
    "[T, 0]": ((5, 0), (5,)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("name", ["eligibility_traces", "prefix_sum"])
def test_no_features_give_empty_outputs(name, case, backend):
    x_shape, flag_shape = CASES[case]
    x = torch.zeros(x_shape)
    res = getattr(rltscan, name)(x, terminated=torch.zeros(flag_shape, dtype=torch.bool),
                                 backend=backend)  # fmt: skip
    out = res.eligibility_traces if name == "eligibility_traces" else res.prefix_sums
    assert out.shape == x.shape and out.dtype == torch.float32


def test_zero_sequences_give_empty_outputs(backend):
    z = torch.zeros(0, 5)
    res = rltscan.gae(z, z, terminated=z.bool(), last_value=torch.zeros(0), backend=backend)
    assert res.advantages.shape == res.value_targets.shape == (0, 5)
