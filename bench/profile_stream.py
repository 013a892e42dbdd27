"""Where a streamed run spends its scan time: every estimator call timed (synchronised).

    python bench/profile_stream.py FILE [--device cuda] [--estimator gae] [--out DIR]

Runs ``rltscan.api.run`` on FILE (written to a temp copy via ``-o``) with the
estimator wrapped by a timer, and prints/saves the per-call times next to the
report's stages, to tell first-call costs (kernel compile or cache load) from
per-call costs.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
import time
from pathlib import Path

import torch

import rltscan.estimators as est
from rltscan import api


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--estimator", default="gae")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    spec = est.ESTIMATORS[args.estimator]
    calls: list[dict] = []

    def timed(**kw):
        sync = kw["rewards"].is_cuda if isinstance(kw.get("rewards"), torch.Tensor) else False
        if sync:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        res = spec.function(**kw)
        if sync:
            torch.cuda.synchronize()
        calls.append(
            {
                "ms": (time.perf_counter() - t0) * 1e3,
                "steps": int(
                    kw["rewards"].size
                    if hasattr(kw["rewards"], "size") and not callable(kw["rewards"].size)
                    else kw["rewards"].numel()
                ),
            }
        )
        return res

    est.ESTIMATORS[args.estimator] = dataclasses.replace(spec, function=timed)
    params = {"gamma": 0.99, "lam": 0.95} if args.estimator == "gae" else {"gamma": 0.99}
    runs = []
    for k in range(2):
        calls.clear()
        with tempfile.TemporaryDirectory(dir=Path(args.file).parent) as tmp:
            out = Path(tmp) / ("o" + Path(args.file).suffix)
            t0 = time.perf_counter()
            report = api.run(
                args.estimator, args.file, output=str(out), device=args.device, params=params
            )
            wall = time.perf_counter() - t0
        stages = {s.name: round(s.seconds, 4) for s in report.stages}
        runs.append({"run": k, "wall_s": wall, "stages": stages, "calls_ms": list(calls)})
        ms = [c["ms"] for c in calls]
        print(f"run {k}: wall {wall:.2f} s; stages {stages}")
        rest = sorted(ms[1:]) or [float("nan")]
        print(f"  calls: first {ms[0]:.1f} ms, then median {rest[len(rest) // 2]:.2f} ms")
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "profile_stream.json").write_text(json.dumps(runs, indent=1))


if __name__ == "__main__":
    main()
