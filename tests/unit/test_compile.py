"""The estimators as custom ops (rltscan.ops) inside torch.compile(fullgraph=True), on the
CPU (the op runs the torch backend); the CUDA side (inductor, graph capture) is in
tests/gpu/test_gpu.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import rltscan
import rltscan.ops as ops
from tests.conftest import assert_close_to_oracle, torch_rollout


def _inputs(seed: int, shape=(4, 37)):
    g = torch.Generator().manual_seed(seed)
    batch = torch_rollout(g, shape, trunc_rate=0.05)
    lp = lambda: torch.log(torch.rand(shape, generator=g) * 0.9 + 0.1)  # noqa: E731
    return *batch, lp(), lp()


@pytest.mark.parametrize("seed", [0, 1])
def test_gae_op_in_fullgraph_compile_matches_the_oracle(seed):
    r, v, term, trunc, boot, _, _ = _inputs(seed)

    def loss(r, v, term, trunc, boot):
        out = ops.gae(r, v, terminated=term, truncated=trunc, bootstrap_values=boot,
                      gamma=0.97, lam=0.9)  # fmt: skip
        return out["advantages"], out["value_targets"] * 2

    compiled = torch.compile(loss, fullgraph=True, backend="aot_eager")
    adv, vt2 = compiled(r, v, term, trunc, boot)
    want = rltscan.gae(r, v, terminated=term, truncated=trunc, bootstrap_values=boot,
                       gamma=0.97, lam=0.9, backend="reference")  # fmt: skip
    assert_close_to_oracle(adv, want.advantages, torch.float32)
    assert_close_to_oracle(vt2, want.value_targets * 2, torch.float32)


def test_vtrace_and_returns_ops_compile():
    r, v, term, _, _, lt, lb = _inputs(3)

    def f(r, v, term, lt, lb):
        a = ops.vtrace(r, v, logp_target=lt, logp_behavior=lb, terminated=term,
                       last_value=v[:, -1], gamma=0.9)  # fmt: skip
        b = ops.discounted_returns(r, terminated=term, gamma=0.9)
        return a["vs"], b["returns"]

    vs, ret = torch.compile(f, fullgraph=True, backend="aot_eager")(r, v, term, lt, lb)
    want_vs = rltscan.vtrace(r, v, logp_target=lt, logp_behavior=lb, terminated=term,
                             last_value=v[:, -1], gamma=0.9, backend="reference")  # fmt: skip
    want_ret = rltscan.discounted_returns(r, terminated=term, gamma=0.9, backend="reference")
    assert_close_to_oracle(vs, want_vs.vs, torch.float32)
    assert_close_to_oracle(ret, want_ret.returns, torch.float32)


def test_op_outputs_are_constants_of_the_loss():
    r, v, term, *_ = _inputs(4)
    v = v.clone().requires_grad_(True)

    def loss(r, v, term):
        adv = ops.gae(r, v, terminated=term, last_value=v[:, -1].detach())["advantages"]
        return (adv * v).sum()  # the gradient flows only through the explicit v

    out = torch.compile(loss, fullgraph=True, backend="aot_eager")(r, v, term)
    out.backward()
    adv = rltscan.gae(r, v.detach(), terminated=term, last_value=v[:, -1].detach()).advantages
    torch.testing.assert_close(v.grad, adv)


def test_fake_outputs_have_the_real_shapes_and_dtypes():
    r, v, term, *_ = _inputs(5, (7,))
    r64 = r.double()
    outs = ops.gae(r64, v, terminated=term, last_value=0.0 + v[-1:].squeeze(0))
    assert all(o.dtype == torch.float64 and o.shape == (7,) for o in outs.values())
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fr, fv = mode.from_tensor(r64), mode.from_tensor(v)
        fterm = mode.from_tensor(term)
        slots = {"rewards": fr, "values": fv, "terminated": fterm}
        arrays = [slots.get(n) for n in ops.array_names("gae")]
        fake = torch.ops.rltscan.estimate("gae", arrays, [0.99, 0.95], "zero", None, None, None,
                                          None, True, "auto")  # fmt: skip
    assert [(o.shape, o.dtype) for o in fake] == [((7,), torch.float64)] * 2


def test_op_refuses_a_carry_with_one_line():
    r, v, term, *_ = _inputs(6)
    res = rltscan.gae(r, v, terminated=term, last_value=v[:, -1])
    with pytest.raises(rltscan.ParameterError, match="carry is not supported"):
        ops.gae(r, v, terminated=term, carry=res.carry)


# rltscan.ops is imported by the first traced call (its module imports torch._dynamo,
# ~1 s, which an eager run never needs): a public function compiles from a fresh process
FRESH = """
import sys, torch, rltscan
assert "rltscan.ops" not in sys.modules and "torch._dynamo" not in sys.modules
g = torch.Generator().manual_seed(0)
r, v = torch.randn(4, 37, generator=g), torch.randn(4, 37, generator=g)
term = torch.rand(4, 37, generator=g) < 0.1
f = lambda r, v, t: rltscan.gae(r, v, terminated=t, last_value=v[:, -1], gamma=0.97).advantages
out = torch.compile(f, fullgraph=True, backend="aot_eager")(r, v, term)
torch.testing.assert_close(out, f(r, v, term))
print("ops loaded:", "rltscan.ops" in sys.modules)
"""


def test_a_public_function_compiles_before_rltscan_ops_is_imported():
    done = subprocess.run(
        [sys.executable, "-c", FRESH], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("ops loaded: True")
