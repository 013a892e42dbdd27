"""The README's performance table from the kernel probe of 2026-12-04, until
``bench/table.py`` has run on the H200.

    PYTHONPATH=. python bench/results/table-h200-2026-12-04-from-probe/derive.py

Reads ``../kernel-probe-h200-2026-12-04-b/`` (``kernel_probe.json``, and the driver and
commit beside it) and writes ``result.json`` and ``table.md`` here, in
``bench/table.py``'s format. Only what that run measured, checked against a float64
solve (error ≤ 1e-4) and at the tiles the kernel picks today
(``triton_scan.choose_tiles``) is taken: its tile sweep's rows where the shipped tile
was swept (2^26 flat), its default rows where its default tile is today's (rows of one
1024-step tile: 4096×1024). Every other cell is left out (–): its rl-triton rows were
not checked against float64, it had no torch.compile rows, and its 16×131072 rows, its
``validate=True`` row and its 2^26 K-settings and per-step rows ran 8-warp tiles where
today's kernel runs 4.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench import table
from rltscan.scan import triton_scan

HERE = Path(__file__).resolve().parent
PROBE = HERE.parent / "kernel-probe-h200-2026-12-04-b"
PROBE_TILE_WARPS = 8  # that tree's default: 1024-step tiles of 8 warps (its README)
TOL = 1e-4  # that run's check


def shape_of(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split("x"))


def today_tile(shape: tuple[int, ...]) -> str:
    t = triton_scan.choose_tiles(*(shape if len(shape) == 2 else (1, shape[0])), True)
    return f"{t.rows}x{t.chunk}/{t.num_warps}"


def probe_default_tile(shape: tuple[int, ...]) -> str:
    return f"1x1024/{PROBE_TILE_WARPS}"  # every probe shape had rows of ≥ 1024 steps


def cell(r: dict[str, Any]) -> dict[str, Any]:
    assert r["ok"] and r["max_rel_err"] <= TOL, r
    return {"us": r["us"], "max_rel_err": r["max_rel_err"]}


def main() -> None:
    probe = json.loads((PROBE / "kernel_probe.json").read_text())
    driver = (PROBE / "gpu.txt").read_text().splitlines()[1].split(", ")[1]
    commit = (PROBE / "commit.txt").read_text().strip().splitlines()[-1].split()[0]
    bw = probe["copy_GBps"]
    found: dict[tuple, dict[str, Any]] = {}
    for r in probe["rows"]:
        shape, ep = shape_of(r["shape"]), r["ep_len"]
        if r["estimator"] not in table.ESTIMATORS or ep != 1000.0 or shape not in table.SHAPES:
            continue
        case = {"settings": table.K_CASE, "per-step": table.STEP_CASE}.get(r["section"], "")
        if case == table.K_CASE and (r["estimator"] != "gae" or r["how"] != "one launch"):
            continue
        if case == table.STEP_CASE and r["gamma"] != "per step":
            continue
        tile = r.get("tile", probe_default_tile(shape))
        if tile != today_tile(shape) or r["section"] == "rl-triton":
            continue
        column = "rltscan_validated" if r.get("validate") else "rltscan"
        row = found.setdefault((r["estimator"], shape, case), {
            "estimator": r["estimator"], "shape": list(shape), "case": case,
            "steps": math.prod(shape),
            "bytes": round(r["floor_us"] * bw * 1e3), "floor_us": r["floor_us"],
        })  # fmt: skip
        row[column] = cell(r)
    rows = []
    for row in found.values():
        row.setdefault("rltscan_validated", {"us": None, "why": "not measured at these tiles"})
        if row["case"] == table.STEP_CASE or row["estimator"] not in ("gae", "returns", "vtrace"):
            why = "n/a: no per-step γ_t" if row["case"] else "n/a: other inputs"
            row["rl_triton"] = {"us": None, "why": why}
        else:
            row["rl_triton"] = {"us": None, "why": "not checked against float64 in that run"}
        row["compile"] = {"us": None, "why": "not measured in that run"}
        if row["case"] == table.K_CASE:
            row["compile"] = {"us": None, "why": "n/a: one compile per setting"}
        rows.append(row)
    order = [(k, s, "") for s in table.SHAPES for k in table.ESTIMATORS]
    order += [("gae", s, c) for c in (table.K_CASE, table.STEP_CASE) for s in table.EXTRA_SHAPES]
    rows.sort(key=lambda r: order.index((r["estimator"], tuple(r["shape"]), r["case"])))
    record = {
        "gpu": probe["gpu"], "driver": driver, "torch": probe["torch"],
        "triton": probe["triton"], "python": probe["python"], "date": probe["date"],
        "commit": commit, "tree": None, "copy_GBps": bw, "copy_MiB": 1024, "tolerance": TOL,
        "note": "Interim: the rows of `bench/results/kernel-probe-h200-2026-12-04-b/` "
        "measured at the tiles the kernel picks today, copied by `derive.py` beside the "
        "source; what that run did not measure so is left out or –.",
    }  # fmt: skip
    result = {"record": record, "rows": rows}
    (HERE / "result.json").write_text(json.dumps(result, indent=1) + "\n")
    (HERE / "table.md").write_text(table.render(result))
    print(table.render(result))


if __name__ == "__main__":
    main()
