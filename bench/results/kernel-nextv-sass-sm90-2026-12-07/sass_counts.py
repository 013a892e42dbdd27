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
The compile and the counts are those of ``../kernel-sass-sm90-2026-12-05/sass_counts.py``
(imported from there), with the launch's register cap added; that script compiled one
kernel file, and the kernel now spans ``triton_scan``, ``_tile`` and ``kinds/``, so a
variant here is a tree.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_BASE = os.path.join(_HERE, "..", "kernel-sass-sm90-2026-12-05", "sass_counts.py")
_spec = importlib.util.spec_from_file_location("sass_counts_2026_12_05", _BASE)
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

# the capture of 2026-12-05, with the launch's register cap (``maxnreg``) kept
_CAP = '"num_warps": self.num_warps, "maxnreg": self.max_registers,'
CAPTURE = base.CAPTURE.replace('"num_warps": self.num_warps,', _CAP)


def plans(tree: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = tree  # that tree with the installed Triton (the interpreter)
    out = subprocess.run([sys.executable, "-c", CAPTURE], capture_output=True, text=True,
                         env=env, check=True, cwd=tree)  # fmt: skip
    return json.loads(out.stdout)


def compile_one(fn, plan: dict):
    """``base.compile_one`` with the plan's register cap passed to ptxas."""
    if not plan.get("maxnreg"):
        return base.compile_one(fn, plan)
    import triton

    real = triton.compile

    def capped(src, target=None, options=None):
        return real(src, target=target, options={**(options or {}), "maxnreg": plan["maxnreg"]})

    triton.compile = capped
    try:
        return base.compile_one(fn, plan)
    finally:
        triton.compile = real


def one_tree(tree: str) -> list[dict]:
    """(in a process of its own, ``tree`` first on the path) every estimator's counts"""
    sys.path.insert(0, tree)
    from rltscan.scan import triton_scan

    rows = []
    for kind, plan in plans(tree).items():
        rows.append({"estimator": kind, "tiles": f"{plan['num_warps']} warps",
                     "maxnreg": plan.get("maxnreg", 0),
                     **base.counts(compile_one(triton_scan._scan_kernel, plan))})  # fmt: skip
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
