"""Write-back semantics of a careful Unix tool (issue 10 items 6, 7 and 11; README
"Write-back rules").

In-process tests call :func:`rltscan.api.run`; the ones that need a real process
(signals, pipes, concurrency, a full disk, a kill) run ``python -m rltscan`` on
copies of ``sample_data/`` files in tmp dirs, as a user would.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rltscan import api, interrupts
from rltscan.errors import InputFileError, OutputRefusedError, ParameterError
from rltscan.io import atomic
from rltscan.io import shards as io_shards
from tests.io_helpers import (
    FLAT,
    KILL_AFTER_RENAMES,
    PARQUET,
    ROOT,
    big_flat_h5,
    big_flat_parquet,
    fingerprint,
    h5_columns,
    parquet_columns,
    small_tmpfs,
)

ENV = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1"}
PQ = {"ends_are": "terminal"}  # the sample's episode ends are terminal


def gae(path: Path | str, **kw: object):
    if str(path).endswith(".parquet"):
        kw = {**PQ, **kw}
    return api.run("gae", str(path), device="cpu", **kw)


def cli(*args: str, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "rltscan", *args, "--device", "cpu", "-q"],
        capture_output=True,
        env=ENV,
        timeout=300,
        **kw,
    )


def one_line(err: bytes | str) -> str:
    text = err.decode() if isinstance(err, bytes) else err
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


def names(path: Path) -> set[str]:
    if path.suffix == ".parquet":
        return set(pq.read_schema(path).names)
    with h5py.File(path, "r") as f:
        return set(f)


@pytest.fixture()
def flat(tmp_path: Path) -> Path:
    dst = tmp_path / "f.h5"
    shutil.copy(FLAT, dst)
    return dst


@pytest.fixture()
def table(tmp_path: Path) -> Path:
    dst = tmp_path / "t.parquet"
    shutil.copy(PARQUET, dst)
    return dst


# --------------------------------------------------------------------------- 1 symlinks


@pytest.mark.parametrize("fixture", ["flat", "table"])
def test_in_place_through_a_symlink_updates_the_target_and_keeps_the_link(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    target = request.getfixturevalue(fixture)
    link = tmp_path / f"link{target.suffix}"
    link.symlink_to(target.name)
    gae(link)
    assert link.is_symlink() and os.readlink(link) == target.name
    assert "advantages" in names(target)


def test_output_to_a_symlink_with_overwrite_writes_through(flat: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.h5"
    shutil.copy(FLAT, other)
    link = tmp_path / "out.h5"
    link.symlink_to(other)
    gae(flat, output=str(link), overwrite=True)
    assert link.is_symlink() and Path(os.readlink(link)) == other
    assert "advantages" in names(other)
    assert "advantages" not in names(flat)


# --------------------------------------------------------------------------- 2 special files


def test_dev_null_is_refused_and_never_replaced(flat: Path) -> None:
    before = os.stat("/dev/null")
    with pytest.raises(OutputRefusedError, match="character device"):
        gae(flat, output="/dev/null", overwrite=True)
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev


def test_fifo_and_socket_outputs_are_refused(flat: Path, tmp_path: Path) -> None:
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputRefusedError, match="FIFO"):
        gae(flat, output=str(fifo), overwrite=True)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    sock_path = tmp_path / "s.sock"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(sock_path))
        with pytest.raises(OutputRefusedError, match="socket"):
            gae(flat, output=str(sock_path), overwrite=True)
    assert stat.S_ISSOCK(os.stat(sock_path).st_mode)


def test_a_fifo_input_is_never_written_back_in_place(tmp_path: Path) -> None:
    fifo = tmp_path / "in.h5"
    os.mkfifo(fifo)
    with pytest.raises(OutputRefusedError, match="FIFO"):
        gae(fifo)  # refused before it is opened (which would block)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_dev_null_on_the_command_line_is_one_line_exit_5(flat: Path) -> None:
    run = cli("gae", str(flat), "-o", "/dev/null", "--overwrite")
    assert run.returncode == 5
    assert "character device" in one_line(run.stderr)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


# --------------------------------------------------------------------------- 3 hard links


def test_hard_linked_input_is_refused_unless_break_links(flat: Path, tmp_path: Path) -> None:
    twin = tmp_path / "twin.h5"
    os.link(flat, twin)
    with pytest.raises(OutputRefusedError, match="--break-links"):
        gae(flat)
    assert os.stat(flat).st_nlink == 2 and "advantages" not in names(twin)
    gae(flat, break_links=True)
    assert "advantages" in names(flat)
    assert "advantages" not in names(twin)  # the other name keeps the old file


# --------------------------------------------------------------------------- 4 permissions


def test_read_only_input_is_refused_before_any_work(flat: Path, monkeypatch) -> None:
    flat.chmod(0o444)
    before = fingerprint(h5_columns(flat))
    monkeypatch.setattr(api, "open_input", _must_not_run)
    with pytest.raises(OutputRefusedError, match="read-only"):
        gae(flat)
    assert fingerprint(h5_columns(flat)) == before


def _must_not_run(*a: object, **k: object) -> None:
    raise AssertionError("the input was opened before the write-back checks")


def test_read_only_input_on_the_command_line_is_one_line_exit_5(flat: Path) -> None:
    flat.chmod(0o444)
    run = cli("gae", str(flat))
    assert run.returncode == 5, run.stderr
    assert "read-only" in one_line(run.stderr)


def test_unwritable_directory_is_exit_5_and_unreadable_input_exit_3(
    flat: Path, monkeypatch
) -> None:
    real_access = os.access
    monkeypatch.setattr(api, "open_input", _must_not_run)

    def no_write(path, mode, **kw):  # root passes access(); act as a user would see it
        if Path(path) == flat.parent and mode & os.W_OK:
            return False
        return real_access(path, mode, **kw)

    monkeypatch.setattr(os, "access", no_write)
    with pytest.raises(OutputRefusedError, match="permission denied"):
        gae(flat)

    def no_read(path, mode, **kw):
        return False if Path(path) == flat and mode & os.R_OK else real_access(path, mode, **kw)

    monkeypatch.setattr(os, "access", no_read)
    with pytest.raises(InputFileError, match="cannot read"):
        gae(flat)


def test_immutable_directory_is_one_line_exit_5(flat: Path) -> None:
    """A directory even root cannot write to (chattr +i), where chattr works."""
    if shutil.which("chattr") is None:
        pytest.skip("no chattr")
    made = subprocess.run(["chattr", "+i", str(flat.parent)], capture_output=True)
    if made.returncode != 0:
        pytest.skip("chattr +i is not permitted here")
    try:
        run = cli("gae", str(flat), "--overwrite")
    finally:
        subprocess.run(["chattr", "-i", str(flat.parent)], check=True)
    assert run.returncode == 5, run.stderr
    assert "Traceback" not in run.stderr.decode()
    one_line(run.stderr)


# --------------------------------------------------------------------------- 5 concurrent writers


@pytest.mark.parametrize("suffix", [".h5", ".parquet"])
def test_two_concurrent_write_backs_keep_both_updates(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"data{suffix}"
    if suffix == ".h5":
        big_flat_h5(path, 400_000)
    else:
        big_flat_parquet(path, 400_000, 4)
    cmds = [
        [sys.executable, "-m", "rltscan", est, str(path), "--device", "cpu", "-q"]
        for est in ("gae", "returns")
    ]
    procs = [subprocess.Popen(c, stderr=subprocess.PIPE, env=ENV) for c in cmds]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    assert {"advantages", "value_targets", "returns"} <= names(path)


def _wait_for_a_lock_waiter(path: Path, proc: subprocess.Popen, timeout: float) -> None:
    """Until a blocked request for ``path``'s write-back lock shows in /proc/locks (a
    "->" line on the file's inode), ``proc`` ends, or ``timeout`` passes."""
    locks = Path("/proc/locks")
    ino = f":{os.stat(path).st_ino}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if locks.exists() and any(
            "->" in line and line.split()[-3].endswith(ino)
            for line in locks.read_text().splitlines()
        ):
            return
        time.sleep(0.05)


