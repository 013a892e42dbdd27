"""Each plan of plans.json compiled for sm_90a without a GPU (the compile and counts of
``../kernel-nextv-sass-sm90-2026-12-07/sass_counts.py``): registers, programs an SM,
spills and SASS counts. From the repository's root, with the device's Triton:
``PYTHONPATH=/tmp/t36 python bench/results/kernel-settings-sass-sm90-2026-12-07/compile.py``.
"""

import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.argv = ["compile"]
spec = importlib.util.spec_from_file_location(
    "sc", os.path.join(HERE, "..", "kernel-nextv-sass-sm90-2026-12-07", "sass_counts.py")
)
sc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sc)
sys.path.insert(0, os.getcwd())
import triton  # noqa: E402

from rltscan.scan import triton_scan  # noqa: E402

with open(os.path.join(HERE, "plans.json")) as fh:
    plans = json.load(fh)
print("triton", triton.__version__)
print("| launch | warps | regs | programs/SM | spill bytes | instructions | barriers "
      "| global loads | global stores |")  # fmt: skip
print("|---|---|---|---|---|---|---|---|---|")
for name, plan in plans.items():
    c = sc.base.counts(sc.compile_one(triton_scan._scan_kernel, plan))
    w, regs = plan["num_warps"], c["regs"]
    programs = min(65536 // (-(-regs // 8) * 8 * 32 * w), 64 // w)  # 64 warps an SM
    print(f"| {name} | {w} | {regs} | {programs} | {c['spill_bytes']} | {c['instructions']} "
          f"| {c['barriers']} | {c['global_loads']} | {c['global_stores']} |")  # fmt: skip
