"""Whether two trees' scan kernels compile to the same sm_90a code, launch by launch
(issue 29: each kind's prologue and epilogue moved out of ``_scan_kernel`` into
``rltscan/scan/kinds/``; Triton inlines them, so the code must not change).

    pip install --no-deps --target /tmp/t36 triton==3.6.0     # the device's Triton
    python same_code.py plans OUT/plans.json [TEST_PLANS.json ...]
    python same_code.py compile OUT/plans.json OUT/NAME.json TREE   # once per tree
    python same_code.py compare PREFIX OUT/plans.json OUT/A.json OUT/B.json [...]

``plans``: the launches (constexprs, warps, pointer dtypes, the integer arguments'
``== 1`` / multiple-of-16 facts) that this tree's host path makes, taken under Triton's
interpreter without running them: each kind at 2^16 flat steps (the probe's tiles and
specialisations at 2^26), 16 x 4096 batch-major and time-major, fp32, bf16, fp16 and
fp64 inputs, validate off and on, no bootstrap column and a next_values column; plus
the plans recorded from the CPU test suite (``capture_plugin.py``: tiny tiles), and
those again with the probe's flat tiles (1024 steps, 4 warps, 8 steps a thread) where
their time stride is 1. ``compile``: every plan's ``_scan_kernel`` of TREE compiled for
sm_90a with the Triton on PYTHONPATH, line info off (``TRITON_DISABLE_LINE_INFO=1``:
PTX without source positions), then ``ptxas`` and ``nvdisasm``; keeps the PTX's and the
SASS's sha256 and the counts of ``../kernel-sass-sm90-2026-12-05/sass_counts.py``.
``compare``: PREFIX.md, a row per plan with the trees' counts (one figure where they
agree) and whether PTX and SASS are byte-identical; PREFIX.json, the plans and every
tree's rows.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor

CAPTURE = r"""
import json, os, sys, torch
os.environ["TRITON_INTERPRET"] = "1"
from rltscan import bench
from rltscan.scan import triton_scan
plans = {}
class Stop(Exception):
    pass
def fire(self, tensors, device, check_id=0):
    plan = {"consts": [[n, v if isinstance(v, (bool, int)) else str(v)] for n, v in self.consts],
            "num_warps": self.num_warps, "ints": list(self.ints),
            "ptr_dtypes": [str(t.dtype) for t in tensors]}
    plans[key(plan)] = plan
    raise Stop
def key(plan):
    return json.dumps([plan["consts"], plan["num_warps"], plan["ptr_dtypes"],
                       [[v == 1, v % 16 == 0] for v in plan["ints"]]])
triton_scan.Launch.fire = fire
for kind in ("gae", "returns", "td_lambda", "vtrace", "retrace", "traces", "prefix_sum"):
    for shape, major in (((65536,), False), ((16, 4096), False), ((16, 4096), True)):
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
            for validate in (False, True):
                for nv in (False, True):
                    inp = bench.make_inputs(kind, shape, ep_len=1000.0, device="cpu")
                    inp = {k: v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point()
                           else v for k, v in inp.items()}
                    if major:
                        inp = {k: v.t().contiguous().t() if isinstance(v, torch.Tensor)
                               and v.ndim == 2 else v for k, v in inp.items()}
                    if nv and "values" in inp:  # (in place of the bootstrap form made)
                        inp.pop("bootstrap_values", None), inp.pop("last_value", None)
                        inp["next_values"] = inp["values"]
                    elif nv:
                        continue
                    try:
                        bench.call(kind, inp, backend="triton", validate=validate)
                    except Stop:
                        pass
                    except Exception as e:  # an input set this kind does not take
                        print(kind, shape, dtype, validate, nv, repr(e)[:120], file=sys.stderr)
for path in sys.argv[1:]:
    for plan in json.load(open(path)):
        plans[key(plan)] = plan
        c = dict(plan["consts"])
        if plan["ints"][3] == 1:  # time stride 1: the same launch with the probe's flat tiles
            c.update(ROWS=1, CHUNK=1024, PER=8, LOOKBACK=True)
            flat = dict(plan, consts=[[n, c[n]] for n, _ in plan["consts"]], num_warps=4)
            plans[key(flat)] = flat
