"""Files whose ``done`` column contradicts their ``terminated``/``truncated`` columns are
refused, naming the first such row and the ``--ignore`` that settles it.

A done read as "the episode ended after this step" (``--dones-mean ended``, TorchRL's
``next/done``, RLDS's ``is_last``, d3rlpy's ``episode_terminals``) is ``terminated or
truncated``; a row that terminated while its done says the episode went on is written
by no producer, and its readings differ (rltscan's flags end the episode there;
TorchRL's GAE bootstraps nothing but runs the trace on). Before, the run read it as an
end with no word (exit 0). docs/CONVENTIONS.md §1.4. Run as a user would:
``python -m rltscan gae FILE ...`` in a subprocess.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.io_helpers import run_cli

GAMMA, LAM = 0.9, 0.8
N = 12


def _columns(seed: int = 0) -> dict[str, np.ndarray]:
    """A consistent flat table: one termination (row 3), one truncation (row 7)."""
    rng = np.random.default_rng(seed)
    term = np.zeros(N, bool)
    trunc = np.zeros(N, bool)
    term[3], trunc[7] = True, True
    return {
        "rewards": rng.normal(size=N),
        "values": rng.normal(size=N),
        "next_values": rng.normal(size=N),
        "terminated": term,
        "truncated": trunc,
        "done": term | trunc,
    }


def _parquet(path: Path, cols: dict[str, np.ndarray]) -> Path:
    pq.write_table(pa.table(cols), path)
    return path


def _gae(path: Path, *args: str) -> tuple[int, str]:
    res = run_cli(
        "gae", str(path), "--gamma", str(GAMMA), "--lam", str(LAM), "--device", "cpu", "-q",
        *args,
    )  # fmt: skip
    return res.returncode, res.stderr


def test_terminated_where_done_is_0_is_refused(tmp_path: Path) -> None:
    cols = _columns()
    cols["done"][3] = False
    path = _parquet(tmp_path / "steps.parquet", cols)
    code, err = _gae(path, "--dones-mean", "ended", "-o", str(tmp_path / "out.parquet"))
    assert code == 2, err
    assert '"terminated" is set at row 3' in err and '"done"' in err, err
    assert "--ignore done" in err and "--ignore terminated" in err, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out.parquet").exists()


def test_truncated_where_done_is_0_is_refused_in_a_later_window(tmp_path: Path) -> None:
    """Streamed in windows of 4 steps: the row is named in the file's terms."""
    cols = _columns()
    cols["done"][7] = False
    path = _parquet(tmp_path / "steps.parquet", cols)
    code, err = _gae(path, "--dones-mean", "ended", "--chunk-steps", "4", "-o",
                     str(tmp_path / "out.parquet"))  # fmt: skip
    assert code == 2, err
    assert '"truncated" is set at row 7' in err, err


def test_without_dones_mean_it_is_still_refused(tmp_path: Path) -> None:
    cols = _columns()
    cols["done"][3] = False
    code, err = _gae(_parquet(tmp_path / "steps.parquet", cols), "-o", str(tmp_path / "o.parquet"))
    assert code == 2, err


def test_torchrl_next_done_beside_next_terminated(tmp_path: Path) -> None:
    """TorchRL's keys (``TensorDict.to_h5``): ``next/done`` 0 where ``next/terminated``
    is 1."""
    cols = _columns()
    cols["done"][3] = False
    path = tmp_path / "rollout.h5"
    with h5py.File(path, "w") as f:
        f["next/reward"] = cols["rewards"][:, None]
        f["state_value"] = cols["values"][:, None]
        f["next/state_value"] = cols["next_values"][:, None]
        f["next/done"] = cols["done"][:, None]
        f["next/terminated"] = cols["terminated"][:, None]
        f["next/truncated"] = cols["truncated"][:, None]
    code, err = _gae(path, "--dones-mean", "ended", "-o", str(tmp_path / "out.h5"))
    assert code == 2, err
    assert '"next/terminated" is set at row 3' in err and "--ignore next/done" in err, err


def test_episode_starts_that_do_not_follow_a_termination(tmp_path: Path) -> None:
    cols = _columns()
    starts = np.zeros(N, bool)
    starts[1:] = cols["done"][:-1]
    starts[4] = False  # row 3 terminated, yet row 4 does not start an episode
    del cols["done"]
    cols["episode_starts"] = starts
    code, err = _gae(_parquet(tmp_path / "sb3.parquet", cols), "--ends-are", "truncated")
    assert code == 2, err
    assert '"terminated" is set at row 3' in err and '"episode_starts"' in err, err


def test_d3rlpy_terminal_inside_an_episode(tmp_path: Path) -> None:
    """d3rlpy 1.x: ``terminals`` set on a row ``episode_terminals`` does not end."""
    cols = _columns()
    path = tmp_path / "d3rlpy.h5"
    with h5py.File(path, "w") as f:
        f["rewards"] = cols["rewards"]
        f["values"] = cols["values"]
        f["next_values"] = cols["next_values"]
        f["terminals"] = cols["terminated"].astype(np.float32)
        ends = cols["done"].copy()
        ends[3] = False
        f["episode_terminals"] = ends.astype(np.float32)
    code, err = _gae(path)
    assert code == 2, err
    assert '"terminals" is set at row 3' in err and '"episode_terminals"' in err, err


# -------------------------------------------------------------------- still read


@pytest.mark.parametrize("chunk", [None, "4"], ids=["whole", "windows"])
def test_consistent_done_is_read_as_the_flags(tmp_path: Path, chunk: str | None) -> None:
    cols = _columns()
    cols["done"][10] = True  # an end no flag explains: --ends-are says it
    with_done = _parquet(tmp_path / "with.parquet", cols)
    without = {k: v for k, v in cols.items() if k != "done"}
    without["truncated"] = cols["truncated"] | (cols["done"] & ~cols["terminated"])
    flags_only = _parquet(tmp_path / "without.parquet", without)
    extra = ["--chunk-steps", chunk] if chunk else []
    outs = []
    for src, more in ((with_done, ["--dones-mean", "ended", "--ends-are", "truncated"]),
                      (flags_only, [])):  # fmt: skip
        out = tmp_path / f"{src.stem}_out.parquet"
        code, err = _gae(src, *more, *extra, "-o", str(out))
        assert code == 0, err
        outs.append(pq.read_table(out).column("advantages").to_numpy())
    np.testing.assert_array_equal(outs[0], outs[1])
