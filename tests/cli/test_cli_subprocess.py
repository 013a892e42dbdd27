"""``python -m rltscan`` as a real process: entry point, imports, streams, pipelines."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import pyarrow.parquet as pq

from tests.io_helpers import FLAT, PARQUET, ROOT, B, T, copy_sample

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "120"}
RLTSCAN = [sys.executable, "-m", "rltscan"]


def rltscan(*args: str | Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RLTSCAN, *map(str, args)], env=ENV, input=stdin, capture_output=True, timeout=300
    )


def test_gae_on_a_sample_file_end_to_end(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    done = rltscan("gae", path, "--device", "cpu", "--gamma", "0.99", "--lam", "0.95")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert done.stdout == b""
    assert "scan" in err and "write" in err and "steps/s" in err
    assert "\x1b[" not in err  # NO_COLOR
    with h5py.File(path) as f:
        assert f["advantages"].shape == (B * T,)
        assert f["value_targets"].attrs["estimator"] == "gae"


def test_pipeline_stdout_to_stdin() -> None:
    # the sample's stream cuts are unflagged eps_id changes: say what they are
    first = rltscan(
        "returns", PARQUET, "--ends-are", "truncated", "--device", "cpu", "-q", "-o", "-"
    )
    assert first.returncode == 0, first.stderr.decode()
    second = rltscan(
        "prefix-sum",
        "-",
        "--x",
        "returns",
        "--ends-are",
        "truncated",
        "--device",
        "cpu",
        "-q",
        "-o",
        "-",
        stdin=first.stdout,
    )
    assert second.returncode == 0, second.stderr.decode()
    table = pq.read_table(io.BytesIO(second.stdout))
    assert {"reward", "returns", "prefix_sums"} <= set(table.column_names)
    assert table.num_rows == B * T
    assert json.loads(table.schema.metadata[b"rltscan"])["outputs"].keys() >= {
        "returns",
        "prefix_sums",
    }


def test_error_is_one_line_with_exit_code(tmp_path: Path) -> None:
    done = rltscan("gae", tmp_path / "missing.h5")
    assert done.returncode == 3
    assert done.stderr.decode().splitlines() == [
        f"error: {tmp_path / 'missing.h5'} does not exist; check the path"
    ]
    assert done.stdout == b""


def test_version() -> None:
    done = rltscan("--version")
    assert done.returncode == 0 and done.stdout.decode().startswith("rltscan ")


def test_import_stays_light() -> None:
    heavy = "{'h5py', 'pyarrow', 'triton', 'rich'}"
    code = f"import rltscan, sys; print(sorted({heavy} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode().strip() == "[]"


def test_the_process_ends_as_python_would_without_native_teardown() -> None:
    # main() leaves through os._exit (native thread pools torn down in the interpreter's
    # finalisation can abort a finished run): threads are still joined, atexit handlers
    # still run, buffered output is still flushed, and the command's exit code stands
    script = (
        "import atexit, sys, threading, time\n"
        "from rltscan import cli\n"
        "atexit.register(lambda: print('atexit ran', flush=True))\n"
        "threading.Thread(target=lambda: (time.sleep(0.2), print('thread ran'))).start()\n"
        "sys.stdout.write('buffered')\n"
        "sys.argv = ['rltscan', '{}']\n"
        "cli.main()\n"
    )
    ok = subprocess.run(
        [sys.executable, "-c", script.format("--version")], env=ENV, capture_output=True,
        timeout=120,
    )  # fmt: skip
    out = ok.stdout.decode()
    assert ok.returncode == 0, ok.stderr.decode()
    assert "buffered" in out and "thread ran" in out and "atexit ran" in out
    bad = subprocess.run(
        [sys.executable, "-c", script.format("no-such-command")], env=ENV,
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2
    assert "atexit ran" in bad.stdout.decode()
