"""The CLI in-process (typer's CliRunner): options, exit codes, exact stderr lines, stdout."""

from __future__ import annotations

import io
import json
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from rltscan import cli
from rltscan.cli import estimate
from rltscan.cli.options import PARAM_OPTIONS
from rltscan.errors import ParameterError
from rltscan.estimators import DECLARATIONS
from tests.io_helpers import (
    BUFFER,
    FLAT,
    MINARI,
    PARQUET,
    B,
    T,
    bare_dones_buffer,
    copy_sample,
    h5_columns,
)

runner = CliRunner()
CPU = ["--device", "cpu", "--backend", "torch"]


# the Parquet sample's stream cuts are eps_id changes with no flag: the user says what
# they are (without it the run stops with exit 2, tests/unit/test_resolver.py)
ENDS = ("--ends-are", "truncated")
SAYS = {PARQUET: ENDS}


def invoke(*args: str | Path, input: bytes | None = None):
    return runner.invoke(cli.app, [str(a) for a in args], input=input)


def first_err(result) -> str:
    return result.stderr.splitlines()[0] if result.stderr else ""


@pytest.fixture
def flat(tmp_path: Path) -> Path:
    return copy_sample(FLAT, tmp_path)


def edited(tmp_path: Path, edit) -> Path:
    """A copy of the flat sample with ``edit(h5py.File)`` applied."""
    path = copy_sample(FLAT, tmp_path)
    with h5py.File(path, "a") as f:
        edit(f)
    return path


def replace(f, name: str, value: np.ndarray) -> None:
    del f[name]
    f[name] = value


# --------------------------------------------------------------------------- success paths


def test_gae_writes_back_and_prints_the_timing_table(flat: Path) -> None:
    result = invoke("gae", flat, *CPU, "--gamma", "0.99", "--lam", "0.95")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == ""
    for stage in ("detect", "plan", "open", "read", "scan", "write", "copy", "stream (wall)"):
        assert stage in result.stderr
    assert "streamed in 1 window(s)" in result.stderr
    assert "steps/s" in result.stderr and "GB/s" in result.stderr
    assert "advantages" in h5_columns(flat)


def test_json_report_has_stable_keys(flat: Path) -> None:
    result = invoke("td-lambda", flat, *CPU, "--json", "-q", "--lambda", "0.9")
    assert result.exit_code == 0, result.stderr
    assert result.stderr == ""
    report = json.loads(result.stdout)
    assert set(report) >= {
        "rltscan_version", "command", "input", "output", "format", "layout", "device",
        "backend", "dtype", "steps", "episodes", "sequences", "params", "columns", "counts",
        "outputs", "stages", "total_seconds", "dry_run", "written", "notes",
    }  # fmt: skip
    assert [s["name"] for s in report["stages"]] == [
        "detect", "plan", "open", "read", "to device", "scan", "from device", "write",
        "copy", "stream (wall)", "commit",
    ]  # fmt: skip
    assert report["streaming"]["windows"] == 1 and report["streaming"]["peak_rss_bytes"] > 0
    assert report["params"]["lam"] == 0.9
    assert report["steps"] == B * T and report["layout"] == "flat"
    assert report["outputs"][0]["name"] == "lambda_returns"


def test_quiet_prints_nothing(flat: Path) -> None:
    result = invoke("returns", flat, *CPU, "-q")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "", "")


def test_dry_run_prints_the_plan_and_writes_nothing(flat: Path) -> None:
    before = flat.read_bytes()
    result = invoke("vtrace", flat, *CPU, "--dry-run", "--rho-clip", "1.5")
    assert result.exit_code == 0, result.stderr
    assert "would write" in result.stderr and "pg_advantages" in result.stderr
    assert "dry run: nothing written" in result.stderr
    assert flat.read_bytes() == before


def test_prefix_lets_two_runs_live_side_by_side(flat: Path) -> None:
    assert invoke("gae", flat, *CPU, "-q").exit_code == 0
    result = invoke("gae", flat, *CPU, "-q", "--prefix", "g9_", "--gamma", "0.9")
    assert result.exit_code == 0, result.stderr
    with h5py.File(flat) as f:
        assert f["g9_advantages"].attrs["gamma"] == 0.9
        assert not np.allclose(f["g9_advantages"][()], f["advantages"][()])


@pytest.mark.parametrize("sample", [FLAT, BUFFER, PARQUET, MINARI], ids=lambda p: p.name)
@pytest.mark.parametrize(
    "command", ["gae", "vtrace", "retrace", "td-lambda", "returns", "traces", "prefix-sum"]
)
def test_every_estimator_runs_on_every_sample(command: str, sample: Path, tmp_path: Path) -> None:
    path = copy_sample(sample, tmp_path)
    result = invoke(command, path, *CPU, "-q", *SAYS.get(sample, ()))
    assert result.exit_code == 0, result.stderr


