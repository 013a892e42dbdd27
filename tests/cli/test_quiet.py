"""The machine modes print exactly what the README promises, in a real process
(``python -m rltscan``), on every estimator command and on ``inspect``:

* ``--json``: the report, one JSON object, on stdout and nothing on stderr (no tables,
  histograms, notes, warnings); an error is ``{"error": {...}}`` on stdout and one
  ``error:`` line on stderr.
* ``-q``: nothing at all on success; an error is one ``error:`` line on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from rltscan.estimators import DECLARATIONS
from tests.io_helpers import FLAT, ROOT, copy_sample, rltscan_process

COMMANDS = list(DECLARATIONS)
# a terminal stderr would get a bar; these are pipes (and the bar would show at once)
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "RLTSCAN_PROGRESS_DELAY": "0"}
ENV.pop("NO_COLOR", None)


def rltscan(*args: str | Path) -> subprocess.CompletedProcess:
    return rltscan_process(ENV, *args)


def one_error_line(stderr: bytes) -> str:
    lines = stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), lines
    return lines[0].removeprefix("error: ")


@pytest.mark.parametrize("command", COMMANDS)
def test_json_run_prints_only_the_report(command: str, tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    done = rltscan(command, path, "--device", "cpu", "--json")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
    report = json.loads(done.stdout)  # one object, nothing around it
    assert report["command"] == command and report["written"]
    # notes: the open end at the data's end, where it bootstraps (traces: none)
    assert isinstance(report["notes"], list) and report["statistics"]["outputs"]
    assert bool(report["notes"]) == (command not in ("traces", "prefix-sum", "return-to-go"))


@pytest.mark.parametrize("command", COMMANDS)
def test_quiet_run_prints_nothing(command: str, tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    done = rltscan(command, path, "--device", "cpu", "-q")
    assert (done.returncode, done.stdout, done.stderr) == (0, b"", b""), done.stderr.decode()


@pytest.mark.parametrize("command", COMMANDS)
def test_errors_in_machine_modes_are_one_line(command: str, tmp_path: Path) -> None:
    """A data error (exit 4, after the columns are resolved: a dry run, so no torch) and a
    usage error with a hint (exit 2, before the command runs)."""
    path = copy_sample(FLAT, tmp_path)
    bad = (command, path, "--dry-run", "--rewards", "nope")
    quiet = rltscan(*bad, "-q")
    assert quiet.returncode == 4 and quiet.stdout == b""
    message = one_error_line(quiet.stderr)
    assert '"nope"' in message
    as_json = rltscan(*bad, "--json")
    assert as_json.returncode == 4
    assert one_error_line(as_json.stderr) == message
    assert json.loads(as_json.stdout) == {
        "error": {"code": 4, "kind": "DataError", "message": message}
    }
    for mode in ("-q", "--json"):
        usage = rltscan(command, path, "--prefx", "p_", mode)
        assert usage.returncode == 2
        message = one_error_line(usage.stderr)  # the "did you mean" hint is not a line here
        assert message.startswith(f'rltscan {command} has no option "--prefx"')
        if mode == "--json":
            error = json.loads(usage.stdout)["error"]
            assert (error["message"], error["hint"]) == (message, "did you mean --prefix?")
        else:
            assert usage.stdout == b""


def test_python_warnings_become_notes_not_stderr(tmp_path: Path) -> None:
    """Retrace with γ·λ·c̄ > 1 warns that the recurrence is not contractive: under --json
    the warning is a note of the report; stderr stays empty."""
    path = copy_sample(FLAT, tmp_path)
    done = rltscan("retrace", path, "--device", "cpu", "--c-clip", "2", "--lam", "1", "--json")
    assert done.returncode == 0, done.stderr.decode()
    assert done.stderr == b""
    notes = json.loads(done.stdout)["notes"]
    assert any(n.startswith("RuntimeWarning: ") and "not contractive" in n for n in notes)


def test_inspect_json_and_quiet(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    as_json = rltscan("inspect", path, "--json")
    assert as_json.returncode == 0 and as_json.stderr == b""
    assert json.loads(as_json.stdout)["estimators"]["gae"]["ready"]
    quiet = rltscan("inspect", path, "-q")
    assert (quiet.returncode, quiet.stdout, quiet.stderr) == (0, b"", b"")

    missing = tmp_path / "missing.h5"
    quiet = rltscan("inspect", missing, "-q")
    assert quiet.returncode == 3 and quiet.stdout == b""
    message = one_error_line(quiet.stderr)
    assert message == f"{missing} does not exist; check the path"
    as_json = rltscan("inspect", missing, "--json")
    assert as_json.returncode == 3 and one_error_line(as_json.stderr) == message
    assert json.loads(as_json.stdout) == {
        "error": {"code": 3, "kind": "InputFileError", "message": message}
    }
