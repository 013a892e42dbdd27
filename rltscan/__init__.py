"""rltscan: advantages and returns over trajectory data.

Seven credit-assignment estimators (GAE, V-trace, Retrace(λ), TD(λ) returns,
discounted returns, eligibility traces, episodic prefix sums), each a thin
coefficient module over ONE first-order linear-recurrence scan
``y_t = a_t * y_{t±1} + b_t`` (see ``rltscan.scan``).

Importing this package is cheap: the errors and ``__version__`` load with it; the
estimators, ``linear_scan``, ``run`` and ``inspect`` load (with torch) on first
use, so the CLI's ``--help``, ``--version``, ``inspect`` and dry runs never import
torch or triton (tests/cli/test_startup.py).
"""

from __future__ import annotations

from rltscan import interrupts

interrupts.install_early()  # the CLI honours Ctrl-C during the imports below

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

__version__ = "0.1.0"

# name -> the module that defines it; loaded (with torch) on first look-up (PEP 562)
_LAZY = {
    "ESTIMATORS": "rltscan.estimators",
    "EstimatorSpec": "rltscan.estimators",
    "Result": "rltscan.estimators",
    "discounted_returns": "rltscan.estimators",
    "eligibility_traces": "rltscan.estimators",
    "gae": "rltscan.estimators",
    "prefix_sum": "rltscan.estimators",
    "retrace": "rltscan.estimators",
    "td_lambda": "rltscan.estimators",
    "vtrace": "rltscan.estimators",
    "linear_scan": "rltscan.scan",
    "prepare_call": "rltscan.estimators.functions",  # repeated calls: one launch
    "synchronize": "rltscan.estimators.functions",  # raise a deferred validation error
    "run": "rltscan.api",  # the file-level API
    "inspect": "rltscan.api",
}
# every declared estimator's public function (a new estimator module adds its own; the
# declarations import no torch)
from rltscan.estimators import DECLARATIONS as _DECLARATIONS

_LAZY.update({d.function_name: "rltscan.estimators" for d in _DECLARATIONS.values()})


def __getattr__(name: str):
    """The estimators, ``linear_scan``, ``run`` and ``inspect`` load on first use."""
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'rltscan' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(where), name)
    if where != "rltscan.api":  # (run/inspect stay looked up, as before: tests patch them)
        globals()[name] = value  # later look-ups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


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
    "prepare_call",
    "retrace",
    "run",
    "synchronize",
    "td_lambda",
    "vtrace",
]
__all__ += sorted({d.function_name for d in _DECLARATIONS.values()} - set(__all__))
