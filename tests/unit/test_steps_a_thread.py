"""The kernel's register paths at every number of consecutive steps a thread holds
(``Tiles.per_thread``: 1 to 32): V at t+1 shifted out of V at t in each thread's
registers (``_tile._ld_next``) and outputs stored in 16-byte halves at 8 a thread
(``_tile._put``), against the float64 oracle. Odd lengths leave a partial group at the
window's end, two or more tiles per row take the look-back, and the bootstrap forms
decide which kinds read V at t+1 (interpreted Triton in CI, compiled with ``-m gpu``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from cases import BACKWARD, ESTIMATORS, make_case, run
from conftest import assert_close_to_oracle

import rltscan
from rltscan.scan import triton_scan
from tests.unit.test_chunks import BY_KIND, call, chunked, make


@pytest.fixture(autouse=True)
def _small_triton_tiles():
    """(conftest's fixture of this name forces tiny tiles: here each test picks its own)"""
    yield


# (chunk, rows, warps) -> steps a thread: 64/1/1 -> 2, 128 -> 4, 256 -> 8, 512 -> 16,
# 1024 -> 32; 256 on 2 rows of 2 warps -> 8 with two rows a program
TILES = [(64, 1, 1), (128, 1, 1), (256, 1, 1), (512, 1, 1), (1024, 1, 1), (256, 2, 2)]


def _ids(t):
    chunk, rows, warps = t
    per = triton_scan.Tiles(rows, chunk, warps).per_thread(True)
    return f"{rows}x{chunk}/{warps}w-{per}a-thread"


@pytest.mark.parametrize("tiles", TILES, ids=_ids)
@pytest.mark.parametrize("name", ESTIMATORS)
def test_every_kind_at_every_steps_a_thread(name, tiles, rng):
    chunk, rows, warps = tiles
    # two full tiles and a partial third whose last group is cut short (T % 4 == 3)
    T = 2 * chunk + chunk // 2 + 3
    case = make_case(name, rng, B=3, T=T, p_done=0.01, dtype=torch.float32)
    with triton_scan.tile_override(rows=rows, chunk=chunk, num_warps=warps):
        got = run(case, "triton", dtype=torch.float32)
    for key, want in case.expected.items():
        assert_close_to_oracle(got[key], want, torch.float32)


@pytest.mark.parametrize("form", ["next", "boot", "last", "zero"])
@pytest.mark.parametrize("name", [n for n in BACKWARD if n != "retrace"])
@pytest.mark.parametrize("tiles", [(128, 1, 1), (512, 1, 1)], ids=_ids)
def test_next_value_in_registers_every_bootstrap_form(name, form, tiles, rng):
    chunk, rows, warps = tiles
    for T, p in ((chunk + 1, 0.3), (3 * chunk - 5, 0.0), (chunk // 2 + 1, 0.05)):
        try:
            case = make_case(name, rng, B=2, T=T, p_done=p, form=form, dtype=torch.float32)
        except (TypeError, ValueError):
            pytest.skip(f"{name} takes no {form!r} bootstrap form")
        with triton_scan.tile_override(rows=rows, chunk=chunk, num_warps=warps):
            got = run(case, "triton", dtype=torch.float32)
        for key, want in case.expected.items():
            assert_close_to_oracle(got[key], want, torch.float32)


@pytest.mark.parametrize("tiles", [(256, 1, 1), (512, 1, 1)], ids=_ids)
@pytest.mark.parametrize("name", ["gae", "td_lambda", "vtrace"])
def test_flat_float64_and_time_major_take_the_same_values(name, tiles, rng):
    """float64 (values two words wide) and a time-major view (1 step a thread) of the
    same data agree with the oracle under the same forced tile."""
    chunk, rows, warps = tiles
    case = make_case(name, rng, B=2, T=chunk + 7, p_done=0.02, dtype=torch.float64)
    with triton_scan.tile_override(rows=rows, chunk=chunk, num_warps=warps):
        wide = run(case, "triton", dtype=torch.float64)
        tm = run(case, "triton", dtype=torch.float64, layout="tb")
    for key, want in case.expected.items():
        assert_close_to_oracle(wide[key], want, torch.float64)
        assert_close_to_oracle(tm[key], want, torch.float64)


BACKWARD_V = ["gae", "td_lambda", "returns", "vtrace"]  # the kinds that read V at t+1


@pytest.mark.parametrize("tiles", [(128, 1, 1), (512, 1, 1), (256, 2, 2)], ids=_ids)
@pytest.mark.parametrize("kind", ["gae", "vtrace"])
def test_several_settings_in_one_launch(kind, tiles, rng):
    """Each setting's block of outputs (V-trace reads its own ``vs_{t+1}`` back from
    it) against the float64 solve of that setting alone."""
    chunk, rows, warps = tiles
    inputs = make(kind, (2, 2 * chunk + 5), rng, 0.02)
    gammas = [0.9, 0.99, 1.0]
    fn = getattr(rltscan, BY_KIND[kind].function_name)
    with triton_scan.tile_override(rows=rows, chunk=chunk, num_warps=warps):
        got = fn(**inputs, gamma=gammas, lam=0.9, backend="triton")
    for k, g in enumerate(gammas):
        want = fn(**inputs, gamma=g, lam=0.9, backend="torch")
        for name, arr in want.items():
            assert_close_to_oracle(getattr(got, name)[k], arr, torch.float64)


@pytest.mark.parametrize("tiles", [(128, 1, 1), (512, 1, 1)], ids=_ids)
@pytest.mark.parametrize("kind", BACKWARD_V)
def test_chunk_ends_inside_a_thread_and_at_its_last_step(kind, tiles, rng):
    """A chunk's window end mid-group and at a thread's last step: V at t+1 there is the
    next chunk's first V (the carry), not a shifted register."""
    chunk, rows, warps = tiles
    T = 3 * chunk
    inputs = make(kind, (T,), rng, 0.01)
    per = triton_scan.Tiles(rows, chunk, warps).per_thread(True)
    # pieces of chunk + 3, chunk - per, per and chunk - 3 steps: their last steps fall
    # mid-group, at a thread's last step inside a tile, and at group 0's last step
    cuts = [chunk + 3, 2 * chunk + 3 - per, 2 * chunk + 3]
    whole = dict(call(kind, inputs, time_dim=0, backend="torch"))  # (test_chunks' call)
    with triton_scan.tile_override(rows=rows, chunk=chunk, num_warps=warps):
        got = chunked(kind, inputs, cuts, 0, backend="triton")
    for k, want in whole.items():
        assert np.isfinite(got[k]).all(), k
        assert_close_to_oracle(got[k], want, torch.float64)
