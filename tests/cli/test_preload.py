"""The CLI loads torch (and numba's CPU target; only numba's for a run the torch-free
lane takes) on a thread while it opens and plans the file (rltscan.preload); the glibc
allocator setting of streamed runs is the CLI process's own
(rltscan.engines.stream.windows.fix_mmap_threshold).

Each CLI case runs in a fresh interpreter: what loads where, and when, is per process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import rltscan
from rltscan.engines.stream import windows
from tests.io_helpers import FLAT, copy_sample

# ``rltscan ARGS`` in this interpreter, with the modules in BLOCKED failing to import (as
# a broken install would), and an audit hook that says which thread imported torch first
PROBE = """
import sys, threading
BLOCKED = {blocked!r}
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError("blocked for the test: " + name)
sys.meta_path.insert(0, Block())
first = []
def hook(event, args):
    if event == "import" and args[0] == "torch" and not first:
        first.append(threading.current_thread().name)
sys.addaudithook(hook)
import atexit
atexit.register(lambda: sys.stderr.write("\\nTORCH-THREAD:" + ",".join(first) + "\\n"))
from rltscan.cli import main
sys.argv = ["rltscan", *sys.argv[1:]]
main()
"""


def _cli(*args: str, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", PROBE.format(blocked=blocked), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def _outputs(path: Path) -> dict[str, np.ndarray]:
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in ("advantages", "value_targets") if k in f}


@pytest.mark.parametrize("backend", ["torch", "cpu"])
def test_torch_loads_on_the_thread_and_the_outputs_are_the_library_s(
    tmp_path: Path, backend: str
) -> None:
    """A torch-backend run loads torch on the thread; a cpu-backend run takes the
    torch-free lane (rltscan.estimators.host) and loads none."""
    path = copy_sample(FLAT, tmp_path)
    out = tmp_path / "out.h5"
    done = _cli("gae", str(path), "-o", str(out), "--device", "cpu", "--backend", backend, "-q")
    assert done.returncode == 0, done.stderr
    loader = "rltscan-preload" if backend == "torch" else ""
    assert done.stderr.rstrip().endswith("TORCH-THREAD:" + loader)
    want = tmp_path / "want.h5"
    rltscan.run("gae", str(path), output=str(want), device="cpu", backend=backend)
    got, ref = _outputs(out), _outputs(want)
    assert set(got) == {"advantages", "value_targets"}
    for name in got:
        assert got[name].tobytes() == ref[name].tobytes()


def test_a_torch_that_cannot_load_is_one_line_and_exit_6(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    before = path.read_bytes()
    done = _cli("gae", str(path), "--device", "cpu", "--backend", "torch", blocked=("torch",))
    assert done.returncode == 6, done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln and not ln.startswith("TORCH-THREAD")]
    assert len(lines) == 1 and lines[0].startswith("error: torch cannot be imported"), lines
    assert "Traceback" not in done.stderr and "pip install" in lines[0]
    assert path.read_bytes() == before


def test_a_numba_that_cannot_load_is_the_cpu_backend_s_one_line(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    args = ("gae", str(path), "--device", "cpu", "--backend", "cpu", "--json")
    done = _cli(*args, blocked=("numba",))
    assert done.returncode == 6, done.stderr
    err = json.loads(done.stdout)["error"]
    assert err["message"].startswith("the cpu backend was asked for but the numba")
    assert "Traceback" not in done.stderr


def test_a_bad_input_still_fails_with_its_own_line(tmp_path: Path) -> None:
    """An error met while torch loads on the thread: its line, its code, a clean exit."""
    missing = tmp_path / "nope.h5"
    done = _cli("gae", str(missing), "--device", "cpu")
    assert done.returncode not in (0, 1), done.stderr
    lines = [ln for ln in done.stderr.splitlines() if ln and not ln.startswith("TORCH-THREAD")]
    assert len(lines) == 1 and lines[0].startswith("error: "), lines


class _Libc:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def mallopt(self, *_: int) -> int:
        self.calls.append("mallopt")
        return 1

    def malloc_trim(self, *_: int) -> int:
        self.calls.append("malloc_trim")
        return 1


@pytest.fixture
def libc(monkeypatch: pytest.MonkeyPatch) -> _Libc:
    """A stand-in for the C library that records the allocator calls made to it."""
    fake = _Libc()
    monkeypatch.setattr(windows, "_libc", lambda: fake)
    return fake


def test_a_library_streamed_run_leaves_the_allocator_setting_alone(
    tmp_path: Path, libc: _Libc
) -> None:
    path = copy_sample(FLAT, tmp_path)
    rltscan.run("gae", str(path), device="cpu", chunk_steps=256, block_steps=256)
    assert "malloc_trim" in libc.calls and "mallopt" not in libc.calls


def test_the_cli_sets_the_mmap_threshold_for_its_own_process(tmp_path: Path, libc: _Libc) -> None:
    from typer.testing import CliRunner

    from rltscan import cli

    path = copy_sample(FLAT, tmp_path)
    res = CliRunner().invoke(cli.app, ["gae", str(path), "--device", "cpu", "-q"])
    assert res.exit_code == 0, res.output
    assert libc.calls[0] == "mallopt"


# numba loaded the way the torch-free lane's thread loads it, then SciPy (where installed)
_WITHOUT_SCIPY = """
import sys
from rltscan import preload, scan
with preload.numba_without_scipy():
    scan.load_cpu_target()
from rltscan.scan import cpu_fused
print("SCIPY-DURING:", "scipy" in sys.modules and sys.modules["scipy"] is not None)
try:
    import scipy.linalg
    print("SCIPY-AFTER:", scipy.linalg.__name__)
except ImportError:
    print("SCIPY-AFTER: not installed")
"""


def test_numba_loads_without_scipy_and_scipy_imports_after() -> None:
    """The lane's thread keeps numba's SciPy probe off its path (seconds of a short run),
    and SciPy is importable as usual once numba is loaded."""
    pytest.importorskip("numba")
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_SCIPY], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert "SCIPY-DURING: False" in done.stdout
    assert "SCIPY-AFTER: scipy.linalg" in done.stdout or "not installed" in done.stdout


def test_numba_without_scipy_leaves_a_loaded_scipy_alone() -> None:
    """In a process that already has SciPy (a user's, or a second run in one process),
    nothing is hidden."""
    scipy = pytest.importorskip("scipy")
    from rltscan import preload

    with preload.numba_without_scipy():
        assert sys.modules["scipy"] is scipy
    assert sys.modules["scipy"] is scipy


def test_a_torch_free_cli_run_imports_no_scipy(tmp_path: Path) -> None:
    """A streamed cpu run through the CLI never imports SciPy (the lane's only numba)."""
    pytest.importorskip("numba")
    pytest.importorskip("scipy")
    src = copy_sample(FLAT, tmp_path)
    probe = (
        "import sys, atexit\n"
        "atexit.register(lambda: sys.stderr.write('\\nSCIPY:%s\\n' % "
        "('scipy' in sys.modules and sys.modules['scipy'] is not None)))\n"
        "from rltscan.cli import main\n"
        "sys.argv = ['rltscan', *sys.argv[1:]]\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, "gae", str(src), "--backend", "cpu", "--quiet"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "SCIPY:False" in done.stderr
