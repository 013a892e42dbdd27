"""The column resolver's trust rule: exact, or stop with the flag to pass (issue 10).

One resolver (``rltscan.io.layout.prepare``) serves ``inspect``, ``--dry-run`` and the
run, so they cannot disagree; these tests build files the way producers write them
and check each reading against a float64 loop (tests/oracles.py).
"""

from __future__ import annotations

import time
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import AmbiguousInputError, MissingBootstrapError, ParameterError
from tests.io_helpers import FLAT, PARQUET, parquet_columns
from tests.oracles import gae as gae_oracle

GAMMA, LAM = 0.9, 0.8


def _episodes(rng: np.random.Generator, lengths: list[int], ends: list[str]) -> dict:
    """Columns of a gymnasium-style table: ``ends`` is "term", "trunc" or "cut" per episode."""
    n = sum(lengths)
    reward = rng.normal(size=n)
    value = rng.normal(size=n)
    next_value = np.empty(n)
    term = np.zeros(n, bool)
    trunc = np.zeros(n, bool)
    eid = np.repeat(np.arange(len(lengths)), lengths)
    step = np.concatenate([np.arange(t) for t in lengths])
    start = 0
    for t, end in zip(lengths, ends, strict=True):
        stop = start + t
        next_value[start : stop - 1] = value[start + 1 : stop]
        next_value[stop - 1] = rng.normal()  # V(final obs), not the next episode's
        term[stop - 1] = end == "term"
        trunc[stop - 1] = end == "trunc"
        start = stop
    return dict(
        episode_id=eid,
        step=step,
        reward=reward,
        value=value,
        next_value=next_value,
        term=term,
        trunc=trunc,
    )


def _oracle(cols: dict, term: np.ndarray, trunc: np.ndarray) -> np.ndarray:
    """GAE of the data's meaning: every episode end is a cut, termination wins; the
    end of the data is a truncation."""
    cut = trunc.copy()
    cut[-1] |= not term[-1]
    res = gae_oracle(
        list(cols["reward"]),
        list(cols["value"]),
        list(cols["next_value"]),
        list(term),
        list(cut),
        gamma=GAMMA,
        lam=LAM,
    )
    return np.asarray(res["advantages"], float)


def _gae_to(path: Path, out: Path, **kw) -> api.RunReport:
    return api.run(
        "gae", str(path), output=str(out), device="cpu", params={"gamma": GAMMA, "lam": LAM}, **kw
    )


def _write_parquet(path: Path, columns: dict) -> Path:
    pq.write_table(pa.table(columns), path)
    return path


@pytest.fixture
def gymnasium_done(tmp_path: Path) -> tuple[Path, dict]:
    """Issue 10 case 1: ``done`` = terminated (gymnasium), beside ``truncated``."""
    rng = np.random.default_rng(1)
    cols = _episodes(rng, [7, 5, 9, 4, 6], ["term", "trunc", "term", "trunc", "cut"])
    table = {
        "episode_id": cols["episode_id"],
        "step": cols["step"],
        "reward": cols["reward"],
        "done": cols["term"],
        "truncated": cols["trunc"],
        "value": cols["value"],
        "next_value": cols["next_value"],
    }
    return _write_parquet(tmp_path / "gym.parquet", table), cols


def test_done_beside_truncated_is_refused_with_the_flags(gymnasium_done) -> None:
    path, _ = gymnasium_done
    with pytest.raises(AmbiguousInputError, match="--terminals done") as err:
        api.run("gae", str(path), dry_run=True)
    assert "--dones-mean ended" in str(err.value)
    info = api.inspect(str(path))
    assert not info["estimators"]["gae"]["ready"]
    assert "--terminals done" in info["estimators"]["gae"]["needs"]


def test_done_as_terminals_gives_the_exact_answer(gymnasium_done, tmp_path: Path) -> None:
    path, cols = gymnasium_done
    out = tmp_path / "out.parquet"
    _gae_to(path, out, columns={"terminated": "done"})
    got = parquet_columns(out)["advantages"]
    np.testing.assert_allclose(got, _oracle(cols, cols["term"], cols["trunc"]), rtol=1e-6)


