"""Smoke test of the file-to-file benchmark (bench/e2e.py) at 20,000 steps on the CPU."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CASES = ("io-floor", "io-floor-inplace", "rltscan-cpu", "rltscan-cpu-inplace", "naive")


def test_e2e_bench_smoke(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        str(REPO / "bench" / "e2e.py"),
        "--steps",
        "20000",
        "--formats",
        "hdf5,parquet",
        "--estimators",
        "gae",  # (one estimator: each case is a subprocess that imports torch)
        "--devices",
        "cpu",
        "--out",
        str(tmp_path),
        "--workdir",
        str(tmp_path),
        "--budget-s",
        "120",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]

    result = json.loads((tmp_path / "e2e.json").read_text())
    assert result["correctness"]["passed"], result["correctness"]
    assert {(r["format"], r["estimator"]) for r in result["correctness"]["results"]} == {
        (f, "gae") for f in ("hdf5", "parquet")
    }

    cases = {(c["format"], c["estimator"], c["case"]): c for c in result["cases"]}
    for fmt in ("hdf5", "parquet"):
        for est in ("gae",):
            for kind in CASES:
                case = cases.get((fmt, est, kind))
                assert case is not None, f"missing case {fmt}/{est}/{kind}"
                assert case["status"] == "ok", case
                assert case["wall_s"] > 0 and case["peak_rss_bytes"] > 0, case
                if kind.startswith("rltscan") or kind == "naive":
                    assert case["check"]["passed"], case
                if kind != "io-floor":
                    assert case["ratio_io_floor"] > 0, case

    table = (tmp_path / "e2e.md").read_text()
    assert "| hdf5 | gae | rltscan-cpu | ok |" in table
    assert "io-floor-inplace" in table


def test_write_result_writes_the_record_and_its_table(tmp_path: Path) -> None:
    """Bench scripts' result files: every figure in the JSON, the quoted table in .md."""
    from bench import harness

    text = harness.write_result(
        str(tmp_path / "r"), {"rows": [1.5]}, ("row", "µs"), [("gae 4096x128", 1.5)],
        title="T", caption="C.",
    )  # fmt: skip
    assert json.loads((tmp_path / "r.json").read_text()) == {"rows": [1.5]}
    assert (tmp_path / "r.md").read_text() == text
    assert text == "# T\n\nC.\n\n| row | µs |\n|---|---|\n| gae 4096x128 | 1.5 |\n"
