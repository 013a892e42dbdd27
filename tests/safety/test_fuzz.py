"""Byte-mutated copies of the sample files, run in-process (issue 10 item 11).

Each case copies one sample file (or the Minari dataset with one of its files mutated),
flips, overwrites or cuts a few bytes at a seeded place (the metadata regions more often:
HDF5's superblock and object headers near the start, Parquet's footer at the end), then
runs ``api.inspect`` and ``api.run`` on it. Every case must end either normally or with an
:class:`~rltscan.errors.RltscanError` (the CLI's one-line error, never a traceback), within
a time bound, and an input that made the run fail must be byte-identical afterwards.

Header flips (issue 28) XOR one or two bytes of the file's structure only: of an HDF5
file, the bytes outside every dataset's raw data (superblock, object headers, B-trees,
heaps); of a Parquet file, its footer. Such a case ends within :data:`CASE_SECONDS`
with a one-line error (exit 3 mostly), or with exit 0 when the flip is *harmless*: the
run's outputs are then bit-identical to the unmutated file's. A flip that makes another
valid file (the mutant reads cleanly through h5py or pyarrow, but differently: a renamed
link, a moved data address) is judged as that file and may give other numbers.

The default run (300 byte cases and 60 header flips, ~40 s) is sized for CI on two slow
cores; ``-m slow`` runs more. Run ``python tests/safety/test_fuzz.py N [SEED] [--header]`` to fuzz N
cases by hand and list failures.
"""

from __future__ import annotations

import faulthandler
import functools
import hashlib
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

ROOT = Path(__file__).resolve().parents[2]
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
HEADER_TARGETS: list[tuple[str, str | None]] = [
    ("cartpole_flat.h5", None),
    ("cartpole_buffer.h5", None),
    ("cartpole_minari", "data/main_data.hdf5"),
    ("cartpole.parquet", None),
]
# per case, inspect and gae together (typical: 0.05-0.5 s; issue 28). A flip that makes
# libhdf5 spin costs each of the two calls its structure walk's stall budget (2 s, see
# rltscan.io.hdf5.stall_seconds) before exit 3: 4 s plus start-up, on a core shared with
# the suite's other process; more than this is a hang
CASE_SECONDS = 10.0
HANG_KILL_SECONDS = 60  # backstop: dump every stack and exit if one call never returns

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
    header: bool = False  # a header flip (issue 28), else a byte mutation
    flip: tuple[int, int] | None = None  # a given header flip: (offset, XOR mask)


def cases(count: int, seed: int = 0) -> list[Case]:
    return [
        Case(i, *TARGETS[i % len(TARGETS)], seed=zlib.crc32(f"{seed}:{i}".encode()))
        for i in range(count)
    ]


def header_cases(count: int, seed: int = 0) -> list[Case]:
    return [
        Case(
            i,
            *HEADER_TARGETS[i % len(HEADER_TARGETS)],
            seed=zlib.crc32(f"header {seed}:{i}".encode()),
            header=True,
        )
        for i in range(count)
    ]


@functools.cache
def header_offsets(sample: str, member: str | None) -> np.ndarray:
    """Where a sample's structure is: an HDF5 file's bytes outside every dataset's raw
    data (chunks or contiguous storage), a Parquet file's footer."""
    import h5py

    path = SAMPLES / sample / (member or "")
    size = path.stat().st_size
    if path.suffix == ".parquet":
        footer = int.from_bytes(path.read_bytes()[-8:-4], "little")
        return np.arange(size - footer - 8, size)
    raw = np.zeros(size, bool)
    with h5py.File(path, "r") as f:

        def visit(_: str, obj: object) -> None:
            if not isinstance(obj, h5py.Dataset):
                return
            offset = obj.id.get_offset()
            if offset is not None:
                raw[offset : offset + obj.id.get_storage_size()] = True
            for i in range(obj.id.get_num_chunks() if obj.chunks else 0):
                chunk = obj.id.get_chunk_info(i)
                raw[chunk.byte_offset : chunk.byte_offset + chunk.size] = True

        f.visititems(visit)
    return np.flatnonzero(~raw)


