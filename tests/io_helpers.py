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
