"""Byte-mutated copies of the sample files, run in-process (issue 10 item 11).

Each case copies one sample file (or the Minari dataset with one of its files mutated),
flips, overwrites or cuts a few bytes at a seeded place (the metadata regions more often:
HDF5's superblock and object headers near the start, Parquet's footer at the end), then
runs ``api.inspect`` and ``api.run`` on it. Every case must end either normally or with an
:class:`~rltscan.errors.RltscanError` (the CLI's one-line error, never a traceback), within
a time bound, and an input that made the run fail must be byte-identical afterwards.

The default run (300 cases, ~25 s) is sized for CI on two slow cores; ``-m slow`` runs more.
Run ``python tests/test_fuzz.py N [SEED]`` to fuzz N cases by hand and list failures.
"""

from __future__ import annotations

import faulthandler
import json
import shutil
import sys
import time
import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_data"
sys.path.insert(0, str(ROOT))

from rltscan import api  # noqa: E402
from rltscan.errors import RltscanError  # noqa: E402
from tests.io_helpers import digest  # noqa: E402

# (sample, file inside it to mutate or None for the file itself)
TARGETS: list[tuple[str, str | None]] = [
    ("cartpole_flat.h5", None),
    ("cartpole_buffer.h5", None),
    ("cartpole.parquet", None),
    ("cartpole_minari", "data/main_data.hdf5"),
    ("cartpole_minari", "data/metadata.json"),
]
CASE_SECONDS = 20.0  # a case slower than this is a hang (typical: 0.05-0.3 s)
HANG_KILL_SECONDS = 120  # backstop: dump every stack and exit if one call never returns

HOSTILE_JSON = [
    b"[]",
    b'"hdf5"',
    b"null",
    b"42",
    b'{"data_format": ["hdf5"]}',
    b'{"data_format": {"a": 1}}',
    b'{"data_format": null}',
    b"\xff\xfe{}",
    b'{"data_format": "hdf5", "total_steps": "many"}',
    b"{" * 5000,
]


@dataclass(frozen=True)
class Case:
    index: int
    sample: str
    member: str | None
    seed: int


def cases(count: int, seed: int = 0) -> list[Case]:
    return [
        Case(i, *TARGETS[i % len(TARGETS)], seed=zlib.crc32(f"{seed}:{i}".encode()))
        for i in range(count)
    ]


def mutate(data: bytes, rng: np.random.Generator, member: str | None) -> bytes:
    """A seeded mutation of ``data``: bit flips, an overwritten block, a cut, or (for
    Minari's JSON) a hostile document."""
    if member is not None and member.endswith(".json") and rng.random() < 0.5:
        return HOSTILE_JSON[int(rng.integers(len(HOSTILE_JSON)))]
    buf = bytearray(data)
    n = len(buf)
    is_parquet = data[:4] == b"PAR1"
    # HDF5 structure sits mostly near the start; Parquet's footer at the end.
    if rng.random() < 0.7:
        lo, hi = (max(0, n - 4096), n) if is_parquet else (0, min(n, 4096))
    else:
        lo, hi = 0, n
    kind = rng.integers(4)
    if kind == 0:  # flip a few bits
        for _ in range(int(rng.integers(1, 9))):
            pos = int(rng.integers(lo, hi))
            buf[pos] ^= 1 << int(rng.integers(8))
    elif kind == 1:  # overwrite a small block
        pos = int(rng.integers(lo, hi))
        size = int(rng.integers(1, 33))
        fill = rng.choice([0x00, 0xFF, -1])
        for j in range(pos, min(n, pos + size)):
            buf[j] = int(rng.integers(256)) if fill == -1 else int(fill)
    elif kind == 2:  # set an 8-byte little-endian integer (lengths, offsets) to a wild value
        pos = int(rng.integers(lo, max(lo + 1, hi - 8)))
        value = int(rng.choice([0, 1, 2**31 - 1, 2**32 + 7, 2**63 - 1, int(rng.integers(2**62))]))
        buf[pos : pos + 8] = value.to_bytes(8, "little")
    else:  # cut the file
        end = int(rng.integers(lo, hi)) if rng.random() < 0.5 else int(rng.integers(n))
        buf = buf[:end]
    return bytes(buf)


