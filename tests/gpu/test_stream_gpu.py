"""The streaming engine on CUDA (pinned staging buffers, issue 12): the window size
never changes a bit of the result, and the result equals the CPU run's to float
rounding, for flat / time-major / batch-major HDF5 and Parquet (the batch-major
layout assembles the outputs along axis 1 of the pinned buffer). Runs on the GPU
machine only (``pytest -m gpu tests/gpu/test_stream_gpu.py``).
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from rltscan import api
from tests.engines.test_stream import CASES, columns, read_outputs, write_file
from tests.shard_helpers import OUTPUTS, PARAMS

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]


def run_on(device: str, src: Path, dst: Path, command: str, **kw) -> dict[str, np.ndarray]:
    report = api.run(
        command, str(src), output=str(dst), device=device, params=PARAMS[command], **kw
    )
    assert report.streaming is not None and report.device.startswith(device)
    return read_outputs(dst, OUTPUTS[command])


@pytest.mark.parametrize("layout,suffix,shape,block", CASES, ids=lambda c: str(c))
@pytest.mark.parametrize("command", ["gae", "vtrace", "traces"])
def test_cuda_windows_are_bit_identical_and_match_the_cpu(
    command: str, layout: str, suffix: str, shape: tuple, block: int, tmp_path: Path
) -> None:
    rng = np.random.default_rng(zlib.crc32(f"gpu{command}{layout}{suffix}".encode()))
    src = write_file(tmp_path / f"in{suffix}", columns(rng, shape, 0.1), layout)
    results = [
        run_on("cuda", src, tmp_path / f"o{k}{suffix}", command, chunk_steps=c, block_steps=block)
        for k, c in enumerate([block, 3 * block, 10**9])
    ]
    for other in results[1:]:
        for name in results[0]:
            assert np.array_equal(results[0][name], other[name], equal_nan=True), name
    cpu = run_on(
        "cpu", src, tmp_path / f"cpu{suffix}", command, chunk_steps=block, block_steps=block
    )
    for name in cpu:
        np.testing.assert_allclose(results[0][name], cpu[name], rtol=2e-5, atol=2e-5)
