"""The role table (rltscan/roles.py) is the one place a role lives.

The docs list every row as the code has it; the CLI's column options, their help and
which command shows which are the table's; the resolver finds columns by its aliases and
names a role's option (or ``--ignore`` for a role without one) in its messages.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import h5py
import numpy as np
import pytest
from typer.main import get_command
from typer.testing import CliRunner

from rltscan import api, cli
from rltscan.errors import AmbiguousInputError, DataError
from rltscan.estimators import DECLARATIONS
from rltscan.roles import KINDS, ROLES, of_argument, of_kind, with_option
from tests import oracles

ROOT = Path(__file__).resolve().parents[2]
CONVENTIONS = (ROOT / "docs" / "CONVENTIONS.md").read_text()
README = (ROOT / "README.md").read_text()


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def roles_table() -> str:
    """docs/CONVENTIONS.md §1.11's table, from the code (paste it there when it changes)."""
    lines = [
        "| role | kind | option | names found, in order | what |",
        "|---|---|---|---|---|",
    ]
    for r in ROLES.values():
        option = "/".join(f"`{o}`" for o in r.options) or "—"
        names = ", ".join(f"`{a}`" for a in r.aliases) or "none: only when named"
        if r.default_to:
            names += f" (unnamed: the `{r.default_to}` column)"
        if r.look_alike:
            like = ", ".join(f"`{n}`" for n in r.look_alike.names)
            names += f"; unnamed {like} stop the run"
        lines.append(f"| `{r.name}` | {r.kind} | {option} | {names} | {_cell(r.help)} |")
    return "\n".join(lines)


def test_the_docs_list_every_role_as_the_code_has_it() -> None:
    table = roles_table()
    section = CONVENTIONS[CONVENTIONS.index("### 1.11") : CONVENTIONS.index("## 2. ")]
    assert table in section, f"docs/CONVENTIONS.md §1.11 needs this table:\n{table}"


def test_the_readme_lists_every_column_option() -> None:
    rows = [line for line in README.splitlines() if line.startswith("| `--rewards")]
    rows += [line for line in README.splitlines() if line.startswith("| `--terminals`")]
    listed = set(re.findall(r"--[a-z][a-z-]*", " ".join(rows)))
    assert listed == {o for r in with_option() for o in r.options}


def test_every_row_is_well_formed() -> None:
    options = [o for r in ROLES.values() for o in r.options]
    assert len(options) == len(set(options)), "an option spelling names two roles"
    arguments = [r.argument for r in ROLES.values() if r.argument]
    assert len(arguments) == len(set(arguments)), "an argument is filled by two roles"
    declared = {i for d in DECLARATIONS.values() for i in d.inputs}
    for r in ROLES.values():
        assert r.kind in KINDS, r.name
        assert set(r.inputs) <= declared, f"{r.name} fills an input no estimator takes"
        assert r.default_to is None or r.default_to in ROLES
        if r.kind in ("step", "bootstrap"):
            assert r.argument is not None, r.name  # what the resolver passes it as
        elif r.kind != "sequence":
            assert r.argument is None, r.name  # built into terminated/truncated instead
        if r.argument:
            assert of_argument(r.argument) is r


@pytest.mark.parametrize("command", [*DECLARATIONS, "inspect"])
def test_each_command_shows_the_options_of_the_roles_it_reads(command: str) -> None:
    params = {p.name: list(p.opts) for p in get_command(cli.app).commands[command].params}
    inputs = DECLARATIONS[command].inputs if command in DECLARATIONS else None
    for r in with_option():
        shown = inputs is None or bool(set(r.inputs) & set(inputs))
        assert (params.get(r.keyword) == list(r.options)) == shown, (command, r.name)
        if shown:
            help_text = next(
                p.help for p in get_command(cli.app).commands[command].params if p.name == r.keyword
            )
            assert help_text == r.help


def _flat(path: Path, **extra: np.ndarray) -> Path:
    with h5py.File(path, "w") as f:
        f["rewards"] = np.array([1.0, 0.5, -1.0, 2.0], np.float32)
        f["terminals"] = np.array([0, 1, 0, 0], bool)
        for name, value in extra.items():
            f[name] = value
    return path