def prepare_case(case: Case, tmp: Path) -> Path:
    """The mutated copy of the case's sample under ``tmp``."""
    rng = np.random.default_rng(case.seed)
    src = SAMPLES / case.sample
    dst = tmp / f"in [{case.index}]{src.suffix}"  # brackets: a markup-looking path
    if src.is_dir():
        shutil.copytree(src, dst)
        target = dst / (case.member or "")
    else:
        shutil.copyfile(src, dst)
        target = dst
    target.write_bytes(mutate(target.read_bytes(), rng, case.member))
    return dst


def run_case(case: Case, tmp: Path) -> str | None:
    """None if the case behaves; else what went wrong (a traceback or a changed input)."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = prepare_case(case, tmp)
    before = digest(path)
    in_place = case.index % 3 == 0
    suffix = ".parquet" if path.is_dir() else path.suffix
    if case.index % 3 == 2:  # to the other format: the conversion reads everything
        suffix = ".h5" if suffix == ".parquet" else ".parquet"
    output = None if in_place else str(tmp / f"out{suffix}")
    failed = False
    start = time.perf_counter()
    faulthandler.dump_traceback_later(HANG_KILL_SECONDS, exit=True)
    try:
        for call in ("inspect", "gae"):
            try:
                if call == "inspect":
                    api.inspect(str(path))
                else:
                    api.run("gae", str(path), output=output, device="cpu", backend="torch")
            except RltscanError as err:
                failed = True
                if "\n" in str(err):
                    return f"{call}: multi-line error {str(err)!r}"
            except BaseException:  # a traceback is what we look for
                return f"{call}: {traceback.format_exc(limit=-6)}"
    finally:
        faulthandler.cancel_dump_traceback_later()
    took = time.perf_counter() - start
    if took > CASE_SECONDS:
        return f"took {took:.1f} s (a hang?)"
    if (failed or not in_place) and digest(path) != before:
        return "the input changed although the run failed" if failed else "-o changed the input"
    return None


def _check(count: int, seed: int, tmp_path: Path) -> None:
    problems = []
    for case in cases(count, seed):
        problem = run_case(case, tmp_path / str(case.index))
        shutil.rmtree(tmp_path / str(case.index), ignore_errors=True)
        if problem:
            problems.append(f"case {case.index} ({case.sample} {case.member or ''}): {problem}")
    assert not problems, f"{len(problems)} of {count} cases:\n" + "\n".join(problems[:5])


def test_fuzz_samples(tmp_path: Path) -> None:
    _check(300, 0, tmp_path)


# --------------------------------------------------------------------------- hostile, by hand


def _h5(path: Path, **cols: object) -> Path:
    import h5py

    with h5py.File(path, "w") as f:
        for key, value in cols.items():
            if isinstance(value, list):
                f.create_dataset(key, data=value, dtype=h5py.string_dtype())
            else:
                f[key] = value
    return path


def _expect(path: Path, code: int, text: str) -> None:
    """``inspect`` ends normally or with a one-line RltscanError; the run refuses with
    ``code`` and ``text``; the input is untouched."""
    before = digest(path)
    try:
        api.inspect(str(path))
    except RltscanError as err:
        assert "\n" not in str(err)
    with pytest.raises(RltscanError) as err:
        api.run("gae", str(path), device="cpu")
    assert err.value.exit_code == code, err.value
    assert text in str(err.value) and "\n" not in str(err.value), err.value
    assert digest(path) == before


ONES = np.ones(6, np.float32)
FLAGS = np.zeros(6, bool)


@pytest.mark.parametrize(
    ("name", "cols", "code", "text"),
    [
        ("float128", {"rewards": np.ones(6, np.longdouble)}, 4, "float128"),
        ("complex", {"rewards": np.ones(6, np.complex64)}, 4, "complex64"),
        ("bytes", {"rewards": np.array([b"a"] * 6)}, 4, "|S1"),
        ("strings", {"rewards": ["a"] * 6}, 4, "object"),
        ("compound", {"rewards": np.zeros(6, [("a", "f4"), ("b", "f4")])}, 4, "dtype"),
        ("scalar", {"rewards": np.float32(1.0)}, 4, "scalar"),
        ("values128", {"rewards": ONES, "values": np.ones(6, np.longdouble)}, 4, "float128"),
    ],
)
def test_hostile_hdf5_columns(name: str, cols: dict, code: int, text: str, tmp_path: Path) -> None:
    cols = {"terminals": FLAGS, "values": ONES, "next_values": ONES, **cols}
    _expect(_h5(tmp_path / f"{name} [x].h5", **cols), code, text)


def test_scalar_column_in_minari_episodes(tmp_path: Path) -> None:
    import h5py

    root = tmp_path / "ds"
    shutil.copytree(SAMPLES / "cartpole_minari", root)
    with h5py.File(root / "data" / "main_data.hdf5", "a") as f:
        del f["episode_3/rewards"]
        f["episode_3/rewards"] = np.float64(1.0)
    _expect(root, 4, '"episode_3/rewards" is a scalar')


@pytest.mark.parametrize(
    "document",
    [b"[]", b'"hdf5"', b"null", b"3", b'{"data_format": ["x"]}', b"\xff\xfe{}", b"{" * 5000],
)
def test_minari_metadata_that_is_not_an_object(document: bytes, tmp_path: Path) -> None:
    root = tmp_path / "ds [1]"
    shutil.copytree(SAMPLES / "cartpole_minari", root)
    (root / "data" / "metadata.json").write_bytes(document)
    _expect(root, 3, "metadata.json")


def _parquet_bytes(table: object, **kw: object) -> bytes:
    import io

    import pyarrow.parquet as pq

    buf = io.BytesIO()
    pq.write_table(table, buf, **kw)
    return buf.getvalue()


def test_non_utf8_names_in_a_parquet_footer(tmp_path: Path) -> None:
    import pyarrow as pa

    table = pa.table({"reward": ONES, "terminals": FLAGS, "values": ONES, "zzzzname": ONES})
    data = _parquet_bytes(table, store_schema=False).replace(b"zzzzname", b"zz\xff\xfename")
    path = tmp_path / "names [1].parquet"
    path.write_bytes(data)
    _expect(path, 3, "utf-8")


def test_duplicate_parquet_column_names(tmp_path: Path) -> None:
    import pyarrow as pa

    table = pa.Table.from_arrays(
        [pa.array(ONES), pa.array(ONES * 2), pa.array(FLAGS), pa.array(ONES)],
        names=["reward", "reward", "terminals", "values"],
    )
    path = tmp_path / "dup.parquet"
    path.write_bytes(_parquet_bytes(table))
    _expect(path, 3, 'two columns named "reward"')


@pytest.mark.parametrize("suffix", [".arrows", ".bin", ".parquet"])
def test_arrow_stream_file_is_written_back_as_a_stream(suffix: str, tmp_path: Path) -> None:
    """An IPC stream in a file (any name) is read as one and updated in place, as a stream;
    never Parquet on stdout with the file left as it was."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    table = pa.table({"reward": ONES, "terminals": FLAGS, "values": ONES, "next_values": ONES})
    path = tmp_path / f"rollouts [1]{suffix}"
    with ipc.new_stream(str(path), table.schema) as writer:
        writer.write_table(table)
    report = api.run("gae", str(path), device="cpu")
    assert report.written and report.output == f"{path} (arrow-stream)"
    back = ipc.open_stream(path.read_bytes()).read_all()
    assert back.column_names[:4] == table.column_names
    assert {"advantages", "value_targets"} <= set(back.column_names)
    assert back.select(table.column_names).equals(table)


def test_truncated_arrow_stream_file(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.ipc as ipc

    table = pa.table({"reward": ONES, "terminals": FLAGS, "values": ONES})
    path = tmp_path / "cut.arrows"
    with ipc.new_stream(str(path), table.schema) as writer:
        writer.write_table(table)
    path.write_bytes(path.read_bytes()[:-40])
    _expect(path, 3, "Arrow IPC stream")


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_fuzz_samples_more(seed: int, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """2,100 more cases (minutes on two cores): only when asked for, ``-m slow``."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the long fuzz run; run it with -m slow")
    _check(700, seed, tmp_path)


if __name__ == "__main__":  # python tests/test_fuzz.py N [SEED]: fuzz by hand
    import tempfile

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    found: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        t0 = time.perf_counter()
        for case in cases(count, seed):
            problem = run_case(case, Path(tmpdir) / str(case.index))
            shutil.rmtree(Path(tmpdir) / str(case.index), ignore_errors=True)
            if problem:
                key = problem.strip().splitlines()[-1][:200]
                found.setdefault(key, []).append(case.index)
        print(f"{count} cases in {time.perf_counter() - t0:.1f} s")
    print(json.dumps({k: v[:8] for k, v in found.items()}, indent=1))
