"""The default tile of a launch (``triton_scan.choose_tiles``): GAE, discounted returns
and TD(λ) take 2048-step tiles on rows longer than one tile in float32 (measured faster,
see the function's comment), every other case keeps the tile it had, and rows on the
long tiles give the float64 oracle's answer through the look-back (interpreted Triton
in CI, compiled with ``-m gpu``)."""

from __future__ import annotations

import pytest
import torch
from cases import make_case, run
from conftest import assert_close_to_oracle

from rltscan.scan.triton_scan import KINDS, Tiles, choose_tiles

LONG = Tiles(1, 2048, 4)
DEFAULT = Tiles(1, 1024, 4)


@pytest.fixture(autouse=True)
def _small_triton_tiles():
    """(conftest's fixture of this name forces tiny tiles under the interpreter: here the
    default tiles are what is tested)"""
    yield


@pytest.mark.parametrize(
    ("kind", "rows", "steps", "wide", "want"),
    [
        ("gae", 1, 1 << 26, False, LONG),
        ("returns", 16, 131072, False, LONG),
        ("gae", 1, 1025, False, LONG),
        ("gae", 1, 1 << 26, True, DEFAULT),  # float64: not measured on the long tile
        ("vtrace", 1, 1 << 26, False, DEFAULT),
        ("retrace", 1, 1 << 26, False, DEFAULT),
        ("td_lambda", 1, 1 << 26, False, LONG),
        ("traces", 1, 1 << 26, False, DEFAULT),
        ("linear", 1, 1 << 26, False, DEFAULT),
        ("gae", 4096, 1024, False, Tiles(1, 1024, 8)),  # a row in one tile: as before
        ("gae", 64, 100, False, Tiles(8, 128, 4)),
    ],
)
def test_default_tile_per_kind(kind, rows, steps, wide, want):
    assert choose_tiles(rows, steps, True, KINDS[kind], wide) == want


def test_time_major_tiles_do_not_depend_on_the_kind():
    tiles = {choose_tiles(4096, 1 << 20, False, k, False) for k in KINDS.values()}
    assert tiles == {Tiles(32, 128, 4)}


@pytest.mark.parametrize("name", ["gae", "discounted_returns", "td_lambda"])
@pytest.mark.parametrize(("T", "p_done"), [(2049, 0.3), (4097, 0.0)])
def test_long_tile_rows_match_the_oracle(name, T, p_done, rng):
    case = make_case(name, rng, B=2, T=T, p_done=p_done, dtype=torch.float32)
    got = run(case, "triton", dtype=torch.float32)
    for key, want in case.expected.items():
        assert_close_to_oracle(got[key], want, torch.float32)
