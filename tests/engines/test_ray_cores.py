"""A Ray shard task held to the CPUs it asked for (rltscan/engines/ray/cores.py, issue 25).

No Ray here: the claim, the affinity of every thread and the pools, set and undone.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pyarrow as pa
import pytest
import torch

from rltscan.engines.ray import cores

linux = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="needs thread affinity and two CPUs",
)


def test_cpu_list_format() -> None:
    assert cores._parse_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]


def test_physical_cores_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """4 logical CPUs, siblings (0, 2) and (1, 3): tasks take 0 and 1 before 2 and 3."""
    for cpu, siblings in {0: "0,2", 1: "1,3", 2: "0,2", 3: "1,3"}.items():
        (tmp_path / f"{cpu}").write_text(siblings)
    monkeypatch.setattr(cores, "_TOPOLOGY", str(tmp_path / "{}"))
    assert cores.cpu_order([3, 2, 1, 0]) == [0, 1, 2, 3]
    monkeypatch.setattr(cores, "_TOPOLOGY", str(tmp_path / "missing{}"))
    assert cores.cpu_order([3, 1, 2]) == [1, 2, 3]


def test_claims_are_exclusive_and_die_with_the_holder(tmp_path: Path) -> None:
    allowed = [0, 1, 2]
    a = cores.claim(2, allowed, tmp_path)
    b = cores.claim(1, allowed, tmp_path)
    assert len(a) == 2 and len(b) == 1
    assert {c for c, _ in a}.isdisjoint(c for c, _ in b)
    assert cores.claim(1, allowed, tmp_path) == []  # every CPU held: nothing, none kept
    cores.release(b)
    again = cores.claim(1, allowed, tmp_path)
    assert [c for c, _ in again] == [c for c, _ in b]
    cores.release(a + again)


@linux
def test_pinned_holds_every_thread_and_undoes_it(tmp_path: Path) -> None:
    before = os.sched_getaffinity(0)
    threads, arrow = torch.get_num_threads(), pa.cpu_count()
    started = threading.Event()
    stop = threading.Event()
    seen: dict[str, set[int]] = {}

    def old_thread() -> None:  # a thread that exists before the task (a pool's)
        seen["tid"] = {threading.get_native_id()}
        started.set()
        stop.wait()

    t = threading.Thread(target=old_thread)
    t.start()
    started.wait()
    tid = next(iter(seen["tid"]))
    try:
        with cores.pinned(1.0, tmp_path) as cpus:
            assert len(cpus) == 1
            assert os.sched_getaffinity(0) == set(cpus)
            assert os.sched_getaffinity(tid) == set(cpus)  # threads started before, too
            assert (torch.get_num_threads(), pa.cpu_count()) == (1, 1)
            # the claim is held: another task of this node gets another CPU
            other = cores.claim(1, before, tmp_path)
            assert other and other[0][0] not in cpus
            cores.release(other)
    finally:
        stop.set()
        t.join()
    assert os.sched_getaffinity(0) == before
    assert (torch.get_num_threads(), pa.cpu_count()) == (threads, arrow)
    assert len(cores.claim(len(before), before, tmp_path)) == len(before)  # all released


@linux
def test_pinned_runs_unpinned_when_every_cpu_is_claimed(tmp_path: Path) -> None:
    before = os.sched_getaffinity(0)
    everything = cores.claim(len(before), before, tmp_path)
    try:
        with cores.pinned(1.0, tmp_path) as cpus:
            assert cpus == [] and os.sched_getaffinity(0) == before
    finally:
        cores.release(everything)


@linux
def test_pinned_runs_unpinned_without_a_claim_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the directory should be
    with cores.pinned(1.0, blocker / "claims") as cpus:
        assert cpus == []
