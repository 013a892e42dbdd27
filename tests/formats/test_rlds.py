"""RLDS-style step tables (issue 21 item 3): the ``is_last`` row and what it is.

RLDS (google-research/rlds) stores one row per step: ``is_first``, ``is_last``,
``is_terminal``, ``observation``, ``action``, ``reward``, ``discount``. The ``is_last``
row "contains the last observation; its action, reward and discount are invalid";
``is_terminal`` on it says that observation is terminal, and an episode whose last row
is not terminal was truncated. Converters differ: TFDS's D4RL export appends such a
final-observation row only for terminal episodes or when next observations exist, and
otherwise marks the real last step ``is_last`` (its reward valid).

tensorflow_datasets is not installed, so the tables are built by hand to that layout
(FORMATS §4), with garbage in every slot RLDS calls invalid. The rule: the final
observation row is excluded from the transitions (outputs NaN there), its ``values``
entry (V of the final observation) bootstraps a truncated episode, and where the table
does not prove which kind of ``is_last`` row it has, the run stops naming
``is_last_row`` (CLI ``--is-last-row``).
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import AmbiguousInputError, DataError, MissingBootstrapError
from tests import oracles
from tests.producers import episodes, fixed_list

GAMMA, LAM = 0.9, 0.8
INVALID = 1234.5  # reward/action of a final-observation row: never a transition
INVALID_DISCOUNT = 0.37  # its discount (RLDS: invalid) - would be visible if read


def rlds_rows(s: dict, plan: list[tuple[int, str]], final_rows: str, rng) -> dict:
    """The RLDS table of the episodes ``s`` (tests.producers.episodes).

    ``final_rows``: "all" (RLDS proper: every episode ends with a final-observation
    row), "terminal" (TFDS D4RL without next observations: only terminal episodes get
    one; the others mark their real last step is_last) or "none" (every is_last row is
    a step). ``values`` on a final-observation row is V of the final observation (garbage
    where it is terminal, as producers.episodes does)."""
    cols: dict[str, list] = {
        k: [] for k in ("reward", "discount", "values", "is_first", "is_last", "is_terminal", "row")
    }
    start = 0
    for length, end in plan:
        stop = start + length
        term = end == "term"
        extra = final_rows == "all" or (final_rows == "terminal" and term)
        for t in range(start, stop):
            cols["reward"].append(s["r"][t])
            # dm_env/RLDS: the discount out of step t; 0 into a terminal state
            cols["discount"].append(0.0 if (t == stop - 1 and term) else GAMMA)
            cols["values"].append(s["v"][t])
            cols["is_first"].append(t == start)
            cols["is_last"].append(t == stop - 1 and not extra)
            cols["is_terminal"].append(False)
            cols["row"].append(t)
        if extra:
            cols["reward"].append(INVALID)
            cols["discount"].append(INVALID_DISCOUNT)
            cols["values"].append(s["nv"][stop - 1])  # V(s_T): garbage when terminal
            cols["is_first"].append(False)
            cols["is_last"].append(True)
            cols["is_terminal"].append(term)
            cols["row"].append(-1)
        start = stop
    out = {k: np.asarray(v) for k, v in cols.items()}
    n = len(out["reward"])
    out["reward"] = out["reward"].astype(np.float32)
    out["discount"] = out["discount"].astype(np.float32)
    out["values"] = out["values"].astype(np.float32)
    out["observation"] = rng.normal(size=(n, 3)).astype(np.float32)
    out["action"] = np.where(out["row"] < 0, INVALID, rng.normal(size=n)).astype(np.float32)
    return out


def write(table: dict, path: Path) -> Path:
    cols = {k: v for k, v in table.items() if k != "row"}
    if path.suffix == ".parquet":
        cols["observation"] = fixed_list(cols["observation"])
        pq.write_table(pa.table(cols), path)
    else:
        with h5py.File(path, "w") as f:
            for k, v in cols.items():
                f[k] = v
    return path


def want_gae(s: dict, *, bootstrap: bool = True) -> np.ndarray:
    """GAE of the transitions' meaning (one stream; the end of the data is a cut)."""
    nv = s["nv"].astype(np.float64)
    if not bootstrap:  # no V(s_T) anywhere: 0 where a truncation needs one
        nv = np.where(s["trunc"] & ~s["term"], 0.0, nv)
    res = oracles.gae(
        s["r"].tolist(), s["v"].tolist(), nv.tolist(), s["term"].tolist(),
        s["trunc"].tolist(), gamma=GAMMA, lam=LAM,
    )  # fmt: skip
    return np.asarray(res["advantages"])


