"""The README stays true: every command is documented, every quoted figure has a source."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.main import get_command

from rltscan.cli import app

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
RESULTS = ROOT / "bench" / "results" / "h200-2026-12-02"


def _commands() -> list[str]:
    return sorted(get_command(app).commands)


@pytest.mark.parametrize("command", _commands())
def test_every_command_is_in_the_readme_with_help(command):
    assert f"rltscan {command}" in README
    assert get_command(app).commands[command].help


def test_readme_commands_match_ci():
    """The README's test command is exactly what .ci/run executes."""
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert ci in README


NAMES = {
    "GAE": "gae",
    "discounted returns": "returns",
    "TD(λ)": "td_lambda",
    "V-trace": "vtrace",
    "Retrace": "retrace",
    "eligibility traces": "traces",
    "prefix sums": "prefix_sum",
}


def test_performance_table_comes_from_the_result_file():
    rows = json.loads((RESULTS / "gpu-flat.json").read_text())["results"]
    find = {(r["estimator"], r["steps"]): r for r in rows if r["episode_len"] == 1000.0}
    table = [line for line in README.splitlines() if line.startswith("| ") and "%" in line]
    seen = 0
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] not in NAMES:
            continue
        for cell, steps in zip(cells[1:3], (1 << 26, 1 << 28), strict=True):
            us, pct = re.match(r"(\d+) \((\d+)%\)", cell).groups()
            r = find[(NAMES[cells[0]], steps)]
            assert int(us) == round(r["triton_us"]), (cells[0], steps)
            assert int(pct) == round(r["pct_of_floor"]), (cells[0], steps)
            seen += 1
    assert seen == 14
