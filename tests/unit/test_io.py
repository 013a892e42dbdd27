"""rltscan.io and rltscan.api: detection, aliases, layouts, write-back, atomicity."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rltscan import api
from rltscan.errors import (
    AmbiguousInputError,
    DataError,
    InputFileError,
    OutputRefusedError,
)
from rltscan.io import open_input
from rltscan.io.formats import sniff_bytes
from rltscan.io.layout import prepare
from rltscan.io.resolve import Reading
from tests.io_helpers import (
    BUFFER,
    FLAT,
    MINARI,
    PARQUET,
    B,
    T,
    bare_dones_buffer,
    copy_sample,
    fingerprint,
    h5_columns,
    minari_output,
    parquet_columns,
    time_major_to_flat,
)

COMMANDS = ("gae", "vtrace", "retrace", "td-lambda", "returns", "traces", "prefix-sum")
RTOL, ATOL = 1e-5, 1e-5  # float32 outputs vs float64 (Minari rewards are float64)


def run(command: str, path: Path, **kw: object) -> api.RunReport:
    kw.setdefault("device", "cpu")
    kw.setdefault("backend", "torch")
    if Path(path).name == PARQUET.name:  # its stream cuts are unflagged eps_id changes
        kw.setdefault("ends_are", "truncated")
    return api.run(command, str(path), **kw)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize(
    ("head", "fmt"),
    [
        (b"\x89HDF\r\n\x1a\n....", "hdf5"),
        (b"PAR1....", "parquet"),
        (b"ARROW1\x00\x00", "arrow"),
        (b"\xff\xff\xff\xff....", "arrow-stream"),
        (b"hello", None),
    ],
)
def test_sniff_bytes(head: bytes, fmt: str | None) -> None:
    assert sniff_bytes(head) == fmt


@pytest.mark.parametrize(
    ("path", "fmt", "layout", "steps", "sequences"),
    [
        (FLAT, "hdf5", "flat", B * T, 1),
        (BUFFER, "hdf5", "time-major", B * T, B),
        (PARQUET, "parquet", "flat", B * T, 1),
        (MINARI, "minari", "episodes", B * T, None),
    ],
    ids=["flat", "time-major", "parquet", "minari"],
)
def test_layout_detected(path: Path, fmt: str, layout: str, steps: int, sequences: int) -> None:
    # the Parquet sample's stream cuts are eps_id changes with no flag: the user says what
    # they are (--ends-are), see test_parquet_sample_unflagged_ends_need_ends_are
    ends_are = "truncated" if path == PARQUET else None
    info = api.inspect(str(path), ends_are=ends_are)
    assert (info["format"].split("/")[0], info["layout"], info["steps"]) == (fmt, layout, steps)
    if sequences is not None:
        assert info["sequences"] == sequences
    assert all(state["ready"] for state in info["estimators"].values()), info["estimators"]


def test_parquet_sample_unflagged_ends_need_ends_are() -> None:
    """Where the answer changes the numbers (the estimator bootstraps); traces, prefix
    sums and return-to-go run either way."""
    from rltscan.estimators import DECLARATIONS

    info = api.inspect(str(PARQUET))
    assert info["steps"] == B * T
    for command, state in info["estimators"].items():
        if not DECLARATIONS[command].bootstraps:
            assert state["ready"], command
            continue
        assert not state["ready"]
        assert "--ends-are truncated" in state["needs"]


def test_aliases_resolved_in_parquet() -> None:
    info = api.inspect(str(PARQUET), ends_are="truncated")
    roles = info["roles"]
    assert roles["rewards"] == "reward"
    assert roles["values"] == "vf_preds"
    assert roles["logp_behavior"] == "action_logp"
    assert roles["terminated"] == "terminated"


def test_alias_under_infos_group_in_d4rl_file() -> None:
    assert api.inspect(str(FLAT))["roles"]["logp_behavior"] == "infos/action_log_probs"


def test_override_beats_detection(tmp_path: Path) -> None:
    path = copy_sample(PARQUET, tmp_path)
    report = run("returns", path, columns={"rewards": "vf_preds"}, dry_run=True)
    assert report.columns["rewards"] == "vf_preds"


def test_override_to_missing_column_lists_what_exists() -> None:
    source = open_input(str(PARQUET))
    with pytest.raises(
        DataError, match=r'has no column "nope" \(given by --rewards\); pass one of'
    ):
        prepare(
            source,
            arguments=("rewards",),
            required=("rewards",),
            reading=Reading(columns={"rewards": "nope"}),
        )


def test_flat_file_end_is_a_truncation_without_a_flag() -> None:
    with h5py.File(FLAT) as f:
        assert not f["terminals"][-1] and not f["timeouts"][-1]
    report = run("gae", FLAT, dry_run=True)
    assert report.counts["forced_cuts"] == 0
    assert report.episodes > report.counts["terminated"] + report.counts["truncated"]


def test_minari_values_t_plus_one_become_next_values() -> None:
    report = run("gae", MINARI, dry_run=True)
    assert any("T+1" in note for note in report.notes)


def test_minari_episode_groups_sorted_numerically(tmp_path: Path) -> None:
    path = tmp_path / "eps.h5"
    with h5py.File(path, "w") as f:
        for i in (10, 2, 1):
            g = f.create_group(f"episode_{i}")
            g["rewards"] = np.full(3, float(i))
            g["terminations"] = np.array([0, 0, 1], bool)
            g["truncations"] = np.zeros(3, bool)
    source = open_input(str(path))
    assert source.episode_keys == ["episode_1", "episode_2", "episode_10"]
    prepared = prepare(source, arguments=("x",), required=("x", "terminated"))
    np.testing.assert_array_equal(prepared.kwargs["x"], np.repeat([1.0, 2.0, 10.0], 3))


def test_bare_dones_is_never_guessed(tmp_path: Path) -> None:
    path = bare_dones_buffer(tmp_path / "dones.h5", 5)
    source = open_input(str(path))
    with pytest.raises(AmbiguousInputError, match="pass --dones-mean ended or --dones-mean starts"):
        prepare(source, arguments=("rewards",), required=("rewards", "terminated"))


def test_dones_mean_starts_shifts_by_one(tmp_path: Path) -> None:
    path = tmp_path / "cleanrl.h5"
    starts = np.zeros((6, 1), bool)
    starts[3] = True  # obs 3 begins an episode => the episode ended after step 2
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones((6, 1), np.float32)
        f["dones"] = starts
    source = open_input(str(path), layout="time-major")
    prepared = prepare(
        source,
        arguments=("rewards",),
        required=("rewards", "terminated"),
        reading=Reading(dones_mean="starts", ends_are="terminal"),
    )
    assert prepared.kwargs["terminated"][:, 0].tolist() == [0, 0, 1, 0, 0, 0]


def test_episode_id_column_gives_boundaries(tmp_path: Path) -> None:
    path = tmp_path / "ids.parquet"
    pq.write_table(pa.table({"reward": [1.0] * 5, "episode_index": [0, 0, 1, 1, 1]}), path)
    source = open_input(str(path))
    with pytest.raises(AmbiguousInputError, match="pass --ends-are terminal"):
        prepare(source, arguments=("rewards",), required=("rewards", "terminated"))
    prepared = prepare(
        source,
        arguments=("rewards",),
        required=("rewards", "terminated"),
        reading=Reading(ends_are="truncated"),
    )
    assert prepared.kwargs["truncated"].tolist() == [0, 1, 0, 0, 0]


def test_non_contiguous_episode_ids_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "ids.parquet"
    pq.write_table(
        pa.table({"reward": [1.0] * 4, "terminated": [0, 0, 0, 0], "eps_id": [0, 1, 0, 1]}), path
    )
    source = open_input(str(path))
    with pytest.raises(DataError, match="appears in more than one run of rows"):
        prepare(source, arguments=("rewards",), required=("rewards", "terminated"))


# --------------------------------------------------------------------------- same data, layouts


def _outputs_of(command: str, path: Path, tmp: Path, prefix: str = "") -> dict[str, np.ndarray]:
    copy = copy_sample(path, tmp)
    report = run(command, copy, prefix=prefix)
    names = [o.name for o in report.outputs]
    if copy.is_dir():
        return {n: minari_output(copy, n) for n in names}
    if copy.suffix == ".parquet":
        cols = parquet_columns(copy)
        return {n: cols[n] for n in names}
    cols = h5_columns(copy)
    return {n: time_major_to_flat(cols[n]) if cols[n].ndim == 2 else cols[n] for n in names}


@pytest.mark.parametrize("command", COMMANDS)
def test_same_trajectories_in_every_layout_give_the_same_results(
    command: str, tmp_path: Path
) -> None:
    results = {}
    for i, path in enumerate((FLAT, BUFFER, PARQUET, MINARI)):
        (tmp_path / str(i)).mkdir()
        results[path.name] = _outputs_of(command, path, tmp_path / str(i))
    want = results[FLAT.name]
    assert want
    for name, got in results.items():
        assert set(got) == set(want), name
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=RTOL, atol=ATOL, err_msg=name)


# --------------------------------------------------------------------------- write-back


def test_hdf5_write_back_keeps_every_column_and_records_provenance(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    before = fingerprint(h5_columns(path))
    run("gae", path, params={"gamma": 0.9, "lam": 0.8})
    after = h5_columns(path)
    assert {k: v for k, v in fingerprint(after).items() if k in before} == before
    with h5py.File(path) as f:
        ds = f["advantages"]
        assert ds.shape == (B * T,) and ds.dtype == np.float32
        assert ds.compression == "gzip"  # matches the source columns
        assert ds.attrs["estimator"] == "gae"
        assert ds.attrs["gamma"] == 0.9 and ds.attrs["lam"] == 0.8
        assert json.loads(ds.attrs["source_columns"])["rewards"] == "rewards"
        assert ds.attrs["rltscan_version"]


def test_time_major_outputs_keep_the_buffer_shape(tmp_path: Path) -> None:
    path = copy_sample(BUFFER, tmp_path)
    run("vtrace", path)
    with h5py.File(path) as f:
        assert f["vs"].shape == (T, B) and f["pg_advantages"].shape == (T, B)


def test_minari_outputs_go_inside_each_episode_group(tmp_path: Path) -> None:
    path = copy_sample(MINARI, tmp_path)
    run("td-lambda", path)
    with h5py.File(path / "data" / "main_data.hdf5") as f:
        for key in f:
            g = f[key]
            assert g["lambda_returns"].shape == g["rewards"].shape
            assert g["lambda_returns"].dtype == np.float64  # Minari rewards are float64


def test_parquet_write_back_preserves_columns_row_groups_and_metadata(tmp_path: Path) -> None:
    path = copy_sample(PARQUET, tmp_path)
    before_file = pq.ParquetFile(path)
    before_groups = [
        before_file.metadata.row_group(i).num_rows for i in range(before_file.num_row_groups)
    ]
    before_meta = dict(before_file.schema_arrow.metadata)
    before = pq.read_table(path)
    run("gae", path)
    after_file = pq.ParquetFile(path)
    after = pq.read_table(path)
    assert after.column_names[: before.num_columns] == before.column_names
    assert after.column_names[before.num_columns :] == ["advantages", "value_targets"]
    assert after.select(before.column_names).equals(before)
    assert [
        after_file.metadata.row_group(i).num_rows for i in range(after_file.num_row_groups)
    ] == before_groups
    meta = after_file.schema_arrow.metadata
    for key, value in before_meta.items():
        if key != b"ARROW:schema":
            assert meta[key] == value
    record = json.loads(meta[b"rltscan"])
    assert record["outputs"]["advantages"]["estimator"] == "gae"
    assert record["outputs"]["advantages"]["params"]["gamma"] == 0.99
    assert after_file.metadata.row_group(0).column(0).compression == "ZSTD"


@pytest.mark.parametrize("sample", [FLAT, PARQUET], ids=["hdf5", "parquet"])
def test_overwrite_gives_byte_identical_outputs(sample: Path, tmp_path: Path) -> None:
    path = copy_sample(sample, tmp_path)
    run("gae", path)
    read = h5_columns if sample.suffix == ".h5" else parquet_columns
    first = fingerprint(read(path))
    with pytest.raises(OutputRefusedError, match='already has "advantages"'):
        run("gae", path)
    run("gae", path, overwrite=True)
    assert fingerprint(read(path)) == first
    if sample.suffix == ".parquet":
        copy = tmp_path / "again.parquet"
        run("gae", path, overwrite=True, output=str(copy))
        assert copy.read_bytes() == path.read_bytes()


def test_input_columns_are_never_overwritten(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    with h5py.File(path, "a") as f:
        f["returns"] = f["rewards"][()]  # an input column named like the output
    before = path.read_bytes()
    with pytest.raises(OutputRefusedError, match="even with --overwrite"):
        run("returns", path, columns={"rewards": "returns"}, overwrite=True)
    assert path.read_bytes() == before


def test_output_path_leaves_the_input_untouched(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    before = path.read_bytes()
    out = tmp_path / "out.h5"
    run("returns", path, output=str(out))
    assert path.read_bytes() == before
    assert "returns" in h5_columns(out)
    with pytest.raises(OutputRefusedError, match="already exists; pass --overwrite"):
        run("returns", path, output=str(out))


def test_hdf5_to_parquet_export(tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    run("gae", BUFFER, output=str(out))
    table = pq.read_table(out)
    assert {"traj_id", "step", "rewards", "advantages"} <= set(table.column_names)
    assert table.num_rows == B * T


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    path = copy_sample(FLAT, tmp_path)
    before = path.read_bytes()
    report = run("gae", path, dry_run=True)
    assert path.read_bytes() == before
    assert not report.written and [o.name for o in report.outputs] == [
        "advantages",
        "value_targets",
    ]


# --------------------------------------------------------------------------- failures while writing


def test_exception_mid_write_leaves_input_and_no_temp(tmp_path: Path, monkeypatch) -> None:
    path = copy_sample(FLAT, tmp_path)
    before = path.read_bytes()

    def boom(self, name, **kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(h5py.Group, "create_dataset", boom)
    with pytest.raises(KeyboardInterrupt):
        run("gae", path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [path.name]


def test_full_disk_is_output_refused(tmp_path: Path, monkeypatch) -> None:
    path = copy_sample(PARQUET, tmp_path)
    before = path.read_bytes()

    def full(*args, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pq.ParquetWriter, "write_table", full)
    with pytest.raises(OutputRefusedError, match="no space left on device"):
        run("gae", path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir() if p.is_file()] == [path.name]


def test_not_hdf5_or_parquet(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("hello")
    with pytest.raises(InputFileError, match="is not HDF5, Parquet or Arrow"):
        open_input(str(path))


# --------------------------------------------------------------------------- round trips


COLUMN_DTYPES = st.sampled_from([np.float32, np.float64, np.int32, np.int64])


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    n=st.integers(1, 300),
    row_group=st.integers(1, 64),
    dtypes=st.lists(COLUMN_DTYPES, min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
)
def test_parquet_round_trip(n, row_group, dtypes, seed, tmp_path: Path) -> None:
    rng = np.random.default_rng(seed)
    cols = {f"c{i}": (rng.normal(size=n) * 10).astype(d) for i, d in enumerate(dtypes)}
    cols["reward"] = rng.normal(size=n).astype(np.float32)
    cols["terminated"] = rng.random(n) < 0.1
    path = tmp_path / f"rt{seed}_{n}.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=row_group)
    run("prefix-sum", path, overwrite=True)
    table = pq.read_table(path)
    for name, values in cols.items():
        np.testing.assert_array_equal(table.column(name).to_numpy(), values)
    ends = np.flatnonzero(cols["terminated"])
    want = np.empty(n, np.float64)
    acc = 0.0
    for t in range(n):
        acc = (0.0 if t and (t - 1) in ends else acc) + float(cols["reward"][t])
        want[t] = acc
    np.testing.assert_allclose(table.column("prefix_sums").to_numpy(), want, rtol=1e-5, atol=1e-4)
    assert pq.ParquetFile(path).num_row_groups == -(-n // row_group)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    shape=st.tuples(st.integers(1, 40), st.integers(1, 5)),
    dtype=st.sampled_from([np.float16, np.float32, np.float64]),
    seed=st.integers(0, 2**16),
)
def test_hdf5_time_major_round_trip(shape, dtype, seed, tmp_path: Path) -> None:
    rng = np.random.default_rng(seed)
    path = tmp_path / f"tm{seed}_{shape[0]}_{shape[1]}.h5"
    rewards = rng.normal(size=shape).astype(dtype)
    with h5py.File(path, "w") as f:
        f.attrs["layout"] = "time_major"
        f["rewards"] = rewards
        f["terminations"] = rng.random(shape) < 0.2
    run("returns", path, overwrite=True, params={"gamma": 1.0})
    cols = h5_columns(path)
    np.testing.assert_array_equal(cols["rewards"], rewards)
    out = cols["returns"]
    assert out.shape == shape
    assert out.dtype == (np.float64 if dtype == np.float64 else np.float32)
    # gamma=1 with a terminal on the last step only would be a reversed cumsum; check
    # the last step, which is always its own reward (window end, no bootstrap: zero).
    np.testing.assert_allclose(out[-1], rewards[-1].astype(np.float64), rtol=1e-3, atol=1e-3)


# ------------------------------------------------ Minari Parquet/Arrow (columnar) backend


def _minari_columnar(tmp_path: Path, backend: str) -> Path:
    """The HDF5 Minari sample rewritten as Minari's columnar layout: one ``data/<id>/``
    directory per episode, every column T+1 rows (values real; the rest padded)."""
    root = tmp_path / f"minari_{backend}"
    (root / "data").mkdir(parents=True)
    meta = json.loads((MINARI / "data" / "metadata.json").read_text())
    meta["data_format"] = backend
    (root / "data" / "metadata.json").write_text(json.dumps(meta))
    with h5py.File(MINARI / "data" / "main_data.hdf5") as f:
        for key in f:
            g = f[key]
            cols = {}
            for name in g:
                x = np.asarray(g[name])
                if name == "observations" or x.ndim != 1:
                    continue
                if name != "values":  # pad like Minari: one dummy row (0 / False)
                    x = np.append(x, np.zeros(1, dtype=x.dtype))
                cols[name] = x
            table = pa.table(cols)
            d = root / "data" / key.removeprefix("episode_")
            d.mkdir()
            if backend == "parquet":
                pq.write_table(table, d / "part-0.parquet")
            else:
                with pa.ipc.new_file(d / "part-0.arrow", table.schema) as w:
                    w.write_table(table)
    return root


@pytest.mark.parametrize("backend", ["parquet", "arrow"])
@pytest.mark.parametrize("command", ["gae", "vtrace", "retrace", "prefix-sum"])
def test_minari_columnar_matches_hdf5_and_keeps_padding(
    tmp_path: Path, backend: str, command: str
) -> None:
    ref_path = copy_sample(MINARI, tmp_path)
    run(command, ref_path)
    root = _minari_columnar(tmp_path, backend)
    before = {
        d.name: (pq.read_table(next(d.iterdir())) if backend == "parquet" else None)
        for d in (root / "data").iterdir()
        if d.is_dir()
    }
    run(command, root)
    outs = {"gae": "advantages", "vtrace": "vs", "retrace": "retrace_targets"}
    out = outs.get(command, "prefix_sums")
    with h5py.File(ref_path / "data" / "main_data.hdf5") as f:
        for key in f:
            d = root / "data" / key.removeprefix("episode_")
            part = next(d.iterdir())
            if backend == "parquet":
                table = pq.read_table(part)
            else:
                with pa.memory_map(str(part)) as src:
                    table = pa.ipc.open_file(src).read_all()
            got = table.column(out).to_numpy()
            want = np.asarray(f[key][out])
            assert len(got) == len(want) + 1 and np.isnan(got[-1])  # padding row kept
            np.testing.assert_allclose(got[:-1], want, rtol=RTOL, atol=ATOL)
            if before[d.name] is not None:  # every original column unchanged
                for name in before[d.name].column_names:
                    assert table.column(name).equals(before[d.name].column(name))


H5PY_FLUSH_FAILED = (
    "Can't write image to file (file write failed: time = Mon Dec  7 03:35:06 2026\n, "
    "filename = '/tmp/.x.rltscan-1.tmp', file descriptor = 5, errno = {}, error message = "
    "'File too large', buf = 0x1, total write size = 3829, bytes this sub-write = 3829)"
)


@pytest.mark.parametrize(
    ("code", "words"),
    [(errno.EFBIG, "ulimit -f"), (errno.ENOSPC, "no space left"), (errno.EDQUOT, "quota")],
)
def test_h5py_s_failed_flush_is_output_refused_in_the_api(
    tmp_path: Path, monkeypatch, code: int, words: str
) -> None:
    """h5py reports a flush that found no room as a RuntimeError holding the errno; the
    API raised it as is (the CLI named it), now OutputRefusedError as an OSError would."""
    from rltscan.io import atomic

    path = copy_sample(FLAT, tmp_path)
    before = path.read_bytes()

    close = h5py.File.close

    def failed(self):  # the temp file's close, where HDF5 flushes what it holds
        if ".rltscan-" in self.filename:
            close(self)
            raise RuntimeError(H5PY_FLUSH_FAILED.format(code))
        close(self)

    monkeypatch.setattr(h5py.File, "close", failed)
    monkeypatch.setattr(atomic, "_file_size_limit", lambda: 1 << 40)  # EFBIG: ulimit -f
    with pytest.raises(OutputRefusedError, match=words):
        run("gae", path)
    monkeypatch.undo()
    assert path.read_bytes() == before


def test_a_file_past_the_file_size_limit_is_refused_before_writing(tmp_path: Path) -> None:
    """``ulimit -f`` below the copy an in-place rewrite starts from: refused up front."""
    pytest.importorskip("resource")
    path = copy_sample(FLAT, tmp_path)
    script = (
        "import resource, signal, sys\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
        "from rltscan import api\n"
        "from rltscan.errors import OutputRefusedError\n"
        "try:\n"
        "    api.run('gae', sys.argv[1], device='cpu')\n"
        "except OutputRefusedError as err:\n"
        "    print(err)\n"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "file size limit (ulimit -f) of 4,096 bytes" in done.stdout


def test_a_file_too_large_for_its_filesystem_names_no_ulimit(tmp_path: Path, monkeypatch) -> None:
    """EFBIG with no ``ulimit -f`` in force is the filesystem's largest file (FAT32's 4 GiB
    on a USB disk): the message said to raise ``ulimit -f``, which changes nothing there."""
    from rltscan.io import atomic

    path = copy_sample(FLAT, tmp_path)
    close = h5py.File.close

    def failed(self):
        if ".rltscan-" in self.filename:
            close(self)
            raise RuntimeError(H5PY_FLUSH_FAILED.format(errno.EFBIG))
        close(self)

    monkeypatch.setattr(h5py.File, "close", failed)
    monkeypatch.setattr(atomic, "_file_size_limit", lambda: None)
    with pytest.raises(OutputRefusedError) as err:
        run("gae", path)
    assert "ulimit" not in str(err.value) and "another filesystem" in str(err.value)
