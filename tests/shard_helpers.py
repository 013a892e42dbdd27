"""Sharded Parquet datasets for the shard-engine tests: one table cut into files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

COMMANDS = ["gae", "td-lambda", "returns", "vtrace", "retrace", "traces", "prefix-sum"]
OUTPUTS = {
    "gae": ("advantages", "value_targets"),
    "td-lambda": ("lambda_returns",),
    "returns": ("returns",),
    "vtrace": ("vs", "pg_advantages"),
    "retrace": ("retrace_targets", "advantages"),
    "traces": ("eligibility_traces",),
    "prefix-sum": ("prefix_sums",),
}
PARAMS = {
    "gae": {"gamma": 0.97, "lam": 0.9},
    "td-lambda": {"gamma": 0.97, "lam": 0.9},
    "returns": {"gamma": 0.97},
    "vtrace": {"gamma": 0.97, "rho_clip": 1.3, "c_clip": 0.9},
    "retrace": {"gamma": 0.97, "lam": 0.9},
    "traces": {"gamma": 0.97, "lam": 0.9},
    "prefix-sum": {},
}
# uneven shards: a one-row shard and an empty one in the middle
SIZES = (53, 1, 0, 97, 31, 140)


def kwargs(command: str) -> dict:
    """``rltscan.run`` arguments: the truncations bootstrap from 0, so the next value
    inside an episode (values_{t+1}) is what crosses shard edges."""
    out: dict = {"params": PARAMS[command]}
    if command in ("gae", "td-lambda", "returns", "vtrace"):
        out["missing_bootstrap"] = "zero"
    return out


def table(n: int, p_done: float, seed: int = 0) -> pa.Table:
    """Every column any estimator reads (no next_values: V_{t+1} is the next row's
    value), plus a column nothing reads, with schema metadata to be kept."""
    rng = np.random.default_rng(seed)
    u = rng.random(n)

    def f() -> np.ndarray:
        return rng.standard_normal(n).astype(np.float32)

    def lp() -> np.ndarray:
        return np.log(rng.uniform(0.05, 1.0, n)).astype(np.float32)

    cols = {
        "rewards": f(),
        "values": f(),
        "terminals": u < p_done / 2,
        "timeouts": (u >= p_done / 2) & (u < p_done),
        "logp_behavior": lp(),
        "logp_target": lp(),
        "q_values": f(),
        "next_expected_q": f(),
        "v_pi": f(),
        "obs": rng.integers(0, 1 << 30, n),
    }
    return pa.table(cols).replace_schema_metadata({"origin": "shard test"})


def write_shards(
    directory: Path,
    whole: pa.Table,
    sizes: tuple[int, ...] = SIZES,
    name: str = "part-{}.parquet",
    row_group: int = 13,
) -> list[Path]:
    """``whole`` cut into files of ``sizes`` rows (small row groups: windows cross them)."""
    directory.mkdir(parents=True, exist_ok=True)
    assert sum(sizes) == whole.num_rows
    paths, start = [], 0
    for i, size in enumerate(sizes):
        path = directory / name.format(i)
        pq.write_table(whole.slice(start, size), path, row_group_size=row_group)
        paths.append(path)
        start += size
    return paths


def concat(paths: list[Path], column: str) -> np.ndarray:
    return np.concatenate([pq.read_table(p).column(column).to_numpy() for p in paths])


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (hidden ones included) with a hash of its bytes."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }
