#!/usr/bin/env python3
"""File-to-file benchmark (issue 5, item 4): rltscan against the I/O floor and a naive script.

    python bench/e2e.py --steps 100000000 --formats hdf5,parquet --estimators gae,returns \
        --devices cpu,cuda --out DIR [--workdir DIR] [--chunk-steps N] [--naive-max-steps N] \
        [--repeat 1] [--budget-s 540]

One flat D4RL-style file per format is generated (cached in --workdir by steps, seed and
chunk), then for every format x estimator these cases run, each in a fresh `python`
subprocess, timed from spawn to reap (wall clock, interpreter start and imports included)
with the child's own peak RSS from ``os.wait4``:

  io-floor            read only the needed columns chunk by chunk and write as many f32 output
                      columns to a new file, same library (h5py / pyarrow), no compute
  io-floor-inplace    what an in-place write-back must do at least: HDF5 copies the whole
                      file and writes the outputs into the copy; Parquet reads every column and
                      rewrites the table with the outputs appended
  rltscan-<dev>       python -m rltscan <est> FILE --device <dev> --json -o NEW_FILE
  rltscan-<dev>-inplace   the same into a copy of FILE (copy made before timing)
  naive               whole columns loaded with h5py / pyarrow, a per-step Python loop over
                      NumPy arrays, outputs written to a new file with the same library

Results: DIR/e2e.json and DIR/e2e.md (the table is printed too). Correctness: rltscan's output
on a separate small file is compared in full with the loop (float64), and the last steps of
every output file of the timed runs are compared with the loop on the same suffix of the input
(a suffix ending in a truncation with a bootstrap is self-contained for backward estimators).
Cases that would not fit in --budget-s are skipped and recorded as skipped.

The internal modes ``--floor-case KIND`` and ``--naive-case`` run one case (the parent
spawns them); they import only numpy plus h5py or pyarrow, like a user script would.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
GEN_VERSION = 1  # bump when the generator changes: cached files are keyed by it
GAMMA, LAM = 0.99, 0.95
CHECK_STEPS = 100_000  # the separate correctness file, and the verified suffix of each output
PROBE_STEPS = 1_000_000  # the naive loop is timed on this many steps to estimate a skipped run
TOL = 1e-4  # |got - ref| <= TOL * |ref| + TOL * max(1, max|ref|)
MARGIN_S = 5.0  # budget kept back for the reports

INPUTS = {
    "gae": ("rewards", "values", "next_values", "terminals", "timeouts"),
    "returns": ("rewards", "next_values", "terminals", "timeouts"),
}
OUTPUTS = {"gae": ("advantages", "value_targets"), "returns": ("returns",)}
SUFFIX = {"hdf5": ".h5", "parquet": ".parquet"}
# Seconds per step assumed for a case kind before one has been measured (generous: CPU, 2 cores).
PRIOR_S_PER_STEP = {
    "io-floor": 40e-9,
    "io-floor-inplace": 80e-9,
    "rltscan": 500e-9,
    "rltscan-inplace": 600e-9,
    "naive": 3e-6,
}
FLOOR_TEXT = {
    "io-floor": (
        "read only the columns the estimator reads ({cols}) chunk by chunk "
        "(HDF5: {chunk}-step slices; Parquet: row groups) and write {nout} f32 output "
        "column(s) of the same length to a NEW file with the same library (h5py datasets "
        "chunked like the input / one pyarrow ParquetWriter, default codec); the rewards "
        "chunk is written as each output, no compute. This is the issue's floor."
    ),
    "io-floor-inplace": (
        "the least an in-place write-back does: HDF5 = shutil.copyfile of the whole file "
        "to a temp name, write the outputs into the copy chunk by chunk, os.replace over the "
        "file; Parquet = read every column row group by row group, write a new file with the "
        "outputs appended, os.replace over the file. Runs on a copy made before timing."
    ),
}


# ---------------------------------------------------------------------------------------------
# the two estimators as a user writes them: a per-step loop over NumPy arrays


def naive_gae(r, v, nv, term, trunc, gamma=GAMMA, lam=LAM):
    """GAE backward over one flat sequence; a terminal step cuts and does not bootstrap, a
    truncated step (and the last row) cuts and bootstraps from next_values."""
    n = len(r)
    adv = np.zeros(n, dtype=r.dtype)
    last = 0.0
    for t in range(n - 1, -1, -1):
        if term[t]:
            last = r[t] - v[t]
        elif trunc[t] or t == n - 1:
            last = r[t] + gamma * nv[t] - v[t]
        else:
            last = r[t] + gamma * v[t + 1] - v[t] + gamma * lam * last
        adv[t] = last
    return {"advantages": adv, "value_targets": adv + v}


def naive_returns(r, nv, term, trunc, gamma=GAMMA):
    """Discounted reward-to-go; bootstraps from next_values at truncations and the last row."""
    n = len(r)
    ret = np.zeros(n, dtype=r.dtype)
    g = 0.0
    for t in range(n - 1, -1, -1):
        if term[t]:
            g = r[t]
        elif trunc[t] or t == n - 1:
            g = r[t] + gamma * nv[t]
        else:
            g = r[t] + gamma * g
        ret[t] = g
    return {"returns": ret}


def naive_compute(est: str, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if est == "gae":
        return naive_gae(
            cols["rewards"],
            cols["values"],
            cols["next_values"],
            cols["terminals"],
            cols["timeouts"],
        )
    return naive_returns(cols["rewards"], cols["next_values"], cols["terminals"], cols["timeouts"])


def reference(est: str, cols: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The same loop in float64 (the oracle for the checks)."""
    return naive_compute(
        est, {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in cols.items()}
    )


