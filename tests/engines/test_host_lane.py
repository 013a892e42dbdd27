"""The torch-free lane of a cpu file run (rltscan.estimators.host) against the torch lane.

A streamed ``--backend cpu`` run of an estimator with a fused kernel (GAE, discounted
returns, TD(λ), V-trace) solves its blocks from numpy views, without importing torch.
Its outputs and statistics must be the torch lane's to the bit (the same kernel behind
the public function): random HDF5 and Parquet files, in place and to a new file, bool
and uint8 flags, sparse and dense episode ends, with and without next values, several
windows and blocks (carries between them), several seeds. A block the lane does not
take (a NaN where it is not read) goes to the public function and the carries cross;
refusals are the public function's, one line, same exit code (a missing bootstrap is
refused on the lane, with the public function's own check and error); a CLI run with
torch made unimportable still computes, the missing-bootstrap rule in force or not.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import rltscan
from rltscan.errors import MissingBootstrapError
from rltscan.estimators import host
from tests.io_helpers import BUFFER

STEPS, CHUNK, BLOCK = 3000, 1024, 256  # 3 windows of 4 blocks
COMMANDS = ("gae", "returns", "td-lambda", "vtrace")
SUFFIX = {"hdf5": ".h5", "parquet": ".parquet"}


def _columns(seed: int, ends: float, flag: str, next_values: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    u = rng.random(STEPS)
    terminals, timeouts = u < ends / 2, (u >= ends / 2) & (u < ends)
    terminals[-1], timeouts[-1] = True, False  # the data ends on a termination
    lp = np.log(rng.uniform(0.1, 1.0, STEPS))
    cols = {
        "rewards": rng.standard_normal(STEPS, dtype=np.float32),
        "values": rng.standard_normal(STEPS, dtype=np.float32),
        "terminals": terminals.astype(flag),
        "timeouts": timeouts.astype(flag),
        "logp_target": lp.astype(np.float32),
        "logp_behavior": rng.permutation(lp).astype(np.float32),
    }
    if next_values:
        cols["next_values"] = rng.standard_normal(STEPS, dtype=np.float32)
    return cols


def _write(fmt: str, path: Path, cols: dict[str, np.ndarray]) -> Path:
    if fmt == "hdf5":
        with h5py.File(path, "w") as f:
            for name, x in cols.items():
                f.create_dataset(name, data=x)
    else:
        pq.write_table(pa.table(cols), path, row_group_size=CHUNK)
    return path


def _read(path: Path, names: list[str]) -> dict[str, np.ndarray]:
    if path.suffix == ".h5":
        with h5py.File(path, "r") as f:
            return {n: f[n][()] for n in names}
    table = pq.read_table(path)
    return {n: table.column(n).to_numpy() for n in names}


@pytest.fixture
def solved(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each block the lane was offered was solved there (True) or handed back."""
    seen: list[bool] = []
    solve = host.solve

    def spy(*args: Any, **kwargs: Any) -> Any:
        out = solve(*args, **kwargs)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(host, "solve", spy)
    return seen


