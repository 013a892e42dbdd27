"""The progress bar, seen as a user sees it: stderr is a pseudo-terminal.

A run shows one bar (rich, stderr) once it has lasted ``RLTSCAN_PROGRESS_DELAY`` seconds
(default 1): the stage and the steps done, on streamed, sharded and whole-file runs. It
never shows when stderr is not a terminal, nor under ``-q``/``--json``; ``NO_COLOR``
takes only the colour away. The subprocess tests set the (documented) delay to 0 so a
small file shows the bar every time; the 1 s default is checked in-process on a bar
whose run lasts 2 s and one that ends at once.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rltscan import report
from rltscan.errors import ParameterError
from tests.io_helpers import FLAT, ROOT, copy_sample
from tests.shard_helpers import table, write_shards

BASE = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "120", "TERM": "xterm-256color"}
BASE.pop("NO_COLOR", None)
AT_ONCE = {"RLTSCAN_PROGRESS_DELAY": "0"}
HIDE_CURSOR = b"\x1b[?25l"  # rich's live display starts by hiding the cursor
# SGR colour parameters: 30-39/40-49 (with 38/48 extended), 90-97, 100-107
COLOUR = re.compile(rb"\x1b\[(?:[0-9;]*;)?(?:3[0-9]|4[0-9]|9[0-7]|10[0-7])(?:;[0-9;]*)?m")


def run_on_a_terminal(*args: str | Path, **env: str) -> tuple[int, bytes, bytes]:
    """``(exit code, stdout, what the terminal on stderr received)`` of ``rltscan ARGS``."""
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rltscan", *map(str, args)],
        env={**BASE, **env},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=slave,
    )
    os.close(slave)
    received: list[bytes] = []

    def drain() -> None:  # the pty's buffer is small: read while the run writes
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed its end
                return
            if not chunk:
                return
            received.append(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        out, _ = proc.communicate(timeout=300)
    finally:
        reader.join(timeout=30)
        os.close(master)
    return proc.returncode, out, b"".join(received)


STAGES = {  # what the bar may name (as the engines time them)
    "starting", "detect", "plan", "open", "read", "scan", "write", "stream", "commit",
    "carries", "cleanup", "pass 1 (aggregates)", "pass 2 (statistics for --normalize)",
    "pass 2 (outputs)",
}  # fmt: skip


def shown_stages(terminal: bytes) -> set[str]:
    """Every stage the bar named: the words before "…" at the start of a drawn line,
    after the spinner (blank once the count is complete), escape sequences taken out."""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", terminal.decode("utf-8", "replace"))
    found = (
        re.match(r"\s*(?:[⠀-⣿]\s+)?([A-Za-z][\w ()-]*)…", line)
        for line in re.split(r"[\r\n]", text)
    )
    return {m.group(1) for m in found if m}


def shown_steps(terminal: bytes) -> list[str]:
    """Every ``done/total steps`` the bar showed, in order."""
    return re.findall(r"([\d,]+/[\d,]+) steps", terminal.decode("utf-8", "replace"))


def test_streamed_run_shows_a_bar_counting_steps(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    code, out, terminal = run_on_a_terminal("gae", path, "--device", "cpu", **AT_ONCE)
    assert code == 0, terminal.decode()
    assert out == b""
    assert HIDE_CURSOR in terminal
    assert shown_steps(terminal)[-1] == "1,024/1,024"
    assert shown_stages(terminal) <= STAGES and "commit" in shown_stages(terminal)
    # the bar is erased, then the report prints
    assert terminal.rindex(HIDE_CURSOR) < terminal.index(b"gae on ")
    assert b"wrote advantages, value_targets to" in terminal


def test_whole_file_run_shows_a_bar(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    out_path = tmp_path / "out.parquet"  # a conversion: one read, one scan, one write
    code, _, terminal = run_on_a_terminal(
        "returns", path, "--device", "cpu", "-o", out_path, **AT_ONCE
    )
    assert code == 0, terminal.decode()
    assert HIDE_CURSOR in terminal
    assert shown_steps(terminal)[-1] == "1,024/1,024"
    assert shown_stages(terminal) <= STAGES and "write" in shown_stages(terminal)


def test_sharded_run_shows_a_bar_per_pass(tmp_path: Path) -> None:
    shards = tmp_path / "shards"
    write_shards(shards, table(322, 0.05))
    code, _, terminal = run_on_a_terminal("returns", shards, "--device", "cpu", **AT_ONCE)
    assert code == 0, terminal.decode()
    assert shown_stages(terminal) <= STAGES and "cleanup" in shown_stages(terminal)
    assert shown_steps(terminal)[-1] == "322/322"


def test_no_colour_keeps_the_bar(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    code, _, coloured = run_on_a_terminal("gae", path, "--device", "cpu", **AT_ONCE)
    assert code == 0 and COLOUR.search(coloured)  # (the check below can fail)
    code, _, terminal = run_on_a_terminal(
        "gae", path, "--device", "cpu", "--overwrite", NO_COLOR="1", **AT_ONCE
    )
    assert code == 0, terminal.decode()
    assert HIDE_CURSOR in terminal and shown_steps(terminal)[-1] == "1,024/1,024"
    assert not COLOUR.search(terminal)


@pytest.mark.parametrize("mode", ["-q", "--json"])
def test_machine_modes_show_no_bar(mode: str, tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    code, out, terminal = run_on_a_terminal("gae", path, "--device", "cpu", mode, **AT_ONCE)
    assert code == 0, terminal.decode()
    assert terminal == b""
    assert (out == b"") if mode == "-q" else json.loads(out)["command"] == "gae"


def test_no_bar_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "rltscan", "gae", path, "--device", "cpu"],
        env={**BASE, **AT_ONCE},
        capture_output=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert HIDE_CURSOR not in done.stderr and not shown_steps(done.stderr)
    assert b"wrote advantages, value_targets to" in done.stderr


def test_a_bad_delay_is_one_line(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    code, _, terminal = run_on_a_terminal(
        "gae", path, "--device", "cpu", RLTSCAN_PROGRESS_DELAY="soon"
    )
    assert code == 2
    assert terminal.decode().splitlines() == [
        'error: RLTSCAN_PROGRESS_DELAY must be a number of seconds >= 0 (or inf), got "soon"; '
        "unset it or set e.g. RLTSCAN_PROGRESS_DELAY=1"
    ]


# --------------------------------------------------------------------------- the default delay


def _terminal_console() -> tuple[object, io.StringIO]:
    from rich.console import Console

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    sink = Tty()
    return Console(file=sink, force_terminal=True, force_interactive=True, width=100), sink


@pytest.mark.parametrize(("lasts", "shown"), [(0.0, False), (2.0, True)])
def test_the_bar_waits_for_the_default_second(lasts: float, shown: bool) -> None:
    console, sink = _terminal_console()
    with report.progress_bar(console, environ={}) as bar:
        assert bar is not None and bar.delay == report.DEFAULT_DELAY == 1.0
        bar("scan", True)
        bar.advance(5, 10)
        time.sleep(lasts)
    assert ("5/10 steps" in sink.getvalue()) is shown


def test_delay_from_the_environment() -> None:
    assert report.delay_from({}) == 1.0
    assert report.delay_from({"RLTSCAN_PROGRESS_DELAY": "0"}) == 0.0
    assert report.delay_from({"RLTSCAN_PROGRESS_DELAY": "inf"}) == float("inf")
    for bad in ("-1", "nan", "soon"):
        with pytest.raises(ParameterError):
            report.delay_from({"RLTSCAN_PROGRESS_DELAY": bad})