def test_a_second_writer_waits_for_the_lock(flat: Path) -> None:
    held = atomic.lock(flat)
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rltscan", "returns", str(flat), "--device", "cpu", "-q"],
            stderr=subprocess.PIPE,
            env=ENV,
        )
        # until the kernel's lock table shows the second writer blocked on this very
        # lock (a second or two), else at most the 20 s this test always waited
        _wait_for_a_lock_waiter(flat, proc, timeout=20)
        assert proc.poll() is None, proc.stderr.read()  # still waiting for the lock
        assert "returns" not in names(flat)
    finally:
        held.release()
    assert proc.wait(timeout=120) == 0, proc.stderr.read()
    assert "returns" in names(flat)


# --------------------------------------------------------------------------- 6 identity


@pytest.mark.parametrize("fixture", ["flat", "table"])
def test_an_input_replaced_while_running_aborts_and_keeps_the_new_file(
    fixture: str, request: pytest.FixtureRequest, tmp_path: Path, monkeypatch
) -> None:
    path = request.getfixturevalue(fixture)
    new = tmp_path / f"new{path.suffix}"
    shutil.copy(path, new)
    with open(new, "ab") as f:
        f.write(b"\0" * 16)  # another size: the producer's new file
    published = fingerprint({"bytes": np.frombuffer(new.read_bytes(), np.uint8)})
    real_keep = atomic.keep_owner

    def publish_then_keep(dst: Path, tmp: Path) -> None:  # just before the final rename
        os.replace(new, path)
        real_keep(dst, tmp)

    monkeypatch.setattr(atomic, "keep_owner", publish_then_keep)
    with pytest.raises(InputFileError, match="changed while rltscan ran"):
        gae(path)
    assert fingerprint({"bytes": np.frombuffer(path.read_bytes(), np.uint8)}) == published
    assert not [p for p in tmp_path.iterdir() if ".rltscan-" in p.name]


