"""The scan kernel's sm_90 code without a GPU: registers, spills and SASS instruction
counts per thread of the launches the probe times at 2^26 flat steps (issue 23).

    pip install --no-deps --target /tmp/t36 triton==3.6.0     # the device's Triton
    PYTHONPATH=/tmp/t36:. python bench/results/kernel-sass-sm90-2026-12-05/sass_counts.py \\
        OUT_PREFIX NAME=KERNEL_FILE [NAME=KERNEL_FILE ...]

Each estimator's launch (constexprs, warps, pointer dtypes, integer arguments) is taken
from this tree's host path under Triton's interpreter at 65536 flat steps (the same
tiles and specialisations as 2^26: every integer argument a multiple of 16, R and the
time stride 1); each KERNEL_FILE's ``_scan_kernel`` is then compiled for sm_90a with
those arguments, ``ptxas -v`` gives registers and spills, ``nvdisasm`` the SASS.
Writes OUT_PREFIX.json and OUT_PREFIX.md.
"""

from __future__ import annotations

import importlib.util
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
                  "num_warps": self.num_warps, "ints": list(self.ints),
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


def plans() -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = "."  # this tree with the installed Triton (the interpreter)
    out = subprocess.run([sys.executable, "-c", CAPTURE], capture_output=True, text=True,
                         env=env, check=True)  # fmt: skip
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
    return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": plan["num_warps"]})  # fmt: skip


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


def main() -> None:
    prefix, specs = sys.argv[1], [a.split("=", 1) for a in sys.argv[2:]]
    launch = plans()
    rows = []
    for name, path in specs:
        spec = importlib.util.spec_from_file_location(f"variant_{name}", path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
        for kind, plan in launch.items():
            rows.append({"kernel": name, "estimator": kind,
                         **counts(compile_one(mod._scan_kernel, plan))})  # fmt: skip
            print(rows[-1], flush=True)
    import triton

    with open(prefix + ".json", "w") as fh:
        json.dump({"triton": triton.__version__, "target": "sm_90a", "plans": launch,
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
