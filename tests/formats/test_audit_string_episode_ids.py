"""Audit: episode ids written as text, as pandas, polars and Hugging Face ``datasets``
write them.

A logger that names its episodes (``"ep0007"``, a UUID, a pandas ``Categorical``) writes
the id column as Arrow ``string`` / ``large_string`` (polars, HF ``datasets``) or
``dictionary<values=string>`` (pandas categoricals). An episode ends where the id
changes (docs/CONVENTIONS.md §1.5), whatever the ids' type. rltscan refused such a
column (exit 4, "has type ..., not numbers or booleans; pass the right column
with its option"). They are now read as text and compared by equality, like numeric
ids: with flags beside them, and with ids only (after ``--ends-are``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from tests.audit_ref import episode_ends, estimates, one_line_error
from tests.io_helpers import run_cli

pd = pytest.importorskip("pandas")
pl = pytest.importorskip("polars")

GAMMA, LAM = 0.9, 0.8
LENGTHS = [4, 3, 5, 2]


def episodes(seed: int = 0) -> dict[str, np.ndarray]:
    """Four episodes: terminated, truncated, terminated, cut by the end of the log."""
    rng = np.random.default_rng(seed)
    n = sum(LENGTHS)
    ends, term, trunc = episode_ends(LENGTHS)
    v = rng.normal(size=n)
    nv = np.append(v[1:], rng.normal())
    nv[ends[:-1]] = rng.normal(size=len(ends) - 1)  # V(final obs) of each episode
    nv[term] = 50.0  # never read
    eid = np.repeat(np.arange(len(LENGTHS)), LENGTHS)
    return {"eid": eid, "r": rng.normal(size=n), "v": v, "nv": nv, "term": term, "trunc": trunc}


def names(eid: np.ndarray) -> list[str]:
    return [f"{(7 * e + 3) % 11:02d}-{'abcd'[e]}" for e in eid]  # not sorted as they come


def write(tool: str, path: Path, e: dict[str, np.ndarray], flags: bool) -> None:
    cols = {"episode_id": names(e["eid"]), "reward": e["r"], "value": e["v"], "next_value": e["nv"]}
    if flags:
        cols |= {"terminated": e["term"], "truncated": e["trunc"]}
    if tool == "pandas-categorical":
        df = pd.DataFrame(cols)
        df["episode_id"] = df["episode_id"].astype("category")
        df.to_parquet(path)
    elif tool == "polars":
        pl.DataFrame(cols).write_parquet(path)
    else:
        datasets = pytest.importorskip("datasets")
        datasets.Dataset.from_dict(cols).to_parquet(str(path))


def expected(e: dict[str, np.ndarray], truncated_ends: bool) -> dict[str, np.ndarray]:
    term, trunc = e["term"], e["trunc"]
    if truncated_ends:  # ids only, every end read as a truncation (--ends-are truncated)
        trunc = term | trunc
        term = np.zeros_like(term)
    return estimates(e["r"], e["v"], e["nv"], term, trunc, GAMMA, LAM)


def write_ids_that_come_back(path: Path, e: dict[str, np.ndarray]) -> list[str]:
    """A polars log whose last episode's rows carry the first episode's id (an unsorted
    log); returns the ids written."""
    ids = names(e["eid"])
    ids[-2:] = [ids[0]] * 2
    pl.DataFrame(
        {"episode_id": ids, "reward": e["r"], "terminated": e["term"], "truncated": e["trunc"]}
    ).write_parquet(path)
    return ids


def check_ids_only(path: Path, e: dict[str, np.ndarray], in_process: bool) -> None:
    """Ids only: TD(λ) stops naming ``--ends-are``, then with ``--ends-are truncated``
    gives the numbers of every end read as a truncation."""
    args = ["td-lambda", str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "-q"]
    res = run_cli(*args, in_process=in_process)
    assert res.returncode == 2 and "--ends-are" in one_line_error(res.stderr)
    res = run_cli(*args, "--ends-are", "truncated", in_process=in_process)
    assert res.returncode == 0, res.stderr
    got = pq.read_table(path)["lambda_returns"].to_numpy()
    np.testing.assert_allclose(got, expected(e, True)["lambda_returns"])


TOOLS = ["pandas-categorical", "polars", "hf-datasets"]


@pytest.mark.parametrize("tool", TOOLS)
def test_with_flags_text_ids_give_the_numbers(tool: str, tmp_path: Path) -> None:
    """Text ids beside flags: read and compared by equality (they were refused as a
    column of another type, and only ``--ignore`` of the ids got through); the table's
    own columns (the id column's text or dictionary type included) are kept."""
    e = episodes()
    path = tmp_path / "log.parquet"
    write(tool, path, e, flags=True)
    raw = path.read_bytes()
    args = ["gae", str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "-q"]
    res = run_cli(*args, in_process=True)
    assert res.returncode == 0, res.stderr
    table = pq.read_table(path)
    np.testing.assert_allclose(table["advantages"].to_numpy(), expected(e, False)["advantages"])
    assert table.drop_columns(["advantages", "value_targets"]).equals(pq.read_table(pa_buffer(raw)))


def test_text_ids_that_come_back_are_refused(tmp_path: Path) -> None:
    """An id that appears in two runs of rows (an unsorted log) is refused by its text."""
    ids = write_ids_that_come_back(tmp_path / "log.parquet", episodes())
    res = run_cli("returns", str(tmp_path / "log.parquet"), "--gamma", "0.9", "-q")
    assert res.returncode == 4, res.stderr
    line = one_line_error(res.stderr)
    assert f"episode id {ids[0]!r}" in line and "sort the table" in line


def pa_buffer(raw: bytes):
    import pyarrow as pa

    return pa.BufferReader(raw)


@pytest.mark.parametrize("tool", TOOLS)
def test_ids_only_are_read_like_numeric_ids(tool: str, tmp_path: Path) -> None:
    e = episodes()
    path = tmp_path / "log.parquet"
    write(tool, path, e, flags=False)
    check_ids_only(path, e, in_process=True)


def test_numeric_ids_of_the_same_table_are_read(tmp_path: Path) -> None:
    """The baseline the finding compares with: integer ids, ids only, as a subprocess."""
    e = episodes()
    path = tmp_path / "log.parquet"
    pd.DataFrame(
        {"episode_id": e["eid"] * 10 + 3, "reward": e["r"], "value": e["v"], "next_value": e["nv"]}
    ).to_parquet(path)
    check_ids_only(path, e, in_process=False)


@pytest.mark.parametrize("steps", ["1", "3", "4"])
def test_text_ids_streamed_in_windows_match_the_whole_file(steps: str, tmp_path: Path) -> None:
    """Windows that end inside an episode and on its last step: the run across them is
    one episode where the text id goes on, and an id that comes back in a later window
    is refused as in a whole read."""
    e = episodes()
    path = tmp_path / "log.parquet"
    write("polars", path, e, flags=True)
    args = ["gae", str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "-q"]
    res = run_cli(*args, "--chunk-steps", steps, "--block-steps", steps, in_process=True)
    assert res.returncode == 0, res.stderr
    got = pq.read_table(path)["advantages"].to_numpy()
    np.testing.assert_allclose(got, expected(e, False)["advantages"])
    write_ids_that_come_back(tmp_path / "back.parquet", e)
    res = run_cli("returns", str(tmp_path / "back.parquet"), "--gamma", "0.9", "-q",
                  "--chunk-steps", steps, "--block-steps", steps)  # fmt: skip
    assert res.returncode == 4, res.stderr
    assert "sort the table" in one_line_error(res.stderr)