def header_flip(data: bytes, rng: np.random.Generator, offsets: np.ndarray) -> bytes:
    """One or two bytes of the structure XORed with a random non-zero mask."""
    buf = bytearray(data)
    for _ in range(int(rng.integers(1, 3))):
        buf[int(offsets[rng.integers(len(offsets))])] ^= int(rng.integers(1, 256))
    return bytes(buf)


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
    data = target.read_bytes()
    if case.flip is not None:
        buf = bytearray(data)
        buf[case.flip[0]] ^= case.flip[1]
        target.write_bytes(bytes(buf))
    elif case.header:
        target.write_bytes(header_flip(data, rng, header_offsets(case.sample, case.member)))
    else:
        target.write_bytes(mutate(data, rng, case.member))
    return dst


def _flags(sample: str) -> dict[str, str]:
    """What a header-flip run passes: the Parquet sample's ends are terminal (its
    README), so that its numbers are computed and compared, not refused."""
    return {"ends_are": "terminal"} if sample.endswith(".parquet") else {}


def _out_suffix(sample: str) -> str:
    return ".parquet" if sample.endswith(".parquet") else ".h5"


def outputs_of(path: Path) -> dict[str, str] | None:
    """A digest of every output column (advantages, value_targets) in a run's output
    file, at any depth (episode groups); None if the file cannot be read back."""
    import h5py
    import pyarrow.parquet as pq

    names = ("advantages", "value_targets")
    try:
        if path.suffix == ".parquet":
            table = pq.read_table(path, columns=list(names))
            return {
                n: hashlib.sha256(table.column(n).to_numpy().tobytes()).hexdigest() for n in names
            }
        found: dict[str, str] = {}
        with h5py.File(path, "r") as f:  # step by step: the copied input may be damaged
            groups = {"": f, **{f"{k}/": f[k] for k in f if k.startswith("episode_")}}
            for prefix, group in groups.items():
                for name in names:
                    if name in group:
                        found[prefix + name] = hashlib.sha256(group[name][()]).hexdigest()
        return found
    except Exception:  # any failure to read back is a finding
        return None


def content_of(path: Path) -> str | None:
    """What a reader sees in a (mutated) input: every object's kind, type, shape, values
    and attributes (HDF5), or the table and its schema (Parquet); None if any of it
    cannot be read."""
    import h5py
    import pyarrow.parquet as pq

    digest_ = hashlib.sha256()
    try:
        if path.is_dir():  # a Minari dataset: its HDF5 file
            path = path / "data" / "main_data.hdf5"
        if path.suffix == ".parquet":
            table = pq.read_table(path)
            digest_.update(str(table.schema).encode())
            for column in table.columns:
                digest_.update(repr(column.to_pylist()).encode())
            return digest_.hexdigest()
        with h5py.File(path, "r") as f:

            def walk(group: object, depth: int) -> None:
                digest_.update(repr(sorted((k, repr(v)) for k, v in group.attrs.items())).encode())
                for key in group:
                    obj = group.get(key)
                    digest_.update(f"{key}:{type(obj).__name__}".encode())
                    if isinstance(obj, h5py.Dataset):
                        digest_.update(f"{obj.dtype}{obj.shape}".encode() + obj[()].tobytes())
                        digest_.update(
                            repr(sorted((k, repr(v)) for k, v in obj.attrs.items())).encode()
                        )
                    elif isinstance(obj, h5py.Group) and depth < 8:
                        walk(obj, depth + 1)

            walk(f, 0)
        return digest_.hexdigest()
    except Exception:  # any failure to read is what we look for
        return None


@functools.cache
def baseline(sample: str, tmp: Path) -> tuple[dict[str, str] | None, str | None]:
    """The outputs and the content of an unmutated sample, for the harmless flips."""
    src = SAMPLES / sample
    dst = tmp / f"baseline {sample}"
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copyfile(src, dst)
    out = tmp / f"baseline-out {sample}{_out_suffix(sample)}"
    api.run("gae", str(dst), output=str(out), device="cpu", backend="torch", **_flags(sample))
    return outputs_of(out), content_of(dst)


