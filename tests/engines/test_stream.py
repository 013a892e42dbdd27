"""The streaming engine: files walked in windows with carries (issue 5).

* every window size gives bit-identical outputs (for a given block size), for all
  seven estimators, flat / time-major / batch-major HDF5 and Parquet;
* small blocks agree with one block over the whole file (float rounding only);
* flags derived from the next row (episode-start dones, episode-id changes) are
  right at window edges; ids that restart in a later window are refused;
* errors name the step of the file, not of the block;
* resident memory does not grow with the file (a subprocess over files 1x and 8x).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import DataError, MissingBootstrapError
from tests.io_helpers import ROOT
from tests.shard_helpers import COMMANDS, OUTPUTS, PARAMS  # the seven commands' names, params


def columns(rng: np.random.Generator, shape: tuple[int, ...], p_done: float) -> dict:
    """Every column any estimator reads; never zeros, ends dense or sparse."""
    u = rng.random(shape)
    term = u < p_done / 2
    trunc = (u >= p_done / 2) & (u < p_done)

    def f() -> np.ndarray:
        return rng.standard_normal(shape).astype(np.float32)

    def lp() -> np.ndarray:
        return np.log(rng.uniform(0.05, 1.0, shape)).astype(np.float32)

    return {
        "rewards": f(),
        "values": f(),
        "next_values": f(),
        "terminals": term,
        "timeouts": trunc,
        "logp_behavior": lp(),
        "logp_target": lp(),
        "q_values": f(),
        "next_expected_q": f(),
        "v_pi": f(),
    }


def write_file(path: Path, cols: dict, layout: str, row_group: int = 37) -> Path:
    if path.suffix == ".parquet":
        table = pa.table({k: pa.array(v) for k, v in cols.items()})
        pq.write_table(table, path, row_group_size=row_group)
        return path
    with h5py.File(path, "w") as f:
        for key, value in cols.items():
            f.create_dataset(key, data=value.T if layout == "batch-major" else value)
        if layout != "flat":
            f.attrs["layout"] = layout
    return path


def read_outputs(path: Path, names: tuple[str, ...]) -> dict[str, np.ndarray]:
    if path.suffix == ".parquet":
        table = pq.read_table(path)
        return {n: table.column(n).to_numpy() for n in names if n in table.column_names}
    with h5py.File(path, "r") as f:
        return {n: f[n][()] for n in names if n in f}


def run_to(src: Path, dst: Path, command: str, **kw) -> dict[str, np.ndarray]:
    report = api.run(command, str(src), output=str(dst), device="cpu", params=PARAMS[command], **kw)
    assert report.streaming is not None
    return read_outputs(dst, OUTPUTS[command])


CASES = [
    ("flat", ".h5", (203,), 8),
    ("time-major", ".h5", (67, 3), 24),
    ("batch-major", ".h5", (67, 3), 24),
    ("flat", ".parquet", (203,), 8),
]


@pytest.mark.parametrize("layout,suffix,shape,block", CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("p_done", [0.05, 0.5])
def test_window_size_never_changes_a_bit(
    command: str, layout: str, suffix: str, shape: tuple, block: int, p_done: float, tmp_path: Path
) -> None:
    rng = np.random.default_rng(zlib.crc32(f"{command}{layout}{suffix}{p_done}".encode()))
    src = write_file(tmp_path / f"in{suffix}", columns(rng, shape, p_done), layout)
    results = []
    for k, chunk in enumerate([block, 3 * block, 5 * block, 10**9]):
        dst = tmp_path / f"out{k}{suffix}"
        results.append(run_to(src, dst, command, chunk_steps=chunk, block_steps=block))
    first = results[0]
    assert set(first) == set(OUTPUTS[command])
    for other in results[1:]:
        for name in first:
            assert np.array_equal(first[name], other[name], equal_nan=True), name
    # one block over the whole file: the same values up to float rounding
    whole = run_to(src, tmp_path / f"whole{suffix}", command)
    for name in first:
        np.testing.assert_allclose(first[name], whole[name], rtol=2e-5, atol=2e-5)


def test_small_chunks_are_raised_to_the_block(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    src = write_file(tmp_path / "in.h5", columns(rng, (100,), 0.1), "flat")
    out = str(tmp_path / "out.h5")
    report = api.run("returns", str(src), output=out, device="cpu", chunk_steps=3, block_steps=16)
    assert report.streaming is not None
    assert report.streaming.chunk_steps == 16 and report.streaming.windows == 7


def test_episode_starts_and_last_dones_across_windows(tmp_path: Path) -> None:
    """A CleanRL buffer: dones[t] = obs t starts an episode, next_done [B] ends it."""
    rng = np.random.default_rng(3)
    t, b = 41, 2
    starts = rng.random((t, b)) < 0.2
    cols = {
        "rewards": rng.standard_normal((t, b)).astype(np.float32),
        "values": rng.standard_normal((t, b)).astype(np.float32),
        "dones": starts,
    }
    path = tmp_path / "buf.h5"
    with h5py.File(path, "w") as f:
        for k, v in cols.items():
            f[k] = v
        f["next_done"] = rng.random(b) < 0.5
        f["next_value"] = rng.standard_normal(b).astype(np.float32)
    outs = []
    for k, chunk in enumerate([2 * b, 5 * b, 10**6]):
        dst = tmp_path / f"o{k}.h5"
        api.run("gae", str(path), output=str(dst), device="cpu", ends_are="terminal",
                chunk_steps=chunk, block_steps=2 * b)  # fmt: skip
        outs.append(read_outputs(dst, ("advantages",))["advantages"])
    assert np.array_equal(outs[0], outs[1]) and np.array_equal(outs[0], outs[2])
    # and the same as the estimator on the whole arrays with the shift done by hand
    import rltscan

    ended = np.zeros_like(starts)
    ended[:-1] = starts[1:]
    with h5py.File(path, "r") as f:
        ended[-1] = f["next_done"][()]
        last = f["next_value"][()]
    want = rltscan.gae(cols["rewards"], cols["values"], terminated=ended, last_value=last,
                       gamma=0.97, lam=0.9, time_dim=0, backend="reference")  # fmt: skip
    got_default = outs[0]
    want_default = rltscan.gae(cols["rewards"], cols["values"], terminated=ended,
                               last_value=last, time_dim=0, backend="reference")  # fmt: skip
    assert want["advantages"].shape == got_default.shape
    np.testing.assert_allclose(got_default, want_default["advantages"], rtol=1e-5, atol=1e-5)


def _id_table(path: Path, ids: np.ndarray) -> Path:
    rng = np.random.default_rng(5)
    n = len(ids)
    table = pa.table(
        {
            "episode_id": pa.array(ids),
            "rewards": pa.array(rng.standard_normal(n).astype(np.float32)),
            "terminals": pa.array(rng.random(n) < 0.05),
        }
    )
    pq.write_table(table, path, row_group_size=10)
    return path


def test_episode_ids_split_by_windows_give_the_whole_file_result(tmp_path: Path) -> None:
    ids = np.repeat(np.arange(9), [7, 1, 12, 8, 8, 3, 20, 5, 16])
    src = _id_table(tmp_path / "ids.parquet", ids)
    small = run_to(src, tmp_path / "a.parquet", "returns", chunk_steps=8, block_steps=8,
                   missing_bootstrap="zero", ends_are="truncated")  # fmt: skip
    whole = run_to(src, tmp_path / "b.parquet", "returns", chunk_steps=8, block_steps=10**6,
                   missing_bootstrap="zero", ends_are="truncated")  # fmt: skip
    np.testing.assert_allclose(small["returns"], whole["returns"], rtol=1e-5, atol=1e-5)
    # the forced cut at each id change: the step before a change never sees the next reward
    table = pq.read_table(src)
    r = table.column("rewards").to_numpy()
    end = np.flatnonzero(ids[1:] != ids[:-1])
    term = table.column("terminals").to_numpy()
    lone = [e for e in end if not term[e]]
    np.testing.assert_allclose(small["returns"][lone], r[lone], rtol=1e-6)


def test_episode_id_that_comes_back_in_a_later_window_is_refused(tmp_path: Path) -> None:
    ids = np.repeat(np.array([0, 1, 2, 3, 1]), [9, 9, 9, 9, 9])
    src = _id_table(tmp_path / "ids.parquet", ids)
    with pytest.raises(DataError, match='episode id 1 in "episode_id" appears in more than one'):
        api.run("returns", str(src), output=str(tmp_path / "o.parquet"), device="cpu",
                chunk_steps=8, block_steps=8, missing_bootstrap="zero",
                ends_are="truncated")  # fmt: skip
    assert not (tmp_path / "o.parquet").exists()


def test_errors_name_the_step_of_the_file(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    cols = columns(rng, (100,), 0.1)
    cols["rewards"][37] = np.nan
    src = write_file(tmp_path / "in.h5", cols, "flat")
    with pytest.raises(DataError, match='column "rewards" holds NaN at row 37') as err:
        api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    assert err.value.index == (37,) and err.value.column == "rewards"
    cols = columns(rng, (100,), 0.0)
    del cols["next_values"]
    cols["timeouts"][53] = True
    cols["terminals"][-1] = True  # the file's end needs no bootstrap
    src = write_file(tmp_path / "b.h5", cols, "flat")
    with pytest.raises(MissingBootstrapError, match=r'row 53 is a truncation \("timeouts"'):
        api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    with h5py.File(src) as f:
        assert "advantages" not in f


def test_streamed_hdf5_keeps_every_input_column_bit_for_bit(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    cols = columns(rng, (90,), 0.1)
    src = write_file(tmp_path / "in.h5", cols, "flat")
    api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    with h5py.File(src) as f:
        for key, value in cols.items():
            assert f[key].dtype == value.dtype and np.array_equal(f[key][()], value)
        assert f["advantages"].shape == (90,) and f["advantages"].attrs["estimator"] == "gae"


def test_streamed_parquet_keeps_row_groups_columns_and_metadata(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    cols = columns(rng, (95,), 0.1)
    src = write_file(tmp_path / "in.parquet", cols, "flat", row_group=20)
    api.run("vtrace", str(src), device="cpu", chunk_steps=16, block_steps=8)
    pf = pq.ParquetFile(src)
    assert [pf.metadata.row_group(i).num_rows for i in range(pf.num_row_groups)] == [20] * 4 + [15]
    table = pf.read()
    assert table.column_names == [*cols, "vs", "pg_advantages"]
    for key, value in cols.items():
        assert np.array_equal(table.column(key).to_numpy(), value)
    assert b"rltscan" in pf.schema_arrow.metadata
    assert not [p for p in tmp_path.iterdir() if ".rltscan-" in p.name]


MEMORY_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    import h5py, numpy as np
    from rltscan import api
    path, steps = sys.argv[1], int(sys.argv[2])
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        for name, dtype in (("rewards", "f4"), ("values", "f4"), ("next_values", "f4"),
                            ("terminals", "?"), ("timeouts", "?")):
            ds = f.create_dataset(name, shape=(steps,), dtype=dtype)
            for s in range(0, steps, 1 << 18):
                n = min(1 << 18, steps - s)
                ds[s:s + n] = (rng.random(n) < 0.002) if dtype == "?" else rng.random(n)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    report = api.run("gae", path, device="cpu", chunk_steps=1 << 16, block_steps=1 << 16)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"base_kb": base, "peak_kb": peak, "windows": report.streaming.windows}))
    """
)


