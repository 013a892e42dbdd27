"""ptxas's register cap (``triton_scan.register_cap``): GAE and V-trace take it only in
the plain float32 launches whose rows span several tiles (one setting, scalar γ and λ,
no validation screen: what was measured faster), every other launch leaves the
registers to ptxas, and a capped launch gives the float64 oracle's answer (interpreted
Triton in CI, where the cap is not applied; compiled with ``-m gpu``)."""

from __future__ import annotations

import pytest
import torch
from cases import make_case, run
from conftest import assert_close_to_oracle

from rltscan.scan.triton_scan import KINDS, register_cap


@pytest.fixture(autouse=True)
def _small_triton_tiles():
    """(conftest's fixture of this name forces tiny tiles under the interpreter: here the
    default tiles, those the cap is chosen for, are what is tested)"""
    yield


PLAIN = dict(lookback=True, wide=False, nset=1, check=False, step_columns=False)


@pytest.mark.parametrize("kind", ["gae", "vtrace"])
def test_plain_long_rows_of_gae_and_vtrace_are_capped(kind):
    assert register_cap(KINDS[kind], **PLAIN) == 80


@pytest.mark.parametrize("kind", ["returns", "td_lambda", "retrace", "traces", "linear"])
def test_other_kinds_keep_ptxas_choice(kind):
    assert register_cap(KINDS[kind], **PLAIN) == 0


@pytest.mark.parametrize(
    "change",
    [
        {"lookback": False},  # a row in one tile
        {"wide": True},  # float64
        {"nset": 3},  # several settings: slower with the cap
        {"check": True},  # the validation screen: not measured
        {"step_columns": True},  # γ_t / λ_t columns: slower with the cap
    ],
)
@pytest.mark.parametrize("kind", ["gae", "vtrace"])
def test_launches_not_measured_faster_are_not_capped(kind, change):
    assert register_cap(KINDS[kind], **{**PLAIN, **change}) == 0


@pytest.mark.parametrize("name", ["gae", "vtrace"])
@pytest.mark.parametrize(("T", "p_done"), [(2049, 0.3), (4097, 0.0)])
def test_capped_launches_match_the_oracle(name, T, p_done, rng):
    case = make_case(name, rng, B=1, T=T, p_done=p_done, dtype=torch.float32)
    got = run(case, "triton", dtype=torch.float32, validate=False)
    for key, want in case.expected.items():
        assert_close_to_oracle(got[key], want, torch.float32)
