"""The seven estimators: their declarations (torch-free) and, on first use, the Python API.

(:mod:`rltscan.estimators.host` is the torch-free lane of a cpu file run: no estimator.)

Each module beside this file declares one estimator (``DECLARATION``, a
:class:`~rltscan.estimators.declaration.Declaration`) without importing torch, and
builds its recurrence coefficients with torch inside its functions. Importing this
package loads only the declarations (:data:`DECLARATIONS`, by CLI command): the CLI's
``--help``, ``inspect`` and dry runs need nothing more. The public functions
(``gae``, ``vtrace``, ...), the result types and the registry (``ESTIMATORS``,
``MODULES``) live in :mod:`rltscan.estimators.functions` and load, with torch, the
first time one of them is looked up here (PEP 562).
"""

from __future__ import annotations

import functools
import importlib
import math
import pkgutil
from collections.abc import Mapping
from types import ModuleType
from typing import Any

from rltscan.errors import ParameterError
from rltscan.estimators.declaration import (
    SWEEPABLE,
    Declaration,
    Param,
    is_sweep,
    sweep_refusal,
)

# The public modules that declare no estimator (reached as attributes, ``__getattr__``).
_SUBMODULES = ("declaration", "functions", "host")

# One module per estimator: every public module of this package (not ``declaration``,
# ``functions``, ``host``) declares one; adding an estimator is adding its module, its function
# (``functions.py``) and its result class (``_result.py``). The first
# seven keep the CLI's order; any other follows, by module name. The module names are
# also the public functions' names: after loading, ``rltscan.estimators.gae`` is the
# function (as it always was), the module is ``sys.modules["rltscan.estimators.gae"]``.
_FIRST = (
    "gae",
    "vtrace",
    "retrace",
    "td_lambda",
    "discounted_returns",
    "eligibility_traces",
    "prefix_sum",
)
_FOUND = sorted(
    m.name
    for m in pkgutil.iter_modules(__path__)
    if not m.name.startswith("_") and m.name not in (*_SUBMODULES, *_FIRST)
)
_MODULE_NAMES = (*_FIRST, *_FOUND)
_BY_KIND: dict[str, ModuleType] = {}
for _name in _MODULE_NAMES:
    _module = importlib.import_module(f"{__name__}.{_name}")
    _BY_KIND[_module.DECLARATION.name] = _module
    del globals()[_name]  # the name belongs to the public function (loaded lazily below)
del _name, _module

DECLARATIONS: dict[str, Declaration] = {
    m.DECLARATION.command: m.DECLARATION for m in _BY_KIND.values()
}


def declared_module(kind: str) -> ModuleType:
    """The module of the estimator whose ``Declaration.name`` is ``kind``."""
    return _BY_KIND[kind]


# --------------------------------------------------------------------------- the range checks


@functools.cache
def parameter_table() -> dict[str, Param]:
    """Every declared parameter by name: the one table that the range checks (Python
    functions and file runs alike), ``--help`` and the provenance record read. A name
    declared by several estimators has one range (its default may differ)."""
    table: dict[str, Param] = {}
    for d in DECLARATIONS.values():
        for p in d.parameters:
            seen = table.setdefault(p.name, p)
            if (seen.low, seen.high, seen.low_open) != (p.low, p.high, p.low_open):
                raise RuntimeError(f"{p.name} is declared with two ranges ({d.command})")
    return table


def check_params(values: Mapping[str, float | None], *, options: bool = False) -> None:
    """Refuse a value outside its declared range (docs/CONVENTIONS.md §5), one wording
    for everyone: ``gamma must be in [0, 1], got 1.5; pass a value like 0.95``. With
    ``options`` the name is the CLI's (``--gamma``). Every value must be finite, except a
    clip threshold's +inf (no clipping) in a Python call (not ``options``: a file run
    records its parameters as JSON); a name no estimator declares is only checked for
    finiteness."""
    table = parameter_table()
    for name, value in values.items():
        if value is None:
            continue
        if name in SWEEPABLE and is_sweep(value):  # several settings: each one checked
            for v in value:
                check_params({name: v}, options=options)
            refused = sweep_refusal(value)
            if refused is not None:
                label = "--" + name.replace("_", "-") if options else name
                raise ParameterError(f"{label} {refused}")
            continue
        param = table.get(name) or Param(name, None, "", low=-math.inf)
        refused = param.violation(value, infinite=not options)
        if refused is not None:
            label = "--" + name.replace("_", "-") if options else name
            raise ParameterError(f"{label} {refused[0]}", refused[1])


def __getattr__(name: str) -> Any:
    """The torch side (functions, result types, ``ESTIMATORS``, ``MODULES``) on first use."""
    if name.startswith("__"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    functions = importlib.import_module(f"{__name__}.functions")
    try:
        value = getattr(functions, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    globals()[name] = value  # later look-ups are plain attribute reads
    return value


__all__ = [
    "DECLARATIONS",
    "ESTIMATORS",
    "MODULES",
    "Carry",
    "Declaration",
    "EstimatorSpec",
    "GAEResult",
    "PrefixSumResult",
    "Problem",
    "Result",
    "RetraceResult",
    "ReturnsResult",
    "TDLambdaResult",
    "TracesResult",
    "VTraceResult",
    "check_params",
    "declared_module",
    "discounted_returns",
    "eligibility_traces",
    "gae",
    "parameter_table",
    "prefix_sum",
    "retrace",
    "td_lambda",
    "vtrace",
]
# an added estimator's function and result type are public too
__all__ += [
    name
    for d in DECLARATIONS.values()
    for name in (d.function_name, d.result_name)
    if name not in __all__
]
