"""The kernel's compile cache follows every kind's code.

Triton keeps compiled kernels on disk under a key hashed from the kernel's source and
the sources of the ``@triton.jit`` functions it calls. If Triton's dependency walk
missed a function the kernel calls, an upgraded rltscan whose kind changed would run
the kernel cached for the old code, with exit 0 and other numbers. The walk follows a
call by name (``td_lambda.coefficients(*args)``) but not one through
``getattr(td_lambda, NAME)`` (measured under Triton 3.6 and 3.9: editing td_lambda's,
returns', traces', prefix_sum's or linear's ``coefficients`` then left the key as it
was), which is why ``kinds``' dispatchers name every kind's function. Each case edits
one kind function of a copy of the package (a comment inside its signature: same code,
new source) and checks that the kernel's cache key moved.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[2]
KEY = "from rltscan.scan import triton_scan; print(triton_scan._scan_kernel.cache_key)"


def _key(tree: Path) -> str:
    # the compiled kernel's key (under the interpreter the kernel is not a JITFunction)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = str(tree)
    done = subprocess.run(
        [sys.executable, "-c", KEY], capture_output=True, text=True, env=env, cwd=tree, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _copy(tmp_path: Path, name: str) -> Path:
    tree = tmp_path / name
    shutil.copytree(
        ROOT / "rltscan", tree / "rltscan", ignore=shutil.ignore_patterns("__pycache__")
    )
    return tree


def _touch(tree: Path, module: str, function: str) -> None:
    """A comment line inside ``function``'s signature in kinds/``module``.py."""
    path = tree / "rltscan" / "scan" / "kinds" / f"{module}.py"
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if line.startswith(f"def {function}("))
    lines.insert(at + 1, "         # cache key probe\n")
    path.write_text("".join(lines))


@pytest.fixture(scope="module")
def base_key(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _key(_copy(tmp_path_factory.mktemp("base"), "tree"))


# one function each way the shell reaches a kind: load/prepare/coefficients through
# _call's getattr, screen and epilogue through their own chains, and a _common helper
# that a kind's ``load`` is an alias of
@pytest.mark.parametrize(
    ("module", "function"),
    [
        ("gae", "epilogue"),
        ("vtrace", "prepare"),
        ("retrace", "coefficients"),
        ("td_lambda", "coefficients"),
        ("vtrace", "screen"),
        ("_common", "load_delta"),  # gae.load and vtrace's, by another name
        ("linear", "load"),
    ],
)
def test_editing_a_kind_function_changes_the_kernel_cache_key(
    tmp_path: Path, base_key: str, module: str, function: str
) -> None:
    tree = _copy(tmp_path, "edited")
    _touch(tree, module, function)
    assert _key(tree) != base_key
