"""The help of each command shows the defaults that command really uses (issue 10 item 4):
``returns --help`` says ``--missing-bootstrap`` defaults to zero because the returns
estimator does, and ``--lam`` is 0.95 for GAE but 1.0 for V-trace."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rltscan import api, cli
from rltscan.cli.options import NONE_DEFAULTS, PARAM_OPTIONS
from rltscan.estimators import ESTIMATORS
from tests.io_helpers import FLAT, copy_sample

runner = CliRunner()
ROW = re.compile(r"^\s+(?:-\w, )?(--[\w-]+)")  # click's plain help: "  -o, --output <str>"
DEFAULT = re.compile(r"\[default: ([^\]]*)\]")


def shown_defaults(command: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """``--option`` → the text of its ``[default: …]`` in ``rltscan COMMAND --help``."""
    # one line per option
    result = runner.invoke(
        cli.app, [command, "--help"], terminal_width=1000, max_content_width=1000
    )
    assert result.exit_code == 0, result.output
    out: dict[str, str] = {}
    for line in result.stdout.splitlines():
        row, defaults = ROW.match(line), DEFAULT.findall(line)
        if row and defaults:
            out[row.group(1)] = defaults[-1]
    return out


def used_by_a_run(command: str, tmp_path: Path) -> dict:
    """The report of a run given no options: what the API actually used."""
    path = copy_sample(FLAT, tmp_path)
    out = tmp_path / "out.h5"
    result = runner.invoke(cli.app, [command, str(path), "-o", str(out), "--json", "-q"])
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("command", list(ESTIMATORS))
def test_help_defaults_are_the_values_the_api_uses(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shown = shown_defaults(command, monkeypatch)
    report = used_by_a_run(command, tmp_path)
    spec = ESTIMATORS[command]
    own = inspect.signature(spec.function).parameters
    run = inspect.signature(api.run).parameters
    checked = set()

    for name in spec.params:  # γ, λ, clips: as the run's report records them
        option = PARAM_OPTIONS[name][0][0]
        if own[name].default is None:  # decided from another parameter
            assert shown[option] == f"({NONE_DEFAULTS[name]})"
        else:
            assert shown[option] == str(report["params"][name]) == str(own[name].default)
        checked.add(option)
    if "missing_bootstrap" in own:
        used = report["params"]["missing_bootstrap"]
        assert shown["--missing-bootstrap"] == used == own["missing_bootstrap"].default
        checked.add("--missing-bootstrap")
    for name in ("device", "backend"):
        assert shown[f"--{name}"] == run[name].default
        checked.add(f"--{name}")
    assert int(shown["--chunk-steps"]) == report["streaming"]["chunk_steps"]  # flat: one row
    assert int(shown["--block-steps"]) == report["streaming"]["block_steps"]
    checked |= {"--chunk-steps", "--block-steps"}
    assert set(shown) == checked  # no default in the help goes unchecked


@pytest.mark.parametrize(("command", "mode"), [("returns", "zero"), ("gae", "error")])
def test_missing_bootstrap_default_per_command(
    command: str, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert shown_defaults(command, monkeypatch)["--missing-bootstrap"] == mode


def test_lambda_default_per_command(monkeypatch: pytest.MonkeyPatch) -> None:
    assert shown_defaults("gae", monkeypatch)["--lam"] == "0.95"
    assert shown_defaults("vtrace", monkeypatch)["--lam"] == "1.0"