def test_two_names_of_a_role_without_an_option_name_the_ignore_that_settles_it(tmp_path):
    """A step counter stored twice (``step`` and ``t``): the refusal names ``--ignore``,
    never an option the command line does not have, and that option settles it."""
    counter = np.arange(4, dtype=np.int64)
    path = _flat(tmp_path / "two.h5", step=counter, t=counter)
    with pytest.raises(AmbiguousInputError) as err:
        api.run("returns", str(path), dry_run=True)
    assert 'both "step" and "t" could be the step column' in str(err.value)
    assert "pass --ignore t or --ignore step" in str(err.value)
    assert "--step" not in str(err.value)
    report = api.run("returns", str(path), dry_run=True, ignore=["t"])
    assert report.columns["step"] == "step"


def test_a_bad_flag_of_a_role_without_an_option_names_the_ignore(tmp_path) -> None:
    """RLDS's ``is_last`` (a role found by name only) holding a 2: the fix is ``--ignore``."""
    path = _flat(tmp_path / "rlds.h5", is_last=np.array([0, 0, 2, 1], np.int8))
    with pytest.raises(DataError) as err:
        api.run("returns", str(path), dry_run=True)
    assert str(err.value).endswith("fix the column or pass --ignore is_last"), str(err.value)


# --------------------------------------------------------------------------- roles of V(s_{t+1})

# One row per role whose column gives V(s_{t+1}) (kind "bootstrap"): which entries its
# column holds, at "every" step that does not terminate or only at the "cuts" it is read
# at (truncations and the end of the data); the others are NaN, which must not matter.
# The oracle is tests/oracles.next_state_values, which takes each such argument.
V_NEXT = {"next_values": "every", "bootstrap_values": "cuts"}
CPU = ["--device", "cpu", "--backend", "torch", "-q"]


def _v_next_file(path: Path, role: str, stored: str, seed: int = 7) -> dict[str, np.ndarray]:
    """A flat file with terminations, truncations and ``role``'s column stored as
    ``stored``; returns its arrays (and the column as ``role``)."""
    rng = np.random.default_rng(seed)
    n = 64
    term, trunc = rng.random(n) < 0.1, rng.random(n) < 0.15
    rewards, values, successor = rng.normal(size=(3, n))
    cut = (trunc | (np.arange(n) == n - 1)) & ~term
    column = np.where(~term if V_NEXT[role] == "every" else cut, successor, np.nan)
    data = {"rewards": rewards, "values": values, "terminals": term, "timeouts": trunc}
    with h5py.File(path, "w") as f:
        for name, value in {**data, stored: column}.items():
            f[name] = value
    return {**data, role: column}


@pytest.mark.parametrize("named", [False, True], ids=["by-name", "by-option"])
@pytest.mark.parametrize("role", list(V_NEXT))
def test_a_bootstrap_column_is_what_the_oracle_reads_as_v_of_the_successor(
    role: str, named: bool, tmp_path: Path
) -> None:
    row = ROLES[role]
    stored = "critic_next" if named else row.aliases[0]
    path = tmp_path / "steps.h5"
    d = _v_next_file(path, role, stored)
    options = [row.option, stored] if named else []
    args = ["gae", str(path), *CPU, "--gamma", "0.9", "--lam", "0.8", *options]
    result = CliRunner().invoke(cli.app, args)
    assert result.exit_code == 0, result.output
    with h5py.File(path) as f:
        got = f["advantages"][()]
        assert json.loads(f["advantages"].attrs["source_columns"])[role] == stored
    term, trunc = d["terminals"], d["timeouts"]
    nv = oracles.next_state_values(term, trunc, values=d["values"], **{row.argument: d[role]})
    want = oracles.gae(d["rewards"], d["values"], nv, term, trunc, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(got, want["advantages"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "pair", list(itertools.combinations([r.name for r in of_kind("bootstrap")], 2)), ids=str
)
def test_two_bootstrap_columns_are_a_decision(pair: tuple[str, str], tmp_path: Path) -> None:
    path = tmp_path / "two.h5"
    _v_next_file(path, pair[0], ROLES[pair[0]].aliases[0])
    with h5py.File(path, "a") as f:
        f[ROLES[pair[1]].aliases[0]] = f[ROLES[pair[0]].aliases[0]][()]
    with pytest.raises(AmbiguousInputError) as err:
        api.run("gae", str(path), dry_run=True)
    assert "--ignore" in str(err.value)
