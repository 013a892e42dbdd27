"""No input hangs rltscan (issue 28): a corrupt HDF5 header ends the run with exit 3 and
one line, fast, and the input stays as it was.

libhdf5 loops forever on some corrupt metadata (a global heap whose object sizes make no
progress: a flipped byte at offset 2072 of ``sample_data/cartpole_buffer.h5``), inside C
and holding the GIL, deaf to SIGTERM. The CLI cases run as real processes with a hard
kill, so a regression fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import h5py
import numpy as np
import pytest

from rltscan import api
from rltscan.errors import InputFileError, ParameterError
from rltscan.io import hdf5
from tests.io_helpers import BUFFER, MINARI, ROOT, digest

LIMIT = 5.0  # seconds a corrupt file may take, start-up included (issue 28)
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
ENV.pop(hdf5.STALL_ENV, None)


def flipped(tmp: Path, offset: int, mask: int = 0xFF, src: Path = BUFFER) -> Path:
    data = bytearray(src.read_bytes())
    data[offset] ^= mask
    path = tmp / f"flip {offset} [{mask}].h5"  # a space and brackets: quoting in messages
    path.write_bytes(bytes(data))
    return path


def cli(*args: str, env: dict | None = None) -> tuple[int, str, float]:
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "rltscan", *args],
            capture_output=True,
            text=True,
            env=env or ENV,
            timeout=60,  # SIGKILL: a spinning libhdf5 ignores SIGTERM
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"rltscan {' '.join(args)} ran past 60 s")
    return done.returncode, done.stderr, time.perf_counter() - start


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


@pytest.mark.parametrize("offset", [818, 1589, 2072, 3132, 4001])
def test_the_issue_mutants_end_fast(offset: int, tmp_path: Path) -> None:
    """Each ends within the limit with exit 3 and one line, or exit 0 (a harmless flip)."""
    path = flipped(tmp_path, offset)
    before = digest(path)
    code, err, took = cli("inspect", str(path), "--json")
    assert took < LIMIT, f"{took:.1f} s"
    assert code in (0, 3), err
    if code == 3:
        assert str(path) in one_line(err)
    assert digest(path) == before


def test_a_spinning_global_heap_is_unreadable_structure(tmp_path: Path) -> None:
    """The flip at 2072 made libhdf5 spin forever reading the "layout" attribute."""
    path = flipped(tmp_path, 2072)
    before = digest(path)
    for command in (["inspect", str(path)], ["gae", str(path), "--device", "cpu"]):
        code, err, took = cli(*command)
        line = one_line(err)
        # (gae imports torch first: seconds more on a loaded machine, not a hang)
        assert code == 3 and (took < LIMIT or command[0] == "gae"), (code, took, err)
        assert line.startswith(f"error: {path}: unreadable structure"), line
        assert hdf5.STALL_ENV in line
    assert digest(path) == before
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp left


def test_the_stall_budget_is_configurable(tmp_path: Path) -> None:
    path = flipped(tmp_path, 2072)
    code, err, took = cli("inspect", str(path), env={**ENV, hdf5.STALL_ENV: "0.3"})
    assert took < LIMIT
    assert code == 3 and "no progress in 0.3 s" in one_line(err)
    code, err, _ = cli("inspect", str(path), env={**ENV, hdf5.STALL_ENV: "soon"})
    assert code == 2 and f'{hdf5.STALL_ENV}="soon"' in one_line(err)


def test_the_budget_grows_with_the_file(monkeypatch) -> None:
    monkeypatch.delenv(hdf5.STALL_ENV, raising=False)
    assert hdf5.stall_seconds(0) == 2.0
    assert hdf5.stall_seconds(10**9) == 12.0
    monkeypatch.setenv(hdf5.STALL_ENV, "60")
    assert hdf5.stall_seconds(0) == 60.0
    for bad in ("0", "-1", "nan", "inf", ""):
        monkeypatch.setenv(hdf5.STALL_ENV, bad)
        with pytest.raises(ParameterError):
            hdf5.stall_seconds(0)


def _copy(tmp: Path) -> Path:
    path = tmp / "rollouts.h5"
    path.write_bytes(BUFFER.read_bytes())
    return path


def test_a_walk_that_never_returns_is_killed(tmp_path: Path, monkeypatch) -> None:
    """In-process too (the Python API): the walk runs in a forked child, killed on a stall."""
    monkeypatch.setenv(hdf5.STALL_ENV, "0.3")
    real = h5py.File

    def spinning(path: object, mode: str = "r", **kw: object) -> object:
        if str(path).endswith("rollouts.h5") and mode == "r":
            while True:  # the child spins (a loop in C would hold the GIL too)
                time.sleep(0.01)
        return real(path, mode, **kw)

    monkeypatch.setattr(h5py, "File", spinning)
    path = _copy(tmp_path)
    start = time.perf_counter()
    with pytest.raises(InputFileError, match=r"unreadable structure .*no progress in 0\.3 s"):
        api.inspect(str(path))
    assert time.perf_counter() - start < 3


def test_time_waiting_for_a_core_is_not_a_stall(tmp_path: Path, monkeypatch) -> None:
    """On a loaded machine the child may wait for a core longer than the budget: that
    time does not count (here every second looks queued, so a 1 s pause is no stall),
    while the same pause on an idle machine is one."""
    monkeypatch.setenv(hdf5.STALL_ENV, "0.3")
    real = h5py.File

    def pausing(path: object, mode: str = "r", **kw: object) -> object:
        if str(path).endswith("rollouts.h5") and mode == "r":
            time.sleep(1.0)
        return real(path, mode, **kw)

    monkeypatch.setattr(h5py, "File", pausing)
    path = _copy(tmp_path)
    with pytest.raises(InputFileError, match=r"no progress in 0\.3 s"):
        api.inspect(str(path))
    monkeypatch.setattr(hdf5, "queued_seconds", lambda pid: time.monotonic())
    os.utime(path, ns=(time.time_ns(), time.time_ns() + 10**9))  # a new mtime: walked again
    api.inspect(str(path))


def test_the_queued_time_of_a_process_is_read() -> None:
    assert hdf5.queued_seconds(os.getpid()) >= 0.0
    assert hdf5.queued_seconds(2**22 + 12345) == 0.0  # no such process


def test_a_walk_that_crashes_libhdf5_is_exit_3(tmp_path: Path, monkeypatch) -> None:
    real = h5py.File

    def crashing(path: object, mode: str = "r", **kw: object) -> object:
        if str(path).endswith("rollouts.h5") and mode == "r":
            os.kill(os.getpid(), signal.SIGSEGV)
        return real(path, mode, **kw)

    monkeypatch.setattr(h5py, "File", crashing)
    with pytest.raises(InputFileError, match=r"libhdf5 crashed .*\(signal 11\)") as err:
        api.run("gae", str(_copy(tmp_path)), device="cpu")
    assert err.value.exit_code == 3 and "\n" not in str(err.value)


def test_a_slow_walk_that_progresses_is_not_cut(tmp_path: Path, monkeypatch) -> None:
    """The budget is time without progress: a file with many objects may take longer."""
    monkeypatch.setenv(hdf5.STALL_ENV, "0.5")
    path = tmp_path / "many.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones(8, np.float32)
        for i in range(40):
            f.attrs[f"a{i}"] = i
    real = h5py.AttributeManager.__getitem__

    def slow(self: object, name: str) -> object:
        time.sleep(0.03)  # 40 attributes: 1.2 s in all, 0.03 s between beats
        return real(self, name)

    monkeypatch.setattr(h5py.AttributeManager, "__getitem__", slow)
    api.inspect(str(path))


def test_more_links_than_bytes_is_refused(tmp_path: Path, monkeypatch) -> None:
    """A group can hold no more links than the file has bytes (a corrupt count that the
    walk would follow for ever is cut there). Shown by telling the walk the file is tiny."""
    path = _copy(tmp_path)
    real = os.stat

    def tiny(p: object, *a: object, **kw: object) -> os.stat_result:
        st = real(p, *a, **kw)
        if str(p) == str(path):
            return os.stat_result((*st[:6], 8, *st[7:]))  # st_size = 8
        return st

    monkeypatch.setattr(hdf5.os, "stat", tiny)
    with pytest.raises(InputFileError, match="more links than the file has bytes"):
        hdf5.check_structure(path)


def test_links_that_loop_are_listed_once(tmp_path: Path) -> None:
    path = tmp_path / "loop.h5"
    with h5py.File(path, "w") as f:
        g = f.create_group("data")
        g["rewards"] = np.ones(8, np.float32)
        g["terminals"] = np.zeros(8, bool)
        g["again"] = h5py.SoftLink("/data")  # data/again/again/... for ever
        f["self"] = h5py.ExternalLink(path.name, "/")
    info = api.inspect(str(path), group="/data")
    names = [c["name"] for c in info["columns"]]
    assert sorted(names) == ["rewards", "terminals"]


def test_groups_nested_too_deep_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "deep.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones(8, np.float32)
        f.create_group("/".join(["g"] * (hdf5.MAX_DEPTH + 2)))
    with pytest.raises(InputFileError, match="nest deeper than"):
        api.inspect(str(path))


def test_a_role_name_that_is_not_a_dataset_is_refused(tmp_path: Path) -> None:
    """A flipped object header turned "terminations" into a named datatype: read without
    it, the run gave other numbers and exit 0."""
    path = tmp_path / "typed.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones(8, np.float32)
        f["values"] = np.ones(8, np.float32)
        f["terminations"] = np.dtype("f4")  # a committed datatype under a role's name
    with pytest.raises(InputFileError, match='"terminations" is a named datatype'):
        api.run("gae", str(path), device="cpu")


def test_a_damaged_float_type_is_refused(tmp_path: Path) -> None:
    """A flipped exponent bias in "values"' float type: libhdf5 converted every value to
    another number (h5py even called the 4-byte type float64), and the run said exit 0."""
    path = tmp_path / "typed.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones(64, np.float32)
        f["values"] = np.full(64, 2.0, np.float32)
        f["terminals"] = np.zeros(64, bool)
    data = bytearray(path.read_bytes())
    # a float32 datatype message: class 1 version 1, little-endian IEEE, size 4, offset
    # 0, precision 32, exponent at 23 (8 bits), mantissa at 0 (23 bits), bias 127
    message = b"\x11\x20\x1f\x00\x04\x00\x00\x00\x00\x00\x20\x00\x17\x08\x00\x17\x7f"
    where = [i for i in range(len(data)) if data.startswith(message, i)]
    assert len(where) == 2  # rewards, values
    data[where[1] + 16] = 0x7E  # values: bias 126
    path.write_bytes(bytes(data))
    with h5py.File(path, "r") as f:
        assert not np.array_equal(f["values"][()], np.full(64, 2.0))  # libhdf5 converts
    before = digest(path)
    with pytest.raises(InputFileError, match='dataset "values" has a 4-byte number type'):
        api.run("gae", str(path), device="cpu", missing_bootstrap="zero")
    assert digest(path) == before


def _minari(tmp: Path, offset: int, value: int) -> Path:
    """The Minari sample's HDF5 file, alone, with 8 bytes set to ``value``."""
    main = tmp / "main_data.hdf5"
    data = bytearray((MINARI / "data" / "main_data.hdf5").read_bytes())
    data[offset : offset + 8] = value.to_bytes(8, "little")
    main.write_bytes(bytes(data))
    return main


