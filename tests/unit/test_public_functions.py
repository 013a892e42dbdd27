"""The public functions (rltscan.gae, ...) as hand-written Python: their signatures, no
generated code anywhere in the package, and torch.compile(fullgraph=True) over a user
function that calls them (they become one custom op each while traced), on the CPU and,
with CUDA, under a CUDA graph."""

from __future__ import annotations

import inspect
import pathlib
import re

import numpy as np
import pytest
import torch

import rltscan
from rltscan.estimators import DECLARATIONS
from tests import oracles
from tests.conftest import assert_close_to_oracle, torch_rollout

ROOT = pathlib.Path(rltscan.__file__).parent


def _opt(name: str) -> str:
    """An optional array input."""
    return f"{name}: 'ArrayLike | None' = None"


# The signatures the functions had when they were generated from the declarations (the
# last generated version, printed with inspect.signature): the hand-written ones keep them.
# The runs of parameters several functions share are spelled once below.
_FLAGS = (_opt("terminated"), _opt("truncated"))
_BOOTSTRAP = (_opt("next_values"), _opt("bootstrap_values"), _opt("last_value"), _opt("discount"))
_GAMMA = "gamma: 'float | list[float] | ArrayLike' = 0.99"
_ENDS_AND_RUN = (  # every function ends with these
    _opt("dones"),
    "dones_mean: 'str | None' = None",
    _opt("episode_starts"),
    _opt("last_dones"),
    "ends_are: 'str | None' = None",
    "carry: 'Carry | None' = None",
    "time_dim: 'int | None' = None",
    "backend: 'str' = 'auto'",
    "validate: 'bool' = True",
)
_GAE_PARAMETERS = (  # gae's and td_lambda's
    "rewards: 'ArrayLike'",
    _opt("values"),
    *_FLAGS,
    *_BOOTSTRAP,
    _opt("lam_per_step"),
    _GAMMA,
    "lam: 'float | list[float] | ArrayLike' = 0.95",
    "missing_bootstrap: 'str' = 'error'",
    *_ENDS_AND_RUN,
)
SIGNATURES = {  # name -> (return annotation, *parameters; the keyword-only ones follow `*`)
    "gae": ("GAEResult", *_GAE_PARAMETERS),
    "vtrace": (
        "VTraceResult",
        "rewards: 'ArrayLike'",
        _opt("values"),
        _opt("logp_target"),
        _opt("logp_behavior"),
        *_FLAGS,
        *_BOOTSTRAP,
        _opt("lam_per_step"),
        _GAMMA,
        "lam: 'float | list[float] | ArrayLike' = 1.0",
        "rho_clip: 'float' = 1.0",
        "c_clip: 'float' = 1.0",
        "pg_rho_clip: 'float | None' = None",
        "missing_bootstrap: 'str' = 'error'",
        *_ENDS_AND_RUN,
    ),
    "retrace": (
        "RetraceResult",
        "rewards: 'ArrayLike'",
        _opt("q_values"),
        _opt("next_expected_q"),
        _opt("logp_target"),
        _opt("logp_behavior"),
        *_FLAGS,
        _opt("v_pi"),
        _opt("discount"),
        _opt("lam_per_step"),
        _opt("next_target_probs"),
        _opt("next_q"),
        _GAMMA,
        "lam: 'float | list[float] | ArrayLike' = 1.0",
        "c_clip: 'float' = 1.0",
        "trace: 'str' = 'retrace'",
        *_ENDS_AND_RUN,
    ),
    "td_lambda": ("TDLambdaResult", *_GAE_PARAMETERS),
    "discounted_returns": (
        "ReturnsResult",
        "rewards: 'ArrayLike'",
        *_FLAGS,
        _opt("values"),
        *_BOOTSTRAP,
        _GAMMA,
        "missing_bootstrap: 'str' = 'zero'",
        *_ENDS_AND_RUN,
    ),
    "eligibility_traces": (
        "TracesResult",
        "x: 'ArrayLike'",
        *_FLAGS,
        _GAMMA,
        "lam: 'float | list[float] | ArrayLike' = 0.95",
        _opt("init"),
        *_ENDS_AND_RUN,
    ),
    "prefix_sum": (
        "PrefixSumResult",
        "x: 'ArrayLike'",
        *_FLAGS,
        _opt("is_first"),
        _opt("init"),
        *_ENDS_AND_RUN,
    ),
    "return_to_go": (
        "ReturnToGoResult",
        "rewards: 'ArrayLike'",
        *_FLAGS,
        "scale: 'float' = 1.0",
        *_ENDS_AND_RUN,
    ),
}


def test_no_exec_or_eval_in_the_package():
    """Every function, call key and launch is ordinary code a reader can step through."""
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in sorted(ROOT.rglob("*.py"))
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\b(exec|eval)\(", line) and not line.lstrip().startswith("#")
    ]
    assert found == []


@pytest.mark.parametrize("d", list(DECLARATIONS.values()), ids=lambda d: d.function_name)
def test_signatures_are_the_generated_ones_and_follow_the_declaration(d):
    fn = getattr(rltscan, d.function_name)
    sig = inspect.signature(fn)
    assert (sig.return_annotation, *map(str, sig.parameters.values())) == SIGNATURES[fn.__name__]
    assert fn.__module__ == "rltscan.estimators.functions"
    assert fn.__name__ == d.function_name
    params = inspect.signature(fn).parameters
    names = list(params)
    assert names[: len(d.signature)] == list(d.signature)
    kinds = [p.kind for p in params.values()]
    assert kinds[: d.positional] == [inspect.Parameter.POSITIONAL_OR_KEYWORD] * d.positional
    assert set(kinds[d.positional :]) == {inspect.Parameter.KEYWORD_ONLY}
    for name, default in d.defaults().items():
        assert params[name].default == default, name
    doc = inspect.getdoc(fn)
    assert "Args:" in doc and "Returns:" in doc and d.result_name in doc