def stored(path: Path, name: str) -> np.ndarray:
    if path.suffix == ".parquet":
        return pq.read_table(path, columns=[name]).column(name).to_numpy().astype(np.float64)
    with h5py.File(path) as f:
        return f[name][()].astype(np.float64)


PLAN = [(4, "term"), (3, "trunc"), (5, "term"), (2, "trunc"), (3, "trunc")]


def gae(path: Path, **kw) -> api.RunReport:
    return api.run("gae", str(path), device="cpu", params={"gamma": GAMMA, "lam": LAM}, **kw)


@pytest.fixture(params=[".parquet", ".h5"])
def suffix(request: pytest.FixtureRequest) -> str:
    return request.param


def test_final_observation_rows_are_not_transitions(suffix: str, tmp_path: Path) -> None:
    """RLDS proper, terminal and truncated episodes: asked once (with the discount
    column's decision, in one message); then exact, the final rows NaN, and the
    truncated episodes bootstrapped from V of their final observation."""
    rng = np.random.default_rng(0)
    s = episodes(rng, PLAN)
    table = rlds_rows(s, PLAN, "all", rng)
    path = write(table, tmp_path / f"rlds{suffix}")
    with pytest.raises(AmbiguousInputError) as err:
        gae(path)
    text = str(err.value)
    assert "--is-last-row observation or --is-last-row transition" in text
    assert "--discount discount" in text and len(err.value.decisions) == 2
    report = gae(path, is_last_row="observation", ignore=["discount"])
    got = stored(path, "advantages")
    final = table["row"] < 0
    assert np.isnan(got[final]).all() and np.isfinite(got[~final]).all()
    np.testing.assert_allclose(got[~final], want_gae(s), rtol=1e-5, atol=1e-5)
    assert report.counts["final_observation_rows"] == len(PLAN)
    assert report.counts["terminated"] == 2 and report.counts["truncated"] == 3
    assert report.provenance["reading"]["is_last_row"] == "observation"
    assert report.provenance["source_columns"]["values"] == "values"


def test_per_step_discount_is_aligned_as_rlds_defines_it(tmp_path: Path) -> None:
    """discount_t on row t is the discount out of step t (γ_t); the final row's is
    invalid and never read."""
    rng = np.random.default_rng(1)
    s = episodes(rng, PLAN)
    path = write(rlds_rows(s, PLAN, "all", rng), tmp_path / "rlds.parquet")
    api.run("gae", str(path), device="cpu", params={"lam": LAM}, is_last_row="observation",
            columns={"discount": "discount"})  # fmt: skip
    got = stored(path, "advantages")
    np.testing.assert_allclose(got[np.isfinite(got)], want_gae(s), rtol=1e-5, atol=1e-5)


def _asked_which_rows(tmp_path: Path, seed: int, end: str, final: str) -> tuple[dict, Path]:
    """Three episodes (4, 3, 5 steps) that all end with ``end``, as an RLDS table whose
    is_last rows are ``final`` (see :func:`rlds_rows`), and the refusal that asks
    --is-last-row without the discount column: (the episodes, the file)."""
    rng = np.random.default_rng(seed)
    plan = [(4, end), (3, end), (5, end)]
    s = episodes(rng, plan)
    path = write(rlds_rows(s, plan, final, rng), tmp_path / "rlds.parquet")
    with pytest.raises(AmbiguousInputError, match="--is-last-row"):
        gae(path, ignore=["discount"])
    return s, path


def test_all_terminal_rows_are_still_asked(tmp_path: Path) -> None:
    """Every is_last row terminal proves nothing (rlds_dataset_builder marks its real last
    steps so, tests/formats/test_rlds_builders.py): asked; with the word, exact."""
    s, path = _asked_which_rows(tmp_path, 2, "term", "all")
    gae(path, ignore=["discount"], is_last_row="observation")
    got = stored(path, "advantages")
    np.testing.assert_allclose(got[np.isfinite(got)], want_gae(s), rtol=1e-5, atol=1e-5)


