"""The Python API reads shapes exactly or refuses them (issue 21, item 1;
docs/CONVENTIONS.md §8): ``time_dim=None`` means time last on ``[T]``/``[B, T]`` and
refuses what could be read two ways; an explicit ``time_dim`` is taken as said, with a
trailing axis of length 1 after time (TorchRL's ``[*B, T, 1]``, ``[T, B, 1]``) squeezed
and restored. Every estimator, against the float64 oracles of tests/oracles.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cases import DECLARED, ESTIMATORS, PER_ROW_KEYS, make_case
from conftest import assert_close_to_oracle

import rltscan
from rltscan import AmbiguousInputError, DataError, ParameterError

F64 = torch.float64


def _case(name: str, rng: np.random.Generator, B: int, T: int, form: str = "next"):
    return make_case(name, rng, B=B, T=T, p_done=0.2, form=form, dtype=F64)


def _call(case, arrays: dict, **kw):
    pos = [arrays[k] for k in case.pos]
    rest = {k: v for k, v in arrays.items() if k not in case.pos}
    return getattr(rltscan, case.name)(*pos, **rest, **case.params, **kw, backend="torch")


def _torch(case, shape_of=lambda x: x) -> dict:
    """The case's arrays as tensors, per-step arrays through ``shape_of``."""
    out = {}
    for k, v in case.arrays.items():
        t = torch.as_tensor(v)
        out[k] = t if k in PER_ROW_KEYS else shape_of(t)
    return out


@pytest.mark.parametrize("name", ESTIMATORS)
def test_torchrl_b_t_1_with_time_dim_minus_2_is_exact_and_keeps_the_shape(name, rng):
    """TorchRL's ``[B, T, 1]`` with ``time_dim=-2``: the oracle's numbers, in [B, T, 1];
    a per-sequence value may be ``[B]`` or ``[B, 1]``."""
    case = _case(name, rng, B=3, T=11, form="last" if name != "retrace" else "next")
    arrays = _torch(case, lambda t: t.unsqueeze(-1))
    res = _call(case, arrays, time_dim=-2)
    for key, want in case.expected.items():
        assert res[key].shape == (3, 11, 1), key
        assert_close_to_oracle(res[key][..., 0], want, F64)
    if "last_value" in arrays:  # [B, 1] beside [B, T, 1] (old code: a shape error)
        arrays["last_value"] = arrays["last_value"].unsqueeze(-1)
        again = _call(case, arrays, time_dim=-2)
        for key, want in case.expected.items():
            assert_close_to_oracle(again[key][..., 0], want, F64)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_time_major_t_b_1_with_time_dim_0(name, rng):
    case = _case(name, rng, B=3, T=7, form="next")
    arrays = _torch(case, lambda t: t.t().unsqueeze(-1) if t.ndim == 2 else t)
    res = _call(case, arrays, time_dim=0)
    for key, want in case.expected.items():
        assert res[key].shape == (7, 3, 1), key
        assert_close_to_oracle(res[key][..., 0].t(), want, F64)


@pytest.mark.parametrize("name", ESTIMATORS)
def test_torchrl_shape_with_the_default_time_dim_is_refused(name, rng):
    """Issue 21: ``[B, T, 1]`` with time_dim left out computed T sequences of one step."""
    case = _case(name, rng, B=4, T=9)
    with pytest.raises(AmbiguousInputError) as err:
        _call(case, _torch(case, lambda t: t.unsqueeze(-1)))
    msg = str(err.value)
    assert "time_dim=None" in msg and "time_dim=-2" in msg and "[*B, T, 1]" in msg, msg
    assert "\n" not in msg and "; pass " in msg


