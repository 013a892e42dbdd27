"""Each estimator's torch-free declaration agrees with its Python function (issue 11 item 1):
the declared defaults are the function's defaults, the declared inputs are its array
arguments, and the registry (``ESTIMATORS``, ``MODULES``) is derived from the declarations."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest

import rltscan
from rltscan import api
from rltscan.errors import ParameterError
from rltscan.estimators import DECLARATIONS, ESTIMATORS, MODULES, declared_module, parameter_table
from rltscan.estimators._checks import check_params as python_check_params

# keywords every public function takes that are neither inputs nor parameters
CONTROL = {"carry", "time_dim", "backend", "validate", "missing_bootstrap"}
# episode ends given as dones or episode starts (every estimator that takes flags)
CONTROL |= {"dones", "dones_mean", "episode_starts", "last_dones", "ends_are"}
# arrays a function accepts that are not declared inputs: Retrace's discrete-action form
# (turned into next_expected_q before the estimator runs) and the returns' values
# (accepted, like the other bootstrapping estimators, but never read: D5)
NOT_DECLARED = {"retrace": {"next_target_probs", "next_q"}, "returns": {"values"}}


@pytest.mark.parametrize("command", list(DECLARATIONS))
def test_declared_defaults_are_the_function_defaults(command: str) -> None:
    d = DECLARATIONS[command]
    signature = inspect.signature(ESTIMATORS[command].function).parameters
    for name, default in d.defaults().items():
        assert name in signature, f"{command}: declared {name!r} is not a keyword of the function"
        assert signature[name].default == default, (command, name)
    # and nothing the function defaults is left undeclared
    keywords = set(signature) - set(d.inputs) - NOT_DECLARED.get(d.name, set())
    assert keywords - CONTROL == set(d.params), command
    assert ("missing_bootstrap" in signature) == (d.missing_bootstrap is not None), command


@pytest.mark.parametrize("command", list(DECLARATIONS))
def test_declared_inputs_are_the_function_arguments(command: str) -> None:
    d = DECLARATIONS[command]
    signature = inspect.signature(ESTIMATORS[command].function).parameters
    assert set(d.inputs) <= set(signature), command
    assert set(d.required) <= set(d.inputs), command
    no_default = {n for n, p in signature.items() if p.default is inspect.Parameter.empty}
    assert no_default <= set(d.required), command
    assert d.function_name in rltscan.__all__
    assert getattr(rltscan, d.function_name) is ESTIMATORS[command].function


@pytest.mark.parametrize("command", list(DECLARATIONS))
def test_registry_is_derived_from_the_declarations(command: str) -> None:
    d, spec = DECLARATIONS[command], ESTIMATORS[command]
    assert (spec.name, spec.command, spec.inputs, spec.required, spec.outputs) == (
        d.name,
        d.command,
        d.inputs,
        d.required,
        d.outputs,
    )
    assert (spec.params, spec.reverse) == (d.params, d.reverse)
    module = MODULES[d.name]
    assert module is declared_module(d.name)
    assert module.DECLARATION is d
    assert (d.reverse, d.outputs) == (module.REVERSE, module.OUTPUTS)
    assert d.function is spec.function  # the declaration's lazy look-up finds the same
    assert list(DECLARATIONS) == list(ESTIMATORS)  # one order: the CLI's


def _check_word_parameter(command: str, param, check: str) -> None:
    """Each declared word is accepted and anything else refused, with the one wording."""
    d = DECLARATIONS[command]
    name = "--" + param.name.replace("_", "-") if check == "file" else param.name
    for word in param.choices:
        assert param.violation(word) is None
        if check == "file":
            api.check_params({param.name: word})
    for bad in ("nope", 1.0, param.default.upper()):
        if check == "file":
            with pytest.raises(ParameterError) as err:
                api.check_params({param.name: bad})
        else:
            with pytest.raises(ParameterError) as err:
                arrays = {n: np.zeros(3) for n in d.required}  # never looked at
                d.function(**arrays, **{param.name: bad})
        assert str(err.value).startswith(f"{name} must be one of "), str(err.value)


@pytest.mark.parametrize(
    ("command", "param"),
    [(c, p) for c, d in DECLARATIONS.items() for p in d.parameters],
    ids=lambda x: getattr(x, "name", x),
)
@pytest.mark.parametrize("check", ["file", "python"])
def test_declared_ranges_are_the_checked_ranges(command: str, param, check: str) -> None:
    """A value just outside the declared range is refused, the edges are accepted: by the
    file runs' check (options) and the Python functions' check alike, which read the one
    table (``declaration.parameter_table``) and say it in one wording."""
    assert parameter_table()[param.name].range_text == param.range_text
    if param.choices is not None:  # a word parameter: its words, and nothing else
        _check_word_parameter(command, param, check)
        return

    def checked(value: float) -> None:
        if check == "file":
            api.check_params({param.name: value})
        else:
            python_check_params(**{param.name: value})

    # +inf is a clip's "no clipping" in Python (issue 27); a file run records JSON: finite
    no_clip = check != "file" and param.infinite is not None
    outside = [param.low if param.low_open else param.low - 1e-6, math.nan]
    outside += [] if no_clip else [math.inf]
    if param.high is not None:
        outside.append(param.high + 1e-6)
    for value in outside:
        with pytest.raises(ParameterError) as err:
            checked(value)
        name = "--" + param.name.replace("_", "-") if check == "file" else param.name
        assert str(err.value).startswith(f"{name} must be "), str(err.value)
    inside = [param.low + 1e-6 if param.low_open else param.low] + ([math.inf] if no_clip else [])
    if param.high is not None:
        inside.append(param.high)
    for value in inside:
        checked(value)
    if param.default is not None:
        checked(param.default)
    else:
        assert param.fallback in DECLARATIONS[command].params
