"""Pictures (rltscan/pictures.py): sparklines that fit the terminal, NO_COLOR and ASCII,
and ``--plot`` PNGs (or one clean error without matplotlib)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

from rltscan import pictures
from tests.io_helpers import ROOT

RLTSCAN = [sys.executable, "-m", "rltscan"]
HAS_MPL = importlib.util.find_spec("matplotlib") is not None
PNG = b"\x89PNG\r\n\x1a\n"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "120", **extra}


def _run(*args: str | Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*RLTSCAN, *map(str, args)], env=_env(**env), capture_output=True, timeout=300
    )


def _episodes_file(path: Path) -> None:
    """30 episodes of lengths 5..34 (reward 1 per step: return = length), one open."""
    lengths = list(range(5, 35))
    n = sum(lengths) + 3
    term = np.zeros(n, bool)
    term[np.cumsum(lengths) - 1] = True
    with h5py.File(path, "w") as f:
        f["rewards"] = np.ones(n, np.float32)
        f["values"] = np.zeros(n, np.float32)
        f["terminals"] = term
        f["timeouts"] = np.zeros(n, bool)


# --------------------------------------------------------------------------- terminal


def test_sparkline_fits_the_width_and_keeps_the_counts() -> None:
    counts = [0, 1, 5, 9, 0, 3, 2, 8] * 4  # 32 bins
    for width in (4, 8, 16, 31, 32, 100):
        line = pictures.sparkline(counts, width)
        assert 0 < len(line) <= max(width, 1)
        assert sum(pictures.narrowed(counts, width)) == sum(counts)
    full = pictures.sparkline(counts, 32)
    assert full[0] == " " and full[3] == "█" and full[1] == "▁"  # empty, top, lowest
    assert set(pictures.sparkline(counts, 32, unicode=False)) <= set(pictures.ASCII_RAMP + " ")
    assert pictures.sparkline([0, 0], 10) == ""


@pytest.mark.parametrize("width", [20, 40, 80, 200])
def test_histogram_line_fits_the_terminal(width: int) -> None:
    hist = {"edges": list(np.linspace(-123.456, 7890.12, 33)), "counts": list(range(32))}
    line = pictures.histogram_line("advantages", hist, width)
    floor = len("advantages") + len("-123") + len("7.89e+03") + 4 + 8  # the sparkline's least
    assert len(line) <= max(width, floor)
    assert line.startswith("advantages  -123 ") and line.endswith(" 7.89e+03")
    assert pictures.histogram_line("x", {"edges": [], "counts": []}, 40).endswith("values)")


def test_can_encode() -> None:
    assert pictures.can_encode("utf-8")
    assert not pictures.can_encode("ascii")
    assert not pictures.can_encode("no-such-codec")


def test_inspect_draws_episode_distributions_narrow_no_color_and_ascii(tmp_path: Path) -> None:
    path = tmp_path / "eps.h5"
    _episodes_file(path)
    done = _run("inspect", path, COLUMNS="40")
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "\x1b[" not in out  # NO_COLOR
    lines = [line for line in out.splitlines() if line.startswith("episode ")]
    assert len(lines) == 2 and all(len(line) <= 40 for line in lines)
    assert any(c in lines[0] for c in pictures.BLOCKS)
    # an output that cannot encode the blocks gets the ASCII ramp
    done = _run("inspect", path, COLUMNS="60", PYTHONIOENCODING="ascii")
    assert done.returncode == 0, done.stderr.decode()
    lines = [line for line in done.stdout.decode().splitlines() if line.startswith("episode ")]
    assert lines and not any(c in line for line in lines for c in pictures.BLOCKS)
    # --json: the numbers only (edges and counts), the same episodes
    info = json.loads(_run("inspect", path, "--json").stdout)
    ep = info["statistics"]["episodes"]
    assert ep["complete"] == 30 and ep["open"] == {"count": 1, "steps": 3, "return": 3.0}
    assert ep["length"]["min"] == 5 and ep["length"]["max"] == 34
    assert ep["return"]["mean"] == pytest.approx(19.5)
    assert sum(ep["length"]["histogram"]["counts"]) == 30
    assert len(ep["length"]["histogram"]["edges"]) == 33


def test_run_report_shows_what_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "eps.h5"
    _episodes_file(path)
    done = _run("gae", path, "--device", "cpu", "--missing-bootstrap", "zero", COLUMNS="70")
    err = done.stderr.decode()
    assert done.returncode == 0, err
    assert "\x1b[" not in err
    assert "statistics" in err and "1 open episode(s)" in err
    spark = [line for line in err.splitlines() if line.startswith(("advantages ", "value_t"))]
    assert len(spark) == 2 and all(len(line) <= 70 for line in spark)


# --------------------------------------------------------------------------- --plot


@pytest.mark.skipif(not HAS_MPL, reason="matplotlib (rltscan[plot]) is not installed")
def test_plot_writes_pngs_for_inspect_runs_and_bench(tmp_path: Path) -> None:
    path = tmp_path / "eps.h5"
    _episodes_file(path)
    done = _run("inspect", path, "--plot", tmp_path / "inspect.png")
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "inspect.png").read_bytes()[:8] == PNG
    done = _run(
        "gae", path, "--device", "cpu", "--missing-bootstrap", "zero", "--plot", tmp_path / "r.png"
    )
    assert done.returncode == 0, done.stderr.decode()
    assert (tmp_path / "r.png").read_bytes()[:8] == PNG
    from rltscan import bench

    result = {
        "kind": "gpu",
        "device": "test",
        "results": [
            {"estimator": "gae", "shape": s, "layout": "flat", "triton_us": us, "floor_us": f}
            for s, us, f in (("1024", 10.0, 5.0), ("4096", 20.0, 15.0), ("16x256", 20.0, 15.0))
        ],
    }
    series, floor = bench.throughput(result)
    assert series["gae flat"][0] == pytest.approx((1024.0, 1024 / 10e-6))
    assert [s for s, _ in floor] == [1024.0, 4096.0]  # the fastest floor at each size
    assert [f for _, f in floor] == pytest.approx([1024 / 5e-6, 4096 / 15e-6])
    bench.plot(result, str(tmp_path / "bench.png"))
    assert (tmp_path / "bench.png").read_bytes()[:8] == PNG


def test_plot_without_matplotlib_is_one_line_and_exit_2(tmp_path: Path) -> None:
    shim = tmp_path / "shim" / "matplotlib"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text("raise ImportError('No module named matplotlib')\n")
    path = tmp_path / "eps.h5"
    _episodes_file(path)
    before = path.read_bytes()
    env = {"PYTHONPATH": f"{tmp_path / 'shim'}{os.pathsep}{ROOT}"}
    for args in (
        ("gae", path, "--device", "cpu", "--plot", tmp_path / "r.png"),
        ("inspect", path, "--plot", tmp_path / "i.png"),
    ):
        done = _run(*args, **env)
        err = done.stderr.decode().strip()
        assert done.returncode == 2, err
        assert err.count("\n") == 0 and "Traceback" not in err
        assert "pip install 'rltscan[plot]'" in err
        assert not (tmp_path / "r.png").exists()
    assert path.read_bytes() == before  # stopped before any work


def test_plot_and_dry_run_refused() -> None:
    done = _run("gae", "missing.h5", "--dry-run", "--plot", "x.png")
    assert done.returncode == 2 and "--plot" in done.stderr.decode()
