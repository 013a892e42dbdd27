"""``init`` of eligibility traces and prefix sums beside ``x [B, T, D]`` may be one value
per sequence (``[B]``) or one per feature (``[D]``) (docs/CONVENTIONS.md §8.1). When
B == D a ``[B]`` array is both: it used to be read as one per sequence without a word, so
a per-feature init gave other numbers. It is refused now, naming the two shapes that say
it; each of them gives the float64 loop's numbers."""

from __future__ import annotations

import numpy as np
import pytest

import rltscan
from rltscan import AmbiguousInputError
from tests import oracles

B = D = 3
T = 7


def _data(rng):
    x = rng.normal(size=(B, T, D))
    term = rng.random((B, T)) < 0.25
    return x, term


def _want(name, x, term, init_bd):
    """The oracle per sequence, with ``init_bd[b]`` the [D] init of sequence b."""
    if name == "eligibility_traces":
        rows = [oracles.eligibility_traces(x[b], term[b], gamma=0.9, lam=0.8, init=init_bd[b])
                for b in range(B)]  # fmt: skip
    else:
        rows = [oracles.prefix_sum(x[b], term[b], init=init_bd[b]) for b in range(B)]
    return np.stack(rows)


NAMES = ["eligibility_traces", "prefix_sum"]


@pytest.mark.parametrize("name", NAMES)
def test_an_init_that_fits_sequences_and_features_alike_is_refused(name, rng):
    x, term = _data(rng)
    with pytest.raises(AmbiguousInputError, match=r"\(3, 1\) for one per sequence or \(1, 3\)"):
        getattr(rltscan, name)(x, terminated=term, init=np.array([1.0, 2.0, 3.0]))


@pytest.mark.parametrize("name", NAMES)
def test_the_two_shapes_that_say_it_give_the_oracle(name, rng):
    x, term = _data(rng)
    init = np.array([1.0, 2.0, 3.0])
    out = "eligibility_traces" if name == "eligibility_traces" else "prefix_sums"
    kw = {"gamma": 0.9, "lam": 0.8} if name == "eligibility_traces" else {}
    fn = getattr(rltscan, name)
    per_sequence = fn(x, terminated=term, init=init[:, None], backend="torch", **kw)[out]
    per_feature = fn(x, terminated=term, init=init[None, :], backend="torch", **kw)[out]
    np.testing.assert_allclose(per_sequence, _want(name, x, term, np.repeat(init[:, None], D, 1)))
    np.testing.assert_allclose(per_feature, _want(name, x, term, np.repeat(init[None], B, 0)))