@pytest.mark.parametrize(
    ("offset", "value", "text"),
    [
        # a local heap's size: names are listed, a new name goes in, and is not found
        (116378, 1171683874567104576, 'output "/episode_17/advantages" does not read back'),
        # a symbol table node: looking a new name up fails
        (98409, 2**31 - 1, "cannot be written through"),
    ],
)
def test_outputs_that_a_damaged_group_index_loses_are_refused(
    offset: int, value: int, text: str, tmp_path: Path
) -> None:
    """Reading the episodes worked; the outputs went in with exit 0 and could not be
    found in the written file (or the write failed with a traceback)."""
    root = _minari(tmp_path, offset, value)
    before = digest(root)
    out = tmp_path / "out.h5"
    with pytest.raises(InputFileError, match=text) as err:
        api.run("gae", str(root), output=str(out), device="cpu")
    assert "\n" not in str(err.value)
    assert digest(root) == before and not out.exists()


def test_an_episode_column_that_is_a_group_is_refused(tmp_path: Path) -> None:
    import shutil

    root = tmp_path / "ds"
    shutil.copytree(MINARI, root)
    with h5py.File(root / "data" / "main_data.hdf5", "a") as f:
        del f["episode_3/rewards"]
        f.create_group("episode_3/rewards")
    with pytest.raises(InputFileError, match='"episode_3/rewards" is not a dataset'):
        api.run("gae", str(root), device="cpu")


