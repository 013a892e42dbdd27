import importlib.util, json, os, sys, re, subprocess, tempfile, collections
sys.argv=["x"]
spec = importlib.util.spec_from_file_location("sc", "bench/results/kernel-nextv-sass-sm90-2026-12-07/sass_counts.py")
sc = importlib.util.module_from_spec(spec); spec.loader.exec_module(sc)
sys.path.insert(0, os.getcwd())
import triton
from rltscan.scan import triton_scan
plans = json.load(open("bench/results/kernel-settings-sass-sm90-2026-12-07/plans.json"))
for name in sys.argv[1:] or ["vtrace K=3 default", "gae K=3 default"]:
    pass
for name in ["vtrace K=3 default", "gae K=3 default"]:
    ck = sc.compile_one(triton_scan._scan_kernel, plans[name])
    nv = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.TemporaryDirectory() as d:
        cub = os.path.join(d, "k.cubin"); open(cub, "wb").write(ck.asm["cubin"])
        sass = subprocess.run([os.path.join(nv, "nvdisasm"), "-c", cub], capture_output=True, text=True, check=True).stdout
    ins = re.findall(r"/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)", sass)
    c = collections.Counter(i.split(".")[0] for i in ins)
    print(name, len(ins), {k: c[k] for k in ["MUFU","BAR","LDG","STG","LDS","STS","SHFL","FFMA","FMUL","FADD","FMNMX","ATOMG","LD","ST"]})
    print("  ptx ex2:", ck.asm["ptx"].count("ex2.approx"), "bar.sync:", ck.asm["ptx"].count("bar.sync"))
