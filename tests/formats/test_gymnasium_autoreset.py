"""Buffers recorded from Gymnasium vector environments (docs/CONVENTIONS.md §1.4).

Gymnasium >= 1.0 vector envs reset with ``autoreset_mode=NEXT_STEP`` by default: the
``step()`` after an episode's end is the reset (the final observation as ``obs``, the
action ignored, reward 0, no flags). A buffer logged row by row holds one such row after
every end. ``--autoreset next-step`` leaves those rows out, and their value (V of the
final observation) bootstraps a truncated episode. The buffers here are recorded with
gymnasium itself (CartPole, episodes truncated at 12 steps or terminated), then compared
with a float64 loop over the environment's real transitions.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from rltscan import api
from rltscan.errors import DataError, ParameterError
from tests.io_helpers import ROOT

gym = pytest.importorskip("gymnasium")
vector = pytest.importorskip("gymnasium.vector")

GAMMA, LAM = 0.9, 0.8


def record(mode: str, steps: int = 90, seed: int = 0) -> dict[str, np.ndarray]:
    """One CartPole env in a SyncVectorEnv, logged as a training loop logs it: V of
    the observation the action was taken in (a fixed function of it), then the step's
    reward and flags."""
    env = vector.SyncVectorEnv(
        [lambda: gym.make("CartPole-v1", max_episode_steps=12)],
        autoreset_mode=getattr(vector.AutoresetMode, mode),
    )
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    cols: dict[str, list] = {"values": [], "rewards": [], "terminated": [], "truncated": []}
    for _ in range(steps):
        value = float(np.tanh(obs[0]).sum())
        obs, reward, term, trunc, _ = env.step(rng.integers(0, 2, size=1))
        cols["values"].append(value)
        cols["rewards"].append(float(reward[0]))
        cols["terminated"].append(bool(term[0]))
        cols["truncated"].append(bool(trunc[0]))
    env.close()
    return {
        "values": np.asarray(cols["values"], np.float32),
        "rewards": np.asarray(cols["rewards"], np.float32),
        "terminated": np.asarray(cols["terminated"]),
        "truncated": np.asarray(cols["truncated"]),
    }


def want_gae(b: dict[str, np.ndarray]) -> np.ndarray:
    """GAE over the real transitions, in float64: a row after an end is the reset (NaN
    out); a truncated step bootstraps from V of the final observation, which is the
    reset row's value; the data's open end counts V(s_{T}) as 0."""
    v = b["values"].astype(np.float64)
    r = b["rewards"].astype(np.float64)
    end = b["terminated"] | b["truncated"]
    reset = np.zeros(len(v), bool)
    reset[1:] = end[:-1]
    out = np.full(len(v), np.nan)
    acc = 0.0
    for t in range(len(v) - 1, -1, -1):
        if reset[t]:
            continue
        nxt = v[t + 1] if t + 1 < len(v) else 0.0
        if b["terminated"][t]:
            delta, acc = r[t] - v[t], 0.0
        elif b["truncated"][t]:
            delta, acc = r[t] + GAMMA * nxt - v[t], 0.0
        else:
            delta = r[t] + GAMMA * nxt - v[t]
        acc = delta + GAMMA * LAM * acc
        out[t] = acc
    return out


def write(b: dict[str, np.ndarray], path: Path) -> Path:
    if path.suffix == ".h5":
        with h5py.File(path, "w") as f:
            for k, x in b.items():
                f[k] = x
    else:
        pq.write_table(pa.table(dict(b)), path)
    return path


def read(path: Path, name: str) -> np.ndarray:
    if path.suffix == ".h5":
        with h5py.File(path, "r") as f:
            return f[name][()]
    return pq.read_table(path).column(name).to_numpy()


@pytest.mark.parametrize("suffix", [".parquet", ".h5"])
def test_next_step_buffer_gives_the_environment_s_advantages(suffix: str, tmp_path: Path) -> None:
    b = record("NEXT_STEP")
    resets = np.flatnonzero(np.r_[False, (b["terminated"] | b["truncated"])[:-1]])
    assert len(resets) >= 4 and (b["rewards"][resets] == 0).all()  # what gymnasium does
    assert b["truncated"].any() and b["terminated"].any()
    path = write(b, tmp_path / f"buf{suffix}")
    report = api.run(
        "gae",
        str(path),
        params={"gamma": GAMMA, "lam": LAM},
        autoreset="next-step",
        missing_bootstrap="zero",
        device="cpu",
    )
    got = read(path, "advantages")
    want = want_gae(b)
    assert np.isnan(got[resets]).all()
    keep = ~np.isnan(want)
    np.testing.assert_allclose(got[keep], want[keep], rtol=1e-5, atol=1e-5)
    assert any("NEXT_STEP reset rows" in n for n in report.notes)
    for k in b:  # the inputs as they were
        np.testing.assert_array_equal(read(path, k), b[k])


def test_without_the_option_the_reset_rows_are_read_as_steps(tmp_path: Path) -> None:
    """What the option changes: read as steps, the reset rows get numbers of their own,
    which is why a NEXT_STEP buffer needs it (nothing in the columns marks those rows)."""
    b = record("NEXT_STEP")
    path = write(b, tmp_path / "buf.parquet")
    api.run(
        "gae", str(path), params={"gamma": GAMMA, "lam": LAM}, missing_bootstrap="zero",
        device="cpu",
    )  # fmt: skip
    assert not np.isnan(read(path, "advantages")).any()


def test_a_same_step_buffer_is_refused_under_next_step(tmp_path: Path) -> None:
    """SAME_STEP: the row after an end is the next episode's first step (reward 1 in
    CartPole), so the reading is disproved, not applied."""
    path = write(record("SAME_STEP"), tmp_path / "buf.parquet")
    with pytest.raises(DataError, match="a NEXT_STEP reset step has reward 0") as err:
        api.run("gae", str(path), autoreset="next-step", missing_bootstrap="zero", device="cpu")
    assert "drop --autoreset next-step" in str(err.value)
    assert "advantages" not in pq.read_schema(path).names


def test_a_time_major_buffer_is_refused(tmp_path: Path) -> None:
    b = record("NEXT_STEP")
    path = tmp_path / "buf.h5"
    with h5py.File(path, "w") as f:
        for k, x in b.items():
            f[k] = np.stack([x, x], axis=1)  # [T, 2 envs]
    with pytest.raises(ParameterError, match="reads a flat table of steps"):
        api.run(
            "gae", str(path), autoreset="next-step", layout="time-major",
            missing_bootstrap="zero", device="cpu",
        )  # fmt: skip


def test_the_cli_flag_and_its_report(tmp_path: Path) -> None:
    b = record("NEXT_STEP")
    path = write(b, tmp_path / "buf.parquet")
    cmd = [sys.executable, "-m", "rltscan", "gae", str(path), "--gamma", str(GAMMA), "--lam",
           str(LAM), "--autoreset", "next-step", "--missing-bootstrap", "zero", "--device",
           "cpu"]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "NEXT_STEP reset rows" in done.stdout + done.stderr
    meta = b"".join(pq.read_schema(path).metadata.values())
    assert b'"autoreset": "next-step"' in meta  # the provenance: run again, same numbers
    want = want_gae(b)
    keep = ~np.isnan(want)
    np.testing.assert_allclose(read(path, "advantages")[keep], want[keep], rtol=1e-5, atol=1e-5)
    bad = subprocess.run(
        [*cmd[:-6], "--autoreset", "later", "--device", "cpu"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 2 and "--autoreset" in bad.stderr


def test_an_end_right_after_an_end_disproves_the_reading(tmp_path: Path) -> None:
    b = record("NEXT_STEP")
    end = np.flatnonzero(b["terminated"] | b["truncated"])[0]
    b["terminated"][end + 1] = True  # a reset row never ends an episode
    path = write(b, tmp_path / "buf.parquet")
    with pytest.raises(DataError, match=f"row {end + 1} follows an episode end and ends"):
        api.run("gae", str(path), autoreset="next-step", missing_bootstrap="zero", device="cpu")


def test_a_dones_column_is_read_as_ended_and_starts_is_refused(tmp_path: Path) -> None:
    """``dones = terminated | truncated`` (the flags merged, as many loops log them):
    read as the end of step t, with --ends-are for what the ends were."""
    b = record("NEXT_STEP")
    b["truncated"][:] = False  # every end a termination, so --ends-are terminal is exact
    merged = {"values": b["values"], "rewards": b["rewards"], "dones": b["terminated"]}
    path = write(merged, tmp_path / "buf.parquet")
    kw = {"autoreset": "next-step", "missing_bootstrap": "zero", "device": "cpu"}
    with pytest.raises(ParameterError, match="--dones-mean ended"):
        api.run("gae", str(path), dones_mean="starts", ends_are="terminal", **kw)
    api.run(
        "gae", str(path), params={"gamma": GAMMA, "lam": LAM}, dones_mean="ended",
        ends_are="terminal", **kw,
    )  # fmt: skip
    want = want_gae(b)
    keep = ~np.isnan(want)
    np.testing.assert_allclose(read(path, "advantages")[keep], want[keep], rtol=1e-5, atol=1e-5)
    assert np.isnan(read(path, "advantages")[~keep]).all()
