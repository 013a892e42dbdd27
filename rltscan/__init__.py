"""rltscan: advantages and returns over trajectory data.

Seven credit-assignment estimators (GAE, V-trace, Retrace(λ), TD(λ) returns,
discounted returns, eligibility traces, episodic prefix sums), each a thin
coefficient module over ONE first-order linear-recurrence scan
``y_t = a_t * y_{t±1} + b_t`` (see ``rltscan.scan``).

Importing this package is cheap: torch is imported, triton, h5py and pyarrow
are not (they load on first use).
"""

from __future__ import annotations

from rltscan import _interrupts

_interrupts.install_early()  # the CLI honours Ctrl-C during the imports below

# ruff: noqa: E402
from rltscan.errors import (
    AmbiguousInputError,
    BackendUnavailableError,
    DataError,
    DTypeError,
    InputFileError,
    Interrupted,
    OutputRefusedError,
    ParameterError,
    RltscanError,
)
from rltscan.estimators import (
    ESTIMATORS,
    EstimatorSpec,
    Result,
    discounted_returns,
    eligibility_traces,
    gae,
    prefix_sum,
    retrace,
    td_lambda,
    vtrace,
)
from rltscan.scan import linear_scan

__version__ = "0.1.0"


def __getattr__(name: str):
    """``rltscan.run`` / ``rltscan.inspect`` (the file-level API) load on first use."""
    if name in ("run", "inspect"):
        from rltscan import api

        return getattr(api, name)
    raise AttributeError(f"module 'rltscan' has no attribute {name!r}")


__all__ = [
    "ESTIMATORS",
    "AmbiguousInputError",
    "BackendUnavailableError",
    "DTypeError",
    "DataError",
    "EstimatorSpec",
    "InputFileError",
    "Interrupted",
    "OutputRefusedError",
    "ParameterError",
    "Result",
    "RltscanError",
    "__version__",
    "discounted_returns",
    "eligibility_traces",
    "gae",
    "inspect",
    "linear_scan",
    "prefix_sum",
    "retrace",
    "run",
    "td_lambda",
    "vtrace",
]
