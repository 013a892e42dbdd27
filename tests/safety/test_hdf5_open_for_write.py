"""An HDF5 file whose consistency flags are set (a writer with ``libver="latest"`` or in
SWMR mode still has it open, or died without closing it) is not called corrupt: the run
stops with exit 3 saying the file is open for writing and how to clear the flags, and
the file is left as it is."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rltscan import api
from rltscan.errors import InputFileError
from tests.io_helpers import digest

WRITER = """
import os, sys
import h5py, numpy as np
f = h5py.File(sys.argv[1], "w", libver="latest")
f["rewards"] = np.ones(10, "f4")
f["values"] = np.zeros(10, "f4")
f["terminated"] = np.arange(10) == 9
f.flush()
os._exit(0)  # never closed: the flags stay set
"""


def test_a_file_left_open_for_writing_is_named_so(tmp_path: Path) -> None:
    path = tmp_path / "rollout.h5"
    subprocess.run([sys.executable, "-c", WRITER, str(path)], check=True, timeout=120)
    before = digest(path)
    with pytest.raises(InputFileError, match=r"open for writing.*h5clear -s") as err:
        api.run("gae", str(path), device="cpu", backend="torch")
    assert "corrupt" not in str(err.value)
    assert digest(path) == before
