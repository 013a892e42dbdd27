"""The README shows what really prints, and its main command keeps the repository clean.

The quick start's ``console`` block is the main command of "Two commands" and its output;
the "Statistics and pictures" block is a piece of that output. Both are compared with a
fresh run of the command (less the ``pip install``) in a clean copy of the repository,
at 88 columns and on the CPU (the README shows the CPU machine's output; a GPU is hidden
from the run); only the timing table's numbers (seconds, rates, memory) are normalised.
The same run must leave nothing that ``git status`` shows.

After a change of the report, regenerate both blocks from a fresh run with
``python -m tests.repo.test_readme_output`` (from the repository root).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
WIDTH = "88"
INSTALL = "python -m pip install "
# what changes between runs: the timing table's cells and caption (seconds, steps/s,
# GB/s, window sizes, peak RSS)
BOX = "┏┓┗┛┡┩└┘━─┳╇┴╋┼┃│"
NUMBER = re.compile(r"\d[\d,.]*[kMG]?")


def main_command() -> str:
    """The README's main command: the first command of "Two commands"."""
    text = README.read_text()
    section = text[text.index("## Two commands") :]
    line = next(x.strip() for x in section.splitlines() if x.strip().startswith(INSTALL))
    return line


def quick_start() -> tuple[str, list[str]]:
    """``(command, output lines)`` of the quick start's console block."""
    text = README.read_text()
    section = text[text.index("## Quick start") :]
    start = section.index("```console\n") + len("```console\n")
    block = section[start : section.index("\n```", start)]
    first, *output = block.splitlines()
    assert first.startswith("$ ")
    return first[2:], output


def statistics_block() -> list[str]:
    """The output shown in "Statistics and pictures"."""
    text = README.read_text()
    section = text[text.index("## Statistics and pictures") :]
    start = section.index("```\n") + 4
    return section[start : section.index("\n```", start)].splitlines()


def _tracked(src: Path, dst: Path) -> None:
    """The repository's files (its working tree, as git lists them) copied into ``dst``."""
    names = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=src,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, names):
        path = src / name.decode()
        if path.is_file():
            (dst / name.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, dst / name.decode())


def _git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
    }
    env["GIT_COMMITTER_EMAIL"] = "t@t"
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout


NO_NUMBA = """
import importlib.abc, sys


class _NoNumba(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "numba" or name.startswith("numba."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _NoNumba())
"""


def run_main_command(repo: Path) -> subprocess.CompletedProcess:
    """The main command, less its ``pip install``, in ``repo`` (``rltscan`` is this
    interpreter's ``python -m rltscan`` on ``repo``'s code), at :data:`WIDTH` columns,
    with no GPU visible."""
    steps = main_command().split(" && ")
    assert steps[0].startswith(INSTALL), steps
    bin_dir = repo.parent / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "rltscan"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m rltscan "$@"\n')
    shim.chmod(0o755)
    # the main command installs rltscan alone: numba (the optional cpu backend, in the
    # test extra) is hidden, so --backend auto picks what a fresh install picks
    hide = repo.parent / "no-numba"
    hide.mkdir(exist_ok=True)
    (hide / "sitecustomize.py").write_text(NO_NUMBA)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": f"{repo}{os.pathsep}{hide}",
        "COLUMNS": WIDTH,
        "PYTHONIOENCODING": "utf-8",
        "CUDA_VISIBLE_DEVICES": "",  # --device auto: the CPU, as in the README
    }
    for name in ("NO_COLOR", "FORCE_COLOR", "RLTSCAN_PROGRESS_DELAY"):
        env.pop(name, None)
    return subprocess.run(
        ["bash", "-c", " && ".join(steps[1:])],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def normalised(lines: list[str]) -> list[str]:
    """``lines`` with what varies between runs replaced: inside the timing table (from
    its ``timings`` title to the line before ``statistics``) every number becomes ``#``
    and the table's borders and spacing are dropped, so a wider cell compares equal."""
    lines = [line.rstrip() for line in lines]
    if "timings" not in lines:
        return lines
    start = lines.index("timings")
    end = next((i for i, x in enumerate(lines) if x.startswith("statistics")), len(lines))
    words = " ".join(lines[start:end]).translate({ord(c): " " for c in BOX})
    return [*lines[:start], " ".join(NUMBER.sub("#", words).split()), *lines[end:]]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout (the copy is what git tracks)")
    repo = tmp_path_factory.mktemp("clone") / "rltscan"
    repo.mkdir()
    _tracked(ROOT, repo)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "copy")
    return repo, run_main_command(repo)


def test_main_command_writes_in_the_working_directory() -> None:
    command = main_command()
    assert "/tmp" not in command
    assert quick_start()[0] == command  # the quick start shows the same command


def test_quick_start_shows_what_prints(fresh) -> None:
    _, done = fresh
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    shown = quick_start()[1]
    assert normalised(shown) == normalised(done.stderr.splitlines())


def test_statistics_section_is_part_of_that_output(fresh) -> None:
    _, done = fresh
    got = normalised(done.stderr.splitlines())
    block = normalised(statistics_block())
    starts = [i for i in range(len(got)) if got[i : i + len(block)] == block]
    assert starts, "\n".join(block)


def test_main_command_leaves_git_status_clean(fresh) -> None:
    repo, done = fresh
    assert done.returncode == 0, done.stderr
    assert _git(repo, "status", "--porcelain") == ""
    ignored = _git(repo, "status", "--porcelain", "--ignored").splitlines()
    left = {line.removeprefix("!! ") for line in ignored}
    # nothing but Python's own bytecode caches: the copy holding the results is removed
    assert {x for x in left if not x.endswith("__pycache__/")} == set()


def regenerate() -> None:
    """Rewrite the README's quick-start output and statistics block from a fresh run."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "rltscan"
        repo.mkdir()
        _tracked(ROOT, repo)
        done = run_main_command(repo)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    lines = [line.rstrip() for line in done.stderr.splitlines()]
    text = README.read_text()
    command, old = quick_start()
    text = text.replace("\n".join([f"$ {command}", *old]), "\n".join([f"$ {command}", *lines]))
    start = lines.index(next(x for x in lines if x.startswith("statistics")))
    end = max(i for i, x in enumerate(lines) if x.startswith("episode return"))
    text = text.replace("\n".join(statistics_block()), "\n".join(lines[start : end + 1]))
    README.write_text(text)


if __name__ == "__main__":
    regenerate()
