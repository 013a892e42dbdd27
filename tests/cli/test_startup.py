"""The CLI starts without torch or triton (issue 12, "The CLI starts instantly").

``--help``, ``--version``, each command's ``--help``, ``inspect`` and ``--dry-run``
run in a fresh interpreter; at its exit the interpreter reports whether torch or
triton were imported. ``--help``, ``--version`` and each command's ``--help`` import
no numpy and no rich either (their defaults come from :mod:`rltscan.defaults`; the help
is click's plain formatter). No command imports pydantic (typer's coercion of plain
values is skipped, with the same values: ``test_plain_values_are_typers``); an HDF5
input loads no pyarrow, a Parquet one no h5py; ``--json``/``-q`` load no rich. The
estimators' declarations, ``rltscan`` itself and the file layer (``rltscan.io``) import
without torch too; a real run still computes (on a CPU-only machine without triton).
Measured startup times: bench/results/startup-cpu-2core-2026-12-03/, -b/ and -c/.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rltscan.estimators import DECLARATIONS
from tests.io_helpers import FLAT, PARQUET, copy_sample

HEAVY = ("torch", "triton")
# what inspect and --dry-run load besides numpy: the input's own reader, nothing else
# (pandas: pyarrow's to_numpy imports it, 0.4-0.6 s; rltscan reads Arrow buffers itself)
ALL = (*HEAVY, "numpy", "rich", "h5py", "pyarrow", "pydantic", "pandas")
READER = {".h5": "h5py", ".parquet": "pyarrow"}
# what --help and --version must not load either (each costs 0.05-0.2 s on 2 cores)
HELP_HEAVY = (*HEAVY, "numpy", "rich", "h5py", "pyarrow")
# Runs the CLI as the console script does and says, at exit, which heavy modules loaded.
PROBE = """
import atexit, sys
atexit.register(lambda: sys.stderr.write(
    "\\nIMPORTED:" + ",".join(m for m in {heavy!r} if m in sys.modules) + "\\n"))
from rltscan.cli import main
sys.argv = ["rltscan", *sys.argv[1:]]
main()
"""


def run_cli(*args: str, heavy: tuple[str, ...] = HEAVY) -> tuple[int, str, list[str]]:
    """``(exit code, stdout, heavy modules imported)`` of ``rltscan ARGS`` in a new process."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=heavy), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    line = done.stderr.rstrip().rsplit("\n", 1)[-1]
    assert line.startswith("IMPORTED:"), done.stderr
    imported = [m for m in line.removeprefix("IMPORTED:").split(",") if m]
    return done.returncode, done.stdout, imported


def imports_in_new_process(code: str) -> list[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            f"{code}\nimport sys\nprint([m for m in {HEAVY!r} if m in sys.modules])",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1].replace("'", '"'))


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["--version"],
        ["inspect", "--help"],
        *[[command, "--help"] for command in DECLARATIONS],
    ],
    ids=" ".join,
)
def test_help_and_version_import_no_torch(args: list[str]) -> None:
    code, out, imported = run_cli(*args, heavy=HELP_HEAVY)
    assert code == 0
    assert out.strip()
    assert imported == []


def test_defaults_shown_by_help_are_the_api_defaults() -> None:
    """``rltscan.defaults`` (read by --help without numpy) is what ``rltscan.run``,
    ``RunOptions`` and the streaming engine use."""
    from rltscan import api, defaults
    from rltscan.engines.stream import windows as stream
    from rltscan.options import RunOptions

    run = inspect.signature(api.run).parameters
    fields = {f.name: f.default for f in dataclasses.fields(RunOptions)}
    for name in ("prefix", "device", "backend"):
        assert run[name].default == fields[name] == getattr(defaults, name.upper()), name
    assert stream.DEFAULT_CHUNK_STEPS == defaults.CHUNK_STEPS
    assert stream.BLOCK_STEPS == defaults.BLOCK_STEPS


# the Parquet sample's episode ends are known only from its ids: the run says what they are
EXTRA = {FLAT: [], PARQUET: ["--ends-are", "truncated"]}