def test_last_step_marked_is_last(tmp_path: Path) -> None:
    """A converter with no final observation (TFDS D4RL export of truncated episodes):
    every is_last row is a step. Ambiguous without the flag; with it, exact (no V(s_T):
    the missing-bootstrap rule names the first truncation)."""
    s, path = _asked_which_rows(tmp_path, 3, "trunc", "none")
    with pytest.raises(MissingBootstrapError, match=r"row 3 is a truncation"):
        gae(path, ignore=["discount"], is_last_row="transition")
    gae(path, ignore=["discount"], is_last_row="transition", missing_bootstrap="zero")
    np.testing.assert_allclose(
        stored(path, "advantages"), want_gae(s, bootstrap=False), rtol=1e-5, atol=1e-5
    )


def test_the_old_suggestion_is_not_exit_0(tmp_path: Path) -> None:
    """Issue 21 item 3: following "--missing-bootstrap zero" on an RLDS table used to
    give exit 0 with truncated episodes wrong by V(s_T). Now it is refused until the
    is_last rows are said to be final observations, and then V(s_T) is used."""
    rng = np.random.default_rng(4)
    s = episodes(rng, PLAN)
    path = write(rlds_rows(s, PLAN, "all", rng), tmp_path / "rlds.parquet")
    with pytest.raises(AmbiguousInputError, match="--is-last-row"):
        gae(path, ignore=["discount"], missing_bootstrap="zero")
    report = gae(path, ignore=["discount"], missing_bootstrap="zero", is_last_row="observation")
    assert report.counts.get("zero_bootstraps", 0) == 0
    got = stored(path, "advantages")
    np.testing.assert_allclose(got[np.isfinite(got)], want_gae(s), rtol=1e-5, atol=1e-5)


def test_terminal_flag_off_the_last_row_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    s = episodes(rng, PLAN)
    table = rlds_rows(s, PLAN, "all", rng)
    table["is_terminal"][2] = True
    path = write(table, tmp_path / "rlds.parquet")
    with pytest.raises(DataError, match='"is_terminal" is set at row 2, which is not'):
        gae(path, ignore=["discount"], is_last_row="observation")


def test_an_episode_without_its_final_row_is_refused(tmp_path: Path) -> None:
    """Mixed converters: a terminal episode with its final row beside truncated ones that
    mark their last step is_last (TFDS D4RL without next observations) is not provable
    either way: asked. An episode with no is_last row at all, read as final
    observations, is named (never bridged into the next episode)."""
    rng = np.random.default_rng(6)
    s = episodes(rng, PLAN)
    mixed = write(rlds_rows(s, PLAN, "terminal", rng), tmp_path / "mixed.parquet")
    with pytest.raises(AmbiguousInputError, match="--is-last-row"):
        gae(mixed, ignore=["discount"])
    table = rlds_rows(s, PLAN, "all", rng)
    lost = int(np.flatnonzero(table["is_last"])[1])  # episode 1's final row: dropped
    table = {k: np.delete(v, lost, axis=0) for k, v in table.items()}
    path = write(table, tmp_path / "lost.parquet")
    with pytest.raises(DataError, match=rf"row {lost} starts an episode"):
        gae(path, ignore=["discount"], is_last_row="observation")


def test_values_and_returns_on_every_estimator(tmp_path: Path) -> None:
    """returns (reads no values) bootstraps from V(s_T) too; prefix-sum counts only
    transitions (the final rows are NaN)."""
    rng = np.random.default_rng(7)
    s = episodes(rng, PLAN)
    table = rlds_rows(s, PLAN, "all", rng)
    path = write(table, tmp_path / "rlds.parquet")
    api.run("returns", str(path), device="cpu", params={"gamma": GAMMA},
            is_last_row="observation", ignore=["discount"])  # fmt: skip
    want = oracles.discounted_returns(
        s["r"].tolist(), s["nv"].tolist(), s["term"].tolist(), s["trunc"].tolist(), gamma=GAMMA
    )
    got = stored(path, "returns")
    np.testing.assert_allclose(got[table["row"] >= 0], want, rtol=1e-5, atol=1e-5)
    api.run("prefix-sum", str(path), device="cpu", is_last_row="observation")
    sums = stored(path, "prefix_sums")
    assert np.isnan(sums[table["row"] < 0]).all()
    ends = np.flatnonzero(s["term"] | s["trunc"])
    np.testing.assert_allclose(
        sums[table["row"] >= 0][ends], np.add.reduceat(s["r"], np.r_[0, ends[:-1] + 1]), rtol=1e-5
    )