def _run(
    monkeypatch: pytest.MonkeyPatch,
    src: Path,
    tmp: Path,
    command: str,
    *,
    lane: bool,
    inplace: bool,
    **kw: Any,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``command`` on a copy of ``src`` (in place) or to a new file, on the torch-free
    lane or with it switched off (the public function, which imports torch)."""
    with monkeypatch.context() as m:
        if not lane:
            m.setattr(host, "lane", lambda *a, **k: False)
        tmp.mkdir()
        target = tmp / src.name
        if inplace:
            target.write_bytes(src.read_bytes())
        report = rltscan.run(
            command,
            str(target if inplace else src),
            output=None if inplace else str(target),
            device="cpu",
            backend="cpu",
            chunk_steps=CHUNK,
            block_steps=BLOCK,
            **{"missing_bootstrap": "zero" if command != "returns" else None, **kw},
        )
    names = [o.name for o in report.outputs]
    return _read(target, names), report.to_dict()["statistics"]


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert a.keys() == b.keys() and a
    for name in a:
        assert a[name].dtype == b[name].dtype, name
        assert a[name].tobytes() == b[name].tobytes(), name


def _lane_equals_torch_lane(
    monkeypatch: pytest.MonkeyPatch,
    solved: list[bool],
    src: Path,
    tmp: Path,
    command: str,
    **kw: Any,
) -> None:
    """Run ``src`` on the lane (every block solved there) and on the torch lane (the lane
    never asked): the same outputs to the bit and the same statistics."""
    got, got_stats = _run(monkeypatch, src, tmp / "lane", command, lane=True, **kw)
    assert solved and all(solved)  # every block on the lane
    solved.clear()
    want, want_stats = _run(monkeypatch, src, tmp / "torch", command, lane=False, **kw)
    assert not solved  # the torch lane never asked
    _same(got, want)
    assert got_stats == want_stats


@pytest.mark.parametrize("fmt", ["hdf5", "parquet"])
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(
    ("seed", "ends", "flag", "next_values", "inplace"),
    [
        (0, 0.004, "bool", True, True),
        (1, 0.3, "uint8", False, False),
        (2, 0.3, "bool", True, False),
        (3, 0.004, "uint8", False, True),
    ],
)
def test_the_lane_gives_the_torch_lane_s_bits(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    solved: list[bool],
    fmt: str,
    command: str,
    seed: int,
    ends: float,
    flag: str,
    next_values: bool,
    inplace: bool,
) -> None:
    src = _write(fmt, tmp_path / ("in" + SUFFIX[fmt]), _columns(seed, ends, flag, next_values))
    _lane_equals_torch_lane(monkeypatch, solved, src, tmp_path, command, inplace=inplace)


@pytest.mark.parametrize("fmt", ["hdf5", "parquet"])
@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize(("seed", "flag", "inplace"), [(7, "bool", True), (8, "uint8", False)])
def test_the_missing_bootstrap_rule_in_force_stays_on_the_lane(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    solved: list[bool],
    fmt: str,
    command: str,
    seed: int,
    flag: str,
    inplace: bool,
) -> None:
    """No next values stored and ``missing_bootstrap="error"`` (the default but for
    returns): every block is checked for a missing bootstrap on the lane, and solved
    there with the torch lane's bits (episodes end on terminations only)."""
    cols = _columns(seed, 0.01, flag, False)
    cols["terminals"] |= cols["timeouts"]
    cols["timeouts"][:] = False
    src = _write(fmt, tmp_path / ("in" + SUFFIX[fmt]), cols)
    _lane_equals_torch_lane(
        monkeypatch, solved, src, tmp_path, command, inplace=inplace, missing_bootstrap="error"
    )


@pytest.mark.parametrize("kind", ["gae", "td_lambda", "vtrace", "returns"])
@pytest.mark.parametrize(("time_dim", "at"), [(-1, (2, 40)), (0, (40, 2)), (-1, (0, 63))])
def test_a_missing_bootstrap_is_the_public_function_s_refusal(
    kind: str, time_dim: int, at: tuple[int, int]
) -> None:
    """The lane's refusal of a truncation (or a window end) with no bootstrap value is
    the public function's error: class, message, index and time axis."""
    from rltscan.estimators import declared_module

    d = declared_module(kind).DECLARATION
    cols = _columns(9, 0.0, "bool", False)
    shape = (4, 64) if time_dim == -1 else (64, 4)
    args: dict[str, Any] = {
        n: cols[c][: 4 * 64].reshape(shape)
        for n, c in (
            ("rewards", "rewards"),
            ("values", "values"),
            ("terminated", "terminals"),
            ("truncated", "timeouts"),
            ("logp_target", "logp_target"),
            ("logp_behavior", "logp_behavior"),
        )
        if n in d.inputs
    }
    last = (slice(None), -1) if time_dim == -1 else (-1, slice(None))
    args["terminated"][last] = True  # the window ends on terminations, but at ``at``
    args["terminated"][at] = False
    args["truncated"][at] = at[time_dim] != 63  # (the window's end: no flag at all)
    args.update(missing_bootstrap="error", time_dim=time_dim, backend="cpu")
    with pytest.raises(MissingBootstrapError) as lane:
        host.solve(d, args, None)
    with pytest.raises(MissingBootstrapError) as public:
        d.function(**args)
    assert str(lane.value) == str(public.value)
    assert vars(lane.value) == vars(public.value)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_time_major_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, solved: list[bool], command: str
) -> None:
    """A ``[T, B]`` buffer (4 rows read through strides, split over threads; 4 blocks):
    the same bits."""
    src = tmp_path / "buffer.h5"
    src.write_bytes(BUFFER.read_bytes())
    got, got_stats = _run(monkeypatch, src, tmp_path / "lane", command, lane=True, inplace=False)
    assert solved and all(solved)
    want, want_stats = _run(
        monkeypatch, src, tmp_path / "torch", command, lane=False, inplace=False
    )
    _same(got, want)
    assert got_stats == want_stats


@pytest.mark.parametrize("command", ["gae", "vtrace"])
def test_a_block_the_lane_hands_back_runs_on_the_public_function(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, solved: list[bool], command: str
) -> None:
    """A NaN in a slot that is never read (the next value of a terminal step) fails the
    lane's glance at the contents: that block goes to the public function, which checks
    it entry by entry and computes it; the carries cross both ways."""
    cols = _columns(4, 0.05, "bool", True)
    terminal = np.flatnonzero(cols["terminals"][BLOCK * 5 : BLOCK * 6])[0] + BLOCK * 5
    cols["next_values"][terminal] = np.nan
    src = _write("hdf5", tmp_path / "in.h5", cols)
    got, got_stats = _run(monkeypatch, src, tmp_path / "lane", command, lane=True, inplace=False)
    assert solved.count(False) == 1 and solved.count(True) == len(solved) - 1
    want, want_stats = _run(
        monkeypatch, src, tmp_path / "torch", command, lane=False, inplace=False
    )
    _same(got, want)
    assert got_stats == want_stats


