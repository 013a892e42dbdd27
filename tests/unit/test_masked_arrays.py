"""numpy masked arrays (what netCDF4 and ``np.ma`` hand out): a masked entry is data
that is missing, but the call read the value stored under the mask as a real step
(rewards [1, (masked 2), 3, 4] gave the advantages of [1, 2, 3, 4]). A masked entry is
refused now with the conversion that keeps the meaning (``x.filled(np.nan)``: NaN is
refused where it is read and harmless where it is not, docs/CONVENTIONS.md §5); a
masked array with nothing masked is read as its data."""

from __future__ import annotations

import numpy as np
import pytest

import rltscan
from rltscan import DataError

R = np.array([1.0, 2.0, 3.0, 4.0])
V = np.full(4, 0.5)
Z = np.zeros(4, bool)


def test_a_masked_reward_is_refused_with_the_fix():
    r = np.ma.masked_array(R, mask=[0, 1, 0, 0])
    with pytest.raises(DataError, match=r'"rewards" is a masked array.*filled\(np.nan\)'):
        rltscan.gae(r, V, terminated=Z, last_value=0.0)


@pytest.mark.parametrize("name", ["terminated", "last_value", "values", "gamma"])
def test_every_argument_is_checked(name):
    args = {"values": V, "terminated": Z, "last_value": np.zeros(1), "gamma": np.full(4, 0.9)}
    args[name] = np.ma.masked_array(args[name], mask=np.ones_like(args[name], bool))
    with pytest.raises(DataError, match=f'"{name}" is a masked array'):
        rltscan.gae(R, **args)


def test_nothing_masked_reads_the_data():
    want = rltscan.gae(R, V, terminated=Z, last_value=0.0).advantages
    got = rltscan.gae(np.ma.masked_array(R), np.ma.masked_array(V, mask=np.zeros(4, bool)),
                      terminated=Z, last_value=0.0).advantages  # fmt: skip
    np.testing.assert_array_equal(got, want)


def test_masked_bootstrap_values_filled_with_nan_are_read_only_where_needed():
    """The named fix: unread slots may be missing (§1.2)."""
    boot = np.ma.masked_array([0.0, 0.0, 0.0, 0.7], mask=[1, 1, 1, 0])
    got = rltscan.gae(R, V, terminated=Z, bootstrap_values=boot.filled(np.nan)).advantages
    want = rltscan.gae(R, V, terminated=Z, last_value=0.7).advantages
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_a_masked_flag_names_no_nan_fix():
    """``x.filled(np.nan)`` on a boolean mask array gives True where masked (NaN is truthy):
    following the fix read a missing flag as an episode end, with no word. On integers it
    raises numpy's TypeError. A flag has no missing value; the fix says so."""
    term = np.ma.masked_array([False, False, True, False], mask=[0, 1, 0, 0])
    assert term.filled(np.nan)[1]  # what the old fix did
    for flags in (term, term.astype(np.int8)):
        with pytest.raises(DataError) as err:
            rltscan.discounted_returns(R, terminated=flags, gamma=0.9)
        assert "pass x.filled(np.nan)" not in err.value.fix
        assert err.value.fix.startswith("a flag cannot be missing")


def test_masked_integer_rewards_name_a_fix_that_runs():
    r = np.ma.masked_array([1, 2, 3, 4], mask=[0, 1, 0, 0])
    with pytest.raises(DataError) as err:
        rltscan.discounted_returns(r, terminated=Z, gamma=0.9)
    assert "x.astype(np.float64).filled(np.nan)" in err.value.fix
    with pytest.raises(DataError, match='"rewards" has NaN'):  # refused where it is read
        rltscan.discounted_returns(r.astype(np.float64).filled(np.nan), terminated=Z, gamma=0.9)


def test_pandas_missing_values_are_read_or_refused_by_what_they_mean():
    """pandas' (and polars') nullable dtypes: a missing float (pd.NA in Float64) arrives
    as NaN and is refused where it is read, naming the step; a missing flag (pd.NA in
    "boolean", None in polars) or a list holding None is refused naming the fill, not as
    "not an array"."""
    pd = pytest.importorskip("pandas")
    with pytest.raises(DataError, match=r'"rewards" has NaN or Inf at index 1'):
        rltscan.gae(pd.Series([1.0, None, 3.0, 4.0], dtype="Float64"), V, terminated=Z,
                    last_value=0.0)  # fmt: skip
    flags = pd.Series([False, pd.NA, False, True], dtype="boolean")
    with pytest.raises(rltscan.DTypeError, match=r'"terminated" \(Series\) holds .*fillna'):
        rltscan.gae(R, V, terminated=flags)
    with pytest.raises(rltscan.DTypeError, match=r'"values" \(list\) holds .*na_value=np.nan'):
        rltscan.gae(R, [0.5, None, 0.5, 0.5], terminated=Z, last_value=0.0)
    got = rltscan.gae(pd.Series(R, dtype="Float64"), V, terminated=pd.Series(Z),
                      last_value=0.0)  # fmt: skip
    want = rltscan.gae(R, V, terminated=Z, last_value=0.0)
    assert np.array_equal(got.advantages, want.advantages)
    pl = pytest.importorskip("polars")
    with pytest.raises(rltscan.DTypeError, match=r'"terminated" \(Series\) holds .*fill_null'):
        rltscan.gae(R, V, terminated=pl.Series([False, None, False, True]))
