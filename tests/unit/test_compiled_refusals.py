"""A call the op cannot take is refused with rltscan's one-line ParameterError under
``torch.compile(fullgraph=True)`` too (README "Python API": bad input raises rltscan's
errors). Dynamo cannot trace a raise, so before, numpy arrays, lists, several settings,
a carry or an extra positional array inside a compiled function gave dynamo's
"Unsupported" graph error instead of the message; the refusal is now a node of the graph
that raises when the graph runs. A bool or string γ, which ``float()`` takes (True as
1.0), is refused as the plain function refuses it, compiled or not."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rltscan
import rltscan.ops as ops

B, T = 2, 6


def _inputs():
    g = torch.Generator().manual_seed(0)
    r, v = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    return r, v, torch.rand(B, T, generator=g) < 0.2, torch.randn(B, generator=g)


CARRY: list = []  # a chunk's carry, made outside the compiled function

# name -> (the call inside the compiled function, the words of the refusal)
CASES = {
    "numpy arrays": (
        lambda r, v, t, lv: rltscan.gae(r.numpy(), v.numpy(), terminated=t, last_value=lv),
        'takes tensors, "rewards" is a ndarray',
    ),
    "a list": (
        lambda r, v, t, lv: rltscan.gae(r[0], [0.5] * T, terminated=t[0], last_value=lv[0]),
        '"values" is a list',
    ),
    "several settings": (
        lambda r, v, t, lv: rltscan.gae(r, v, terminated=t, last_value=lv, gamma=[0.9, 0.99]),
        "several settings",
    ),
    "a bool gamma": (
        lambda r, v, t, lv: rltscan.gae(r, v, terminated=t, last_value=lv, gamma=True),
        "gamma must be a number, got True",
    ),
    "a string lam": (
        lambda r, v, t, lv: rltscan.gae(r, v, terminated=t, last_value=lv, lam="0.9"),
        "lam must be a number, got '0.9'",
    ),
    "a carry": (
        lambda r, v, t, lv: rltscan.gae(r, v, terminated=t, carry=CARRY[0]),
        "carry is not supported",
    ),
    "an extra positional array": (
        lambda r, v, t, lv: ops.gae(r, v, t, last_value=lv),
        "takes 2 positional arrays",
    ),
}


def _result(out):
    return out["advantages"] if isinstance(out, dict) else out.advantages


@pytest.mark.parametrize("case", list(CASES))
def test_a_refusal_in_a_fullgraph_compile_is_rltscans_message(case):
    call, words = CASES[case]
    r, v, term, lv = _inputs()
    CARRY[:] = [rltscan.gae(r, v, terminated=term, last_value=lv).carry]
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: _result(call(*a)) * 2, fullgraph=True, backend="aot_eager")
    with pytest.raises(rltscan.ParameterError, match=words):
        compiled(*_inputs())


@pytest.mark.parametrize("gamma", [True, "0.9", np.bool_(True)])
def test_the_op_refuses_what_float_would_take_outside_compile_too(gamma):
    r, v, term, lv = _inputs()
    with pytest.raises(rltscan.ParameterError, match="gamma must be a number"):
        ops.gae(r, v, terminated=term, last_value=lv, gamma=gamma)


def test_a_tensordict_in_a_fullgraph_compile_is_refused_with_the_message():
    tensordict = pytest.importorskip("tensordict")
    r, v, term, _ = _inputs()
    keys = {"state_value": v, ("next", "reward"): r, ("next", "terminated"): term}
    td = tensordict.TensorDict({k: x.unsqueeze(-1) for k, x in keys.items()}, batch_size=[B, T])
    torch._dynamo.reset()
    compiled = torch.compile(lambda td: rltscan.gae(td).advantages * 2, fullgraph=True,
                             backend="aot_eager")  # fmt: skip
    with pytest.raises(rltscan.ParameterError, match='"rewards" is a TensorDict; pass tensors'):
        compiled(td)


@pytest.mark.parametrize("validate", [None, "no", 0])
def test_validate_that_is_not_a_bool_is_refused(validate):
    """``validate=None`` used to switch every check off without a word (a falsy value)."""
    r, v, term, lv = _inputs()
    with pytest.raises(rltscan.ParameterError, match="validate must be True or False"):
        rltscan.gae(r, v, terminated=term, last_value=lv, validate=validate)
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda *a: (
            rltscan.gae(*a[:2], terminated=a[2], last_value=a[3], validate=validate).advantages
        ),
        fullgraph=True,
        backend="aot_eager",
    )
    with pytest.raises(rltscan.ParameterError, match="validate must be True or False"):
        compiled(r, v, term, lv)


def test_the_code_after_a_refused_call_traces_with_the_calls_dtype():
    """The refusal's outputs are typed as the call's would be (float64 here): code after
    it that checks dtypes (``torch.dot``) traced against float32 placeholders failed with
    torch's "expected both vectors to have same dtype" instead of rltscan's message (so
    would any op mixing a CPU placeholder with CUDA tensors)."""
    r, v, term, lv = (x.double() if x.is_floating_point() else x for x in _inputs())
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda r, v, t, lv: torch.dot(
            rltscan.gae(r, v, terminated=t, last_value=lv, gamma=True).advantages[0], v[0]
        ),
        fullgraph=True,
        backend="aot_eager",
    )
    with pytest.raises(rltscan.ParameterError, match="gamma must be a number"):
        compiled(r, v, term, lv)