def test_the_copy_is_made_from_the_file_that_was_read(flat: Path, tmp_path: Path) -> None:
    atomic.expect(flat, atomic.identity(os.stat(flat)))
    try:
        other = tmp_path / "other.h5"
        shutil.copy(FLAT, other)
        with h5py.File(other, "a") as f:
            f["extra"] = np.zeros(3)
        os.replace(other, flat)
        with pytest.raises(InputFileError, match="changed while rltscan ran"):
            atomic.copy_verified(flat, tmp_path / "copy.h5")
    finally:
        atomic.forget(flat)


# --------------------------------------------------------------------------- 7 owner, xattrs


def test_owner_group_mode_and_xattrs_are_kept(flat: Path) -> None:
    flat.chmod(0o640)
    if os.geteuid() == 0:
        os.chown(flat, 1234, 5678)
    try:
        os.setxattr(flat, "user.origin", b"robot-7")
        has_xattr = True
    except OSError:
        has_xattr = False
    gae(flat)
    st = os.stat(flat)
    assert "advantages" in names(flat)
    assert stat.S_IMODE(st.st_mode) == 0o640
    if os.geteuid() == 0:
        assert (st.st_uid, st.st_gid) == (1234, 5678)
    if has_xattr:
        assert os.getxattr(flat, "user.origin") == b"robot-7"


# --------------------------------------------------------------------------- 8 broken pipe


