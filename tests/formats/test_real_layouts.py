"""The trust rule on files written the way real producers write them (issue 10).

Every run either computes exactly what the data means, or exits 2 with one line
naming the option to pass. Never exit 0 with other numbers.

For each producer of ``tests/producers.py`` and each estimator:

1. run with no option that describes the data: exit 0 ⇒ every output equals the
   float64 oracle of the producer's MEANING (rtol 1e-5, float32 compute); exit 2 ⇒
   stderr is one line ``error: ...`` naming an ``--option`` and the input is
   unchanged; anything else fails;
2. run with the options that state the producer's meaning (``Produced.fix``): exit
   0 and the oracle's numbers. An option is never silently ignored.

Most runs go through typer's CliRunner (in process, fast); a few go through
``python -m rltscan`` as a real process. A property test builds random flat
tables from the same pieces (alias names of ``rltscan/io/columns.py``, with and
without episode ids and next values) and checks the same rule in process.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from rltscan import api, cli
from rltscan.errors import AmbiguousInputError, DataError, ParameterError
from rltscan.roles import ROLES
from tests import oracles
from tests.conftest import assert_close_to_oracle
from tests.io_helpers import digest, fresh
from tests.producers import (
    BUILDERS,
    Meaning,
    Produced,
    build,
    episodes,
    minari_package,
    read_output,
)

ROOT = Path(__file__).resolve().parents[2]
GAMMA, LAM = 0.9, 0.8
ESTIMATORS: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "gae": (["--gamma", str(GAMMA), "--lam", str(LAM)], ("advantages", "value_targets")),
    "returns": (["--gamma", str(GAMMA)], ("returns",)),
    "td-lambda": (["--gamma", str(GAMMA), "--lam", str(LAM)], ("lambda_returns",)),
}
COMMON = ["--device", "cpu", "-q", "--json"]
OPTION = re.compile(r"--[a-z][a-z-]+")
runner = CliRunner()


# --------------------------------------------------------------------------- oracle


def oracle(m: Meaning, estimator: str) -> dict[str, np.ndarray]:
    """The producer's meaning through the float64 loops of tests/oracles.py, one
    sequence at a time (a flat file is one sequence; a buffer has one per env)."""
    parts = [
        np.moveaxis(a, m.time_axis, -1)
        for a in (m.rewards, m.values, m.next_values, m.terminated, m.truncated)
    ]
    shape = parts[0].shape
    rows = [p.reshape(-1, shape[-1]) for p in parts]
    names = ESTIMATORS[estimator][1]
    out = {n: np.empty(rows[0].shape) for n in names}
    for i in range(rows[0].shape[0]):
        r, v, nv, term, trunc = (x[i].tolist() for x in rows)
        if estimator == "gae":
            res = oracles.gae(r, v, nv, term, trunc, gamma=GAMMA, lam=LAM)
            out["advantages"][i] = res["advantages"]
            out["value_targets"][i] = res["value_targets"]
        elif estimator == "returns":
            out["returns"][i] = oracles.discounted_returns(r, nv, term, trunc, gamma=GAMMA)
        else:
            out["lambda_returns"][i] = oracles.td_lambda(r, nv, term, trunc, gamma=GAMMA, lam=LAM)
    return {n: np.moveaxis(o.reshape(shape), -1, m.time_axis) for n, o in out.items()}


# --------------------------------------------------------------------------- helpers


def fresh_copy(produced: Produced, tmp: Path) -> Path:
    return fresh(produced.path, tmp)


def max_error(got: np.ndarray, want: np.ndarray) -> float:
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want))) if got.size else 0.0


def check_rule(
    produced: Produced,
    estimator: str,
    path: Path,
    before: str,
    code: int,
    stderr: str,
    *,
    fixed: bool,
) -> None:
    """exit 0 ⇒ the oracle's numbers; exit 2 (without the fix) ⇒ one line naming an
    option, input unchanged; anything else fails."""
    flags = " ".join(produced.fix) if fixed else "(no flags)"
    what = f"{produced.name} {estimator} {flags}"
    if code == 0:
        want = oracle(produced.meaning, estimator)
        for name, expected in want.items():
            try:
                got = read_output(produced, path, name)
            except (KeyError, OSError) as err:
                pytest.fail(f"{what}: exit 0 but output {name!r} is not readable: {err}")
            err = max_error(got, expected)
            try:
                assert_close_to_oracle(got, expected, torch.float32)
            except AssertionError:
                pytest.fail(
                    f"{what}: exit 0 with wrong {name}: max error {err:.4g} "
                    f"({int(np.sum(~np.isclose(got, expected, rtol=1e-5, atol=1e-5)))} of "
                    f"{expected.size} differ)"
                    if got.shape == expected.shape
                    else f"{what}: exit 0 with {name} of shape {got.shape}, want {expected.shape}"
                )
        return
    lines = stderr.strip().splitlines()
    if fixed:
        pytest.fail(f"{what}: exit {code} with the meaning's flags: {' | '.join(lines[:3])}")
    if code != 2:
        pytest.fail(f"{what}: exit {code} (want 0 and exact, or 2): {' | '.join(lines[:3])}")
    assert len(lines) == 1 and lines[0].startswith("error:"), f"{what}: stderr {lines!r}"
    assert OPTION.search(lines[0]), f"{what}: exit 2 names no --option: {lines[0]}"
    assert digest(path) == before, f"{what}: exit 2 but the input changed"


def invoke(args: list[str]) -> tuple[int, str]:
    result = runner.invoke(cli.app, args)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.stderr


# --------------------------------------------------------------------------- the table


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Produced]:
    root = tmp_path_factory.mktemp("producers")
    return {name: build(name, root) for name in BUILDERS}


PRODUCERS = list(BUILDERS)


def run_and_check(produced: Produced, estimator: str, tmp: Path, *, fixed: bool) -> None:
    """One in-process run of ``estimator`` on a fresh copy in ``tmp``, with the meaning's
    flags (``fixed``) or none, judged by :func:`check_rule`."""
    path = fresh_copy(produced, tmp)
    before = digest(path)
    args = [estimator, str(path), *ESTIMATORS[estimator][0], *COMMON]
    code, stderr = invoke(args + (produced.fix if fixed else []))
    check_rule(produced, estimator, path, before, code, stderr, fixed=fixed)


@pytest.mark.parametrize("estimator", list(ESTIMATORS))
@pytest.mark.parametrize("producer", PRODUCERS)
def test_no_flags_exact_or_exit_2(
    built: dict[str, Produced], producer: str, estimator: str, tmp_path: Path
) -> None:
    run_and_check(built[producer], estimator, tmp_path, fixed=False)


@pytest.mark.parametrize("estimator", list(ESTIMATORS))
@pytest.mark.parametrize("producer", PRODUCERS)
def test_meaning_flags_give_the_oracle(
    built: dict[str, Produced], producer: str, estimator: str, tmp_path: Path
) -> None:
    run_and_check(built[producer], estimator, tmp_path, fixed=True)


SUBPROCESS = ["done=terminated+truncated", "[B,T]-no-attr", "cleanrl-[T,B]", "minari-hdf5"]


@pytest.mark.parametrize("producer", SUBPROCESS)
def test_real_process_no_flags(built: dict[str, Produced], producer: str, tmp_path: Path) -> None:
    """The same rule through ``python -m rltscan`` (entry point, real stderr)."""
    produced = built[producer]
    path = fresh_copy(produced, tmp_path)
    before = digest(path)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "120"}
    done = subprocess.run(
        [sys.executable, "-m", "rltscan", "gae", str(path), *ESTIMATORS["gae"][0], *COMMON],
        env=env,
        capture_output=True,
        timeout=300,
    )
    check_rule(produced, "gae", path, before, done.returncode, done.stderr.decode(), fixed=False)


@pytest.mark.parametrize("estimator", list(ESTIMATORS))
def test_real_minari_package(estimator: str, tmp_path: Path, monkeypatch) -> None:
    """A dataset written by the real minari package: no flags ⇒ exact or exit 2; the
    meaning's flags ⇒ exact. Skipped where minari (with gymnasium, pillow) is absent."""
    pytest.importorskip("minari")
    pytest.importorskip("PIL")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "datasets"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        produced = minari_package(tmp_path / "datasets", np.random.default_rng(7))
    for fixed in (False, True):
        run_and_check(produced, estimator, tmp_path / ("fixed" if fixed else "bare"), fixed=fixed)