def compare(got: np.ndarray, ref: np.ndarray) -> float:
    """Largest error in units of the tolerance (<= 1 passes); inf on a shape mismatch/NaN."""
    got = np.asarray(got, np.float64)
    if got.shape != ref.shape:
        return float("inf")
    scale = TOL * max(1.0, float(np.abs(ref).max()) if ref.size else 1.0)
    err = np.abs(got - ref) / (TOL * np.abs(ref) + scale)
    worst = float(err.max()) if err.size else 0.0
    return worst if np.isfinite(worst) else float("inf")


# ---------------------------------------------------------------------------------------------
# file access (h5py / pyarrow imported only where used)


def read_columns(fmt: str, path: Path, names, start: int = 0, stop: int | None = None):
    """Whole columns (or rows [start, stop)) as NumPy arrays."""
    if fmt == "hdf5":
        import h5py

        with h5py.File(path, "r") as f:
            return {n: f[n][start:stop] for n in names}
    import pyarrow.parquet as pq

    if start == 0 and stop is None:
        table = pq.read_table(path, columns=list(names))
        return {n: table.column(n).to_numpy() for n in names}
    pf = pq.ParquetFile(path)
    n_rows = pf.metadata.num_rows
    stop = n_rows if stop is None else min(stop, n_rows)
    groups, first, row = [], None, 0
    for i in range(pf.metadata.num_row_groups):
        size = pf.metadata.row_group(i).num_rows
        if row + size > start and row < stop:
            groups.append(i)
            first = row if first is None else first
        row += size
    table = pf.read_row_groups(groups, columns=list(names))
    table = table.slice(start - (first or 0), stop - start)
    return {n: table.column(n).to_numpy() for n in names}


def num_steps(fmt: str, path: Path, name: str = "rewards") -> int:
    if fmt == "hdf5":
        import h5py

        with h5py.File(path, "r") as f:
            return int(f[name].shape[0])
    import pyarrow.parquet as pq

    return int(pq.ParquetFile(path).metadata.num_rows)


def write_new(fmt: str, path: Path, outputs: dict[str, np.ndarray]) -> None:
    if fmt == "hdf5":
        import h5py

        with h5py.File(path, "w") as f:
            for name, arr in outputs.items():
                f.create_dataset(name, data=arr)
        return
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table(outputs), path)


# ---------------------------------------------------------------------------------------------
# generation