def test_broken_pipe_on_stdout_is_exit_5(tmp_path: Path) -> None:
    path = tmp_path / "big.parquet"
    big_flat_parquet(path, 300_000, 4)  # megabytes: more than a pipe buffer
    producer = subprocess.Popen(
        [sys.executable, "-m", "rltscan", "gae", str(path), "-o", "-", "--device", "cpu", "-q"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    head = subprocess.run(["head", "-c", "100"], stdin=producer.stdout, capture_output=True)
    producer.stdout.close()
    err = producer.stderr.read()
    producer.wait(timeout=300)
    assert len(head.stdout) == 100
    assert producer.returncode == 5, err
    assert "broken pipe" in one_line(err)


# --------------------------------------------------------------------------- 9 full disk


def test_full_disk_during_hdf5_write_back_is_exit_5_never_a_crash(tmp_path: Path) -> None:
    src = tmp_path / "src.h5"
    big_flat_h5(src, 200_000)
    size = src.stat().st_size
    # room for the input and its temp copy, not for the outputs (2 x 800 kB)
    with small_tmpfs(tmp_path, 2 * size + 400_000) as mnt:
        path = mnt / "data.h5"
        shutil.copy(src, path)
        before = fingerprint(h5_columns(path))
        for extra in ([], ["--chunk-steps", "50000"]):
            run = cli("gae", str(path), *extra)
            assert run.returncode == 5, run.stderr
            assert "no space left" in one_line(run.stderr)
            assert fingerprint(h5_columns(path)) == before
            assert sorted(p.name for p in mnt.iterdir()) == ["data.h5"]


def test_full_disk_in_process_is_one_error_and_no_temp(flat: Path, monkeypatch) -> None:
    real_create = h5py.Group.create_dataset

    def full(self, name, *a, **k):
        if name == "advantages":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_create(self, name, *a, **k)

    monkeypatch.setattr(h5py.Group, "create_dataset", full)
    with pytest.raises(OutputRefusedError, match="no space left"):
        gae(flat)
    assert [p.name for p in flat.parent.iterdir()] == ["f.h5"]


# --------------------------------------------------------------------------- 10 names


def test_overwrite_replaces_only_what_rltscan_wrote_hdf5(flat: Path) -> None:
    with h5py.File(flat, "a") as f:
        f["advantages"] = np.arange(1024, dtype=np.float32)  # a user's own dataset
    with pytest.raises(OutputRefusedError, match="did not write"):
        gae(flat, overwrite=True)
    with h5py.File(flat, "r") as f:
        assert np.array_equal(f["advantages"][()], np.arange(1024, dtype=np.float32))
    gae(flat, prefix="r_")
    gae(flat, prefix="r_", overwrite=True)  # rltscan's own outputs: replaced


def test_overwrite_replaces_only_what_rltscan_wrote_parquet(table: Path) -> None:
    t = pq.read_table(table)
    pq.write_table(t.append_column("advantages", pa.array(np.zeros(t.num_rows))), table)
    with pytest.raises(OutputRefusedError, match="not written by rltscan"):
        gae(table, overwrite=True)
    gae(table, prefix="r_")
    gae(table, prefix="r_", overwrite=True)
    assert "r_advantages" in names(table)


def test_an_output_name_that_is_a_group_is_exit_2(flat: Path) -> None:
    with h5py.File(flat, "a") as f:
        f.create_group("advantages")["keep"] = np.ones(3)
    for overwrite in (False, True):
        with pytest.raises(ParameterError, match="is a group"):
            gae(flat, overwrite=overwrite)
    with h5py.File(flat, "r") as f:
        assert np.array_equal(f["advantages/keep"][()], np.ones(3))


@pytest.mark.parametrize("prefix", ["/", "a/", "../x"])
def test_a_slash_in_an_output_name_is_exit_2(flat: Path, prefix: str) -> None:
    with pytest.raises(ParameterError, match='contains "/"'):
        gae(flat, prefix=prefix)


# --------------------------------------------------------------------------- 11 sharded commit


def _shards(root: Path, count: int = 4) -> None:
    root.mkdir()
    t = pq.read_table(PARQUET)
    step = t.num_rows // count
    for i in range(count):
        pq.write_table(t.slice(i * step, step), root / f"part-{i}.parquet")


def test_a_kill_during_the_sharded_commit_is_completed_by_the_next_start(
    tmp_path: Path,
) -> None:
    root = tmp_path / "shards"
    _shards(root)
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            KILL_AFTER_RENAMES,
            "gae",
            str(root),
            "--ends-are",
            "terminal",
            "--device",
            "cpu",
            "-q",
        ],
        capture_output=True,
        env={**ENV, "KILL_AFTER": "2"},
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    have = [("advantages" in names(p)) for p in sorted(root.glob("*.parquet"))]
    assert have.count(True) == 2  # killed half way through the renames
    # any rltscan start on the dataset completes the commit first
    run = cli("returns", str(root), "--ends-are", "terminal")
    assert run.returncode == 0, run.stderr
    for p in sorted(root.glob("*.parquet")):
        assert {"advantages", "returns"} <= names(p)
    assert not list(root.glob(".rltscan-*"))


def test_a_staging_directory_without_journal_is_rolled_back(tmp_path: Path) -> None:
    root = tmp_path / "shards"
    _shards(root, 2)
    before = {p.name: fingerprint(parquet_columns(p)) for p in root.glob("*.parquet")}
    stage = root / ".rltscan-stage-dead"
    stage.mkdir()
    pq.write_table(pq.read_table(root / "part-0.parquet").slice(0, 3), stage / "part-0.parquet")
    assert io_shards.recover(root) == []
    assert not stage.exists()
    assert {p.name: fingerprint(parquet_columns(p)) for p in root.glob("*.parquet")} == before


def test_recover_rolls_a_journal_forward(tmp_path: Path) -> None:
    root = tmp_path / "shards"
    _shards(root, 2)
    stage = root / ".rltscan-stage-half"
    stage.mkdir()
    new = pq.read_table(root / "part-1.parquet").append_column(
        "advantages", pa.array(np.ones(pq.read_metadata(root / "part-1.parquet").num_rows))
    )
    pq.write_table(new, stage / "part-1.parquet")
    (stage / "JOURNAL").write_text(
        json.dumps(
            {
                "version": 1,
                "moves": [
                    ["part-0.parquet", "part-0.parquet"],
                    ["part-1.parquet", "part-1.parquet"],
                ],
            }
        )
    )  # part-0 was moved before the kill
    assert io_shards.recover(root) == ["part-1.parquet"]
    assert "advantages" in names(root / "part-1.parquet") and not stage.exists()


# --------------------------------------------------------------------------- 12 VDS, external links


def test_output_elsewhere_resolves_virtual_datasets_and_external_links(tmp_path: Path) -> None:
    src_dir, out_dir = tmp_path / "src", tmp_path / "out"
    src_dir.mkdir()
    out_dir.mkdir()
    cols = h5_columns(FLAT)
    with h5py.File(src_dir / "raw.h5", "w") as raw:
        raw["rewards"] = cols["rewards"]
        raw["values"] = cols["values"]
    with h5py.File(src_dir / "data.h5", "w") as f:
        layout = h5py.VirtualLayout(shape=cols["rewards"].shape, dtype=cols["rewards"].dtype)
        layout[:] = h5py.VirtualSource("raw.h5", "rewards", shape=cols["rewards"].shape)
        f.create_virtual_dataset("rewards", layout, fillvalue=-7.0)
        f["values"] = h5py.ExternalLink("raw.h5", "values")
        for key in ("terminals", "timeouts", "next_values"):
            f[key] = cols[key]
    cwd = os.getcwd()
    os.chdir(src_dir)  # HDF5 resolves the relative names from here, as a user's shell would
    try:
        api.run("gae", "data.h5", output=str(out_dir / "out.h5"), device="cpu")
    finally:
        os.chdir(cwd)
    os.chdir(tmp_path)  # and the copy reads the real data from anywhere
    try:
        with h5py.File(out_dir / "out.h5", "r") as out:
            assert not out["rewards"].is_virtual
            assert np.array_equal(out["rewards"][()], cols["rewards"])
            assert np.array_equal(out["values"][()], cols["values"])
            assert "advantages" in out
    finally:
        os.chdir(cwd)


# --------------------------------------------------------------------------- 13 Ctrl-C


def test_a_swallowed_ctrl_c_still_stops_the_commit(flat: Path, monkeypatch) -> None:
    before = fingerprint(h5_columns(flat))
    monkeypatch.setitem(interrupts._state, "seen", True)
    with pytest.raises(KeyboardInterrupt):
        gae(flat)
    assert fingerprint(h5_columns(flat)) == before
    assert [p.name for p in flat.parent.iterdir()] == ["f.h5"]


@pytest.mark.parametrize("delay", [0.4, 1.0, 2.0])  # after the interpreter's own start
def test_ctrl_c_in_the_first_second_is_honoured(table: Path, delay: float) -> None:
    """SIGINT at any moment of start-up ends the run with 130 and one line. The input
    arrives on stdin and is held half-sent, so that the run is still going when the
    signal comes, however fast this machine starts (a file input may be done by 2 s)."""
    data = table.read_bytes()
    args = ["gae", "-", "--ends-are", "terminal", "--device", "cpu", "-q", "-o", "-"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "rltscan", *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=ENV,
    )
    assert proc.stdin is not None
    proc.stdin.write(data[: len(data) // 2])
    proc.stdin.flush()
    time.sleep(delay)
    assert proc.poll() is None, "the run ended before the signal (it cannot have read it all)"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)  # (closes stdin: the rest never comes)
    assert proc.returncode == 130, err
    assert "interrupted" in one_line(err)
    assert out == b"", "an interrupted run wrote a partial table to stdout"


# --------------------------------------------------------------------------- batched durability


def test_staged_shards_are_synced_once_in_one_batch_before_the_journal(
    tmp_path: Path, monkeypatch
) -> None:
    """Shard tasks stage their files without fsync; the commit syncs every staged shard
    exactly once, before the journal that decides it (docs/SHARDS.md "Durability"), and
    the outputs are the bytes an -o OUT_DIR run (its own batch) writes."""
    root = tmp_path / "shards"
    _shards(root)
    events: list[tuple[str, str]] = []
    real_fsync, real_journal = os.fsync, io_shards.write_journal

    def fsync(fd: int) -> None:
        events.append(("fsync", os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    def write_journal(stage: Path, moves: list) -> None:
        events.append(("journal", str(stage)))
        real_journal(stage, moves)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(io_shards, "write_journal", write_journal)
    kw = {"device": "cpu", "ends_are": "terminal"}
    api.run("gae", str(root), **kw)
    journal = next(k for k, (what, _) in enumerate(events) if what == "journal")
    stage = events[journal][1]
    staged = [p for what, p in events if what == "fsync" and Path(p).suffix == ".parquet"]
    assert sorted(staged) == sorted(f"{stage}/part-{i}.parquet" for i in range(4))
    assert all(what == "fsync" for what, _ in events[:journal])
    assert {p for _, p in events[:journal]} >= set(staged)  # all of them before the journal
    out = tmp_path / "out"
    api.run("gae", str(root), output=str(out), overwrite=True, **kw)
    for p in sorted(root.glob("*.parquet")):
        got, want = parquet_columns(out / p.name), parquet_columns(p)
        assert fingerprint(got) == fingerprint(want)


KILL_IN_THE_BATCHED_SYNC = """
import os, signal, sys
import rltscan.io.shards as s
def fsync_all(paths, **kw):
    os.fsync(os.open(paths[0], os.O_RDONLY))  # one staged file synced, then the kill
    os.kill(os.getpid(), signal.SIGKILL)
s.fsync_all = fsync_all
from rltscan.cli import main
sys.argv = ["rltscan", *sys.argv[1:]]
main()
"""


def test_a_kill_during_the_batched_sync_leaves_the_dataset_as_it_was(tmp_path: Path) -> None:
    root = tmp_path / "shards"
    _shards(root)
    before = {p.name: fingerprint(parquet_columns(p)) for p in root.glob("*.parquet")}
    args = ["gae", str(root), "--ends-are", "terminal", "--device", "cpu", "-q"]
    killed = subprocess.run(
        [sys.executable, "-c", KILL_IN_THE_BATCHED_SYNC, *args],
        capture_output=True,
        env=ENV,
        timeout=300,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert {p.name: fingerprint(parquet_columns(p)) for p in root.glob("*.parquet")} == before
    assert list(root.glob(".rltscan-stage-*"))  # the staged files, never decided
    assert io_shards.recover(root) == []  # no journal: rolled back
    assert not list(root.glob(".rltscan-*"))
    assert {p.name: fingerprint(parquet_columns(p)) for p in root.glob("*.parquet")} == before


def test_staged_shards_start_their_writeback_and_stay_whole(tmp_path: Path, monkeypatch) -> None:
    """Each staged shard asks the kernel to start writing it out as soon as it is
    written (so the batched fsync of the commit finds it mostly on disk); the kick
    changes no byte, and a kick that cannot open its file does nothing."""
    from rltscan.io import sinks

    kicked: list[Path] = []
    real = atomic.start_writeback
    monkeypatch.setattr(sinks, "start_writeback", lambda p: (kicked.append(p), real(p)))
    root = tmp_path / "shards"
    _shards(root)
    out = tmp_path / "out"
    api.run("gae", str(root), output=str(out), ends_are="terminal", device="cpu")
    written = sorted(out.glob("*.parquet"))
    assert len(kicked) == len(written) == 4  # one kick per staged shard
    stage = f"{atomic.TMP_MARK}stage-"
    assert all(stage in str(p) for p in kicked)  # on the staged file, before the commit
    for p in written:
        assert "advantages" in pq.read_schema(p).names
    assert not [t for t in threading.enumerate() if t.name.startswith("rltscan-writeback")]
    real(tmp_path / "missing.parquet")  # nothing to open: no error
    atomic.wait_writebacks()  # and no thread left


UNRAISABLE = """
import gc, sys
from rltscan import interrupts
seen = []
sys.unraisablehook = lambda u: seen.append(type(u.exc_value).__name__)
interrupts.install_running()
interrupts.install_running()  # wraps a hook once
class Raises:
    def __init__(self, exc):
        self.exc = exc
    def __del__(self):
        raise self.exc
Raises(KeyboardInterrupt()); gc.collect()  # no signal seen: passed on
interrupts._state["seen"] = True
Raises(KeyboardInterrupt()); gc.collect()  # the signal's own interrupt: dropped
Raises(ValueError("x")); gc.collect()
print(",".join(seen))
"""


def test_a_ctrl_c_raised_where_python_cannot_raise_prints_nothing_more() -> None:
    """SIGINT can land in a weakref or import-lock callback (seen in CI: 'Exception
    ignored in _get_module_lock' above the one-line message). The interrupt is
    remembered, so that noise is dropped; other unraisable errors still print."""
    done = subprocess.run(
        [sys.executable, "-c", UNRAISABLE], capture_output=True, text=True, env=ENV, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "KeyboardInterrupt,ValueError"