def test_producers_write_what_they_mean(built: dict[str, Produced]) -> None:
    """The fixtures themselves: a mix of ends, and garbage where nothing may be read."""
    for produced in built.values():
        m = produced.meaning
        assert m.rewards.shape == m.terminated.shape == m.next_values.shape, produced.name
        assert (m.terminated | m.truncated).any(), produced.name
        if m.terminated.any():  # a reading that bootstraps a terminal step is visible
            assert np.all(np.abs(m.next_values[m.terminated]) >= 40), produced.name


# --------------------------------------------------------------------------- property test

SCHEMES = {
    # scheme: end kinds the meaning may use
    "term+trunc": ("term", "trunc", "both"),
    "term-only": ("term",),
    "trunc-only": ("trunc",),
    "done-ended+trunc": ("term", "trunc", "both"),  # done = term | trunc (old gym)
    "done-is-term+trunc": ("term", "trunc", "both"),  # done = term (issue case 1)
    "dones-only": ("uniform",),
    "ids-only": ("uniform",),
}
FLAT_ALIASES = {role: [a for a in r.aliases if "/" not in a] for role, r in ROLES.items()}


@st.composite
def tables(draw: st.DrawFn, scheme: str) -> dict:
    kinds = SCHEMES[scheme]
    if kinds == ("uniform",):
        kinds = (draw(st.sampled_from(["term", "trunc"])),)
    n_eps = draw(st.integers(1, 5))
    plan = [(draw(st.integers(1, 5)), draw(st.sampled_from(kinds))) for _ in range(n_eps)]
    if scheme == "ids-only" or draw(st.booleans()):
        # with ids alone the last episode's end is the end of the data: a cut (D3)
        plan[-1] = (plan[-1][0], "cut")
    pick = lambda role: draw(st.sampled_from(FLAT_ALIASES[role]))  # noqa: E731
    names = {role: pick(role) for role in ("rewards", "values", "terminated", "truncated")}
    names["dones"] = pick("dones")
    with_ids = scheme == "ids-only" or draw(st.booleans())
    names["episode_id"] = pick("episode_id") if with_ids else None
    names["next_values"] = (
        draw(st.sampled_from(["next_values", "next_value", "next_state_value"]))
        if draw(st.booleans())
        else None
    )
    return {
        "scheme": scheme,
        "kind": kinds[0],
        "plan": plan,
        "names": names,
        "seed": draw(st.integers(0, 2**16)),
        "format": draw(st.sampled_from(["parquet", "h5"])),
        "estimator": draw(st.sampled_from(list(ESTIMATORS))),
    }


