"""A bound call's carry (the launch a repeated call of one shape takes on the GPU builds
its carry on demand from the outputs it already has, ``_driver._carry_later``): the
same carry as the whole path's, for every fused estimator. The bound launch itself
runs on CUDA only (tests/gpu/test_gpu.py); the carry it hands back is built on the host
path and is checked here on the CPU."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bench import harness
from rltscan import bench
from rltscan.estimators import _driver
from rltscan.scan import triton_scan

FUSED = [k for k in bench.ESTIMATOR_ORDER if triton_scan.fused(k)]


@pytest.mark.parametrize("kind", FUSED)
def test_the_carry_built_from_given_outputs_is_the_whole_paths(kind: str) -> None:
    inp = bench.make_inputs(kind, (3, 41), ep_len=9.0, device="cpu", seed=5)
    kwargs = bench.call_kwargs(kind, inp, backend="torch")
    d = harness.declaration(kind)
    whole = bench.function(kind)(**kwargs)
    outputs = {o: getattr(whole, o) for o in d.outputs if getattr(whole, o) is not None}
    later = _driver._carry_later(d, harness.arguments(kind, kwargs), outputs)
    want, got = dataclasses.asdict(whole.carry), dataclasses.asdict(later)
    assert want.keys() == got.keys()
    for name, value in want.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, got[name]), name
        else:
            assert value == got[name], name
