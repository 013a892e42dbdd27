"""A light install (issue 12): triton is optional.

A CPU-only user installs no triton (CUDA builds of torch on Linux bring their own).
Each test runs in a fresh interpreter where ``import triton`` fails
(``sys.modules["triton"] = None``, as for a package that is not installed):

* ``--backend triton`` / ``backend="triton"`` is exit 6 (BackendUnavailableError) with
  one line naming the fix, nothing written;
* ``backend="auto"`` on CUDA falls back to the torch backend with a
  ``BackendFallbackWarning`` in Python and a note in a file run's report (checked
  here with a stand-in CUDA device; on the GPU machine once: bench/results/e2e-h200-2026-12-03-c/);
* everything on the CPU works as before, and the report has no such note.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.io_helpers import FLAT, copy_sample

BLOCK = "import sys; sys.modules['triton'] = None  # as if triton were not installed\n"
ROOT = Path(__file__).resolve().parents[2]
# auto on the CPU: the fused numba kernels where numba is installed (the cpu extra)
CPU_AUTO = "cpu" if importlib.util.find_spec("numba") is not None else "torch"


def run_python(code: str, *args: str, interpret: bool = True) -> subprocess.CompletedProcess:
    """``code`` in a new interpreter without triton; TRITON_INTERPRET as asked."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:  # the triton backend may run on CPU tensors: the check reached is triton's
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run(
        [sys.executable, "-c", BLOCK + textwrap.dedent(code), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )


CLI = "from rltscan.cli import main\nsys.argv = ['rltscan', *sys.argv[1:]]\nmain()\n"


def test_cli_backend_triton_without_triton_is_exit_6(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    before = path.read_bytes()
    out = tmp_path / "out.h5"
    done = run_python(CLI, "gae", str(path), "-o", str(out), "--backend", "triton", "-q")
    assert done.returncode == 6, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert lines[0].startswith("error: the triton backend was asked for but ")
    assert "triton package is not installed" in lines[0]
    assert "pip install 'rltscan[triton]'" in lines[0] and "--backend torch" in lines[0]
    assert not out.exists() and path.read_bytes() == before


def test_cli_backend_triton_json_error_object(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    done = run_python(CLI, "gae", str(path), "--backend", "triton", "--json", "-q")
    assert done.returncode == 6
    error = json.loads(done.stdout)["error"]
    assert error["code"] == 6 and error["kind"] == "BackendUnavailableError"


def test_cli_on_cpu_runs_without_triton(tmp_path: Path) -> None:
    """``--backend auto`` on the CPU never needed triton: same run, no fallback note."""
    path = copy_sample(FLAT, tmp_path)
    out = tmp_path / "out.h5"
    done = run_python(CLI, "gae", str(path), "-o", str(out), "--json", "-q", interpret=False)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["backend"] == CPU_AUTO and report["written"]
    assert not any("triton" in note for note in report["notes"])


def test_python_backend_triton_without_triton_raises() -> None:
    done = run_python(
        """
        import numpy as np, rltscan
        r, flags = np.ones(8), np.zeros(8, bool)
        kw = dict(terminated=flags, truncated=flags, missing_bootstrap="zero")
        try:
            rltscan.gae(r, r, backend="triton", **kw)
        except rltscan.BackendUnavailableError as err:
            print("EXIT", err.exit_code, str(err))
        print(rltscan.gae(r, r, backend="torch", **kw).advantages.shape)
        """
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.strip().splitlines()
    assert first.startswith("EXIT 6 the triton backend was asked for but the triton package")
    assert "pip install 'rltscan[triton]'" in first
    assert second == "(8,)"


def test_auto_on_cuda_falls_back_to_torch_with_a_warning_and_a_note() -> None:
    """The resolver's choice for a CUDA device (a stand-in: this test needs no GPU)."""
    done = run_python(
        """
        import warnings
        from types import SimpleNamespace
        from rltscan import scan
        from rltscan.plan import backend_name
        cuda = SimpleNamespace(type="cuda")
        print(backend_name("auto", cuda))  # a plan: no import of triton or torch
        print("torch" in sys.modules)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            print(scan.resolve_backend("auto", cuda))
            scan.resolve_backend("auto", cuda)  # warned once per process
        print(len(seen), seen[0].category.__name__)
        print(scan.fallback_note("auto", cuda))
        cpu = SimpleNamespace(type="cpu")
        print(scan.fallback_note("torch", cuda), scan.fallback_note("auto", cpu))
        """,
        interpret=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[:5] == ["torch", "False", "torch", "1 BackendFallbackWarning", lines[4]]
    assert lines[4].startswith("--backend auto ran the torch backend on CUDA because ")
    assert "pip install 'rltscan[triton]'" in lines[4]
    assert lines[5] == "None None"


def test_with_triton_installed_the_resolver_is_unchanged() -> None:
    """Where triton imports (this test environment), auto on CUDA is triton, no note."""
    from types import SimpleNamespace

    from rltscan import scan

    pytest.importorskip("triton")
    cuda = SimpleNamespace(type="cuda")
    assert scan.triton_missing() is None
    assert scan.resolve_backend("auto", cuda) == "triton"
    assert scan.resolve_backend("auto", SimpleNamespace(type="cpu")) == CPU_AUTO
    assert scan.fallback_note("auto", cuda) is None


def test_triton_is_not_a_base_dependency() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = lambda reqs: {r.split(";")[0].split(">")[0].split("[")[0].strip() for r in reqs}  # noqa: E731
    assert "triton" not in names(project["dependencies"])
    extras = project["optional-dependencies"]
    assert "triton" in names(extras["test"])  # CI runs the kernel through the interpreter
    assert names(extras["triton"]) == {"triton"}


def _old_triton(root: Path, version: str) -> Path:
    """A folder that, first on sys.path, makes an installed triton of ``version``: its
    metadata (what the resolver reads) and a package that fails if imported (the version
    must be judged without importing it)."""
    dist = root / f"triton-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: triton\nVersion: {version}\n")
    (root / "triton").mkdir()
    (root / "triton" / "__init__.py").write_text("raise SystemExit('old triton was imported')\n")
    return root


def run_with_old_triton(tmp_path: Path, code: str, version: str = "3.3.1") -> list[str]:
    """``code`` in a new interpreter whose triton is ``version`` (older than the kernel
    compiles on); its stdout lines."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(_old_triton(tmp_path / "site", version)), str(ROOT)])
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


def test_a_triton_older_than_the_kernel_is_refused_naming_the_upgrade(tmp_path: Path) -> None:
    """Triton 3.3 and older cannot compile the kernel: backend="triton" is exit 6 naming
    the torch upgrade (torch pins its Triton), auto on CUDA runs torch with a warning and
    the report's note saying the same, and triton is never imported to find it out."""
    lines = run_with_old_triton(
        tmp_path,
        """
        import warnings
        from types import SimpleNamespace
        import rltscan
        from rltscan import scan
        cuda = SimpleNamespace(type="cuda")
        try:
            scan.resolve_backend("triton", SimpleNamespace(type="cuda"))
        except rltscan.BackendUnavailableError as err:
            print("EXIT", err.exit_code, str(err).replace(chr(10), " "))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            print(scan.resolve_backend("auto", cuda))
        print(str(seen[0].message))
        print(scan.fallback_note("auto", cuda))
        import sys
        print("triton" in sys.modules)
        """,
    )
    exit_line, auto, warned, note, imported = lines
    assert exit_line.startswith("EXIT 6 the triton backend was asked for but triton 3.3.1 ")
    assert "needs triton>=3.4" in exit_line and "upgrade torch to 2.8" in exit_line
    assert "--backend torch" in exit_line
    assert auto == "torch"
    assert "triton 3.3.1 is installed" in warned and "upgrade torch" in warned
    assert note.startswith("--backend auto ran the torch backend on CUDA because triton 3.3.1")
    assert "upgrade torch" in note
    assert imported == "False"


def test_a_triton_new_enough_is_not_refused_by_its_version(tmp_path: Path) -> None:
    """3.4 and later (and local builds: "3.4.0+git...") pass the version check."""
    lines = run_with_old_triton(
        tmp_path,
        "from rltscan import scan; print(scan.triton_too_old())",
        version="3.4.0+git8a1f0c2",
    )
    assert lines == ["None"]


def test_triton_floor_matches_the_dependency_pins() -> None:
    """pyproject's triton pins say the same floor as the resolver."""
    from rltscan import scan

    need = ".".join(map(str, scan.MIN_TRITON))
    text = (ROOT / "pyproject.toml").read_text()
    assert text.count(f"triton>={need};") == 2 and "triton>=3.2" not in text