def write_table(spec: dict, directory: Path) -> tuple[Path, Meaning, dict]:
    """The table of ``spec`` on disk, its meaning, and the api keyword arguments that
    state the meaning."""
    s = episodes(np.random.default_rng(spec["seed"]), spec["plan"])
    names, scheme = spec["names"], spec["scheme"]
    cols: dict[str, np.ndarray] = {names["rewards"]: s["r"], names["values"]: s["v"]}
    roles: dict[str, str] = {"rewards": names["rewards"], "values": names["values"]}
    kw: dict = {}
    if scheme in ("term+trunc", "term-only"):
        cols[names["terminated"]] = s["term"]
        roles["terminated"] = names["terminated"]
    if scheme in ("term+trunc", "trunc-only", "done-ended+trunc", "done-is-term+trunc"):
        # old-gym style: a truncation flag is "truncated and not terminated"
        trunc = s["trunc"] & ~s["term"] if scheme == "done-ended+trunc" else s["trunc"]
        cols[names["truncated"]] = trunc
        roles["truncated"] = names["truncated"]
    if scheme == "done-ended+trunc" or scheme == "dones-only":
        cols[names["dones"]] = s["ended"]
        roles["dones"] = names["dones"]
        kw["dones_mean"] = "ended"
    if scheme == "done-is-term+trunc":
        cols[names["dones"]] = s["term"]
        roles["terminated"] = names["dones"]
    if scheme in ("dones-only", "ids-only"):
        kw["ends_are"] = "terminal" if spec["kind"] == "term" else "truncated"
    if names["episode_id"]:
        cols[names["episode_id"]] = s["eid"] * 7 + 3
        roles["episode_id"] = names["episode_id"]
    if names["next_values"]:
        cols[names["next_values"]] = s["nv"]
        roles["next_values"] = names["next_values"]
    if spec["estimator"] == "returns":
        del roles["values"]  # returns reads no values: naming them is a usage error
    if spec["format"] == "parquet":
        path = directory / "t.parquet"
        pq.write_table(pa.table(cols), path)
    else:
        path = directory / "t.h5"
        with h5py.File(path, "w") as f:
            for k, v in cols.items():
                f[k] = v
    meaning = Meaning(
        rewards=s["r"].astype(np.float64),
        values=s["v"].astype(np.float64),
        next_values=s["nv"].astype(np.float64),
        terminated=s["term"],
        truncated=s["trunc"],
    )
    if not names["next_values"]:  # no bootstrap anywhere: 0 where one is needed (D5)
        n = len(s["r"])
        needs = (s["trunc"] | (np.arange(n) == n - 1)) & ~s["term"]
        meaning.next_values = np.where(needs, 0.0, meaning.next_values)
    return path, meaning, {"columns": roles, **kw}


