"""HDF5 enum datasets as flag columns: read by their names, or refused.

h5py writes numpy bools as the enum ``{FALSE: 0, TRUE: 1}`` and reads it back as bool;
any other enum comes back as its base integers. A producer's status column
``{RUNNING: 0, DONE: 1}`` happens to read right, but ``{DONE: 0, RUNNING: 1}`` (or a
``{TRUE: 0, FALSE: 1}`` written by hand) read as 0/1 ends every episode where it did not
end, with exit 0: rltscan ran returns over the inverted flags. An enum that is not the
boolean one is now refused by name (exit 4); the boolean one, in any case, is read.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

from tests import oracles
from tests.io_helpers import run_cli

N = 10
END = 4  # the step after which the first episode ends (the data ends at N - 1)


def _file(path: Path, mapping: dict[str, int], done_value: int) -> Path:
    other = next(v for v in mapping.values() if v != done_value)
    flags = np.where(np.arange(N) == END, done_value, other).astype(np.int8)
    with h5py.File(path, "w") as h:
        h["rewards"] = np.linspace(1.0, 2.0, N, dtype=np.float32)
        h.create_dataset("terminals", data=flags, dtype=h5py.enum_dtype(mapping, basetype="i1"))
    return path


def _returns(*args: str) -> tuple[int, str]:
    res = run_cli("returns", *args, "--gamma", "0.5", "--device", "cpu", "-q", in_process=True)
    return res.returncode, res.stderr


@pytest.mark.parametrize(
    "mapping",
    [{"DONE": 0, "RUNNING": 1}, {"TRUE": 0, "FALSE": 1}, {"RUNNING": 0, "DONE": 1}],
    ids=["done-is-0", "true-is-0", "done-is-1"],
)
def test_an_enum_that_is_not_boolean_is_refused_by_name(mapping: dict, tmp_path: Path) -> None:
    path = _file(tmp_path / "status.h5", mapping, mapping.get("DONE", mapping.get("TRUE")))
    code, err = _returns(str(path))
    assert code == 4, err
    assert 'dataset "terminals" is an HDF5 enum' in err
    assert err.count("\n") <= 1 and "Traceback" not in err
    with h5py.File(path) as h:
        assert list(h) == ["rewards", "terminals"]  # nothing written


@pytest.mark.parametrize("names", [("FALSE", "TRUE"), ("False", "True"), ("false", "true")])
def test_a_boolean_enum_reads_as_its_flags(names: tuple[str, str], tmp_path: Path) -> None:
    path = _file(tmp_path / "flags.h5", {names[0]: 0, names[1]: 1}, 1)
    code, err = _returns(str(path))
    assert code == 0, err
    with h5py.File(path) as h:
        rewards, got = h["rewards"][:].astype(float), h["returns"][:]
    terminated = np.arange(N) == END
    want = oracles.discounted_returns(rewards, np.zeros(N), terminated, None, gamma=0.5)
    np.testing.assert_allclose(got, want, rtol=1e-6)
