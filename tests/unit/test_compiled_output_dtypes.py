"""Under torch.compile an estimator is one custom op (rltscan.ops) whose fake gives the
outputs' dtype; the compiled graph reads the real outputs as that dtype. The fake must
follow the rule the call follows: float32 unless a float input it reads is float64, an
integer input of 4 or 8 bytes (int64 rewards) counting as float64; flags, per-sequence
values (``last_value``, ``init``) and a one-element γ do not decide it. Before, the fake
counted only float inputs, and counted all of them: inductor then read a float64 buffer
as float32 (or the reverse) and returned other numbers, or corrupted the heap."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import rltscan
import rltscan.ops as ops
from rltscan.estimators import DECLARATIONS

B, T = 2, 9
BY_NAME = {d.name: d for d in DECLARATIONS.values()}


def _fake_dtype(kind: str, slots: dict[str, torch.Tensor], **numbers: float) -> torch.dtype:
    """The dtype the op's fake gives the first output for these arrays."""
    d = BY_NAME[kind]
    values = [numbers.get(n, d.defaults()[n]) for n in ops.number_names(kind)]
    trace = "q-lambda" if kind == "retrace" else None
    with FakeTensorMode() as mode:
        fakes = {n: mode.from_tensor(a) for n, a in slots.items()}
        arrays = [fakes.get(n) for n in ops.array_names(kind)]
        fake = torch.ops.rltscan.estimate(kind, arrays, values, None, trace, None, None, None,
                                          True, "torch")  # fmt: skip
    return fake[0].dtype


def _arrays(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "rewards": torch.randn(B, T, generator=g) * 3,
        "values": torch.randn(B, T, generator=g),
        "terminated": torch.rand(B, T, generator=g) < 0.2,
        "last_value": torch.randn(B, generator=g),
    }


# (estimator, the arrays as given): each differs from all-float32 in one dtype
CASES = {
    "int64 rewards": ("gae", {"rewards": torch.int64}),
    "int32 rewards": ("gae", {"rewards": torch.int32}),
    "int16 rewards": ("gae", {"rewards": torch.int16}),
    "float64 last_value": ("gae", {"last_value": torch.float64}),
    "float64 flags": ("gae", {"terminated": torch.float64}),
    "int64 rewards, returns": ("returns", {"rewards": torch.int64}),
    "float64 values": ("td_lambda", {"values": torch.float64}),
}


def _given(kind: str, dtypes: dict[str, torch.dtype]) -> dict[str, torch.Tensor]:
    arrays = _arrays()
    if kind == "returns":
        arrays.pop("values")
    return {n: a.to(dtypes.get(n, a.dtype)) for n, a in arrays.items()}


@pytest.mark.parametrize("case", list(CASES))
def test_the_fake_gives_the_dtype_the_call_returns(case):
    kind, dtypes = CASES[case]
    given = _given(kind, dtypes)
    d = BY_NAME[kind]
    eager = getattr(rltscan, d.function_name)(**given, gamma=0.9, backend="torch")
    assert _fake_dtype(kind, given, gamma=0.9) == eager[d.outputs[0]].dtype, case


def test_per_step_and_one_element_gamma_decide_as_the_call_does():
    given = _arrays()
    for gamma, want in ((torch.tensor([0.9], dtype=torch.float64), torch.float32),
                        (torch.full((B, T), 0.9, dtype=torch.float64), torch.float64)):  # fmt: skip
        eager = rltscan.gae(**given, gamma=gamma, backend="torch").advantages
        assert eager.dtype == _fake_dtype("gae", {**given, "gamma": gamma}) == want


def test_retrace_expected_q_from_probabilities_decides_the_dtype():
    g = torch.Generator().manual_seed(1)
    r, q = torch.randn(B, T, generator=g), torch.randn(B, T, generator=g)
    term = torch.zeros(B, T, dtype=torch.bool)
    probs = torch.softmax(torch.randn(B, T, 3, generator=g), -1).double()
    nq = torch.randn(B, T, 3, generator=g)
    eager = rltscan.retrace(r, q, next_target_probs=probs, next_q=nq, terminated=term,
                            trace="q-lambda", backend="torch")  # fmt: skip
    slots = {"rewards": r, "q_values": q, "terminated": term, "next_target_probs": probs,
             "next_q": nq}  # fmt: skip
    assert _fake_dtype("retrace", slots) == eager.retrace_targets.dtype == torch.float64


def test_inductor_reads_int64_rewards_exactly(monkeypatch):
    """The user-visible failure: inductor fuses ``+ 1`` on the op's output with the
    fake's dtype (no cache, so the graph is compiled here with today's fake)."""
    from torch._inductor import config

    monkeypatch.setattr(config, "force_disable_caches", True)
    a = _arrays(3)
    args = (a["rewards"].long(), a["values"], a["terminated"], a["last_value"])

    def f(r, v, t, lv):
        return rltscan.gae(r, v, terminated=t, last_value=lv, gamma=0.9, lam=0.8).advantages + 1

    torch._dynamo.reset()
    want = f(*args)
    got = torch.compile(f, fullgraph=True)(*args)
    assert got.dtype == want.dtype == torch.float64
    torch.testing.assert_close(got, want)
