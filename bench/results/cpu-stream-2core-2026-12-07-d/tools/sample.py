"""Run a command, sample its /proc status every 5 ms; print each field's peak (MiB) and
when (s). ``TRACE=FILE``: also write ``[s, RssAnon, RssFile]`` samples there."""

import json
import os
import subprocess
import sys
import time

FIELDS = ("VmRSS", "RssAnon", "RssFile", "RssShmem", "VmHWM")


def status(pid: int) -> dict[str, int]:
    out = {}
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in FIELDS:
                out[key] = int(value.split()[0]) // 1024
    return out


def main() -> None:
    proc = subprocess.Popen(sys.argv[1:], stdout=subprocess.DEVNULL)
    peak = {f: (0, 0.0) for f in FIELDS}
    trace = []
    t0 = time.perf_counter()
    while proc.poll() is None:
        try:
            values = status(proc.pid)
        except (FileNotFoundError, ProcessLookupError):
            break
        t = time.perf_counter() - t0
        trace.append((round(t, 3), values.get("RssAnon"), values.get("RssFile")))
        for key, v in values.items():
            if v > peak[key][0]:
                peak[key] = (v, round(t, 2))
        time.sleep(0.005)
    wall = round(time.perf_counter() - t0, 2)
    print(json.dumps({"rc": proc.wait(), "wall": wall, "peak_mib_at_s": peak}))
    with open(os.environ.get("TRACE", "/dev/null"), "w") as fh:
        json.dump(trace, fh)


if __name__ == "__main__":
    main()
