"""The run report: steps and steps/s count every step once; paths and names print as
they are (no rich markup); every note reaches the table output and ``--json``."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import h5py
import pytest
from typer.testing import CliRunner

from rltscan import cli
from tests.io_helpers import BUFFER, FLAT, copy_sample

runner = CliRunner()
CPU = ["--device", "cpu", "--backend", "torch"]


def invoke(*args: str | Path):
    return runner.invoke(cli.app, [str(a) for a in args])


@pytest.mark.parametrize("output", ["out.h5", "out.parquet"])
def test_steps_per_second_of_a_time_major_buffer(tmp_path: Path, output: str) -> None:
    """Issue 10 item 9: a [T, B] buffer's stages divided T × B × B steps by their time."""
    path = copy_sample(BUFFER, tmp_path)
    with h5py.File(path) as f:
        t, b = f["rewards"].shape
    result = invoke("gae", path, *CPU, "-q", "--json", "-o", tmp_path / output)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["steps"], report["sequences"]) == (t * b, b)
    assert report["outputs"][0]["shape"] == [t, b]
    timed = [s for s in report["stages"] if s["steps_per_s"] is not None]
    assert {s["name"] for s in timed} >= {"read", "scan", "write"}
    for stage in timed:
        assert stage["steps"] == t * b, stage
        assert stage["steps_per_s"] == pytest.approx(t * b / stage["seconds"]), stage


def test_brackets_in_paths_and_names_print_literally(tmp_path: Path) -> None:
    """``run[/]a.h5`` holds a closing tag rich would choke on; ``[bold]`` one it would eat."""
    folder = tmp_path / "run["
    folder.mkdir()
    path = folder / "]a[bold].h5"
    shutil.copy(FLAT, path)
    with h5py.File(path, "a") as f:
        f["r[x]"] = f["rewards"][()]
    result = invoke("returns", path, *CPU, "--rewards", "r[x]", "--prefix", "p[y]_")
    assert result.exit_code == 0, result.stderr
    lines = result.stderr.splitlines()
    assert any(line.startswith(f"returns on {path}: ") for line in lines), result.stderr
    assert f"wrote p[y]_returns to {path} (hdf5)" in lines

    dry = invoke("returns", path, *CPU, "--rewards", "r[x]", "--dry-run", "--prefix", "q[z]_")
    assert dry.exit_code == 0, dry.stderr
    assert "r[x]" in dry.stderr and "q[z]_returns" in dry.stderr

    shown = invoke("inspect", path)
    assert shown.exit_code == 0, shown.stderr
    assert "r[x]" in shown.stdout and "p[y]_returns" in shown.stdout


def test_every_note_is_in_the_table_output_and_the_json(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    args = ("gae", path, *CPU, "--dry-run", "--chunk-steps", "1")  # raised to one block: a note
    report = json.loads(invoke(*args, "--json", "-q").stdout)
    assert report["notes"], report
    text = invoke(*args)
    assert text.exit_code == 0, text.stderr
    lines = text.stderr.splitlines()
    for note in report["notes"]:
        assert f"note: {note}" in lines


def test_note_lines_render_every_note() -> None:
    from rich.console import Console

    from rltscan.report import RunReport, render_run

    notes = ["truncations bootstrapped with 0 [no next values]", "end of data is a truncation"]
    report = RunReport(
        command="returns", input="a[/]b.h5", output="a[/]b.h5 (hdf5)", format="hdf5",
        layout="flat", device="cpu", backend="torch", dtype="float32", steps=10, episodes=1,
        sequences=1, params={}, columns={"rewards": "r[x]"}, outputs=[], stages=[],
        notes=notes,
    )  # fmt: skip
    assert json.loads(json.dumps(report.to_dict()))["notes"] == notes
    console = Console(record=True, width=100, file=io.StringIO())
    render_run(console, report)
    err = console.export_text()
    for note in notes:
        assert f"note: {note}" in err.splitlines()
    assert "returns on a[/]b.h5: flat (hdf5)" in err
