"""Host µs per call of the Python API's repeated (bound) calls, for comparing two trees.

    PYTHONPATH=TREE python bench/api_host_cost.py LABEL >> rows.jsonl

Run it once per tree (e.g. before and after a front-end change), alternating, on a GPU:
each row is one call form (estimator, shape, how time is said) with the host µs per call
(the GPU not waited on; best of 3 loops of 2000 calls), whether the call was bound,
and the tree's label. Forms a tree does not know (``time_dim=None``, TorchRL's
``[B, T, 1]``) are skipped there. The harness (``bench/harness.py``) comes from TREE as
rltscan does: a tree from before it left ``rltscan/bench.py`` has none.
"""

from __future__ import annotations

import inspect
import json
import sys

import torch

import rltscan
from bench import harness
from rltscan import bench
from rltscan.estimators import DECLARATIONS
from rltscan.estimators import _bound as bound

FORMS = [
    ("gae", (4096, 128), -1),
    ("gae", (4096, 128), None),  # the default (time last)
    ("gae", (1024, 1024), -1),
    ("returns", (4096, 128), -1),
    ("vtrace", (4096, 128), -1),
    ("gae", (4096, 128, 1), -2),  # TorchRL's [B, T, 1]
]


def main(label: str) -> None:
    knows_none = inspect.signature(rltscan.gae).parameters["time_dim"].default is None
    for kind, shape, time_dim in FORMS:
        if (time_dim is None or len(shape) == 3) and not knows_none:
            continue
        base = shape[:2]
        inp = bench.make_inputs(kind, base, ep_len=200.0, device="cuda")
        if len(shape) == 3:  # every per-step tensor with a trailing axis of one
            inp = {
                k: v.unsqueeze(-1) if isinstance(v, torch.Tensor) and v.shape == base else v
                for k, v in inp.items()
            }
        kw = bench.call_kwargs(kind, inp, validate=False)
        kw["time_dim"] = time_dim
        if time_dim is None:
            del kw["time_dim"]
        fn = bench.function(kind)
        fn(**kw)
        d = next(x for x in DECLARATIONS.values() if x.name == kind)
        args = harness.arguments(kind, kw)
        key = bound.call_key(d, args)
        bound_now = key is not None and bound.lookup(d, key) is not None
        us = harness.host_us(lambda fn=fn, kw=kw: fn(**kw), 2000, best_of=3)
        row = {"tree": label, "estimator": kind, "shape": "x".join(map(str, shape)),
               "time_dim": time_dim, "bound": bound_now, "host_us": round(us, 2)}  # fmt: skip
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tree")