@pytest.mark.parametrize("sample", [FLAT, PARQUET], ids=lambda p: p.suffix)
def test_inspect_imports_no_torch(sample: Path, tmp_path: Path) -> None:
    path = str(copy_sample(sample, tmp_path))
    code, out, imported = run_cli("inspect", path, "--json", *EXTRA[sample], heavy=ALL)
    assert code == 0
    assert json.loads(out)["estimators"]["gae"]["ready"]
    assert imported == ["numpy", READER[sample.suffix]]  # no rich for --json, no pydantic


@pytest.mark.parametrize("sample", [FLAT, PARQUET], ids=lambda p: p.suffix)
def test_inspect_tables_load_rich_and_the_reader_only(sample: Path, tmp_path: Path) -> None:
    path = str(copy_sample(sample, tmp_path))
    code, out, imported = run_cli("inspect", path, *EXTRA[sample], heavy=ALL)
    assert code == 0
    assert "estimators" in out
    assert imported == ["numpy", "rich", READER[sample.suffix]]


@pytest.mark.parametrize("sample", [FLAT, PARQUET], ids=lambda p: p.suffix)
@pytest.mark.parametrize("command", ["gae", "returns", "traces"])
def test_dry_run_imports_no_torch(command: str, sample: Path, tmp_path: Path) -> None:
    path = copy_sample(sample, tmp_path)
    before = path.read_bytes()
    code, out, imported = run_cli(
        command, str(path), "--dry-run", "--json", "-q", *EXTRA[sample], heavy=ALL
    )
    assert code == 0
    report = json.loads(out)
    assert report["dry_run"] and not report["written"]
    assert report["device"] == "cpu"  # --device auto on this (CPU-only) test machine
    assert path.read_bytes() == before
    assert imported == ["numpy", READER[sample.suffix]]  # no rich under -q, no pydantic


def test_a_run_still_computes(tmp_path: Path) -> None:
    """The estimator command loads torch when it computes on the torch backend, and
    writes its outputs (a cpu-backend run that loads no torch: tests/engines/
    test_host_lane.py)."""
    path = copy_sample(FLAT, tmp_path)
    out = tmp_path / "out.h5"
    heavy = (*ALL, "torch._dynamo")
    args = ("gae", str(path), "-o", str(out), "--backend", "torch", "--json", "-q")
    code, stdout, imported = run_cli(*args, heavy=heavy)
    assert code == 0
    report = json.loads(stdout)
    assert report["written"] and [o["name"] for o in report["outputs"]] == [
        "advantages",
        "value_targets",
    ]
    assert "torch" in imported
    # torch.compile's machinery (~1 s of imports) loads only where it compiles
    assert not {"pydantic", "pyarrow", "rich", "torch._dynamo"} & set(imported)
    if report["device"] == "cpu" and report["backend"] == "torch":  # a CPU run needs no triton
        assert "triton" not in imported
    assert out.exists()


def test_a_parquet_run_loads_no_pandas(tmp_path: Path) -> None:
    """Reading and writing Parquet go through Arrow buffers (``pa.array`` and
    ``to_numpy`` on numpy would import pandas, 0.4-0.6 s)."""
    path = copy_sample(PARQUET, tmp_path)
    out = tmp_path / "out.parquet"
    code, stdout, imported = run_cli(
        "gae", str(path), "-o", str(out), "--ends-are", "terminal", "--json", "-q", heavy=ALL
    )
    assert code == 0 and json.loads(stdout)["written"]
    assert "pyarrow" in imported and "pandas" not in imported


@pytest.mark.parametrize(
    "values",
    [
        np.arange(7, dtype=np.float32),
        np.arange(9, dtype=np.float64)[::2],
        np.arange(3, dtype=np.float16),
        np.arange(-2, 3, dtype=np.int64),
        np.arange(5, dtype=np.uint8),
        np.array([True, False, True, True, False, False, True, True, True]),
        np.zeros(0, np.float32),
        np.zeros(0, bool),
        np.array([np.nan, np.inf, -0.0], np.float32),
    ],
    ids=lambda v: f"{v.dtype}-{len(v)}",
)
def test_arrow_of_round_trips(values: np.ndarray) -> None:
    from rltscan.io.parquet import arrow_of

    got = arrow_of(values)
    got.validate(full=True)
    back = got.to_numpy(zero_copy_only=False)
    assert back.dtype == values.dtype
    np.testing.assert_array_equal(back, values)


