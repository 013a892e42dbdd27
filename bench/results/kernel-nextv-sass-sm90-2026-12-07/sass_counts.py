"""The scan kernel's sm_90a code without a GPU, tree against tree: registers, spills and
SASS instruction counts per thread of the launches the probe times at 2^26 flat steps.

    pip install --no-deps --target /tmp/t36 triton==3.6.0     # the device's Triton
    PYTHONPATH=/tmp/t36 python bench/results/kernel-nextv-sass-sm90-2026-12-07/sass_counts.py \\
        OUT_PREFIX NAME=TREE [NAME=TREE ...]

Each TREE (a checkout of rltscan) is imported in its own process: its host path under
Triton's interpreter at 65536 flat steps gives each estimator's launch (constexprs,
warps, register cap, pointer dtypes, integer facts: the same tiles and specialisations
as 2^26), its ``_scan_kernel`` is compiled for sm_90a with those, ``ptxas -v`` gives
registers and spills, ``nvdisasm`` the SASS. Writes OUT_PREFIX.json and OUT_PREFIX.md.
(The 2026-12-05 script this follows compiled one kernel file; the kernel now spans
``triton_scan``, ``_tile`` and ``kinds/``, so a variant is a tree.)
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile

CAPTURE = r"""
import json, os, sys
os.environ["TRITON_INTERPRET"] = "1"
from rltscan import bench
from rltscan.scan import triton_scan
plans, cur = {}, None
class Stop(Exception):
    pass
def fire(self, tensors, device, check_id=0):
    plans[cur] = {"consts": [[n, v if isinstance(v, (bool, int)) else str(v)]
                             for n, v in self.consts],
                  "num_warps": self.num_warps, "maxnreg": self.max_registers,
                  "ints": list(self.ints),
                  "ptr_dtypes": [str(t.dtype) for t in tensors]}
    raise Stop
triton_scan.Launch.fire = fire
for cur in ("gae", "returns", "td_lambda", "vtrace", "retrace"):
    inp = bench.make_inputs(cur, (65536,), ep_len=1000.0, device="cpu")
    try:
        bench.call(cur, inp, backend="triton", validate=False)
    except Stop:
        pass
json.dump(plans, sys.stdout)
"""
PTR = {"torch.float32": "*fp32", "torch.float64": "*fp64", "torch.bool": "*i1",
       "torch.uint8": "*u8", "torch.int32": "*i32", "torch.int64": "*i64"}  # fmt: skip
INTS = ("R", "T", "stride_r", "stride_t", "n_tblocks", "set_stride")


def plans(tree: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = tree  # that tree with the installed Triton (the interpreter)
    out = subprocess.run([sys.executable, "-c", CAPTURE], capture_output=True, text=True,
                         env=env, check=True, cwd=tree)  # fmt: skip
    return json.loads(out.stdout)


def compile_one(fn, plan: dict):
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = fn.arg_names
    fp = {"fp32": tl.float32, "fp64": tl.float64}
    consts = {n: fp.get(v, v) if isinstance(v, str) else v for n, v in plan["consts"]}
    ints = dict(zip(INTS, plan["ints"], strict=True))
    sig, attrs, ptrs = {}, {}, iter(plan["ptr_dtypes"])
    for i, n in enumerate(names):
        if n in consts:
            sig[n] = "constexpr"
        elif n.endswith("_ptr"):
            dt = next(ptrs)  # the look-back words and the error word: filled at launch
            sig[n] = "*i64" if n == "ws_ptr" else "*i32" if n == "err_ptr" else PTR[dt]
            attrs[(i,)] = [["tt.divisibility", 16]]
        elif n in ints and ints[n] == 1:
            sig[n], consts[n] = "constexpr", 1
        elif n in ints or n in ("epoch", "check_id"):
            sig[n] = "i32"
            if n in ints and ints[n] % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        else:
            sig[n] = "fp32"
    src = ASTSource(fn, sig, consts, attrs)
    opts = {"num_warps": plan["num_warps"]}
    if plan.get("maxnreg"):
        opts["maxnreg"] = plan["maxnreg"]
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)


def counts(ck) -> dict:
    import triton

    nv = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as d:
        ptx, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(ptx, "w") as fh:
            fh.write(ck.asm["ptx"])
        with open(cubin, "wb") as fh:
            fh.write(ck.asm["cubin"])
        cmd = [os.path.join(nv, "ptxas"), "-v", "--gpu-name=sm_90a", ptx, "-o", cubin + "2"]
        v = subprocess.run(cmd, capture_output=True, text=True).stderr
        sass = subprocess.run([os.path.join(nv, "nvdisasm"), "-c", cubin], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    regs = int(re.search(r"Used (\d+) registers", v).group(1))
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", v)
    ins = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    return {
        "regs": regs,
        "programs_per_sm": min(16, 65536 // (-(-regs // 8) * 8 * 128)),  # (4 warps each)
        "spill_bytes": int(spill.group(1)) + int(spill.group(2)),
        "instructions": len(ins),
        "shuffles": sum(i.startswith("SHFL") for i in ins),
        "barriers": sum(i.startswith("BAR") for i in ins),
        "shared_stores": sum(i.startswith("STS") for i in ins),
        "global_loads": sum(i.startswith("LDG") for i in ins),
        "global_stores": sum(i.startswith("STG") for i in ins),
    }


def one_tree(tree: str) -> list[dict]:
    """(in a process of its own, ``tree`` first on the path) every estimator's counts"""
    sys.path.insert(0, tree)
    from rltscan.scan import triton_scan

    rows = []
    for kind, plan in plans(tree).items():
        rows.append({"estimator": kind, "tiles": f"{plan['num_warps']} warps",
                     "maxnreg": plan.get("maxnreg", 0),
                     **counts(compile_one(triton_scan._scan_kernel, plan))})  # fmt: skip
    return rows


def main() -> None:
    if sys.argv[1] == "--one":
        json.dump(one_tree(sys.argv[2]), sys.stdout)
        return
    prefix, specs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    rows = []
    for name, tree in specs:
        out = subprocess.run([sys.executable, __file__, "--one", os.path.abspath(tree)],
                             capture_output=True, text=True, check=True)  # fmt: skip
        for r in json.loads(out.stdout):
            rows.append({"kernel": name, **r})
            print(rows[-1], flush=True)
    import triton

    with open(prefix + ".json", "w") as fh:
        json.dump({"triton": triton.__version__, "target": "sm_90a", "trees": dict(specs),
                   "rows": rows}, fh, indent=1)  # fmt: skip
    keys = [k for k in rows[0] if k not in ("kernel", "estimator")]
    lines = ["| kernel | estimator | " + " | ".join(keys) + " |",
             "|---" * (len(keys) + 2) + "|"]  # fmt: skip
    lines += ["| " + " | ".join(str(r[k]) for k in ("kernel", "estimator", *keys)) + " |"
              for r in rows]  # fmt: skip
    with open(prefix + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