def episode_plan(steps: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Last row of every episode (lengths 200-1000) and whether it is a terminal; the last
    row of the file is a timeout."""
    rng = np.random.default_rng([seed, 0])
    lengths = rng.integers(200, 1001, size=steps // 200 + 2)
    ends = np.cumsum(lengths) - 1
    ends = ends[ends < steps - 1]
    terminal = rng.random(ends.size) < 0.5
    return np.append(ends, steps - 1), np.append(terminal, False)


def _draw(seed: int, k: int, size: int):
    rng = np.random.default_rng([seed, 1, k])
    rewards = rng.standard_normal(size, dtype=np.float32)
    values = rng.standard_normal(size, dtype=np.float32) * np.float32(3.0) + np.float32(1.0)
    boot = rng.standard_normal(size, dtype=np.float32) * np.float32(3.0) + np.float32(1.0)
    return rewards, values, boot


def generate(workdir: Path, steps: int, seed: int, chunk: int) -> dict[str, Path]:
    """The flat HDF5 file and the Parquet file with the same columns (cached)."""
    stem = f"e2e-n{steps}-s{seed}-c{chunk}-g{GEN_VERSION}"
    paths = {fmt: workdir / f"{stem}{suf}" for fmt, suf in SUFFIX.items()}
    if all(p.exists() for p in paths.values()):
        return paths
    import h5py
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = {fmt: p.with_name(p.name + ".tmp") for fmt, p in paths.items()}
    ends, terminal = episode_plan(steps, seed)
    schema = pa.schema(
        [
            ("rewards", pa.float32()),
            ("values", pa.float32()),
            ("next_values", pa.float32()),
            ("terminals", pa.bool_()),
            ("timeouts", pa.bool_()),
        ]
    )
    h5chunk = (min(chunk, steps),)
    with h5py.File(tmp["hdf5"], "w") as h5, pq.ParquetWriter(tmp["parquet"], schema) as pw:
        dsets = {
            f.name: h5.create_dataset(f.name, shape=(steps,), dtype=dtype, chunks=h5chunk)
            for f, dtype in zip(schema, ("f4", "f4", "f4", "bool", "bool"), strict=True)
        }
        nchunks = -(-steps // chunk)
        cur = _draw(seed, 0, min(chunk, steps))
        for k in range(nchunks):
            a, b = k * chunk, min((k + 1) * chunk, steps)
            nxt = _draw(seed, k + 1, min(chunk, steps - b)) if b < steps else None
            rewards, values, boot = cur
            lo, hi = np.searchsorted(ends, [a, b])
            local, term_kind = ends[lo:hi] - a, terminal[lo:hi]
            terminals = np.zeros(b - a, bool)
            timeouts = np.zeros(b - a, bool)
            terminals[local[term_kind]] = True
            timeouts[local[~term_kind]] = True
            next_values = np.empty_like(values)
            next_values[:-1] = values[1:]
            next_values[-1] = nxt[1][0] if nxt is not None else boot[-1]
            cut = terminals | timeouts  # V(s_{t+1}) of the ended episode, not the next row
            next_values[cut] = boot[cut]
            cols = {
                "rewards": rewards,
                "values": values,
                "next_values": next_values,
                "terminals": terminals,
                "timeouts": timeouts,
            }
            for name, arr in cols.items():
                dsets[name][a:b] = arr
            pw.write_table(pa.table(cols, schema=schema), row_group_size=b - a)
            cur = nxt
    for fmt in paths:
        os.replace(tmp[fmt], paths[fmt])
    return paths


def warm(path: Path) -> float:
    """Read the whole file once (untimed case; leaves it in the page cache)."""
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        buf = bytearray(16 << 20)
        while fh.readinto(buf):
            pass
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# the child cases (run in a fresh process by the parent)


def floor_case(kind: str, fmt: str, est: str, inp: Path, out: Path, chunk: int) -> dict:
    """io-floor: needed columns -> new file. io-floor-inplace: ``out`` is a copy of the input
    that gets replaced (HDF5: copy + outputs; Parquet: all columns + outputs)."""
    t0 = time.perf_counter()
    cols, outs = INPUTS[est], OUTPUTS[est]
    if fmt == "hdf5":
        import h5py

        tmp = out.with_name(out.name + ".tmp")
        if kind == "io-floor-inplace":
            shutil.copyfile(out, tmp)
            src_path, mode = tmp, "r+"
        else:
            src_path, mode = inp, "r"
        with h5py.File(src_path, mode) as f:
            g = f if kind == "io-floor-inplace" else h5py.File(tmp, "w")
            try:
                n = f["rewards"].shape[0]
                c = min(chunk, n)
                dsets = {o: g.create_dataset(o, shape=(n,), dtype="f4", chunks=(c,)) for o in outs}
                for a in range(0, n, c):
                    data = {name: f[name][a : a + c] for name in cols}
                    for o in outs:
                        dsets[o][a : a + c] = data["rewards"]
            finally:
                if g is not f:
                    g.close()
        os.replace(tmp, out)
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        tmp = out.with_name(out.name + ".tmp")
        src = out if kind == "io-floor-inplace" else inp
        pf = pq.ParquetFile(src)
        read_cols = None if kind == "io-floor-inplace" else list(cols)
        out_fields = [pa.field(o, pa.float32()) for o in outs]
        schema = pa.schema(list(pf.schema_arrow) + out_fields if read_cols is None else out_fields)
        with pq.ParquetWriter(tmp, schema) as w:
            for i in range(pf.metadata.num_row_groups):
                t = pf.read_row_group(i, columns=read_cols)
                r = t.column("rewards")
                if read_cols is None:
                    for o in outs:
                        t = t.append_column(o, r)
                else:
                    t = pa.table({o: r for o in outs})
                w.write_table(t, row_group_size=max(t.num_rows, 1))
        os.replace(tmp, out)
    return {"inprocess_s": time.perf_counter() - t0}


def naive_case(fmt: str, est: str, inp: Path, out: Path, limit: int | None) -> dict:
    t0 = time.perf_counter()
    cols = read_columns(fmt, inp, INPUTS[est], 0, limit)
    t1 = time.perf_counter()
    outs = naive_compute(est, cols)
    t2 = time.perf_counter()
    write_new(fmt, out, outs)
    t3 = time.perf_counter()
    return {
        "steps": len(cols["rewards"]),
        "read_s": t1 - t0,
        "compute_s": t2 - t1,
        "write_s": t3 - t2,
        "inprocess_s": t3 - t0,
    }


# ---------------------------------------------------------------------------------------------
# running one child: wall clock and its own peak RSS


# The child is forked from a small launcher, not from this process: on Linux a child's
# ru_maxrss starts at the high-water mark of the address space it was forked from (exec keeps
# it), so a child forked from the parent (torch imported, arrays held) would report at least the
# parent's RSS. The launcher (python -S, ~13 MiB) forks, execs the case, times fork-to-reap and
# reports os.wait4's rusage of that one child.
LAUNCHER = r"""
import json, os, sys, time
cmd, out, err = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
fo = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
fe = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
t0 = time.perf_counter()
pid = os.fork()
if pid == 0:
    try:
        os.dup2(fo, 1)
        os.dup2(fe, 2)
        os.execvp(cmd[0], cmd)
    finally:
        os._exit(127)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
rc = os.waitstatus_to_exitcode(status)
print(json.dumps({"rc": rc, "wall_s": wall, "maxrss_kib": ru.ru_maxrss}))
"""


def spawn(cmd: list[str], workdir: Path, timeout_s: float, tree: Path = REPO) -> dict:
    """Run ``cmd`` in a fresh process: wall seconds from fork to reap, its own peak RSS.
    ``tree``: the rltscan checkout it imports (first on the path, and its cwd)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tree), *filter(None, [env.get("PYTHONPATH")])])
    out_path, err_path = workdir / "stdout.txt", workdir / "stderr.txt"
    launcher = [sys.executable, "-S", "-c", LAUNCHER, json.dumps(cmd), str(out_path), str(err_path)]
    proc = subprocess.Popen(
        launcher,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=tree,
        start_new_session=True,  # its own process group: the launcher and the case
        text=True,
    )
    killed = False
    try:
        report, problem = proc.communicate(timeout=max(timeout_s, 1.0))
    except subprocess.TimeoutExpired:
        killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        report, problem = proc.communicate()
    try:
        info = json.loads(report)
    except json.JSONDecodeError:
        info = {"rc": proc.returncode if not killed else -9, "wall_s": float(timeout_s)}
        info["maxrss_kib"] = 0
        if not killed:
            raise RuntimeError(f"launcher failed: {problem.strip()[-500:]}") from None
    return {
        "rc": info["rc"],
        "wall_s": info["wall_s"],
        "peak_rss_bytes": int(info["maxrss_kib"]) * 1024,  # KiB on Linux
        "killed": killed,
        "stdout": out_path.read_text(errors="replace") if out_path.exists() else "",
        "stderr": err_path.read_text(errors="replace") if err_path.exists() else "",
    }