def test_output_to_stdout_is_parquet(flat: Path) -> None:
    result = runner.invoke(cli.app, ["returns", str(PARQUET), *CPU, *ENDS, "-q", "-o", "-"])
    assert result.exit_code == 0, result.stderr
    table = pq.read_table(io.BytesIO(result.stdout_bytes))
    assert "returns" in table.column_names and table.num_rows == B * T


def test_stdin_parquet_to_stdout_arrow(flat: Path) -> None:
    data = PARQUET.read_bytes()
    result = runner.invoke(
        cli.app, ["prefix-sum", "-", *CPU, *ENDS, "-q", "-o", "-", "--to", "arrow"], input=data
    )
    assert result.exit_code == 0, result.stderr
    table = pa.ipc.open_stream(result.stdout_bytes).read_all()
    assert "prefix_sums" in table.column_names


def test_inspect_json_lists_roles_and_needs() -> None:
    result = invoke("inspect", PARQUET, "--json", *ENDS)
    assert result.exit_code == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["layout"] == "flat" and info["roles"]["rewards"] == "reward"
    assert info["estimators"]["gae"]["ready"]


def test_inspect_says_what_is_missing(tmp_path: Path) -> None:
    path = tmp_path / "r.parquet"
    pq.write_table(pa.table({"reward": [1.0, 2.0], "terminated": [False, True]}), path)
    info = json.loads(invoke("inspect", path, "--json").stdout)
    assert not info["estimators"]["gae"]["ready"]
    assert info["estimators"]["gae"]["needs"] == 'a "values" column (--values KEY)'
    assert info["estimators"]["returns"]["ready"]


def test_version_and_help() -> None:
    assert invoke("--version").stdout.startswith("rltscan ")
    assert invoke("-V").exit_code == 0
    wide = {"COLUMNS": "200", "TERMINAL_WIDTH": "200"}
    help_text = runner.invoke(cli.app, ["--help"], env=wide).stdout
    assert "Exit codes" in help_text and "130 interrupted" in help_text
    for command in ("gae", "vtrace", "retrace", "td-lambda", "returns", "traces", "prefix-sum"):
        assert command in help_text
        assert "Exit codes" in runner.invoke(cli.app, [command, "--help"], env=wide).stdout


# --------------------------------------------------------------------------- bad input


def test_missing_file(tmp_path: Path) -> None:
    result = invoke("gae", tmp_path / "nope.h5", *CPU)
    assert result.exit_code == 3
    assert first_err(result) == f"error: {tmp_path / 'nope.h5'} does not exist; check the path"
    assert result.stdout == ""


def test_not_hdf5_or_parquet(tmp_path: Path) -> None:
    path = tmp_path / "notes.csv"
    path.write_text("a,b\n1,2\n")
    result = invoke("gae", path, *CPU)
    assert result.exit_code == 3
    assert first_err(result).startswith(f"error: {path} is not HDF5, Parquet or Arrow")


@pytest.mark.parametrize("sample", [FLAT, PARQUET], ids=["hdf5", "parquet"])
def test_truncated_file(sample: Path, tmp_path: Path) -> None:
    path = tmp_path / sample.name
    path.write_bytes(sample.read_bytes()[: sample.stat().st_size // 2])
    result = invoke("gae", path, *CPU)
    assert result.exit_code == 3
    assert first_err(result).startswith(f"error: {path} is ")
    assert "truncated" in first_err(result)


def test_hdf5_on_a_pipe() -> None:
    result = runner.invoke(cli.app, ["gae", "-", *CPU], input=FLAT.read_bytes())
    assert result.exit_code == 3
    assert first_err(result) == (
        "error: stdin holds HDF5, which needs a seekable file; "
        "save it and pass the path instead of '-'"
    )


def test_missing_column_lists_what_exists(tmp_path: Path) -> None:
    path = edited(tmp_path, lambda f: f.__delitem__("values"))
    result = invoke("gae", path, *CPU)
    assert result.exit_code == 4
    line = first_err(result)
    assert line.startswith(f'error: {path} has no column "values"; pass --values KEY (found: ')
    assert '"rewards"' in line and '"next_values"' in line


def test_shape_mismatch(tmp_path: Path) -> None:
    path = edited(tmp_path, lambda f: replace(f, "values", f["values"][:-1]))
    result = invoke("gae", path, *CPU)
    assert result.exit_code == 4
    assert first_err(result) == (
        f'error: {path}: column "values" has shape ({B * T - 1},) but "rewards" has '
        f"({B * T},); every per-step column needs the same shape"
    )


def test_nan_in_an_entry_that_is_read(tmp_path: Path) -> None:
    def put_nan(f) -> None:
        r = f["rewards"][()]
        r[5] = np.nan
        replace(f, "rewards", r)

    path = edited(tmp_path, put_nan)
    result = invoke("gae", path, *CPU)
    assert result.exit_code == 4  # the file, the column as stored, the row and the kind
    assert first_err(result) == (
        f'error: {path}: column "rewards" holds NaN at row 5, an entry that is read; '
        "fix or mask the data (NaN is only allowed in ignored slots)"
    )


def test_flags_not_0_1(tmp_path: Path) -> None:
    def bad_flag(f) -> None:
        t = f["terminals"][()].astype(np.int8)
        t[7] = 2
        replace(f, "terminals", t)

    path = edited(tmp_path, bad_flag)
    result = invoke("gae", path, *CPU)
    assert result.exit_code == 4
    assert first_err(result) == (
        f'error: {path}: column "terminals" must hold 0/1 flags, found 2 at index 7; '
        "fix the column or pass another with --terminals"
    )


def test_ambiguous_dones(tmp_path: Path) -> None:
    path = bare_dones_buffer(tmp_path / "buffer.h5", 8)
    result = invoke("returns", path, *CPU)
    assert result.exit_code == 2
    assert first_err(result).startswith(f'error: {path}: "dones" may mean "episode ended')
    assert first_err(result).endswith("pass --dones-mean ended or --dones-mean starts")
    ok = invoke("returns", path, *CPU, "-q", "--dones-mean", "starts", "--ends-are", "terminal")
    assert ok.exit_code == 0, ok.stderr


def test_missing_bootstrap(tmp_path: Path) -> None:
    path = edited(tmp_path, lambda f: f.__delitem__("next_values"))
    result = invoke("gae", path, *CPU)
    assert result.exit_code == 4
    assert first_err(result).startswith("error: ")
    assert "bootstrap" in first_err(result)
    assert invoke("gae", path, *CPU, "-q", "--no-bootstrap").exit_code == 0


@pytest.mark.parametrize(
    ("option", "value", "line"),
    [
        ("--gamma", "1.5", "error: --gamma must be in [0, 1], got 1.5; pass a value like 0.95"),
        ("--lam", "-0.1", "error: --lam must be in [0, 1], got -0.1; pass a value like 0.95"),
    ],
)
def test_parameter_out_of_range(flat: Path, option: str, value: str, line: str) -> None:
    result = invoke("gae", flat, *CPU, option, value)
    assert result.exit_code == 2
    assert first_err(result) == line


def test_output_exists(flat: Path) -> None:
    assert invoke("gae", flat, *CPU, "-q").exit_code == 0
    result = invoke("gae", flat, *CPU)
    assert result.exit_code == 5
    assert first_err(result) == (
        f'error: {flat} (hdf5) already has "advantages"; pass --overwrite or --prefix P'
    )
    assert invoke("gae", flat, *CPU, "-q", "--overwrite").exit_code == 0


def test_input_column_never_overwritten(tmp_path: Path) -> None:
    path = edited(tmp_path, lambda f: f.__setitem__("returns", f["rewards"][()]))
    result = invoke("returns", path, *CPU, "--rewards", "returns", "--overwrite")
    assert result.exit_code == 5
    assert first_err(result) == (
        'error: output "returns" would overwrite input column "returns" that returns reads, '
        "even with --overwrite; pass --prefix P"
    )


def test_binary_to_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(estimate, "_stdout_isatty", lambda: True)
    result = invoke("returns", PARQUET, *CPU, "-o", "-")
    assert result.exit_code == 5
    assert first_err(result).startswith(
        "error: refusing to write binary Parquet/Arrow to a terminal"
    )
    assert result.stdout == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present")
def test_cuda_without_gpu(flat: Path) -> None:
    result = invoke("gae", flat, "--device", "cuda")
    assert result.exit_code == 6
    assert first_err(result) == (
        "error: --device cuda was asked for but no CUDA GPU is available; pass --device cpu"
    )


def test_error_as_json_on_stdout(tmp_path: Path) -> None:
    result = invoke("gae", tmp_path / "nope.h5", *CPU, "--json")
    assert result.exit_code == 3
    error = json.loads(result.stdout)["error"]
    assert error == {
        "code": 3,
        "kind": "InputFileError",
        "message": f"{tmp_path / 'nope.h5'} does not exist; check the path",
    }
    assert first_err(result).startswith("error: ")


def test_bad_choice_is_usage_error(flat: Path) -> None:
    result = invoke("gae", flat, *CPU, "--layout", "sideways")
    assert result.exit_code == 2
    assert first_err(result).startswith("error: --layout must be one of flat, episodes")


# --------------------------------------------------------------------------- aliases, inspect

RUN_ONLY = {  # what only a run takes: where results go and how it computes
    "input", "output", "to", "prefix", "overwrite", "break_links", "dry_run", "normalize",
    "device", "backend", "chunk_steps", "block_steps", "engine", "ray_address", "workers",
    "order_by", *PARAM_OPTIONS,
}  # fmt: skip


def _options(command: str) -> dict[str, list[str]]:
    from typer.main import get_command

    params = get_command(cli.app).commands[command].params
    return {p.name: list(p.opts) for p in params}


@pytest.mark.parametrize("command", [*DECLARATIONS, "inspect"])
def test_gymnasium_words_are_the_same_options(command: str) -> None:
    options = _options(command)
    assert options["terminals"] == ["--terminals", "--terminated"]
    assert options["timeouts"] == ["--timeouts", "--truncated"]
    assert options["dones"] == ["--dones", "--done"]
    wide = {"COLUMNS": "200", "TERMINAL_WIDTH": "200"}
    help_text = runner.invoke(cli.app, [command, "--help"], env=wide).stdout
    for pair in ("--terminals, --terminated", "--timeouts, --truncated", "--dones, --done"):
        assert pair in help_text  # listed together


def test_aliases_read_the_same_columns(tmp_path: Path) -> None:
    def renamed(f) -> None:
        f["term"], f["trunc"] = f["terminals"][()], f["timeouts"][()]
        del f["terminals"], f["timeouts"]

    path = edited(tmp_path, renamed)
    words = invoke("returns", path, *CPU, "-q", "--terminated", "term", "--truncated", "trunc")
    assert words.exit_code == 0, words.stderr
    ours = invoke(
        "returns", path, *CPU, "-q", "--terminals", "term", "--timeouts", "trunc", "--prefix", "b_"
    )
    assert ours.exit_code == 0, ours.stderr
    with h5py.File(path) as f:
        np.testing.assert_array_equal(f["returns"][()], f["b_returns"][()])
        assert json.loads(f["returns"].attrs["source_columns"])["terminated"] == "term"


def test_inspect_takes_every_column_and_reading_option_of_the_runs() -> None:
    inspect_options = _options("inspect")
    for command in DECLARATIONS:
        for name, opts in _options(command).items():
            if name in RUN_ONLY:
                continue
            assert inspect_options.get(name) == opts, (command, name)


def test_inspect_reads_as_the_run_with_the_same_options(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The same reading keywords reach api.inspect and api.run (one function builds them)."""
    from rltscan import api

    seen: dict[str, dict] = {}

    def fake(name: str):
        def call(*args, **kwargs):
            seen[name] = kwargs
            raise ParameterError("stop")

        return call

    monkeypatch.setattr(api, "inspect", fake("inspect"))
    monkeypatch.setattr(api, "run", fake("run"))
    options = [
        "--values", "v", "--terminated", "t", "--truncated", "u", "--done", "d",
        "--episode-id", "e", "--dones-mean", "ended", "--ends-are", "terminal",
        "--ignore", "a", "--ignore", "b", "--ends-from-observations", "--no-bootstrap",
        "--layout", "flat", "--group", "/g", "--is-last-row", "observation",
        "--autoreset", "next-step",
    ]  # fmt: skip
    assert invoke("inspect", FLAT, *options).exit_code == 2
    assert invoke("gae", FLAT, *CPU, *options).exit_code == 2
    reading = {k: v for k, v in seen["run"].items() if k in seen["inspect"]}
    assert reading == seen["inspect"]
    assert seen["inspect"] == {
        "columns": {
            "values": "v", "terminated": "t", "truncated": "u", "dones": "d", "episode_id": "e"
        },
        "layout": "flat", "group": "/g", "dones_mean": "ended", "ends_are": "terminal",
        "ignore": ("a", "b"), "observation_gaps": "truncate", "missing_bootstrap": "zero",
        "is_last_row": "observation", "autoreset": "next-step",
    }  # fmt: skip


def test_inspect_with_a_column_option_says_the_run_goes(tmp_path: Path) -> None:
    def moved(f) -> None:
        f["critic"] = f["values"][()]
        del f["values"]

    path = edited(tmp_path, moved)
    before = json.loads(invoke("inspect", path, "--json").stdout)
    assert not before["estimators"]["gae"]["ready"]
    after = invoke("inspect", path, "--json", "--values", "critic")
    assert after.exit_code == 0, after.stderr
    assert json.loads(after.stdout)["estimators"]["gae"]["ready"]
    assert invoke("gae", path, *CPU, "-q", "--values", "critic").exit_code == 0
