import sys, time, atexit, resource, threading, cProfile, pstats, io
def tcpu():
    return time.thread_time()
stats = {}
def wrap(mod, name, label):
    f = getattr(mod, name)
    def g(*a, **k):
        c, w = tcpu(), time.perf_counter()
        try: return f(*a, **k)
        finally:
            s = stats.setdefault(label, [0, 0.0, 0.0]); s[0]+=1; s[1]+=tcpu()-c; s[2]+=time.perf_counter()-w
    setattr(mod, name, g)
import rltscan.engines.stream.run as R
import rltscan.io.hdf5 as H
wrap(R, "prepare", "prepare(window)")
wrap(H, "_read", "hdf5._read")
prof = cProfile.Profile()
orig = R.prepare
def profiled(*a, **k):
    if k.get("window", (0,0))[1]-k.get("window",(0,0))[0] > 1000:
        prof.enable()
        try: return orig(*a, **k)
        finally: prof.disable()
    return orig(*a, **k)
R.prepare = profiled
def dump():
    for k, v in stats.items(): print(f"{k}: calls {v[0]} thread-cpu {v[1]:.3f} s wall {v[2]:.3f} s", file=sys.stderr)
    s = io.StringIO(); pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(25); print(s.getvalue()[:6000], file=sys.stderr)
atexit.register(dump)
sys.argv = ["rltscan", "gae", "ip.h5", "--backend", "cpu", "-q"]
from rltscan.cli import main
main()