def needs_bootstrap(meaning: Meaning) -> bool:
    n = meaning.rewards.size
    return bool(((meaning.truncated | (np.arange(n) == n - 1)) & ~meaning.terminated).any())


def api_rule(spec: dict, path: Path, meaning: Meaning, kw: dict, *, fixed: bool) -> None:
    estimator = spec["estimator"]
    what = f"{spec} {'with ' + str(kw) if fixed else '(no flags)'}"
    params = {"gamma": GAMMA} if estimator == "returns" else {"gamma": GAMMA, "lam": LAM}
    before = digest(path)
    try:
        api.run(estimator, str(path), params=params, device="cpu", **(kw if fixed else {}))
    except (ParameterError, AmbiguousInputError, DataError) as err:
        message = str(err)
        assert OPTION.search(message), f"{what}: error names no --option: {message}"
        assert digest(path) == before, f"{what}: error but the input changed"
        if fixed:
            # the only refusal left once the meaning is stated: no bootstrap value
            assert isinstance(err, DataError) and estimator != "returns", f"{what}: {message}"
            assert not spec["names"]["next_values"] and needs_bootstrap(meaning), message
            assert "--next-values" in message, message
        elif isinstance(err, DataError):
            assert "--" in message, message
        return
    produced = Produced(
        "table", path, "parquet" if path.suffix == ".parquet" else "h5", meaning, []
    )
    if estimator != "returns" and not spec["names"]["next_values"] and needs_bootstrap(meaning):
        pytest.fail(f"{what}: exit 0 although a bootstrap value is missing")
    for name, expected in oracle(meaning, estimator).items():
        got = read_output(produced, path, name)
        err = max_error(got, expected)
        try:
            assert_close_to_oracle(got, expected, torch.float32)
        except AssertionError:
            pytest.fail(f"{what}: exit 0 with wrong {name}: max error {err:.4g}")


@pytest.mark.parametrize("scheme", list(SCHEMES))
@settings(
    max_examples=5,  # x 7 schemes: every naming scheme is drawn, ~35 tables in all
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_random_tables_exact_or_refused(scheme: str, data: st.DataObject) -> None:
    """Random flat tables (alias names, flags present or not, ids and next values or
    not): no flags ⇒ the oracle or a refusal naming an option; the flags of the
    meaning ⇒ the oracle (or, without next values, a missing-bootstrap error)."""
    spec = data.draw(tables(scheme))
    with tempfile.TemporaryDirectory() as tmp:
        path, meaning, kw = write_table(spec, Path(tmp))
        api_rule(spec, path, meaning, kw, fixed=False)
    with tempfile.TemporaryDirectory() as tmp:
        path, meaning, kw = write_table(spec, Path(tmp))
        api_rule(spec, path, meaning, kw, fixed=True)


@pytest.mark.parametrize("estimator", ["returns", "td-lambda", "gae"])
def test_a_renamed_value_column_is_named_on_every_command(
    built: dict[str, Produced], estimator: str, tmp_path: Path
) -> None:
    """Minari groups with V(s_0..s_T) under another name: ``--values critic`` is how a
    user says so, on every command that bootstraps (returns reads only V(s_{t+1}) from
    it); the numbers are the producer's meaning."""
    produced = built["minari-hdf5"]
    path = fresh_copy(produced, tmp_path)
    with h5py.File(path / "data" / "main_data.hdf5", "a") as f:
        for name in f:
            f.move(f"{name}/values", f"{name}/critic")
    renamed = Produced(produced.name, path, produced.kind, produced.meaning, produced.fix)
    before = digest(path)
    args = [estimator, str(path), *ESTIMATORS[estimator][0], *COMMON, *produced.fix]
    if estimator != "returns":  # (returns bootstraps with 0 by default, noted)
        code, stderr = invoke(args)
        assert code == 4 and "--values" in stderr, stderr  # no V found: asked for
        assert digest(path) == before
    code, stderr = invoke([*args, "--values", "critic"])
    check_rule(renamed, estimator, path, before, code, stderr, fixed=True)
