"""Two ``rltscan.run`` calls in two threads, on different files, at the same time.

The write path keeps no state in module globals (issue 22): the inputs' identities,
the ``--break-links`` choice and what was committed belong to each run's
:class:`~rltscan.io.atomic.WriteRun`. Both threaded runs succeed and write the bytes
their sequential runs write; what one run registers, the other never sees.
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import rltscan
from rltscan.io import atomic


def _inputs(directory: Path, tag: str) -> list[Path]:
    rng = np.random.default_rng(5)
    n = 4000
    term = rng.random(n) < 0.02
    term[-1] = True
    cols = {
        "rewards": rng.standard_normal(n).astype(np.float32),
        "values": rng.standard_normal(n).astype(np.float32),
        "terminals": term,
    }
    directory.mkdir(parents=True, exist_ok=True)
    h5, pqt = directory / f"{tag}.h5", directory / f"{tag}.parquet"
    with h5py.File(h5, "w") as f:
        for k, v in cols.items():
            f[k] = v
    pq.write_table(pa.table(cols), pqt)
    return [h5, pqt]


def _run(path: Path) -> None:
    # small windows: the reader, writer and (HDF5) copy threads all take part
    rltscan.run("gae", str(path), device="cpu", chunk_steps=512, block_steps=512)


def test_two_runs_in_threads_write_what_sequential_runs_write(tmp_path):
    sequential = _inputs(tmp_path / "seq", "a")
    for path in sequential:
        _run(path)
    threaded = _inputs(tmp_path / "thr", "a")
    errors: list[BaseException] = []
    done = threading.Barrier(len(threaded), timeout=300)
    wrote: dict[Path, list[Path]] = {}

    def work(path: Path) -> None:
        try:
            _run(path)
            done.wait()  # both runs have committed: each still reports only its own file
            wrote[path] = atomic.committed()
        except BaseException as err:  # handed to the test's thread
            errors.append(err)

    threads = [threading.Thread(target=work, args=(p,)) for p in threaded]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors
    assert wrote == {p: [atomic.real(p)] for p in threaded}
    for seq, thr in zip(sequential, threaded, strict=True):
        if seq.suffix == ".parquet":
            assert seq.read_bytes() == thr.read_bytes()
        else:  # HDF5 files hold their own creation times: compare what they hold
            with h5py.File(seq) as a, h5py.File(thr) as b:
                assert sorted(a) == sorted(b)
                for name in a:
                    assert a[name][()].tobytes() == b[name][()].tobytes(), name
                    assert dict(a[name].attrs) == dict(b[name].attrs), name


def test_each_thread_has_its_own_write_run(tmp_path):
    src = tmp_path / "x.bin"
    src.write_bytes(b"abc")
    registered = threading.Event()
    seen: dict[str, object] = {}

    def first() -> None:
        run = atomic.begin_run(break_links=True)
        atomic.expect(src, atomic.identity(os.stat(src)))
        registered.set()
        seen["first"] = run

    t = threading.Thread(target=first)
    t.start()
    t.join()
    assert registered.is_set()
    mine = atomic.begin_run()
    assert mine is not seen["first"]
    assert mine.expected == {} and not mine.break_links
    # a change to the file the other thread registered is not this run's business
    src.write_bytes(b"abcd")
    shutil.copyfile(src, tmp_path / "y.bin")
    atomic.copy_verified(src, tmp_path / "z.bin")
    assert atomic.committed() == []