# ``rltscan ARGS`` in a fresh interpreter; torch made unimportable with NO_TORCH=1, the
# lane switched off with NO_LANE=1; at exit, whether torch was imported
PROBE = """
import os, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "torch":
            raise ImportError("blocked for the test: " + name)
if os.environ.get("NO_TORCH"):
    sys.meta_path.insert(0, Block())
if os.environ.get("NO_LANE"):
    from rltscan.estimators import host
    host.lane = lambda *a, **k: False
import atexit
atexit.register(lambda: sys.stderr.write("\\nTORCH:" + str("torch" in sys.modules) + "\\n"))
from rltscan.cli import main
sys.argv = ["rltscan", *sys.argv[1:]]
main()
"""


def _cli(*args: str, **env: str) -> tuple[int, list[str], bool]:
    """``(exit code, stderr lines but the probe's, torch imported)``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )
    lines = [ln for ln in done.stderr.splitlines() if ln]
    assert lines and lines[-1].startswith("TORCH:"), done.stderr
    return done.returncode, lines[:-1], lines[-1] == "TORCH:True"


@pytest.mark.parametrize("fmt", ["hdf5", "parquet"])
@pytest.mark.parametrize("command", ["gae", "vtrace"])
@pytest.mark.parametrize("next_values", [True, False])
def test_a_cli_run_without_torch_computes_the_same_bits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str, command: str, next_values: bool
) -> None:
    """With next values, or without them under the default missing-bootstrap rule
    ("error", checked on the lane; the episodes end on terminations only)."""
    cols = _columns(5, 0.01, "bool", next_values)
    if not next_values:
        cols["terminals"] |= cols["timeouts"]
        cols["timeouts"][:] = False
    src = _write(fmt, tmp_path / ("in" + SUFFIX[fmt]), cols)
    out = tmp_path / ("out" + SUFFIX[fmt])
    args = (command, str(src), "-o", str(out), "--device", "cpu", "--backend", "cpu")
    args += ("--chunk-steps", str(CHUNK), "--block-steps", str(BLOCK), "-q")
    code, lines, loaded = _cli(*args, NO_TORCH="1")
    assert code == 0 and not loaded, lines
    names = ["advantages", "value_targets"] if command == "gae" else ["vs", "pg_advantages"]
    rule = {} if next_values else {"missing_bootstrap": "error"}
    want, _ = _run(monkeypatch, src, tmp_path / "torch", command, lane=False, inplace=False, **rule)
    _same(_read(out, names), want)


@pytest.mark.parametrize(
    ("damage", "args"),
    [
        ("rewards", ()),  # a NaN that is read: DataError
        ("timeouts", ("--missing-bootstrap", "error")),  # a truncation with no bootstrap
        ("timeouts", ()),  # the same under GAE's default rule
    ],
)
def test_refusals_are_the_public_function_s(tmp_path: Path, damage: str, args: tuple) -> None:
    """One line, the same line and exit code as the torch lane's. The lane refuses a
    missing bootstrap itself, with torch made unimportable; a NaN that is read goes to
    the public function (which imports torch) to be named."""
    cols = _columns(6, 0.01, "bool", False)
    if damage == "rewards":
        cols["rewards"][1234] = np.nan
    else:
        cols["timeouts"][1500] = True
        cols["terminals"][1500] = False
    src = _write("hdf5", tmp_path / "in.h5", cols)
    base = ("gae", str(src), "--device", "cpu", "--backend", "cpu", "--chunk-steps", str(CHUNK))
    base += ("--block-steps", str(BLOCK), *args)
    before = src.read_bytes()
    code, lines, _ = _cli(*base, **({} if damage == "rewards" else {"NO_TORCH": "1"}))
    torch_code, torch_lines, _ = _cli(*base, NO_LANE="1")
    assert code == torch_code and code not in (0, 1)
    assert len(lines) == 1 and lines == torch_lines and lines[0].startswith("error: ")
    assert src.read_bytes() == before


def test_the_lane_is_chosen_in_one_place() -> None:
    """cpu backend (or auto with numba) on the CPU, a kind with a fused kernel."""
    from rltscan.devices import PlannedDevice

    cpu, gpu = PlannedDevice("cpu"), PlannedDevice("cuda")
    assert host.lane("gae", "cpu", cpu) and host.lane("vtrace", "auto", cpu)
    assert not host.lane("gae", "torch", cpu) and not host.lane("gae", "cpu", gpu)
    assert not host.lane("retrace", "cpu", cpu) and not host.lane("traces", "cpu", cpu)
    assert not host.lane("gae", None, cpu)