def test_plain_values_are_typers() -> None:
    """The CLI coerces plain option values itself (typer 0.29 would build a pydantic
    ``TypeAdapter`` for each, ~0.25 s at start-up): the same values, of the same types,
    as typer's own coercion, and typer's own error for anything else."""
    import typer

    from rltscan import cli

    group = typer.main.get_command(cli.app)
    samples: dict[str, list[object]] = {
        "int": ["0", "7", "-3", "+5", "007", " 5", "1_000", "1.0", "1e3", "abc", "", 4096],
        "float": ["0.99", "1", "-0.5", ".5", "5.", "1e-3", "-2E+2", "+1", " 0.5", "inf"],
        "float-bad": ["nan", "abc", "", "0x10", "1,2", 1, 0.5],
        "str": ["a b", "", "-", "rollouts.h5", "ünï"],
        "list": ["0.9,0.99", "0.9", " 0.9 , 0.99", "x", "0.9,", 0.99],
    }
    seen = set()
    for name in ("gae", "vtrace", "inspect"):
        command = group.commands[name]
        ctx = command.make_context(name, ["x.h5"], resilient_parsing=True)
        for param in command.params:
            if type(param).__name__ not in ("_PlainOption", "_PlainArgument"):
                continue
            base = type(param).__mro__[1]  # typer's own class
            values: list[object] = [None]
            if param.multiple:
                values = [None, (), ("a",), ("a", "b"), ["x"]]
            else:
                for kind in samples:
                    values += samples[kind]
            for value in values:
                try:
                    want: object = base.process_value(param, ctx, value)
                except Exception as err:
                    want = (type(err), str(err))
                try:
                    got: object = param.process_value(ctx, value)
                except Exception as err:
                    got = (type(err), str(err))
                if isinstance(want, float) and math.isnan(want):
                    assert isinstance(got, float) and math.isnan(got), (param.name, value)
                else:
                    assert (got, type(got)) == (want, type(want)), (param.name, value)
                seen.add(param.name)
    assert {"gamma", "lam", "chunk_steps", "prefix", "ignore", "input", "rho_clip"} <= seen


@pytest.mark.parametrize(
    "code",
    [
        "import rltscan",
        "import rltscan.estimators",
        *[
            f"import rltscan.estimators.{d.name}"
            for d in DECLARATIONS.values()
            if d.name not in ("returns", "traces")
        ],
        "import rltscan.estimators.discounted_returns, rltscan.estimators.eligibility_traces",
        "import rltscan.io, rltscan.io.hdf5, rltscan.io.parquet, rltscan.io.layout, "
        "rltscan.io.writeback, rltscan.io.sinks, rltscan.io.convert, rltscan.io.minari, "
        "rltscan.io.shards",
        "import rltscan.api, rltscan.engines.stream.run, rltscan.engines.stream.windows, "
        "rltscan.report, rltscan.cli",
        "from rltscan.estimators import DECLARATIONS; DECLARATIONS['gae'].defaults()",
    ],
)
def test_imports_without_torch(code: str) -> None:
    assert imports_in_new_process(code) == []


def test_public_names_still_load() -> None:
    """``from rltscan import gae`` and every name of ``__all__`` still work (lazily)."""
    code = "import rltscan\nfor n in rltscan.__all__: getattr(rltscan, n)\nfrom rltscan import gae"
    assert "torch" in imports_in_new_process(code)


def test_frozen_modules_leave_triton_quiet() -> None:
    """The CLI freezes what it imported (``rltscan.cli.process.modules_loaded``); with
    triton loaded (a GPU run), its bindings must not report the frozen objects as leaked
    at exit."""
    pytest.importorskip("triton")
    code = (
        "import triton, triton.language\n"
        "from rltscan.cli.process import modules_loaded\n"
        "modules_loaded()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0
    assert "leaked" not in done.stderr, done.stderr[:300]
