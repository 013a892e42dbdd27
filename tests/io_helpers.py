"""Shared helpers for the io/CLI tests: sample copies, readers, a column fingerprint, a
CLI runner."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_data"
FLAT = SAMPLES / "cartpole_flat.h5"
BUFFER = SAMPLES / "cartpole_buffer.h5"
PARQUET = SAMPLES / "cartpole.parquet"
MINARI = SAMPLES / "cartpole_minari"
B, T = 4, 256  # sample_data/make_samples.py


def copy_sample(src: Path, tmp: Path) -> Path:
    dst = tmp / src.name
    if src.is_dir():
        shutil.copytree(src, dst)
    else:
        shutil.copy(src, dst)
    return dst


def fresh(src: Path, directory: Path) -> Path:
    """A copy of a file or directory in ``directory`` (made if missing): one per run, so
    every run starts from the untouched input."""
    directory.mkdir(parents=True, exist_ok=True)
    return copy_sample(src, directory)


def h5_columns(path: Path) -> dict[str, np.ndarray]:
    """Every dataset of an HDF5 file by path."""
    out: dict[str, np.ndarray] = {}
    with h5py.File(path, "r") as f:

        def visit(name: str, obj: object) -> None:
            if isinstance(obj, h5py.Dataset):
                out[name] = obj[()]

        f.visititems(visit)
    return out


def fingerprint(columns: dict[str, np.ndarray]) -> dict[str, str]:
    return {
        k: hashlib.sha256(np.ascontiguousarray(v).tobytes() + str(v.dtype).encode()).hexdigest()
        for k, v in columns.items()
    }


def digest(path: Path) -> str:
    """Bytes of a file, or of every file under a directory (names included)."""
    h = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        h.update(str(f.relative_to(path) if path.is_dir() else f.name).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def parquet_columns(path: Path) -> dict[str, np.ndarray]:
    table = pq.read_table(path)
    return {n: table.column(n).to_numpy() for n in table.column_names}


def minari_output(root: Path, name: str) -> np.ndarray:
    """A per-episode output concatenated in numeric episode order."""
    with h5py.File(root / "data" / "main_data.hdf5", "r") as f:
        keys = sorted(f, key=lambda k: int(k.split("_")[1]))
        return np.concatenate([f[k][name][()] for k in keys])


def time_major_to_flat(a: np.ndarray) -> np.ndarray:
    """[T, B] → the flat file's order (stream 0, then stream 1, ...)."""
    return np.swapaxes(a, 0, 1).reshape(-1)


def run_cli(*args: str, in_process: bool = False) -> subprocess.CompletedProcess:
    """``python -m rltscan ARGS``; with ``in_process``, the same command line through
    typer's CliRunner (the parsing, the run and the exit code without a second Python
    and torch import: one real process per test is enough for what a process adds)."""
    if in_process:
        from typer.testing import CliRunner

        from rltscan import cli

        res = CliRunner().invoke(cli.app, list(args))
        return subprocess.CompletedProcess(args, res.exit_code, res.stdout, res.stderr)
    return subprocess.run(
        [sys.executable, "-m", "rltscan", *args], capture_output=True, text=True, timeout=300
    )


def rltscan_process(env: dict[str, str], *args: str | Path) -> subprocess.CompletedProcess:
    """``python -m rltscan ARGS`` in ``env``, its output captured as bytes."""
    return subprocess.run(
        [sys.executable, "-m", "rltscan", *map(str, args)],
        env=env,
        capture_output=True,
        timeout=300,
    )


# A ``python -c`` program that runs the CLI (its arguments) and SIGKILLs itself after the
# ``$KILL_AFTER``-th rename that follows the writing of a commit journal.
KILL_AFTER_RENAMES = """
import os, signal, sys
import rltscan.io.shards as s
journal, state = s.write_journal, {"armed": False, "moved": 0}
def write_journal(stage, moves):
    journal(stage, moves)
    state["armed"] = True
real_replace = os.replace
def replace(a, b, **k):
    real_replace(a, b, **k)
    if state["armed"]:
        state["moved"] += 1
        if state["moved"] == int(os.environ["KILL_AFTER"]):
            os.kill(os.getpid(), signal.SIGKILL)
s.write_journal = write_journal
os.replace = replace
from rltscan.cli import main
sys.argv = ["rltscan", *sys.argv[1:]]
main()
"""


def bare_dones_buffer(path: Path, steps: int) -> Path:
    """A time-major ``[steps, 2]`` HDF5 buffer with rewards and an all-zero ``dones``
    alone: nothing says whether "dones" means ended or starts."""
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones((steps, 2), np.float32)
        f["dones"] = np.zeros((steps, 2), bool)
        f.attrs["layout"] = "time_major"
    return path


def big_flat_h5(path: Path, n: int) -> None:
    """A flat D4RL-style HDF5 of ``n`` random steps (seed 0) with 8-wide observations:
    big enough that writing it back takes a while."""
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        f["rewards"] = rng.normal(size=n).astype(np.float32)
        f["terminals"] = rng.random(n) < 0.01
        f["timeouts"] = rng.random(n) < 0.005
        f["values"] = rng.normal(size=n).astype(np.float32)
        f["next_values"] = rng.normal(size=n).astype(np.float32)
        f["observations"] = rng.normal(size=(n, 8)).astype(np.float32)


def big_flat_parquet(
    path: Path, n: int, row_groups: int, metadata: dict[str, str] | None = None
) -> None:
    """The Parquet counterpart of :func:`big_flat_h5` (8 observation columns first) in
    ``row_groups`` row groups, with the schema metadata given, if any."""
    rng = np.random.default_rng(0)
    cols = {f"obs_{i}": rng.normal(size=n).astype(np.float32) for i in range(8)}
    cols |= {
        "reward": rng.normal(size=n).astype(np.float32),
        "terminated": rng.random(n) < 0.01,
        "truncated": rng.random(n) < 0.005,
        "value": rng.normal(size=n).astype(np.float32),
        "next_value": rng.normal(size=n).astype(np.float32),
    }
    table = pa.table(cols)
    if metadata is not None:
        table = table.replace_schema_metadata(metadata)
    pq.write_table(table, path, row_group_size=n // row_groups)


@contextlib.contextmanager
def small_tmpfs(parent: Path, size: int) -> Iterator[Path]:
    """A tmpfs of ``size`` bytes mounted at ``parent/small`` (a disk that fills up),
    unmounted afterwards; the test is skipped where mounting needs root or fails."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = parent / "small"
    mnt.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True
    )
    if made.returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)