def test_datasets_whose_storage_overlaps_are_refused(tmp_path: Path) -> None:
    """A flipped address in a layout message points "values" into "rewards"' bytes:
    libhdf5 reads them as values, with exit 0."""
    import struct

    path = tmp_path / "moved.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones(64, np.float32)
        f["values"] = np.full(64, 2.0, np.float32)
        f["terminals"] = np.zeros(64, bool)
        first, second = f["rewards"].id.get_offset(), f["values"].id.get_offset()
    data = bytearray(path.read_bytes())
    layout = b"\x03\x01" + struct.pack("<QQ", second, 256)  # version 3, contiguous
    at = data.index(layout)
    data[at + 2 : at + 10] = struct.pack("<Q", first + 4)
    path.write_bytes(bytes(data))
    with h5py.File(path, "r") as f:  # libhdf5 reads it without a word
        assert f["values"][0] != 2.0
    with pytest.raises(InputFileError, match="two datasets' storage shares bytes"):
        api.run("gae", str(path), device="cpu", missing_bootstrap="zero")


def test_the_structure_walk_fork_warns_nothing_where_jax_is_imported(tmp_path: Path) -> None:
    """A training process that imported JAX (its at-fork hook warns "os.fork() ... will
    likely lead to a deadlock") and calls rltscan.run on an HDF5 file: the walk's child
    only reads the file and leaves by os._exit, so no such warning (it became a
    report note) — run in a subprocess, keeping JAX out of the test workers."""
    import importlib.util

    if importlib.util.find_spec("jax") is None:
        pytest.skip("jax is not installed")
    script = f"""
import warnings, numpy as np, h5py, jax.numpy as jnp, rltscan
jnp.zeros(3).block_until_ready()  # JAX's threads are up
with h5py.File({str(tmp_path / "b.h5")!r}, "w") as f:
    f["rewards"] = np.ones(10, np.float32)
    f["terminals"] = np.eye(10, dtype=bool)[9]
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    report = rltscan.run("returns", {str(tmp_path / "b.h5")!r}, params={{"gamma": 0.9}},
                         device="cpu")
print([str(w.message) for w in seen], report.notes)
"""
    done = subprocess.run([sys.executable, "-c", script], env=ENV, capture_output=True,
                          text=True, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "os.fork()" not in done.stdout, done.stdout
