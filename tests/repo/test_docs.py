"""The README stays true: every command is documented, every section cited exists (its
measured tables come from result files: tests/repo/test_bench_table.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.main import get_command

from rltscan.cli import app

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


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


SHARED_NOTES = ("ALGORITHMS.md", "FORMATS.md", "CLI.md", "STYLE.md", "PERF.md")
USER_FACING = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "rltscan").rglob("*.py")),
    # the tests are read by whoever changes the code: no notes they do not have either
    *sorted(p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_docs.py"),
]


@pytest.mark.parametrize("path", USER_FACING, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_user_facing_file_sends_users_to_files_they_do_not_have(path):
    text = path.read_text()
    assert not [name for name in SHARED_NOTES if name in text]


def test_every_conventions_section_cited_exists():
    """``docs/CONVENTIONS.md §N`` in the code, README and docs names a real section."""
    conventions = (ROOT / "docs" / "CONVENTIONS.md").read_text()
    sections = set(re.findall(r"^#{2,3} (\d+(?:\.\d+)?)[. ]", conventions, flags=re.M))
    cited = set()
    for path in USER_FACING:
        for ref in re.findall(
            r"CONVENTIONS\.md §(\d+(?:\.\d+)?)(?:-(\d+(?:\.\d+)?))?", path.read_text()
        ):
            cited |= {r for r in ref if r}
    assert cited and cited <= sections, cited - sections


def _worked_example() -> dict:
    """The inputs of docs/CONVENTIONS.md's worked examples (§4 and §1.7): six steps, a
    termination at step 2, a truncation at step 4, the window cut after step 5."""
    import numpy as np

    return {
        "rewards": np.array([1.0, -0.5, 2.0, 0.5, 1.5, -1.0]),
        "values": np.array([0.5, 0.2, 1.0, 0.8, 0.3, 0.6]),
        "terminated": np.array([0, 0, 1, 0, 0, 0], bool),
        "truncated": np.array([0, 0, 0, 0, 1, 0], bool),
        "bootstrap_values": np.array([np.nan] * 4 + [0.9, 0.7]),
    }


def test_conventions_worked_example_is_what_gae_computes():
    import numpy as np

    import rltscan

    text = (ROOT / "docs" / "CONVENTIONS.md").read_text()
    conventions = text[text.index("## 4. ") :]  # the §4 table (§1.7 has its own)
    res = rltscan.gae(**_worked_example(), gamma=0.9, lam=0.8)
    for name in ("advantages", "value_targets"):
        row = next(line for line in conventions.splitlines() if line.startswith(f"| {name} |"))
        shown = [float(c.replace("−", "-")) for c in row.strip("|").split("|")[1:]]
        np.testing.assert_allclose(res[name], shown, atol=1e-12)


def test_per_step_discount_worked_example_is_what_gae_computes():
    """docs/CONVENTIONS.md §1.7: the same data with γ_t per step and λ = 0.8."""
    import numpy as np

    import rltscan

    text = (ROOT / "docs" / "CONVENTIONS.md").read_text()
    section = text[text.index("### 1.7") : text.index("## 2. ")]

    def row(name: str) -> list[float]:
        line = next(x for x in section.splitlines() if x.startswith(f"| {name} |"))
        return [float(c.replace("−", "-")) for c in line.strip("|").split("|")[1:]]

    res = rltscan.gae(**_worked_example(), discount=np.array(row("γ_t")), lam=0.8)
    np.testing.assert_allclose(res.advantages, row("advantages"), atol=1e-12)