seen = set()  # one launch per set of constexprs, warps and pointer dtypes (the probe's first)
out = [p for p in plans.values()
       if not (json.dumps([p["consts"], p["num_warps"], p["ptr_dtypes"]]) in seen
               or seen.add(json.dumps([p["consts"], p["num_warps"], p["ptr_dtypes"]])))]
json.dump(out, sys.stdout)
"""
PTR = {"torch.float32": "*fp32", "torch.float64": "*fp64", "torch.bool": "*i1",
       "torch.uint8": "*u8", "torch.int32": "*i32", "torch.int64": "*i64",
       "torch.bfloat16": "*bf16", "torch.float16": "*fp16"}  # fmt: skip
INTS = ("R", "T", "stride_r", "stride_t", "n_tblocks", "set_stride")
NV_BIN = None


def make_plans(out: str, extra: list[str]) -> None:
    env = dict(os.environ, PYTHONPATH=".")  # this tree with the installed Triton
    got = subprocess.run([sys.executable, "-c", CAPTURE, *extra], capture_output=True,
                         text=True, env=env, check=True)  # fmt: skip
    sys.stderr.write(got.stderr)
    with open(out, "w") as fh:
        fh.write(got.stdout)


def compile_one(plan: dict) -> dict:
    import triton
    import triton.language as tl
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from rltscan.scan import triton_scan

    fn = triton_scan._scan_kernel
    fp = {"fp32": tl.float32, "fp64": tl.float64}
    consts = {n: fp.get(v, v) if isinstance(v, str) else v for n, v in plan["consts"]}
    ints = dict(zip(INTS, plan["ints"], strict=True))
    sig, attrs, ptrs = {}, {}, iter(plan["ptr_dtypes"])
    for i, n in enumerate(fn.arg_names):
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
    ck = triton.compile(ASTSource(fn, sig, consts, attrs), target=GPUTarget("cuda", 90, 32),
                        options={"num_warps": plan["num_warps"]})  # fmt: skip
    nv = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    ptx = ck.asm["ptx"]
    with tempfile.TemporaryDirectory() as d:
        p, cubin = os.path.join(d, "k.ptx"), os.path.join(d, "k.cubin")
        with open(p, "w") as fh:
            fh.write(ptx)
        v = subprocess.run([os.path.join(nv, "ptxas"), "-v", "--gpu-name=sm_90a", p, "-o",
                            cubin], capture_output=True, text=True, check=True).stderr  # fmt: skip
        sass = subprocess.run([os.path.join(nv, "nvdisasm"), "-c", cubin], capture_output=True,
                              text=True, check=True).stdout  # fmt: skip
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", v)
    ins = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    return {
        "ptx_sha256": hashlib.sha256(ptx.encode()).hexdigest(),
        "sass_sha256": hashlib.sha256(sass.encode()).hexdigest(),
        "ptx_lines": ptx.count("\n"),
        "regs": int(re.search(r"Used (\d+) registers", v).group(1)),
        "spill_bytes": int(spill.group(1)) + int(spill.group(2)),
        "sass_instructions": len(ins),
        "shuffles": sum(i.startswith("SHFL") for i in ins),
        "barriers": sum(i.startswith("BAR") for i in ins),
        "global_loads": sum(i.startswith("LDG") for i in ins),
        "global_stores": sum(i.startswith("STG") for i in ins),
    }


def compile_tree(plans_path: str, out: str, tree: str) -> None:
    if os.environ.get("_SAME_CODE_TREE") != tree:  # rerun with TREE first on the path
        path = os.pathsep.join(p for p in (tree, os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, PYTHONPATH=path, _SAME_CODE_TREE=tree, TRITON_DISABLE_LINE_INFO="1")
        env.pop("TRITON_INTERPRET", None)
        subprocess.run([sys.executable, __file__, "compile", plans_path, out, tree], env=env,
                       check=True)  # fmt: skip
        return
    import triton

    import rltscan

    assert rltscan.__file__.startswith(os.path.abspath(tree)), rltscan.__file__
    with open(plans_path) as fh:
        plans = json.load(fh)
    jobs = int(os.environ.get("JOBS", os.cpu_count() or 1))
    with ProcessPoolExecutor(jobs) as pool, open(out, "w") as fh:  # JSON lines, as done
        fh.write(json.dumps({"tree": tree, "triton": triton.__version__}) + "\n")
        for row in pool.map(compile_one, plans):
            fh.write(json.dumps(row) + "\n")
            fh.flush()


def _load(path: str) -> dict:
    with open(path) as fh:
        head, *rows = (json.loads(line) for line in fh)
    return dict(head, rows=rows)


def compare(prefix: str, plans_path: str, paths: list[str]) -> None:
    runs = [_load(p) for p in paths]
    with open(plans_path) as fh:
        plans = json.load(fh)
    lines: list[str] = []
    out = lines.append
    names = [os.path.basename(p).removesuffix(".json") for p in paths]
    keys = ("regs", "spill_bytes", "sass_instructions", "shuffles", "barriers",
            "global_loads", "global_stores", "ptx_lines")  # fmt: skip
    kinds = {0: "linear", 1: "gae", 2: "td_lambda", 3: "returns", 4: "vtrace", 5: "retrace",
             6: "traces", 7: "prefix_sum"}  # fmt: skip
    out(
        f"Triton {runs[0]['triton']}, sm_90a; {len(plans)} launches; trees: "
        + ", ".join(f"{n} = {r['tree']}" for n, r in zip(names, runs, strict=True))
    )
    out("")
    out(
        "| # | kind | dtype | tiles (rows×chunk/warps, per) | switches | "
        + " | ".join(keys)
        + " | PTX same | SASS same |"
    )
    out("|---" * (len(keys) + 7) + "|")
    same_all = True
    done = min(len(r["rows"]) for r in runs)
    for i, plan in enumerate(plans[:done]):
        c = dict(plan["consts"])
        rows = [r["rows"][i] for r in runs]
        same_ptx = len({r["ptx_sha256"] for r in rows}) == 1
        same_sass = len({r["sass_sha256"] for r in rows}) == 1
        same_all &= same_ptx and same_sass
        switches = " ".join(n for n, v in c.items() if v is True and n not in ("LOOKBACK",))
        switches += f" NV={c['NV_MODE']} NSET={c['NSET']}" + (
            f" TRACE={c['TRACE']}" if c["KIND"] == 5 else ""
        )
        counts = [" / ".join(dict.fromkeys(str(r[k]) for r in rows)) for k in keys]
        out(f"| {i} | {kinds[c['KIND']]} | {plan['ptr_dtypes'][0].removeprefix('torch.')} | "
              f"{c['ROWS']}×{c['CHUNK']}/{plan['num_warps']}, {c['PER']}"
              f"{' LB' if c['LOOKBACK'] else ''} | {switches} | " + " | ".join(counts)
              + f" | {'yes' if same_ptx else 'NO'} | {'yes' if same_sass else 'NO'} |")  # fmt: skip
    out("")
    out(
        f"{done} of {len(plans)} launches compiled in every tree: "
        + ("all identical" if same_all else "DIFFERENCES FOUND")
    )
    with open(prefix + ".md", "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(prefix + ".json", "w") as fh:
        trees = {n: dict(r, rows=r["rows"][:done]) for n, r in zip(names, runs, strict=True)}
        json.dump({"target": "sm_90a", "plans": plans[:done], "trees": trees}, fh, indent=1)
    sys.stdout.write(lines[-1] + "\n")


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "plans":
        make_plans(args[0], args[1:])
    elif cmd == "compile":
        compile_tree(*args)
    else:
        compare(args[0], args[1], args[2:])