@pytest.mark.parametrize("name", ESTIMATORS)
def test_square_buffer_with_the_default_time_dim_is_refused(name, rng):
    """Issue 21: a square ``[T, B]`` with time_dim forgotten was read as ``[B, T]``."""
    case = _case(name, rng, B=6, T=6)
    with pytest.raises(AmbiguousInputError) as err:
        _call(case, _torch(case))
    msg = str(err.value)
    assert "(6, 6)" in msg and "time_dim=-1" in msg and "time_dim=0" in msg, msg
    # said either way, it is computed
    res = _call(case, _torch(case), time_dim=-1)
    for key, want in case.expected.items():
        assert_close_to_oracle(res[key], want, F64)


@pytest.mark.parametrize("name", ESTIMATORS)
@pytest.mark.parametrize("shape", [(1,), (5, 1)], ids=["[1]", "[5,1]"])
def test_a_time_axis_of_length_one_is_refused_unless_said(name, shape, rng):
    B, T = (None, 1) if len(shape) == 1 else (5, 1)
    case = make_case(name, rng, B=B, T=T, p_done=0.2, form="next", dtype=F64)
    with pytest.raises(AmbiguousInputError) as err:
        _call(case, _torch(case))
    assert "time_dim=-1" in str(err.value)
    res = _call(case, _torch(case), time_dim=-1)
    for key, want in case.expected.items():
        assert_close_to_oracle(res[key], want, F64)


def test_a_column_of_steps_said_with_time_dim_0_is_one_sequence(rng):
    """``[T, 1]`` (one env, time-major): the refusal names time_dim=0, which computes it."""
    case = make_case("gae", rng, B=None, T=8, p_done=0.2, form="next", dtype=F64)
    arrays = _torch(case, lambda t: t.unsqueeze(-1))
    with pytest.raises(AmbiguousInputError, match="time_dim=0 if the first axis is time"):
        _call(case, arrays)
    res = _call(case, arrays, time_dim=0)
    assert res.advantages.shape == (8, 1)
    assert_close_to_oracle(res.advantages[:, 0], case.expected["advantages"], F64)


def test_three_axes_need_time_dim(rng):
    """``[B, T, F]`` with F > 1 (multi-agent, several rewards): time last would be F."""
    r = torch.randn(2, 9, 3)
    with pytest.raises(AmbiguousInputError, match=r"time_dim=-2 for TorchRL's \[\*B, T, 1\]"):
        rltscan.discounted_returns(r, terminated=torch.zeros(2, 9, 3, dtype=torch.bool))
    got = rltscan.discounted_returns(
        r, terminated=torch.zeros(2, 9, 3, dtype=torch.bool), time_dim=-2, gamma=0.9
    ).returns
    want = rltscan.discounted_returns(
        r.transpose(1, 2), terminated=torch.zeros(2, 3, 9, dtype=torch.bool), time_dim=-1,
        gamma=0.9,
    ).returns  # fmt: skip
    torch.testing.assert_close(got, want.transpose(1, 2))


def test_time_major_buffer_with_last_value_names_time_dim(rng):
    """Issue 21: ``[T, B]`` + ``last_value [B]`` with time_dim forgotten failed with a
    message about last_value's shape that never said time_dim."""
    r, v = np.zeros((7, 4)), np.zeros((7, 4))
    with pytest.raises(DataError) as err:
        rltscan.gae(r, v, terminated=np.zeros((7, 4), bool), last_value=np.zeros(4))
    msg = str(err.value)
    assert '"last_value" has shape (4,)' in msg and "time_dim=0" in msg, msg
    assert "time_dim=None" in msg


def test_shape_errors_name_time_dim():
    with pytest.raises(DataError) as err:
        rltscan.gae(np.zeros((3, 5)), np.zeros((5, 3)), terminated=np.zeros((3, 5), bool))
    assert "time_dim" in str(err.value)
    with pytest.raises(ParameterError, match="time_dim"):
        rltscan.gae(np.zeros((3, 5)), np.zeros((3, 5)), terminated=np.zeros((3, 5), bool),
                    time_dim=2)  # fmt: skip
    with pytest.raises(ParameterError, match="time_dim must be an axis"):
        rltscan.gae(np.zeros(5), np.zeros(5), terminated=np.zeros(5, bool), time_dim=0.0)


