"""Usage errors speak first: one ``error:`` line, at most one ``hint:`` line, exit 2, and
under ``--json`` the same error as an object on stdout (issue 10)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rltscan import api, cli
from rltscan.errors import ParameterError
from tests.io_helpers import FLAT, PARQUET, copy_sample

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def invoke(*args: str | Path):
    return runner.invoke(cli.app, [str(a) for a in args])


USAGE = [
    (
        ("gae", "x.h5", "--gama", "0.9"),
        [
            'error: rltscan gae has no option "--gama"; see "rltscan gae --help" for its options',
            "hint: did you mean --gamma?",
        ],
    ),
    (
        ("returns", "x.h5", "--lam", "0.9"),
        [
            'error: rltscan returns has no option "--lam"; '
            'see "rltscan returns --help" for its options',
            "hint: --lam is an option of gae, retrace, td-lambda, traces, vtrace",
        ],
    ),
    (
        ("gae", "x.h5", "--gamma", "abc"),
        ['error: --gamma must be a number, got "abc"; pass e.g. --gamma 0.99'],
    ),
    (
        ("vtrace", "x.h5", "--lambda=high"),
        ['error: --lambda must be a number, got "high"; pass e.g. --lambda 1.0'],
    ),
    (
        ("gae", "x.h5", "--chunk-steps", "1.5"),
        ['error: --chunk-steps must be a whole number, got "1.5"; pass e.g. --chunk-steps 4194304'],
    ),
    (("returns", "x.h5", "--gamma"), ["error: --gamma needs a value; pass it as --gamma 0.99"]),
    (
        ("gae",),
        [
            "error: rltscan gae needs an INPUT (a file, a directory or '-'); "
            'pass one, e.g. "rltscan gae rollouts.h5"'
        ],
    ),
    (
        ("gea", "x.h5"),
        [
            'error: rltscan has no command "gea"; see "rltscan --help" for the commands',
            "hint: did you mean gae?",
        ],
    ),
    (
        ("gae", "a.h5", "b.h5"),
        [
            'error: rltscan gae takes one INPUT, got more ("b.h5" too); '
            "pass one input per run, quoted if it has spaces"
        ],
    ),
    (
        ("inspect", "x.h5", "--layoutt", "flat"),
        [
            'error: rltscan inspect has no option "--layoutt"; '
            'see "rltscan inspect --help" for its options',
            "hint: did you mean --layout?",
        ],
    ),
]


@pytest.mark.parametrize(("args", "lines"), USAGE, ids=lambda a: " ".join(a)[:30])
def test_usage_error_is_the_first_line(args: tuple[str, ...], lines: list[str]) -> None:
    result = invoke(*args)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == lines  # no usage box, no panel, nothing else
    assert result.stdout == ""


@pytest.mark.parametrize(("args", "lines"), USAGE, ids=lambda a: " ".join(a)[:30])
@pytest.mark.parametrize("where", ["first", "last"])
def test_usage_error_under_json_is_an_object_on_stdout(
    args: tuple[str, ...], lines: list[str], where: str
) -> None:
    argv = [args[0], "--json", *args[1:]] if where == "first" else [*args, "--json"]
    if args[-1] == "--gamma":
        argv = [*args[:1], "--json", *args[1:]]  # "--gamma --json" would give --json as γ
    result = invoke(*argv)
    assert result.exit_code == 2
    assert result.stderr.splitlines() == lines[:1]  # one line: the hint is in the object
    error = {"code": 2, "kind": "UsageError", "message": lines[0].removeprefix("error: ")}
    if len(lines) > 1:
        error["hint"] = lines[1].removeprefix("hint: ")
    assert json.loads(result.stdout) == {"error": error}


def test_bad_choice_names_the_closest_value(tmp_path: Path) -> None:
    result = invoke("gae", tmp_path / "x.h5", "--layout", "time_major", "--json")
    assert result.exit_code == 2
    line = (
        'error: --layout must be one of flat, episodes, time-major, batch-major, got "time_major"; '
        "pass --layout time-major"
    )
    assert result.stderr.splitlines() == [line]
    assert json.loads(result.stdout)["error"] == {
        "code": 2,
        "kind": "ParameterError",
        "message": line.removeprefix("error: "),
    }


def test_library_errors_under_json_have_the_same_object(tmp_path: Path) -> None:
    missing = tmp_path / "nope.h5"
    result = invoke("returns", missing, "--json", "--device", "cpu")
    assert result.exit_code == 3
    message = f"{missing} does not exist; check the path"
    assert result.stderr.splitlines() == [f"error: {message}"]
    assert json.loads(result.stdout) == {
        "error": {"code": 3, "kind": "InputFileError", "message": message}
    }


def test_a_bug_under_json_still_gives_an_object(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(api, "run", broken)
    result = invoke("gae", FLAT, "--json")
    assert result.exit_code == 1 and isinstance(result.exception, RuntimeError)
    assert json.loads(result.stdout) == {
        "error": {"code": 1, "kind": "InternalError", "message": "RuntimeError: boom"}
    }


def test_bench_json_takes_a_path_so_no_object() -> None:
    result = invoke("bench", "--json")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == ["error: --json needs a value; pass it as --json VALUE"]
    assert result.stdout == ""


def test_usage_error_in_a_real_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rltscan", "gae", str(FLAT), "--gama", "0.9", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 2
    line = 'error: rltscan gae has no option "--gama"; see "rltscan gae --help" for its options'
    assert proc.stderr.splitlines() == [line]
    assert json.loads(proc.stdout)["error"]["message"] == line.removeprefix("error: ")
    assert json.loads(proc.stdout)["error"]["hint"] == "did you mean --gamma?"


@pytest.mark.parametrize(("sample", "to"), [(FLAT, "parquet"), (PARQUET, "arrow")])
def test_to_without_o_is_refused_in_place(tmp_path: Path, sample: Path, to: str) -> None:
    """``--to`` picks the format of ``-o``; in place it changed nothing and the run went
    on with exit 0, as if the format asked for had been written."""
    path = copy_sample(sample, tmp_path)
    before = path.read_bytes()
    args = ["gae", path, "--to", to, "-q"] + (["--ends-are", "truncated"] * (sample == PARQUET))
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    assert f"--to {to}" in res.stderr and "-o PATH" in res.stderr
    assert path.read_bytes() == before
    with pytest.raises(ParameterError, match="-o PATH"):
        api.run("gae", str(path), to=to, ends_are="truncated")
