"""Tensors whose entries the scan cannot read as they are (sparse, nested, quantized, on
the meta device) are refused with rltscan's DTypeError naming the argument and the
conversion; before, torch's own TypeError/RuntimeError/NotImplementedError came out of
the middle of the call (README "Python API": bad input raises rltscan's errors)."""

from __future__ import annotations

import pytest
import torch

import rltscan

B, T = 2, 5


def _args():
    g = torch.Generator().manual_seed(0)
    return {
        "rewards": torch.randn(B, T, generator=g),
        "values": torch.randn(B, T, generator=g),
        "terminated": torch.rand(B, T, generator=g) < 0.2,
        "last_value": torch.randn(B, generator=g),
    }


@pytest.mark.parametrize("name", ["rewards", "values", "terminated", "last_value"])
def test_a_sparse_argument_is_refused_by_name(name):
    args = _args()
    args[name] = args[name].to_sparse()
    with pytest.raises(rltscan.DTypeError, match=rf'"{name}" is a sparse_coo tensor.*to_dense'):
        rltscan.gae(**args)


def test_a_nested_tensor_is_refused():
    args = _args()
    args["rewards"] = torch.nested.nested_tensor([torch.randn(3), torch.randn(4)])
    with pytest.raises(rltscan.DTypeError, match='"rewards" is a nested tensor; pad it'):
        rltscan.gae(**args)


def test_a_quantized_tensor_is_refused():
    args = _args()
    args["values"] = torch.quantize_per_tensor(args["values"], 0.1, 0, torch.qint8)
    with pytest.raises(rltscan.DTypeError, match=r'"values" is a quantized tensor.*dequantize'):
        rltscan.gae(**args)


def test_a_meta_tensor_is_refused():
    args = {k: v.to("meta") for k, v in _args().items()}
    with pytest.raises(rltscan.DTypeError, match='"rewards" is on the meta device'):
        rltscan.gae(**args)