def test_resident_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    """8x the steps (72 MB of columns, 32 MB of outputs) with 64k-step windows: the peak
    resident set grows by far less than the file (the whole-file path would add both)."""
    script = tmp_path / "mem.py"
    script.write_text(MEMORY_SCRIPT)
    peaks = {}
    for steps in (1 << 19, 1 << 22):
        out = subprocess.run(
            [sys.executable, str(script), str(tmp_path / f"f{steps}.h5"), str(steps)],
            capture_output=True, text=True, cwd=ROOT, timeout=600, check=True,
        )  # fmt: skip
        peaks[steps] = json.loads(out.stdout.strip().splitlines()[-1])
    small, big = peaks[1 << 19], peaks[1 << 22]
    assert big["windows"] == 64 and small["windows"] == 8
    grown_mb = (big["peak_kb"] - small["peak_kb"]) / 1024
    file_mb = (1 << 22) * 14 / 2**20
    assert grown_mb < 16, (grown_mb, file_mb, peaks)


@pytest.mark.parametrize("layout", ["flat", "batch-major"])
def test_windows_that_arrive_before_the_safety_copy_is_done(
    layout: str, tmp_path: Path, monkeypatch
) -> None:
    """HDF5 write-back copies the file beside the stream; windows that come first are
    spilled and moved into the copy at commit, with the same bits as direct writes."""
    import shutil
    import time

    import rltscan.io.sinks as sinks

    rng = np.random.default_rng(6)
    shape = (150,) if layout == "flat" else (50, 3)
    src = write_file(tmp_path / "in.h5", columns(rng, shape, 0.1), layout)
    fast = run_to(src, tmp_path / "fast.h5", "vtrace", chunk_steps=24, block_steps=24)
    real = shutil.copyfile

    def slow(a, b):
        time.sleep(0.6)
        return real(a, b)

    monkeypatch.setattr(sinks.shutil, "copyfile", slow)
    late = run_to(src, tmp_path / "late.h5", "vtrace", chunk_steps=24, block_steps=24)
    for name in fast:
        assert np.array_equal(fast[name], late[name])


def test_a_failed_safety_copy_changes_nothing(tmp_path: Path, monkeypatch) -> None:
    import errno

    import rltscan.io.sinks as sinks
    from rltscan.errors import OutputRefusedError

    rng = np.random.default_rng(7)
    cols = columns(rng, (64,), 0.1)
    src = write_file(tmp_path / "in.h5", cols, "flat")
    before = src.read_bytes()

    def full(a, b):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(sinks.shutil, "copyfile", full)
    with pytest.raises(OutputRefusedError, match="no space left"):
        api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    assert src.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.h5"]


def test_an_empty_file_is_a_data_error_not_a_crash(tmp_path: Path) -> None:
    path = tmp_path / "empty.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = np.zeros(0, np.float32)
        f["terminals"] = np.zeros(0, bool)
    with pytest.raises(DataError, match="no steps"):
        api.run("returns", str(path), device="cpu")
