"""MUFU / barrier / load counts of the K = 3 one-launch V-trace and GAE plans, sm_90a, no GPU.

From the repository root, with the device's Triton in /tmp/t36:
``PYTHONPATH=/tmp/t36 python bench/results/kernel-settings-tiles-h100-2026-12-07-d/sass/mufu.py``
"""

import collections
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile

SC = "bench/results/kernel-nextv-sass-sm90-2026-12-07/sass_counts.py"
PLANS = "bench/results/kernel-settings-sass-sm90-2026-12-07/plans.json"
OPS = ["MUFU", "BAR", "LDG", "STG", "LDS", "STS", "SHFL", "FFMA", "FMUL", "FADD", "FMNMX"]


def main() -> None:
    sys.argv = ["mufu"]
    spec = importlib.util.spec_from_file_location("sc", SC)
    sc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sc)
    sys.path.insert(0, os.getcwd())
    import triton

    from rltscan.scan import triton_scan

    with open(PLANS) as fh:
        plans = json.load(fh)
    nv = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    for name in ["vtrace K=3 default", "gae K=3 default"]:
        ck = sc.compile_one(triton_scan._scan_kernel, plans[name])
        with tempfile.TemporaryDirectory() as d:
            cubin = os.path.join(d, "k.cubin")
            with open(cubin, "wb") as fh:
                fh.write(ck.asm["cubin"])
            sass = subprocess.run([os.path.join(nv, "nvdisasm"), "-c", cubin],
                                  capture_output=True, text=True, check=True).stdout  # fmt: skip
        ins = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
        c = collections.Counter(i.split(".")[0] for i in ins)
        print(name, len(ins), {k: c[k] for k in OPS})
        ptx = ck.asm["ptx"]
        print("  ptx ex2:", ptx.count("ex2.approx"), "bar.sync:", ptx.count("bar.sync"))


if __name__ == "__main__":
    main()