def run_case(case: Case, tmp: Path, base: Path | None = None) -> str | None:
    """None if the case behaves; else what went wrong (a traceback, a changed input, a
    case over the time limit, or for a header flip exit 0 with other numbers). ``base``
    is where the unmutated samples' baselines go (header flips)."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = prepare_case(case, tmp)
    before = digest(path)
    in_place = case.index % 3 == 0 and not case.header
    suffix = ".parquet" if path.is_dir() else path.suffix
    if case.index % 3 == 2 and not case.header:  # to the other format: reads everything
        suffix = ".h5" if suffix == ".parquet" else ".parquet"
    if case.header:  # to its own format beside it, to compare the numbers
        suffix = _out_suffix(case.sample)
    output = None if in_place else str(tmp / f"out{suffix}")
    failed = ran = False
    flags = _flags(case.sample) if case.header else {}
    start = time.perf_counter()
    faulthandler.dump_traceback_later(HANG_KILL_SECONDS, exit=True)
    try:
        for call in ("inspect", "gae"):
            try:
                if call == "inspect":
                    api.inspect(str(path))
                else:
                    api.run("gae", str(path), output=output, device="cpu", backend="torch", **flags)
                    ran = True
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
        return f"took {took:.1f} s, over the {CASE_SECONDS:g} s limit (a hang?)"
    if (failed or not in_place) and digest(path) != before:
        return "the input changed although the run failed" if failed else "-o changed the input"
    if case.header and ran:  # exit 0: harmless, or another valid file
        assert output is not None and base is not None
        want, clean = baseline(case.sample, base)
        if outputs_of(Path(output)) != want and content_of(path) in (None, clean):
            return "exit 0 with other numbers from a file that is not another valid file"
    return None


def _warm(tmp: Path) -> None:
    """One unmutated run first: the first call imports torch (seconds on a loaded
    machine), which is no case's time."""
    api.run("gae", str(SAMPLES / "cartpole_flat.h5"), output=str(tmp / "warm.h5"), device="cpu")


def _check(all_cases: list[Case], tmp_path: Path) -> None:
    _warm(tmp_path)
    problems = []
    for case in all_cases:
        problem = run_case(case, tmp_path / str(case.index), base=tmp_path)
        shutil.rmtree(tmp_path / str(case.index), ignore_errors=True)
        if problem:
            problems.append(f"case {case.index} ({case.sample} {case.member or ''}): {problem}")
    shown = "\n".join(problems[:5])
    assert not problems, f"{len(problems)} of {len(all_cases)} cases:\n{shown}"


def test_fuzz_samples(tmp_path: Path) -> None:
    _check(cases(300, 0), tmp_path)


def test_header_flips(tmp_path: Path) -> None:
    """A seeded subset of header flips of every sample (issue 28), and the flips the
    issue found (one, at 2072, made libhdf5 spin for ever); ``-m slow`` runs more."""
    found = [
        Case(1000 + i, "cartpole_buffer.h5", None, seed=0, header=True, flip=(offset, 0xFF))
        for i, offset in enumerate((818, 1589, 2072, 3132, 4001))
    ]
    _check([*found, *header_cases(60, 0)], tmp_path)


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
    _check(cases(700, seed), tmp_path)


@pytest.mark.slow
def test_header_flips_more(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """1,200 header flips, 300 of each sample (minutes): ``-m slow``."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the long fuzz run; run it with -m slow")
    _check(header_cases(1200, 1), tmp_path)


if __name__ == "__main__":  # python tests/safety/test_fuzz.py N [SEED]: fuzz by hand
    import tempfile

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    make = header_cases if "--header" in sys.argv else cases
    found: dict[str, list[int]] = {}
    with tempfile.TemporaryDirectory() as tmpdir:
        t0 = time.perf_counter()
        _warm(Path(tmpdir))
        for case in make(count, seed):
            problem = run_case(case, Path(tmpdir) / str(case.index), base=Path(tmpdir))
            shutil.rmtree(Path(tmpdir) / str(case.index), ignore_errors=True)
            if problem:
                key = problem.strip().splitlines()[-1][:200]
                found.setdefault(key, []).append(case.index)
        print(f"{count} cases in {time.perf_counter() - t0:.1f} s")
    print(json.dumps({k: v[:8] for k, v in found.items()}, indent=1))