def last_line(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    tail = " | ".join(lines[-3:]) if lines else ""
    return tail[-limit:]


# ---------------------------------------------------------------------------------------------
# the parent


class Budget:
    def __init__(self, seconds: float) -> None:
        self.total, self.t0 = seconds, time.perf_counter()

    def used(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.total - self.used() - MARGIN_S


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.budget = Budget(args.budget_s)
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.workdir = Path(args.workdir or Path(tempfile.gettempdir()) / "rltscan-e2e").resolve()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.runs = Path(tempfile.mkdtemp(prefix="runs-", dir=self.workdir))
        self.formats = [f for f in args.formats.split(",") if f]
        self.estimators = [e for e in args.estimators.split(",") if e]
        self.devices = [d for d in args.devices.split(",") if d]
        self.chunk = args.chunk_steps or args.gen_chunk
        self.cli_chunk = args.chunk_steps  # set to None if the CLI rejects --chunk-steps
        self.notes: list[str] = []
        self.cases: list[dict] = []
        self.rates: dict[tuple[str, str], float] = {}  # (kind, fmt) -> seconds per step
        self.startup: dict[str, dict] = {}
        self.failed = False
        self.cuda_ok = False

    # ---- helpers
    def case_dir(self, name: str) -> Path:
        d = Path(tempfile.mkdtemp(prefix=name + "-", dir=self.runs))
        return d

    def rltscan_cmd(self, est: str, path: Path, device: str, out: Path | None) -> list[str]:
        cmd = [sys.executable, "-m", "rltscan", est, str(path), "--device", device, "--json"]
        cmd += ["--gamma", str(GAMMA)] + (["--lam", str(LAM)] if est == "gae" else [])
        if out is not None:
            cmd += ["-o", str(out)]
        if self.cli_chunk:
            cmd += ["--chunk-steps", str(self.cli_chunk)]
        return cmd

    def self_cmd(self, *extra: str) -> list[str]:
        return [sys.executable, str(Path(__file__).resolve()), *extra]

    def family(self, kind: str) -> str:
        if kind.startswith("rltscan"):
            return "rltscan-inplace" if kind.endswith("inplace") else "rltscan"
        return kind

    def estimate(self, kind: str, fmt: str, steps: int) -> float:
        fam = self.family(kind)
        rate = self.rates.get((kind, fmt))
        if rate is None:
            others = [v for (k, _), v in self.rates.items() if k == kind]
            rate = 1.5 * max(others) if others else PRIOR_S_PER_STEP[fam]
        start = self.startup.get("rltscan" if fam.startswith("rltscan") else "python", {})
        return float(start.get("wall_s", 2.0)) + steps * rate

    def learn(self, kind: str, fmt: str, steps: int, wall: float) -> None:
        fam = "rltscan" if kind.startswith("rltscan") else "python"
        start = float(self.startup.get(fam, {}).get("wall_s", 0.0))
        self.rates[(kind, fmt)] = max(wall - start, 0.0) / max(steps, 1)

    # ---- stages
    def machine(self) -> dict[str, Any]:
        import h5py
        import pyarrow
        import torch

        info: dict[str, Any] = {
            "hostname": socket.gethostname(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpu_count": os.cpu_count(),
            "cpu_affinity": len(os.sched_getaffinity(0)),
            "cpu_model": _cpu_model(),
            "mem_total_bytes": _mem_total(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "versions": {
                "numpy": np.__version__,
                "torch": torch.__version__,
                "h5py": h5py.__version__,
                "hdf5": h5py.version.hdf5_version,
                "pyarrow": pyarrow.__version__,
            },
            "git": _git(),
            "disk_free_bytes": shutil.disk_usage(self.workdir).free,
            "workdir": str(self.workdir),
            "cuda_available": torch.cuda.is_available(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        }
        try:
            import triton

            info["versions"]["triton"] = triton.__version__
        except Exception:
            info["versions"]["triton"] = None
        try:
            sys.path.insert(0, str(REPO))
            import rltscan

            info["versions"]["rltscan"] = rltscan.__version__
        except Exception as err:
            info["versions"]["rltscan"] = f"import failed: {err}"
        self.cuda_ok = bool(info["cuda_available"])
        return info

    def measure_startup(self) -> None:
        d = self.case_dir("startup")
        probes = {
            "rltscan": [sys.executable, "-m", "rltscan", "--version"],
            "python": [sys.executable, "-c", "import numpy, h5py, pyarrow.parquet"],
        }
        if self.cuda_ok:  # issue 12's target: wall <= 1.25 x (in-place floor + these)
            probes["torch"] = [sys.executable, "-c", "import torch"]
            probes["torch-cuda"] = [
                sys.executable,
                "-c",
                "import torch; torch.zeros(1, device='cuda'); torch.cuda.synchronize()",
            ]
        for name, cmd in probes.items():
            res = spawn(cmd, d, min(60.0, max(self.budget.left(), 1.0)))
            self.startup[name] = {
                "command": " ".join(cmd[1:]),
                "wall_s": res["wall_s"],
                "peak_rss_bytes": res["peak_rss_bytes"],
                "rc": res["rc"],
            }
        shutil.rmtree(d, ignore_errors=True)

    def check_small(self, paths: dict[str, Path], devices: list[str]) -> dict:
        """rltscan -o on the small file, in full, against the float64 loop."""
        results: list[dict] = []
        steps = num_steps("hdf5", paths["hdf5"])
        for est in self.estimators:
            ref = reference(est, read_columns("hdf5", paths["hdf5"], INPUTS[est]))
            for fmt in self.formats:
                for dev in devices:
                    d = self.case_dir("check")
                    out = d / ("out" + SUFFIX[fmt])
                    res = spawn(self.rltscan_cmd(est, paths[fmt], dev, out), d, 300.0)
                    if res["rc"] == 2 and self.cli_chunk and "chunk-steps" in res["stderr"]:
                        msg = last_line(res["stderr"])
                        self.notes.append(
                            f"the CLI rejected --chunk-steps {self.cli_chunk} (rc 2: {msg}); "
                            "rltscan cases ran without it"
                        )
                        self.cli_chunk = None
                        res = spawn(self.rltscan_cmd(est, paths[fmt], dev, out), d, 300.0)
                    entry: dict[str, Any] = {"estimator": est, "format": fmt, "device": dev}
                    if res["rc"] != 0:
                        entry.update(
                            passed=False, error=f"rc {res['rc']}: {last_line(res['stderr'])}"
                        )
                    else:
                        got = read_columns(fmt, out, OUTPUTS[est])
                        errs = {k: compare(got[k], ref[k]) for k in OUTPUTS[est]}
                        entry.update(passed=all(e <= 1.0 for e in errs.values()), err_over_tol=errs)
                    results.append(entry)
                    shutil.rmtree(d, ignore_errors=True)
        passed = all(r["passed"] for r in results)
        return {
            "steps": steps,
            "tolerance": f"|got - ref| <= {TOL} * |ref| + {TOL} * max(1, max|ref|)",
            "reference": "the naive loop of this script in float64",
            "passed": passed,
            "results": results,
        }

    def suffix_reference(self, path: Path, steps: int) -> dict[str, dict[str, np.ndarray]]:
        k = min(CHECK_STEPS, steps)
        refs = {}
        for est in self.estimators:
            cols = read_columns("hdf5", path, INPUTS[est], steps - k, steps)
            refs[est] = reference(est, cols)
        return refs

    def verify(self, fmt: str, est: str, out: Path, steps: int, refs) -> dict:
        k = min(CHECK_STEPS, steps)
        try:
            n = num_steps(fmt, out, OUTPUTS[est][0])
            if n != steps:
                return {"passed": False, "error": f"output has {n} rows, input {steps}"}
            got = read_columns(fmt, out, OUTPUTS[est], steps - k, steps)
        except Exception as err:
            return {"passed": False, "error": f"{type(err).__name__}: {err}"}
        errs = {name: compare(got[name], refs[est][name]) for name in OUTPUTS[est]}
        return {"passed": all(e <= 1.0 for e in errs.values()), "suffix": k, "err_over_tol": errs}

    def run_case(self, kind: str, fmt: str, est: str, steps: int, path: Path, refs) -> dict:
        entry: dict[str, Any] = {"case": kind, "format": fmt, "estimator": est, "steps": steps}
        device = kind.split("-")[1] if kind.startswith("rltscan") else None
        if device:
            entry["device"] = device
        inplace = kind.endswith("inplace")
        size = path.stat().st_size
        copy_s = size / 0.3e9 if inplace else 0.0  # untimed setup, still spent from the budget
        est_s = (self.estimate(kind, fmt, steps) + copy_s) * self.args.repeat
        entry["estimated_s"] = round(est_s, 2)
        if est_s > self.budget.left():
            entry.update(
                status="skipped",
                reason=f"budget: estimated {est_s:.0f} s, {max(self.budget.left(), 0):.0f} s left",
            )
            return entry
        walls, rss, inproc = [], [], []
        for _ in range(self.args.repeat):
            d = self.case_dir(kind)
            target = d / ("data" + SUFFIX[fmt]) if inplace else d / ("out" + SUFFIX[fmt])
            if inplace:
                shutil.copyfile(path, target)
            if kind.startswith("rltscan"):
                cmd = self.rltscan_cmd(
                    est, target if inplace else path, device, None if inplace else target
                )
            elif kind == "naive":
                cmd = self.self_cmd("--naive-case", "--format", fmt, "--estimator", est)
                cmd += ["--input", str(path), "--output", str(target)]
            else:
                cmd = self.self_cmd("--floor-case", kind, "--format", fmt, "--estimator", est)
                cmd += ["--input", str(path), "--output", str(target), "--chunk", str(self.chunk)]
            entry["command"] = " ".join(
                ["python", *(c.replace(str(self.runs), "$RUNS") for c in cmd[1:])]
            )
            res = spawn(cmd, d, self.budget.left())
            if res["killed"]:
                entry.update(
                    status="killed",
                    reason=f"killed after {res['wall_s']:.0f} s: over the remaining budget",
                )
                shutil.rmtree(d, ignore_errors=True)
                return entry
            if res["rc"] != 0:
                entry.update(status="failed", rc=res["rc"], error=last_line(res["stderr"]))
                self.failed = True
                shutil.rmtree(d, ignore_errors=True)
                return entry
            try:
                report = json.loads(res["stdout"])
            except json.JSONDecodeError:
                report = {}
                if kind.startswith("rltscan"):
                    entry["json_error"] = "stdout was not one JSON object"
            if kind.startswith("rltscan"):
                entry["rltscan"] = {
                    key: report.get(key)
                    for key in ("backend", "dtype", "layout", "columns", "total_seconds", "output")
                }
                entry["rltscan"]["stages"] = {
                    s["name"]: s["seconds"] for s in report.get("stages", []) if not s["skipped"]
                }
                stream = report.get("streaming") or {}
                if stream:
                    entry["streaming"] = stream
                for key in ("chunk_steps", "peak_device_bytes"):
                    value = report.get(key, stream.get(key))
                    if value is not None:
                        entry[key] = value
                if report.get("total_seconds") is not None:
                    inproc.append(float(report["total_seconds"]))
            elif report.get("inprocess_s") is not None:
                inproc.append(float(report["inprocess_s"]))
            walls.append(res["wall_s"])
            rss.append(res["peak_rss_bytes"])
            if not kind.startswith("io-floor"):
                check = self.verify(fmt, est, target, steps, refs)
                entry["check"] = check
                if not check["passed"]:
                    self.failed = True
            shutil.rmtree(d, ignore_errors=True)
        wall = statistics.median(walls)
        entry.update(
            status="ok" if entry.get("check", {}).get("passed", True) else "wrong output",
            wall_s=wall,
            walls=walls,
            steps_per_s=steps / wall,
            peak_rss_bytes=max(rss),
        )
        if inproc:
            entry["inprocess_s"] = statistics.median(inproc)
        self.learn(kind, fmt, steps, wall)
        return entry

    def naive_entry(self, fmt: str, est: str, steps: int, path: Path, refs) -> dict:
        if steps <= self.args.naive_max_steps:
            if steps > PROBE_STEPS and ("naive", fmt) not in self.rates:
                self.probe(fmt, est, path, min(PROBE_STEPS, steps))
            return self.run_case("naive", fmt, est, steps, path, refs)
        entry: dict[str, Any] = {"case": "naive", "format": fmt, "estimator": est, "steps": steps}
        probe = self.probe(fmt, est, path, PROBE_STEPS)
        if probe is None:
            entry.update(status="skipped", reason="over --naive-max-steps; no probe (budget)")
            return entry
        scale = steps / probe["steps"]
        guess = probe["wall_s"] + probe["inprocess_s"] * (scale - 1.0)
        entry.update(
            status="skipped",
            reason=(
                f"over --naive-max-steps ({self.args.naive_max_steps:,}): estimated "
                f"{guess:.0f} s from a {probe['steps']:,}-step probe ({probe['wall_s']:.2f} s "
                "wall); an estimate, not a measurement"
            ),
            estimated_s=round(guess, 1),
            probe=probe,
        )
        return entry

    def probe(self, fmt: str, est: str, path: Path, limit: int) -> dict | None:
        if self.estimate("naive", fmt, limit) > self.budget.left():
            return None
        d = self.case_dir("probe")
        cmd = self.self_cmd("--naive-case", "--format", fmt, "--estimator", est)
        cmd += ["--input", str(path), "--output", str(d / ("out" + SUFFIX[fmt]))]
        cmd += ["--limit", str(limit)]
        res = spawn(cmd, d, self.budget.left())
        shutil.rmtree(d, ignore_errors=True)
        if res["rc"] != 0 or res["killed"]:
            return None
        inner = json.loads(res["stdout"])
        probe = {"steps": inner["steps"], "wall_s": res["wall_s"], **inner}
        start = float(self.startup.get("python", {}).get("wall_s", 0.0))
        rate = (res["wall_s"] - start) / inner["steps"]
        self.rates[("naive", fmt)] = max(self.rates.get(("naive", fmt), 0.0), rate)
        return probe

    def run(self) -> int:
        args = self.args
        machine = self.machine()
        if "cuda" in self.devices and not self.cuda_ok:
            self.notes.append(
                "cuda requested but torch.cuda.is_available() is False: no cuda cases"
            )
        devices = [d for d in self.devices if d != "cuda" or self.cuda_ok]
        self.measure_startup()

        t0 = time.perf_counter()
        paths = generate(self.workdir, args.steps, args.seed, args.gen_chunk)
        gen_s = time.perf_counter() - t0
        check_steps = min(CHECK_STEPS, args.steps)
        check_paths = generate(self.workdir, check_steps, args.seed + 1, min(args.gen_chunk, 16384))
        warm_s = {fmt: warm(paths[fmt]) for fmt in self.formats}
        files = {
            fmt: {"path": str(p), "bytes": p.stat().st_size}
            for fmt, p in paths.items()
            if fmt in self.formats
        }
        check = self.check_small(check_paths, devices)
        if not check["passed"]:
            self.failed = True
            print("CORRECTNESS CHECK FAILED: rltscan differs from the loop", file=sys.stderr)
            for r in check["results"]:
                if not r["passed"]:
                    print(f"  {r}", file=sys.stderr)
        else:
            refs = self.suffix_reference(paths["hdf5"], args.steps)
            kinds_a = ["io-floor", *(f"rltscan-{d}" for d in devices)]
            kinds_b = ["io-floor-inplace", *(f"rltscan-{d}-inplace" for d in devices)]
            combos = [(f, e) for f in self.formats for e in self.estimators]
            for kinds in (kinds_a, kinds_b):
                for fmt, est in combos:
                    for kind in kinds:
                        self.cases.append(
                            self.run_case(kind, fmt, est, args.steps, paths[fmt], refs)
                        )
            for fmt, est in combos:
                self.cases.append(self.naive_entry(fmt, est, args.steps, paths[fmt], refs))
        self.ratios()
        shutil.rmtree(self.runs, ignore_errors=True)
        result = {
            "benchmark": "rltscan file-to-file (issue 5 item 4)",
            "machine": machine,
            "config": {
                "steps": args.steps,
                "seed": args.seed,
                "formats": self.formats,
                "estimators": self.estimators,
                "devices": self.devices,
                "chunk_steps": args.chunk_steps,
                "chunk_steps_passed_to_cli": self.cli_chunk,
                "floor_chunk": self.chunk,
                "gen_chunk": args.gen_chunk,
                "naive_max_steps": args.naive_max_steps,
                "repeat": args.repeat,
                "budget_s": args.budget_s,
                "gamma": GAMMA,
                "lam": LAM,
            },
            "files": files,
            "generate_s": gen_s,
            "warm_read_s": warm_s,
            "startup": self.startup,
            "floors": floor_texts(self.chunk),
            "inputs_read": {e: list(INPUTS[e]) for e in self.estimators},
            "correctness": check,
            "cases": self.cases,
            "notes": self.notes,
            "elapsed_s": self.budget.used(),
        }
        (self.out / "e2e.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
        md = render_md(result)
        (self.out / "e2e.md").write_text(md)
        print(md)
        return 1 if self.failed else 0

    def ratios(self) -> None:
        floors = {
            (c["case"], c["format"], c["estimator"]): c["wall_s"]
            for c in self.cases
            if c["case"].startswith("io-floor") and c.get("status") == "ok"
        }
        inproc = {
            (c["case"], c["format"], c["estimator"]): c.get("inprocess_s")
            for c in self.cases
            if c["case"].startswith("io-floor") and c.get("status") == "ok"
        }
        for c in self.cases:
            if c.get("status") != "ok":
                continue
            key = (c["format"], c["estimator"])
            base = floors.get(("io-floor", *key))
            if base:
                c["ratio_io_floor"] = c["wall_s"] / base
            base_in = floors.get(("io-floor-inplace", *key))
            if base_in and c["case"].endswith("inplace"):
                c["ratio_io_floor_inplace"] = c["wall_s"] / base_in
            fl = inproc.get(("io-floor", *key))
            if fl and c.get("inprocess_s"):
                c["ratio_io_floor_inprocess"] = c["inprocess_s"] / fl
            start = self.startup.get("torch-cuda", {}) if "cuda" in c["case"] else {}
            if base_in and c["case"].startswith("rltscan") and start.get("wall_s"):
                # issue 12: file to file <= 1.25 x (in-place floor + import torch [+ CUDA init])
                c["ratio_target_base"] = c["wall_s"] / (base_in + float(start["wall_s"]))


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _mem_total() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _git() -> dict[str, Any]:
    """The code measured (``bench.harness.code_record``: the commit only where this tree is
    a git checkout's top, else None, and the hash of the sources, which a copy on the GPU
    machine keeps). Imported here, in the parent alone: the cases' own processes load
    only what a user script would."""
    sys.path.insert(0, str(REPO))  # `python bench/e2e.py` puts bench/, not its parent, first
    from bench.harness import code_record

    rec = code_record(REPO)
    dirty = [p for p in rec["dirty"] or [] if p.startswith("rltscan/")]
    return {"commit": rec["commit"], "tree": rec["tree"], "rltscan_dirty": dirty}


# ---------------------------------------------------------------------------------------------
# report


def _mib(b: float | None) -> str:
    if b is None:
        return "-"
    return f"{b / 2**20:,.1f}" if b < 10 * 2**20 else f"{b / 2**20:,.0f}"


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def _rate(x: float | None) -> str:
    if x is None:
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def floor_texts(chunk: int) -> dict[str, str]:
    cols = "; ".join(f"{e}: {', '.join(c)}" for e, c in INPUTS.items())
    return {
        "io-floor": FLOOR_TEXT["io-floor"].format(
            cols=cols, chunk=f"{chunk:,}", nout="2 (GAE) or 1 (returns)"
        ),
        "io-floor-inplace": FLOOR_TEXT["io-floor-inplace"],
    }


def _streamed(case: dict) -> str:
    """rltscan rows: windows x chunk steps from its report's "streaming" object, else "no"."""
    if not case["case"].startswith("rltscan") or case.get("status") != "ok":
        return "-"
    info = case.get("streaming")
    if not info:
        return "no"
    return f"{info.get('windows', '?')} × {info.get('chunk_steps', 0):,}"


def render_md(res: dict) -> str:
    m, cfg = res["machine"], res["config"]
    v = m["versions"]
    gpu = m["gpu"] or "none"
    floors = floor_texts(cfg["floor_chunk"])
    lines = [
        "# rltscan file-to-file benchmark (issue 5, item 4)",
        "",
        f"- date: {m['date']}; host `{m['hostname']}`; {m['cpu_model']} "
        f"({m['cpu_count']} CPUs, {m['cpu_affinity']} usable); "
        f"RAM {_mib(m['mem_total_bytes'])} MiB; GPU: {gpu}",
        f"- versions: python {m['python']}, torch {v['torch']}, triton {v.get('triton')}, "
        f"numpy {v['numpy']}, h5py {v['h5py']} (HDF5 {v['hdf5']}), pyarrow {v['pyarrow']}, "
        f"rltscan {v.get('rltscan')}",
        f"- git {m['git']['commit']}, tree {m['git'].get('tree')}; uncommitted changes under "
        "rltscan/: " + (", ".join(m["git"]["rltscan_dirty"]) or "none"),
        f"- {cfg['steps']:,} steps, flat D4RL-style columns rewards/values/next_values f32, "
        "terminals/timeouts bool; episodes of 200-1000 steps, half terminal, half timeout, "
        "last row a timeout",
        "- files: "
        + "; ".join(f"{k} {_mib(f['bytes'])} MiB" for k, f in res["files"].items())
        + f" (HDF5 chunked {cfg['gen_chunk']:,} steps, no compression; Parquet row groups of "
        f"{cfg['gen_chunk']:,} rows, pyarrow default codec); disk free "
        f"{_mib(m['disk_free_bytes'])} MiB in {m['workdir']}",
        f"- γ={cfg['gamma']}, λ={cfg['lam']}; repeat {cfg['repeat']} (median wall); "
        f"--chunk-steps {cfg['chunk_steps']} (passed to the CLI: "
        f"{cfg['chunk_steps_passed_to_cli']}); budget {cfg['budget_s']} s, used "
        f"{res['elapsed_s']:.0f} s",
        "",
        "## How",
        "",
        "Every case is a fresh `python` process, timed from spawn to reap (wall clock, "
        "interpreter start and imports included) with that child's own peak RSS "
        "(`ru_maxrss` from `os.wait4`). The page cache is not dropped (no root): each input "
        "file is read once, untimed, before the cases, so every case reads from a warm cache. "
        "In-place cases run on a copy of the input made before timing. Outputs go to a new "
        "file in the work directory, which is deleted after the case.",
        "",
        "- **io-floor**: " + floors["io-floor"],
        "- **io-floor-inplace**: " + floors["io-floor-inplace"],
        "- **rltscan-DEV**: `python -m rltscan EST FILE --device DEV --json --gamma 0.99 "
        "[--lam 0.95] [--chunk-steps N] -o NEW` (the new file holds the input columns plus "
        "the outputs); "
        "**rltscan-DEV-inplace**: the same without `-o`, on the copy.",
        "- **naive**: load every needed column whole (h5py `ds[()]` / `pq.read_table`), a "
        "per-step Python loop over NumPy arrays (terminal: cut, no bootstrap; timeout: cut, "
        "bootstrap from next_values), write the outputs to a new file with the same library.",
        "- × io-floor = wall / io-floor wall (same format and estimator); × inplace floor = wall "
        "/ io-floor-inplace wall, for in-place cases; in-proc s = the time the process reports "
        "itself (rltscan: `total_seconds` of its JSON report; floors and naive: their own "
        "timer), i.e. without interpreter start and imports; × floor in-proc compares those. "
        "streamed = windows × chunk steps from rltscan's JSON `streaming` object ('no' when "
        "the report has none). × (inplace floor + torch start) = wall / (io-floor-inplace wall "
        "+ the `import torch` start-up below, with CUDA initialised for cuda cases): issue 12's "
        "target is <= 1.25.",
        "",
        "Start-up alone: "
        + "; ".join(
            f"`{s['command']}` {s['wall_s']:.2f} s, {_mib(s['peak_rss_bytes'])} MiB RSS"
            for s in res["startup"].values()
        ),
        "",
    ]
    chk = res["correctness"]
    lines.append(
        f"Correctness: rltscan `-o` output on a separate {chk['steps']:,}-step file vs the float64 "
        f"loop ({chk['tolerance']}): **{'passed' if chk['passed'] else 'FAILED'}**"
        + "".join(
            f"; FAILED {r['format']}/{r['estimator']}/{r['device']}: "
            f"{r.get('error') or r.get('err_over_tol')}"
            for r in chk["results"]
            if not r["passed"]
        )
        + ". The last min(steps, 100,000) rows of every rltscan and naive output file of the "
        "timed runs are checked the same way (column `check`)."
    )
    lines += [
        "",
        "| format | estimator | case | status | wall s | steps/s | peak RSS MiB "
        "| peak device MiB | in-proc s | × io-floor | × inplace floor | × floor in-proc "
        "| × (inplace floor + torch start) | streamed | check |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    order = {"io-floor": 0, "io-floor-inplace": 1, "naive": 9}
    cases = sorted(
        res["cases"],
        key=lambda c: (c["format"], c["estimator"], order.get(c["case"], 2), c["case"]),
    )
    reasons = []
    for c in cases:
        check = c.get("check")
        chk_s = "-" if check is None else ("ok" if check["passed"] else "**FAIL**")
        status = c.get("status", "?")
        if status != "ok":
            reasons.append(
                f"- {c['format']}/{c['estimator']}/{c['case']}: {status}: "
                f"{c.get('reason') or c.get('error') or check}"
            )
        lines.append(
            f"| {c['format']} | {c['estimator']} | {c['case']} | {status} "
            f"| {_fmt(c.get('wall_s'), '.3f')} | {_rate(c.get('steps_per_s'))} "
            f"| {_mib(c.get('peak_rss_bytes'))} | {_mib(c.get('peak_device_bytes'))} "
            f"| {_fmt(c.get('inprocess_s'), '.3f')} | {_fmt(c.get('ratio_io_floor'), '.2f')} "
            f"| {_fmt(c.get('ratio_io_floor_inplace'), '.2f')} "
            f"| {_fmt(c.get('ratio_io_floor_inprocess'), '.2f')} "
            f"| {_fmt(c.get('ratio_target_base'), '.2f')} | {_streamed(c)} | {chk_s} |"
        )
    if reasons:
        lines += ["", "Not measured / not ok:", "", *reasons]
    if res["notes"]:
        lines += ["", "Notes:", "", *(f"- {n}" for n in res["notes"])]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--steps", type=int, default=2_000_000)
    p.add_argument("--formats", default="hdf5,parquet")
    p.add_argument("--estimators", default="gae,returns")
    p.add_argument("--devices", default="cpu")
    p.add_argument("--out", default="bench/results/e2e")
    p.add_argument("--workdir", default=None, help="generated files (cached) and scratch")
    p.add_argument("--chunk-steps", type=int, default=None, help="passed to rltscan if given")
    p.add_argument("--gen-chunk", type=int, default=1 << 20, help="HDF5 chunk / row group")
    p.add_argument("--naive-max-steps", type=int, default=20_000_000)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--budget-s", type=float, default=540.0)
    p.add_argument("--seed", type=int, default=0)
    # internal: one case in this (child) process
    p.add_argument("--floor-case", choices=("io-floor", "io-floor-inplace"), default=None)
    p.add_argument("--naive-case", action="store_true")
    p.add_argument("--format", choices=tuple(SUFFIX))
    p.add_argument("--estimator", choices=tuple(INPUTS))
    p.add_argument("--input", type=Path)
    p.add_argument("--output", type=Path)
    p.add_argument("--chunk", type=int, default=1 << 20)
    p.add_argument("--limit", type=int, default=None)
    args = p.parse_args(argv)
    for name in ("formats", "estimators", "devices"):
        allowed = {"formats": SUFFIX, "estimators": INPUTS, "devices": ("cpu", "cuda")}[name]
        bad = [x for x in getattr(args, name).split(",") if x and x not in allowed]
        if bad:
            p.error(f"--{name}: unknown {bad}; choose from {sorted(allowed)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.floor_case:
        info = floor_case(
            args.floor_case, args.format, args.estimator, args.input, args.output, args.chunk
        )
        print(json.dumps(info))
        return 0
    if args.naive_case:
        print(
            json.dumps(naive_case(args.format, args.estimator, args.input, args.output, args.limit))
        )
        return 0
    return Bench(args).run()


if __name__ == "__main__":
    sys.exit(main())
