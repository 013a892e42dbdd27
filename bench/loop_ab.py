"""rltscan against rl-triton 0.1.3 in a loop of calls, interleaved A/B (issue 12).

A training step pays the larger of host and GPU time per call; ``bench/host_path.py``
times each side once per row, which on a noisy host can put minutes of drift between
the two. Here every row alternates the two, ``ROUNDS`` times, and reports the median
per side and the median of the per-round ratios.

    PYTHONPATH=.:bench/.baselines/rl_triton-0.1.3 python bench/loop_ab.py OUT_DIR

Written at the end of session 4 with no device time left: not yet run on a GPU.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any

from rltscan import bench

ROUNDS = 7
N = 1000


def main() -> None:
    out_dir = sys.argv[1]
    os.makedirs(out_dir, exist_ok=True)
    sys.path.insert(0, os.path.dirname(__file__))
    from host_path import ROWS
    from latency import rl_triton_fn

    res: dict[str, Any] = {**bench.run_record(), "rounds": ROUNDS, "calls": N, "rows": []}
    for kind, shape in ROWS:
        if len(shape) == 1 or shape[1] > 8192:  # rl-triton takes ms there: not a contest
            continue
        inp = bench.make_inputs(kind, shape, ep_len=200.0, device="cuda")
        kw = bench.call_kwargs(kind, inp, validate=False)
        fn = bench.function(kind)
        ours = lambda f=fn, k=kw: f(**k)  # noqa: E731
        theirs = rl_triton_fn(kind, inp)
        a, b = [], []
        for _ in range(ROUNDS):
            a.append(bench.host_us(ours, N, waited=True))
            b.append(bench.host_us(theirs, N, waited=True))
        row = {
            "estimator": kind,
            "shape": "x".join(map(str, shape)),
            "rltscan_us": statistics.median(a),
            "rl_triton_us": statistics.median(b),
            "ratio_median": statistics.median(x / y for x, y in zip(a, b, strict=True)),
            "rounds_rltscan": a,
            "rounds_rl_triton": b,
        }
        res["rows"].append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.startswith("rounds")}), flush=True)
    text = bench.write_result(
        os.path.join(out_dir, "loop_ab"),
        res,
        ("row", "rltscan", "rl-triton 0.1.3", "rltscan / rl-triton (median of rounds)"),
        (
            (
                f"{r['estimator']} {r['shape']}",
                f"{r['rltscan_us']:.1f}",
                f"{r['rl_triton_us']:.1f}",
                f"{r['ratio_median']:.2f}",
            )
            for r in res["rows"]
        ),
        title=f"Loop of calls, interleaved A/B, {res['gpu']}, {res['date']}",
        caption=f"torch {res['torch']}, triton {res['triton']}. µs per call of a loop of {N} "
        f"calls, the GPU waited on at its end; median of {ROUNDS} alternating rounds; "
        "validate=False.",
    )
    print(text)


if __name__ == "__main__":
    main()
