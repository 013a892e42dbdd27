"""Audit: jaxrl / IQL-style D4RL data (``D4RLDataset``) moved to Parquet with pandas.

jaxrl keeps ``observations``, ``actions``, ``rewards``, ``masks`` (``1 - terminals``: 0
where the step terminated), ``dones_float`` (1 at EVERY episode end: a termination, a
timeout, or where ``next_observations[t] != observations[t + 1]``) and
``next_observations``; users add their critic's ``values``/``next_values``. Its meaning:
terminated = ``masks == 0``, truncated = ``dones_float`` where ``masks == 1``. No option
states "terminated is 1 - masks", so rltscan can only refuse, and must never exit 0 on
the way to the option a user would try.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.audit_ref import one_line_error
from tests.io_helpers import run_cli

pd = pytest.importorskip("pandas")


def jaxrl_parquet(path: Path, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    lengths, kinds = [5, 4, 6], ["term", "timeout", "cut"]
    obs, nobs = [], []
    terminals, dones = [], []
    for length, kind in zip(lengths, kinds, strict=True):
        o = rng.normal(size=(length + 1, 3))
        obs.append(o[:-1])
        nobs.append(o[1:])
        t = np.zeros(length)
        d = np.zeros(length)
        t[-1] = kind == "term"
        d[-1] = kind != "cut"
        terminals.append(t)
        dones.append(d)
    n = sum(lengths)
    v = rng.normal(size=n)
    pd.DataFrame(
        {
            "observations": list(np.concatenate(obs)),
            "actions": list(rng.normal(size=(n, 2))),
            "rewards": rng.normal(size=n),
            "masks": 1.0 - np.concatenate(terminals),
            "dones_float": np.concatenate(dones),
            "next_observations": list(np.concatenate(nobs)),
            "values": v,
            "next_values": np.append(v[1:], 0.4),
        }
    ).to_parquet(path)


@pytest.mark.parametrize(
    ("options", "code", "names"),
    [
        ([], 4, "--terminals"),
        (["--ignore", "masks"], 4, "--terminals"),
        (["--dones", "dones_float", "--dones-mean", "ended"], 2, "--ignore masks"),
        (["--terminals", "dones_float"], 2, "--ignore masks"),
        (["--ignore", "masks", "--dones", "dones_float", "--dones-mean", "ended"], 2, "--ends-are"),
    ],
)
def test_every_step_towards_an_option_is_refused(options, code, names, tmp_path: Path) -> None:
    path = tmp_path / "halfcheetah.parquet"
    jaxrl_parquet(path)
    raw = path.read_bytes()
    res = run_cli("gae", str(path), *options, "-q", in_process=True)
    assert res.returncode == code, res.stderr
    assert names in one_line_error(res.stderr)
    assert path.read_bytes() == raw


def test_the_first_refusal_names_the_masks_column_too(tmp_path: Path) -> None:
    """The missing flags and the open "masks" decision in one line (exit 4, the missing
    flags' code): the next run is not a second round trip for the mask."""
    path = tmp_path / "halfcheetah.parquet"
    jaxrl_parquet(path)
    res = run_cli("gae", str(path), "-q", in_process=True)
    assert res.returncode == 4
    line = one_line_error(res.stderr)
    assert "--terminals KEY" in line and "--ignore masks" in line