def test_eligibility_traces_features_keep_working(rng):
    """``x [B, T, D]`` with flags ``[B, T]``: features trail the step shape (default
    time_dim), and TorchRL-shaped flags ``[B, T, 1]`` with time_dim=-2 give the same."""
    x = torch.as_tensor(rng.normal(size=(3, 8, 4)))
    term = torch.as_tensor(rng.random((3, 8)) < 0.3)
    base = rltscan.eligibility_traces(x, terminated=term, gamma=0.9, lam=0.8).eligibility_traces
    assert base.shape == (3, 8, 4)
    for d in range(4):
        one = rltscan.eligibility_traces(x[..., d], terminated=term, gamma=0.9, lam=0.8)
        torch.testing.assert_close(base[..., d], one.eligibility_traces)
    torchrl = rltscan.eligibility_traces(
        x, terminated=term.unsqueeze(-1), gamma=0.9, lam=0.8, time_dim=-2
    ).eligibility_traces
    torch.testing.assert_close(torchrl, base)
    flat = rltscan.eligibility_traces(x[0], terminated=term[0], gamma=0.9, lam=0.8)
    torch.testing.assert_close(flat.eligibility_traces, base[0])


@pytest.mark.parametrize("name", ESTIMATORS)
def test_numpy_in_numpy_out_keeps_the_torchrl_shape(name, rng):
    case = _case(name, rng, B=2, T=5)
    arrays = {k: v if k in PER_ROW_KEYS else v[..., None] for k, v in case.arrays.items()}
    res = _call(case, arrays, time_dim=-2)
    for key in case.expected:
        assert isinstance(res[key], np.ndarray) and res[key].shape == (2, 5, 1)


def test_errors_index_the_users_shape():
    """A bad entry of a ``[B, T, 1]`` array is named by its index in that array."""
    r = torch.zeros(2, 6, 1)
    r[1, 4, 0] = float("nan")
    with pytest.raises(DataError) as err:
        rltscan.discounted_returns(r, terminated=torch.zeros(2, 6, 1, dtype=torch.bool),
                                   time_dim=-2)  # fmt: skip
    assert err.value.index == (1, 4, 0) and err.value.time_axis == 1


def test_the_declarations_name_every_function_tested():
    assert set(ESTIMATORS) == set(DECLARED)


@pytest.mark.parametrize("gamma", [0.9, [0.9, 0.5]], ids=["one-setting", "settings"])
def test_numpy_views_with_negative_strides_are_read(gamma):
    """A reversed numpy view (``x[::-1]``) or a big-endian array is an ordinary array:
    torch cannot wrap it without a copy, which once raised torch's own ValueError."""
    rewards = np.arange(6.0)[::-1]
    terminated = np.array([0, 0, 1, 0, 0, 0], bool)[::-1]
    got = rltscan.discounted_returns(rewards, terminated=terminated, gamma=gamma).returns
    want = rltscan.discounted_returns(rewards.copy(), terminated=terminated.copy(), gamma=gamma)
    np.testing.assert_array_equal(got, want.returns)
    big = rltscan.discounted_returns(rewards.astype(">f8"), terminated=terminated, gamma=gamma)
    np.testing.assert_array_equal(big.returns, want.returns)  # big-endian: the same


@pytest.mark.parametrize("gamma", [0.9, [0.9, 0.5]], ids=["one-setting", "settings"])
@pytest.mark.parametrize("dtype", [np.longdouble, np.str_])
def test_numpy_dtypes_torch_cannot_hold_are_refused_by_name(dtype, gamma):
    if dtype is np.longdouble and np.dtype(np.longdouble).itemsize == 8:
        pytest.skip("long double is float64 here")
    rewards = np.arange(3).astype(dtype)
    with pytest.raises(rltscan.DTypeError, match='"rewards" has dtype'):
        rltscan.discounted_returns(rewards, terminated=np.zeros(3, bool), gamma=gamma)
