"""Audit: flag and value columns with missing entries, as pandas writes them.

A pandas log that gained a ``truncated`` column half-way (``pd.concat`` of frames with and
without it) writes it as an object column of ``True``/``False``/``None``, i.e. Arrow
``bool`` with nulls; a nullable ``"boolean"``/``"Float64"`` dtype does the same. A null
flag is not a flag: the run must stop (never read it as False). A null in a slot no
estimator reads (``next_value`` after a terminal step) is harmless (docs/CONVENTIONS.md
§1.6) and must not stop the run; a null in a slot that is read must.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.audit_ref import estimates, one_line_error
from tests.io_helpers import run_cli

pd = pytest.importorskip("pandas")

GAMMA, LAM = 0.9, 0.8


def data(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 12
    term = np.zeros(n, bool)
    trunc = np.zeros(n, bool)
    term[3] = True
    trunc[7] = True
    v = rng.normal(size=n)
    nv = np.append(v[1:], rng.normal())
    nv[7] = rng.normal()
    nv[3] = np.nan
    return {"reward": rng.normal(size=n), "value": v, "next_value": nv, "terminated": term,
            "truncated": trunc}  # fmt: skip


def test_concat_of_logs_without_and_with_truncated_is_refused(tmp_path: Path) -> None:
    d = data()
    early = pd.DataFrame({k: d[k][:5] for k in ("reward", "value", "next_value", "terminated")})
    late = pd.DataFrame({k: v[5:] for k, v in d.items()})
    path = tmp_path / "log.parquet"
    pd.concat([early, late], ignore_index=True).to_parquet(path)
    raw = path.read_bytes()
    res = run_cli("gae", str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "-q")
    assert res.returncode == 4
    assert '"truncated"' in one_line_error(res.stderr)
    assert path.read_bytes() == raw


@pytest.mark.parametrize("column", ["terminated", "truncated"])
def test_nullable_boolean_flags_are_refused(column: str, tmp_path: Path) -> None:
    d = data()
    df = pd.DataFrame(d)
    df[column] = pd.array([*d[column][:-1], None], dtype="boolean")
    path = tmp_path / "log.parquet"
    df.to_parquet(path)
    res = run_cli("td-lambda", str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "-q",
                  in_process=True)  # fmt: skip
    assert res.returncode == 4
    assert f'"{column}"' in one_line_error(res.stderr)


def test_a_null_where_nothing_is_read_is_harmless_and_one_that_is_read_stops(tmp_path: Path):
    d = data()
    df = pd.DataFrame(d)
    df["next_value"] = pd.array([None if np.isnan(x) else x for x in d["next_value"]], "Float64")
    path = tmp_path / "log.parquet"
    df.to_parquet(path)
    args = ["gae", str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "-q"]
    res = run_cli(*args, in_process=True)
    assert res.returncode == 0, res.stderr
    ref = estimates(d["reward"], d["value"], d["next_value"], d["terminated"], d["truncated"],
                    GAMMA, LAM)  # fmt: skip
    np.testing.assert_allclose(pq.read_table(path)["advantages"].to_numpy(), ref["advantages"])
    df["reward"] = pd.array([*d["reward"][:-1], None], "Float64")
    path2 = tmp_path / "log2.parquet"
    df.to_parquet(path2)
    res = run_cli("gae", str(path2), "-q", in_process=True)
    assert res.returncode == 4
    assert '"reward"' in one_line_error(res.stderr)