@pytest.mark.parametrize("d", list(DECLARATIONS.values()), ids=lambda d: d.function_name)
def test_result_classes_hold_the_declared_outputs(d):
    import dataclasses

    from rltscan.estimators import RESULTS

    cls = RESULTS[d.name]
    assert cls.__name__ == d.result_name
    fields = [f.name for f in dataclasses.fields(cls) if f.metadata.get("output", True)]
    assert fields == list(d.outputs)
    optional = {f.name for f in dataclasses.fields(cls) if f.default is None}
    assert optional & set(d.outputs) == {o for o, _ in d.optional_outputs}


def _batch(seed: int, shape=(3, 29)):
    return torch_rollout(torch.Generator().manual_seed(seed), shape, trunc_rate=0.08)


def _oracle_rows(r, v, term, trunc, boot, gamma, lam):
    """GAE advantages and returns, row by row, from the float64 loops of tests/oracles.py."""
    adv, ret = [], []
    for i in range(r.shape[0]):
        rows = [x[i].double().tolist() for x in (r, v, boot)]
        t, u = term[i].tolist(), trunc[i].tolist()
        nv = oracles.next_state_values(t, u, values=rows[1], bootstrap_values=rows[2])
        nv = [0.0 if x is None else x for x in nv]
        adv.append(oracles.gae(rows[0], rows[1], nv, t, u, gamma=gamma, lam=lam)["advantages"])
        ret.append(oracles.discounted_returns(rows[0], nv, t, u, gamma=gamma))
    return torch.tensor(np.array(adv)), torch.tensor(np.array(ret))


def _user_loss(r, v, term, trunc, boot):
    """What training code writes: the public functions, their results read by name."""
    a = rltscan.gae(r, v, terminated=term, truncated=trunc, bootstrap_values=boot,
                    gamma=0.97, lam=0.9)  # fmt: skip
    b = rltscan.discounted_returns(r, terminated=term, truncated=trunc,
                                   bootstrap_values=boot, gamma=0.97)  # fmt: skip
    return a.advantages, a["value_targets"] * 2, b.returns


@pytest.mark.parametrize("seed", [0, 1])
def test_public_functions_compile_fullgraph_on_the_cpu(seed):
    torch._dynamo.reset()
    x = _batch(seed)
    compiled = torch.compile(_user_loss, fullgraph=True, backend="aot_eager")
    got = compiled(*x)
    eager = _user_loss(*x)
    for g, e in zip(got, eager, strict=True):
        torch.testing.assert_close(g, e)
    adv, ret = _oracle_rows(*x, gamma=0.97, lam=0.9)
    assert_close_to_oracle(got[0], adv, torch.float32)
    assert_close_to_oracle(got[1], 2 * (adv + x[1].double()), torch.float32)
    assert_close_to_oracle(got[2], ret, torch.float32)


def test_under_compile_a_carry_is_refused_with_one_line():
    """(Without fullgraph: dynamo cannot build the error inside a graph, so it runs the
    refusal eagerly and the caller sees rltscan's own one-line error.)"""
    torch._dynamo.reset()
    r, v, term, _, _ = _batch(2)
    carry = rltscan.gae(r, v, terminated=term, last_value=v[:, -1]).carry

    def f(r, v, term):
        return rltscan.gae(r, v, terminated=term, carry=carry).advantages

    with pytest.raises(rltscan.ParameterError, match="carry is not supported"):
        torch.compile(f, backend="aot_eager")(r, v, term)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_public_functions_compile_and_replay_in_a_cuda_graph():
    torch._dynamo.reset()
    x = [t.cuda() for t in _batch(3, (64, 257))]
    compiled = torch.compile(_user_loss, fullgraph=True)
    eager = _user_loss(*x)
    got = compiled(*x)
    for g, e in zip(got, eager, strict=True):
        assert_close_to_oracle(g, e.double(), torch.float32)
    static = [t.clone() for t in x]
    compiled(*static)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = compiled(*static)
    fresh = _batch(4, (64, 257))
    for s, f in zip(static, fresh, strict=True):
        s.copy_(f)
    graph.replay()
    torch.cuda.synchronize()
    adv, ret = _oracle_rows(*fresh, gamma=0.97, lam=0.9)
    assert_close_to_oracle(outs[0], adv, torch.float32)
    assert_close_to_oracle(outs[2], ret, torch.float32)


@pytest.mark.parametrize("gamma", [1.0, [1.0, 0.9]], ids=["one setting", "settings"])
def test_warnings_name_the_callers_line(gamma) -> None:
    """A warning from inside the package points at the line that called the public
    function, whatever wrapper or driver frames lie between (it pointed at
    functions.py once the compile wrapper added a frame)."""
    n = 10
    z = torch.zeros(n)
    with pytest.warns(RuntimeWarning, match="not contractive") as caught:
        rltscan.vtrace(torch.rand(n), torch.rand(n), logp_target=z, logp_behavior=z,
                       terminated=z, truncated=z, last_value=torch.zeros(()),
                       gamma=gamma, lam=1.0, c_clip=5.0)  # fmt: skip
    assert {w.filename for w in caught} == {__file__}