def test_inspect_shows_the_open_decision(tmp_path: Path) -> None:
    rng = np.random.default_rng(8)
    s = episodes(rng, PLAN)
    path = write(rlds_rows(s, PLAN, "all", rng), tmp_path / "rlds.parquet")
    info = api.inspect(str(path), ignore=["discount"])
    assert info["roles"]["last_row"] == "is_last" and info["roles"]["rewards"] == "reward"
    assert [d["fix"] for d in info["decisions"]] == [
        "pass --is-last-row observation or --is-last-row transition"
    ]
    assert not info["estimators"]["gae"]["ready"]
    info = api.inspect(str(path), ignore=["discount"], is_last_row="observation")
    assert info["estimators"]["gae"]["ready"] and info["decisions"] == []
    assert info["counts"]["final_observation_rows"] == len(PLAN)


def test_garbage_in_final_rows_is_never_read(tmp_path: Path) -> None:
    """NaN in every invalid slot of the final rows (reward, discount, V of a terminal
    observation): the run is exact, validation finds nothing to refuse."""
    rng = np.random.default_rng(9)
    s = episodes(rng, PLAN)
    table = rlds_rows(s, PLAN, "all", rng)
    final = table["row"] < 0
    table["reward"][final] = np.nan
    table["discount"][final] = np.nan
    table["values"][final & table["is_terminal"]] = np.nan
    path = write(table, tmp_path / "rlds.h5")
    api.run("gae", str(path), device="cpu", params={"lam": LAM}, is_last_row="observation",
            columns={"discount": "discount"})  # fmt: skip
    got = stored(path, "advantages")
    np.testing.assert_allclose(got[~final], want_gae(s), rtol=1e-5, atol=1e-5)


def test_worked_example(tmp_path: Path) -> None:
    """docs/CONVENTIONS.md §1.9: the table's numbers (NaN on the is_last rows)."""
    path = tmp_path / "steps.parquet"
    pq.write_table(
        pa.table(
            {
                "is_first": [1, 0, 0, 1, 0, 0, 0],
                "is_last": [0, 0, 1, 0, 0, 0, 1],
                "is_terminal": [0, 0, 1, 0, 0, 0, 0],
                "reward": [1.0, 2.0, 0.0, 0.5, 1.0, -1.0, 0.0],
                "value": [0.5, 0.3, np.nan, 0.8, 0.6, 0.2, 0.7],
            }
        ),
        path,
    )
    gae(path, is_last_row="observation")
    np.testing.assert_allclose(
        stored(path, "advantages"), [1.994, 1.7, np.nan, 0.362112, 0.1696, -0.57, np.nan]
    )


def test_the_flag_the_refusal_names_exists_on_the_command_line(tmp_path: Path) -> None:
    """The refusal says "pass --is-last-row observation": that option is real, and the
    command line's numbers equal the API's (a subprocess, as a user runs it)."""
    import subprocess
    import sys

    rng = np.random.default_rng(6)
    s = episodes(rng, PLAN)
    path = write(rlds_rows(s, PLAN, "all", rng), tmp_path / "rlds.parquet")
    cmd = [sys.executable, "-m", "rltscan", "gae", str(path), "--gamma", str(GAMMA)]
    cmd += ["--lam", str(LAM), "--ignore", "discount", "-q"]
    refused = subprocess.run(cmd, capture_output=True, text=True)
    assert refused.returncode == 2 and "--is-last-row observation" in refused.stderr
    done = subprocess.run([*cmd, "--is-last-row", "observation"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = stored(path, "advantages")
    np.testing.assert_allclose(got[np.isfinite(got)], want_gae(s), rtol=1e-5, atol=1e-5)
    inspected = subprocess.run(
        [sys.executable, "-m", "rltscan", "inspect", str(path), "--is-last-row", "observation",
         "--ignore", "discount", "--json"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert inspected.returncode == 0, inspected.stderr
    assert '"final_observation_rows"' in inspected.stdout