def test_old_gym_done_with_truncation_flag(tmp_path: Path) -> None:
    """Old gym: ``done`` = terminated or truncated, ``TimeLimit.truncated`` beside it."""
    rng = np.random.default_rng(2)
    cols = _episodes(rng, [6, 8, 5, 7], ["term", "trunc", "trunc", "term"])
    path = _write_parquet(
        tmp_path / "old.parquet",
        {
            "episode_id": cols["episode_id"],
            "reward": cols["reward"],
            "done": cols["term"] | cols["trunc"],
            "TimeLimit.truncated": cols["trunc"],
            "value": cols["value"],
            "next_value": cols["next_value"],
        },
    )
    with pytest.raises(AmbiguousInputError, match="--dones-mean ended"):
        api.run("gae", str(path), dry_run=True)
    out = tmp_path / "out.parquet"
    report = _gae_to(path, out, dones_mean="ended")
    assert any("terminated =" in n for n in report.notes)
    got = parquet_columns(out)["advantages"]
    np.testing.assert_allclose(got, _oracle(cols, cols["term"], cols["trunc"]), rtol=1e-6)


def test_done_that_repeats_both_flags_is_checked_and_noted(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    cols = _episodes(rng, [6, 8, 5], ["term", "trunc", "term"])
    path = _write_parquet(
        tmp_path / "both.parquet",
        {
            "reward": cols["reward"],
            "terminated": cols["term"],
            "truncated": cols["trunc"],
            "done": cols["term"] | cols["trunc"],
            "value": cols["value"],
            "next_value": cols["next_value"],
        },
    )
    report = api.run("gae", str(path), dry_run=True)
    assert any('"done" repeats' in n for n in report.notes)


def test_dones_override_is_never_silently_ignored(gymnasium_done) -> None:
    path, _ = gymnasium_done
    # --dones done --dones-mean ended claims done = terminated or truncated; this "done"
    # is gymnasium's terminated, so the truncated rows contradict the claim: the override
    # is read (the contradiction names it), never dropped, and never run as is
    with pytest.raises(AmbiguousInputError, match='"truncated" is set at row 11 but "done"'):
        api.run("gae", str(path), dry_run=True, columns={"dones": "done"}, dones_mean="ended")
    with pytest.raises(ParameterError, match="--q-values"):
        api.run("gae", str(path), dry_run=True, columns={"q_values": "step", "terminated": "done"})


def test_unflagged_id_change_needs_ends_are(tmp_path: Path) -> None:
    """Issue 10 case 3: an episode-id change with no flag is never guessed."""
    rng = np.random.default_rng(4)
    cols = _episodes(rng, [5, 6, 7], ["cut", "term", "cut"])
    path = _write_parquet(
        tmp_path / "ids.parquet",
        {
            "episode_id": cols["episode_id"],
            "reward": cols["reward"],
            "terminated": cols["term"],
            "value": cols["value"],
            "next_value": cols["next_value"],
        },
    )
    with pytest.raises(AmbiguousInputError, match=r"row 4.*--ends-are truncated"):
        api.run("gae", str(path), dry_run=True)
    out = tmp_path / "out.parquet"
    report = _gae_to(path, out, ends_are="truncated")
    assert any("--ends-are" in n for n in report.notes)
    cut = np.zeros(len(cols["reward"]), bool)
    cut[[4]] = True
    got = parquet_columns(out)["advantages"]
    np.testing.assert_allclose(got, _oracle(cols, cols["term"], cut), rtol=1e-6)


@pytest.mark.parametrize(
    ("command", "output", "want"),
    [
        ("prefix-sum", "prefix_sums", [1, 3, 6, 4, 9, 6, 13, 21]),
        ("return-to-go", "returns_to_go", [6, 5, 3, 9, 5, 21, 15, 8]),
        ("traces", "eligibility_traces", None),
    ],
)
def test_unflagged_ends_are_not_asked_where_they_cannot_change_the_numbers(
    command: str, output: str, want: list | None, tmp_path: Path
) -> None:
    """Traces, prefix sums and return-to-go never bootstrap: an id change ends the
    episode either way, so the file runs as the Python API does (no --ends-are), and
    its numbers are those of either answer; GAE on the same ends still asks."""
    ids, x = np.array([0, 0, 0, 1, 1, 2, 2, 2]), np.arange(1.0, 9.0)
    path = _write_parquet(tmp_path / "ids.parquet", {"episode_id": ids, "reward": x, "v": x})
    got = {}
    for ends in (None, "terminal", "truncated"):
        out = tmp_path / f"{ends}.parquet"
        api.run(command, str(path), output=str(out), device="cpu", ends_are=ends)
        got[ends] = parquet_columns(out)[output]
    np.testing.assert_array_equal(got[None], got["terminal"])
    np.testing.assert_array_equal(got[None], got["truncated"])
    if want is not None:
        np.testing.assert_array_equal(got[None], want)
    with pytest.raises(AmbiguousInputError, match="--ends-are"):
        api.run("gae", str(path), dry_run=True, columns={"values": "v"})


def test_minari_episode_without_a_final_flag_needs_ends_are(tmp_path: Path) -> None:
    path = tmp_path / "eps.h5"
    with h5py.File(path, "w") as f:
        for i, last in enumerate((True, False)):
            g = f.create_group(f"episode_{i}")
            g["rewards"] = np.ones(3)
            g["terminations"] = np.array([0, 0, last], bool)
            g["truncations"] = np.zeros(3, bool)
    with pytest.raises(AmbiguousInputError, match="step 2 of episode_1"):
        api.run("returns", str(path), dry_run=True)
    api.run("returns", str(path), dry_run=True, ends_are="terminal")


def test_two_columns_for_one_role_are_refused(tmp_path: Path) -> None:
    path = _write_parquet(
        tmp_path / "two.parquet",
        {"reward": [1.0, 2.0], "rewards": [1.0, 2.0], "terminated": [False, True]},
    )
    with pytest.raises(AmbiguousInputError, match='both "rewards" and "reward"'):
        api.run("returns", str(path), dry_run=True)
    report = api.run("returns", str(path), dry_run=True, ignore=["reward"])
    assert report.columns["rewards"] == "rewards"


def test_ignore_names_a_column_that_exists(tmp_path: Path) -> None:
    with pytest.raises(ParameterError, match='no column "nope" \\(given by --ignore\\)'):
        api.run("returns", str(FLAT), dry_run=True, ignore=["nope"])


def test_returns_zero_bootstrap_is_a_note(tmp_path: Path) -> None:
    """Issue 10 case 4: the returns default (0 at truncations) is said, with a count."""
    rng = np.random.default_rng(5)
    cols = _episodes(rng, [5, 6, 4], ["trunc", "trunc", "trunc"])
    path = _write_parquet(
        tmp_path / "pend.parquet",
        {"reward": cols["reward"], "terminated": cols["term"], "truncated": cols["trunc"]},
    )
    report = api.run("returns", str(path), dry_run=True)
    assert report.counts["zero_bootstraps"] == 3
    assert any("used 0" in n and "--missing-bootstrap zero" in n for n in report.notes)


def test_inspect_ready_means_the_run_goes(tmp_path: Path) -> None:
    """Issue 10 case 5: D4RL-style truncations without next values: not ready, and the
    error names the truncated step (not a terminal one)."""
    n = 20
    rewards = np.ones(n, np.float32)
    terminals = np.zeros(n, bool)
    timeouts = np.zeros(n, bool)
    terminals[12] = True
    timeouts[15] = True
    path = tmp_path / "d4rl.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = rewards
        f["terminals"] = terminals
        f["timeouts"] = timeouts
        f["values"] = np.zeros(n, np.float32)
    info = api.inspect(str(path))
    assert not info["estimators"]["gae"]["ready"]
    assert "--next-values" in info["estimators"]["gae"]["needs"]
    assert info["estimators"]["returns"]["ready"]  # its default is 0, and it says so
    assert any("used 0" in n for n in info["notes"])
    # never the terminal row 12; the FIRST row that needs V(s_{t+1}) (row 15, not the end
    # of the data at row 19, which a backward stream meets first), named by its flag
    with pytest.raises(MissingBootstrapError, match=r'row 15 is a truncation \("timeouts" is set'):
        api.run("gae", str(path), device="cpu")
    report = api.run("gae", str(path), dry_run=True, missing_bootstrap="zero")
    assert report.counts["zero_bootstraps"] == 2  # row 15 and the end of the data


def test_data_end_is_a_noted_truncation() -> None:
    report = api.run("returns", str(FLAT), dry_run=True)
    assert report.counts["open_ends"] == 1
    assert any("treated as a truncation" in n for n in report.notes)


def test_dry_run_computes_and_writes_nothing(tmp_path: Path) -> None:
    """Issue 10 case 10: a plan reads the flag columns only and writes nothing."""
    path = tmp_path / "big.h5"
    n = 1 << 20
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones(n, np.float32)
        f["values"] = np.zeros(n, np.float32)
        f["next_values"] = np.zeros(n, np.float32)
        f["terminals"] = np.zeros(n, bool)
        f["timeouts"] = np.zeros(n, bool)
    before = path.read_bytes()
    t0 = time.perf_counter()
    report = api.run("gae", str(path), dry_run=True)
    plan_seconds = time.perf_counter() - t0
    assert path.read_bytes() == before
    assert not report.written and report.dry_run
    assert [o.name for o in report.outputs] == ["advantages", "value_targets"]
    assert report.outputs[0].shape == (n,)
    assert "values" in report.columns and "next_values" in report.columns
    assert not any(s.name in ("scan", "write") and not s.skipped for s in report.stages)
    assert plan_seconds < 30  # generous: the point is that nothing is computed


def test_parquet_sample_runs_with_ends_are(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    report = api.run("gae", str(PARQUET), output=str(out), ends_are="truncated", device="cpu")
    assert report.counts["forced_cuts"] == 2  # eps_id changes with no flag (one is terminal)
    assert report.written


def test_step_counter_restart_without_a_flag_needs_ends_are(tmp_path: Path) -> None:
    """A hidden episode end: the step column starts again where no flag is set."""
    path = _write_parquet(
        tmp_path / "steps.parquet",
        {
            "step": [0, 1, 2, 0, 1, 2, 3],
            "reward": np.ones(7),
            "terminated": [False, False, False, False, False, False, True],
            "truncated": np.zeros(7, bool),
        },
    )
    with pytest.raises(AmbiguousInputError, match=r'"step" does not go on by one \(row 2\)'):
        api.run("returns", str(path), dry_run=True)
    report = api.run("returns", str(path), dry_run=True, ends_are="terminal")
    assert report.counts["forced_cuts"] == 1 and report.columns["step"] == "step"


def test_a_counter_that_jumps_names_ignoring_it(tmp_path: Path) -> None:
    """A global counter going up 4 a row is no step-within-episode: the question said it
    "starts again" and named only --ends-are (every row its own episode); it now says it
    does not go on by one and names --ignore of it, which reads the table exactly."""
    cols = {
        "step": [0, 4, 8, 12, 16],
        "reward": np.ones(5),
        "terminated": [False] * 4 + [True],
        "truncated": np.zeros(5, bool),
    }
    path = _write_parquet(tmp_path / "counter.parquet", cols)
    with pytest.raises(AmbiguousInputError, match="--ignore step") as err:
        api.run("returns", str(path), dry_run=True)
    assert '"step" goes from 0 to 4 (row 0) where no flag ends an episode' in str(err.value)
    report = api.run("returns", str(path), ignore=["step"], params={"gamma": 1.0})
    assert report.counts.get("forced_cuts", 0) == 0
    got = pq.read_table(path, columns=["returns"]).column("returns").to_pylist()
    assert got == [5.0, 4.0, 3.0, 2.0, 1.0]


@pytest.mark.parametrize(
    ("columns", "why"),
    [
        (  # LeRobot: next.done on each episode's last frame, ids changing with it
            {"episode_index": [0, 0, 1, 1, 1], "next.done": [0, 1, 0, 0, 1]},
            r'"next.done" ends an episode \(row 4\)',
        ),
        (  # one episode_index run whose frame_index jumps: the ids do not change there
            {"episode_index": [0, 0, 0, 0, 1, 1], "frame_index": [0, 1, 3, 2, 0, 1]},
            r'"frame_index" goes from 1 to 3 \(row 1\) where no flag ends an episode',
        ),
        (
            {"episode_index": [0, 0, 1, 1], "frame_index": [0, 1, 0, 1]},
            r'an episode ends where "episode_index" changes \(row 1\)',
        ),
    ],
    ids=["dones-at-the-end", "step-jump-inside-an-id-run", "id-change"],
)
def test_unflagged_end_is_named_by_what_marks_it(columns: dict, why: str, tmp_path: Path) -> None:
    """The question names the column that ends the episode at the row it names: an id
    column that does not change there is not the reason (it once was named anyway, so a
    frame-order glitch inside one LeRobot episode read as an episode-id change)."""
    n = len(next(iter(columns.values())))
    cols = {k: np.array(v, bool if "done" in k else np.int64) for k, v in columns.items()}
    path = _write_parquet(tmp_path / "ends.parquet", {"next.reward": np.ones(n), **cols})
    with pytest.raises(AmbiguousInputError, match=why):
        api.run("returns", str(path), dry_run=True)


def _d4rl_segments(path: Path, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """D4RL-style file: rollouts of a random-walk env, several collection runs
    concatenated; each run's last episode is cut with neither flag set (the invisible
    ends). Returns (terminals, hidden ends)."""
    obs_rows, next_rows, term_rows, hidden_rows = [], [], [], []
    for run_len in (9, 7, 11):
        s = rng.normal(size=3)
        for t in range(run_len):
            s_next = s + rng.normal(size=3) * 0.1
            done = rng.random() < 0.2 and t < run_len - 1
            obs_rows.append(s)
            next_rows.append(s_next)
            term_rows.append(done)
            hidden_rows.append(t == run_len - 1)
            s = rng.normal(size=3) if done else s_next  # autoreset after a termination
    hidden = np.array(hidden_rows)
    hidden[-1] = False  # the end of the file is the end of the data, not a hidden end
    n = len(obs_rows)
    with h5py.File(path, "w") as f:
        f["observations"] = np.array(obs_rows, np.float32)
        f["next_observations"] = np.array(next_rows, np.float32)
        f["rewards"] = rng.normal(size=n).astype(np.float32)
        f["terminals"] = np.array(term_rows)
        f["timeouts"] = np.zeros(n, bool)
    return np.array(term_rows), hidden


def test_hidden_d4rl_ends_are_found_from_observations(tmp_path: Path) -> None:
    """Issue 14: an episode end with no flag shows as a jump between next_observations[t]
    and observations[t+1]; found (also across streaming windows), never merged."""
    from rltscan.io import open_input
    from rltscan.io.layout import prepare
    from rltscan.io.resolve import Reading

    path = tmp_path / "d4rl.h5"
    _, hidden = _d4rl_segments(path, np.random.default_rng(7))
    source = open_input(str(path))
    args = dict(arguments=("rewards",), required=("rewards", "terminated"))
    with pytest.raises(AmbiguousInputError, match=r"row 8 .*--ends-from-observations"):
        prepare(source, **args)
    truncate = Reading(observation_gaps="truncate")
    whole = prepare(source, reading=truncate, **args)
    assert whole.counts["observation_gaps"] == int(hidden.sum()) == 2
    np.testing.assert_array_equal(whole.kwargs["truncated"], hidden)
    parts = [
        prepare(
            source, reading=Reading(observation_gaps="truncate"), window=(a, min(a + 5, 27)), **args
        )
        for a in range(0, 27, 5)
    ]
    assert sum(p.counts["observation_gaps"] for p in parts) == 2
    np.testing.assert_array_equal(np.concatenate([p.kwargs["truncated"] for p in parts]), hidden)
    ignored = prepare(source, reading=Reading(observation_gaps="ignore"), **args)
    assert "observations" not in ignored.roles and not ignored.kwargs["truncated"].any()
