"""A pytest plugin that records every distinct launch of the scan kernel (what
``Launch.key`` specialises on) the tests make, one JSON file a process in $CAPTURE_DIR:

    PYTHONPATH=.:bench/results/kernel-kinds-sass-sm90-2026-12-05 CAPTURE_DIR=OUT \
        python -m pytest -q -p capture_plugin -n 2 tests/test_lookback.py ...
"""

from __future__ import annotations

import json
import os

_seen = {}


def _norm(v):
    return v if isinstance(v, (bool, int)) else str(v)


def pytest_configure(config):
    from rltscan.scan import triton_scan

    orig = triton_scan.Launch.fire

    def fire(self, tensors, device, check_id=0):
        plan = {
            "consts": [[n, _norm(v)] for n, v in self.consts],
            "num_warps": self.num_warps,
            "ints": list(self.ints),
            "ptr_dtypes": [str(t.dtype) for t in tensors],
        }
        facts = [[v == 1, v % 16 == 0] for v in self.ints]
        key = json.dumps([plan["consts"], plan["num_warps"], plan["ptr_dtypes"], facts])
        _seen.setdefault(key, plan)
        return orig(self, tensors, device, check_id)

    triton_scan.Launch.fire = fire


def pytest_unconfigure(config):
    d = os.environ["CAPTURE_DIR"]
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"plans-{os.getpid()}.json"), "w") as fh:
        json.dump(list(_seen.values()), fh)
