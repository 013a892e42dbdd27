"""Read-only inputs, as offline datasets hand them over (``np.load(mmap_mode="r")``, a
pandas Series under copy-on-write, arrays whose ``writeable`` flag is off): the same
numbers as writable copies, and no warning from torch about non-writable arrays in the
user's log (rltscan never writes into an input). Each case runs in a fresh interpreter:
torch prints that warning once per process, so an earlier test could hide it."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import rltscan

    d = sys.argv[1]
    rng = np.random.default_rng(0)
    n = 257
    cols = {
        "rewards": rng.standard_normal(n),
        "values": rng.standard_normal(n),
        "terminated": rng.random(n) < 0.05,
        "discount": rng.uniform(0.9, 1.0, n),
    }
    for k, v in cols.items():
        np.save(f"{d}/{k}.npy", v)
    mapped = {k: np.load(f"{d}/{k}.npy", mmap_mode="r") for k in cols}
    frozen = {k: v.copy() for k, v in cols.items()}
    for v in frozen.values():
        v.flags.writeable = False
    kind = sys.argv[2]
    if kind == "pandas":
        import pandas as pd

        inputs = {k: pd.Series(v) for k, v in cols.items()}
    else:
        inputs = mapped if kind == "mmap" else frozen
    for fn in (rltscan.gae, rltscan.td_lambda):
        want = fn(**cols, last_value=0.0, lam=0.9)
        got = fn(**inputs, last_value=0.0, lam=0.9)
        for name in want:
            assert np.array_equal(np.asarray(got[name]), np.asarray(want[name])), name
    got = rltscan.discounted_returns(inputs["rewards"], terminated=inputs["terminated"])
    if kind != "pandas":  # the bare recurrence on [T] arrays
        y = rltscan.linear_scan(inputs["discount"], inputs["rewards"], reverse=True)
        want = rltscan.linear_scan(cols["discount"], cols["rewards"], reverse=True)
        assert np.array_equal(np.asarray(y), np.asarray(want))
    print("ok", float(np.asarray(got.returns).sum()))
    """
)


@pytest.mark.parametrize("kind", ["mmap", "frozen", "pandas"])
def test_read_only_inputs_give_the_numbers_and_no_torch_warning(kind, tmp_path):
    if kind == "pandas":
        pytest.importorskip("pandas")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), kind],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok"), proc.stdout
    assert "not writable" not in proc.stderr, proc.stderr[-2000:]
    assert np.isfinite(float(proc.stdout.split()[1]))
