"""What a run is asked to do: one frozen value, built and checked once.

The CLI (or :func:`rltscan.run`) builds a :class:`RunOptions`; planning, the engines
and the report read it and never restate its fields. How the file's columns are
read is its :class:`~rltscan.io.resolve.Reading` (the resolver's input). Torch-free.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rltscan.errors import ParameterError
from rltscan.estimators import check_params
from rltscan.estimators.declaration import PER_STEP_OF, settings_of
from rltscan.io.columns import quoted
from rltscan.io.resolve import Reading
from rltscan.roles import ROLES

ENGINES = ("local", "ray")


@dataclass(frozen=True)
class RunOptions:
    """Everything ``rltscan <command> INPUT [options]`` says, checked by :meth:`check`."""

    command: str
    input: str
    reading: Reading = field(default_factory=Reading)
    output: str | None = None
    to: str | None = None
    prefix: str = ""
    overwrite: bool = False
    dry_run: bool = False
    params: Mapping[str, float] = field(default_factory=dict)
    missing_bootstrap: str | None = None
    device: str = "auto"
    backend: str = "auto"
    chunk_steps: int | None = None
    block_steps: int | None = None
    engine: str | None = None
    ray_address: str | None = None
    workers: int | None = None
    order_by: str | None = None
    break_links: bool = False
    normalize: bool = False  # standardise the advantage outputs (a second pass over them)

    @property
    def declaration(self) -> Any:
        """The estimator's torch-free declaration (``.function`` loads torch)."""
        from rltscan.estimators import DECLARATIONS

        return DECLARATIONS[self.command]

    def check(self) -> RunOptions:
        """Every check that needs no file, with the one-line fix; returns ``self``."""
        from rltscan.estimators import DECLARATIONS

        if self.command not in DECLARATIONS:
            raise ParameterError(
                f'unknown estimator "{self.command}"; pick one of: {quoted(DECLARATIONS)}'
            )
        spec = self.declaration
        unknown = [k for k in self.params if k not in spec.params]
        if unknown:
            raise ParameterError(
                f'{self.command} takes no parameter "{unknown[0]}"; '
                f"its parameters: {quoted(spec.params)}"
            )
        check_params(self.params, options=True)  # the one range table: the declarations
        misused = spec.misused(self.params, options=True)
        if misused is not None:
            raise ParameterError(misused)
        for column, param in PER_STEP_OF.items():  # a per-step column replaces its scalar
            named = self.reading.columns.get(column)
            if named and column not in spec.inputs:
                option = ROLES[column].option
                raise ParameterError(
                    f"{self.command} takes no per-step {param}; drop {option}",
                )
            given = self.params.get(param)  # given at all: the CLI leaves out a default
            if named and given is not None:
                option, flag = ROLES[column].option, "--" + param
                raise ParameterError(
                    f"{option} {named} gives {param} per step and {flag} gives one value; "
                    f"drop one of them"
                )
        if self.missing_bootstrap not in (None, "error", "zero"):
            raise ParameterError(
                f'--missing-bootstrap must be "error" or "zero", got "{self.missing_bootstrap}"'
            )
        for name, value in (
            ("--chunk-steps", self.chunk_steps),
            ("--block-steps", self.block_steps),
        ):
            if value is not None and value < 1:
                raise ParameterError(f"{name} must be a positive number of steps, got {value}")
        if self.engine is not None and self.engine not in ENGINES:
            raise ParameterError(f'--engine must be local or ray, got "{self.engine}"')
        if self.normalize and not spec.normalizable:
            raise ParameterError(
                f"--normalize standardises advantages and {self.command} writes none; "
                "drop --normalize"
            )
        self.reading.check()
        return self

    def call_options(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(keyword arguments for every estimator call, the parameters as used)``: the
        declared defaults filled in (tests/unit/test_declarations.py ties them to the
        functions' own defaults)."""
        spec = self.declaration
        call: dict[str, Any] = dict(self.params)
        defaults = spec.defaults()
        used = {
            n: self.params[n] if self.params.get(n) is not None else defaults.get(n)
            for n in spec.params
        }
        for column, param in PER_STEP_OF.items():  # provenance: which column gave it
            named = self.reading.columns.get(column)
            if named and param in used:
                used[param] = f"column {named}"
        if spec.missing_bootstrap is not None:
            if self.missing_bootstrap is not None:
                call["missing_bootstrap"] = self.missing_bootstrap
            used["missing_bootstrap"] = self.missing_bootstrap or spec.missing_bootstrap
        return call, used

    @property
    def settings(self) -> tuple[dict[str, float], ...] | None:
        """Every (γ, λ) combination asked for (``--gamma 0.9,0.99``), or None for one."""
        return settings_of(self.declaration, self.params)

    @property
    def bootstrap_rule(self) -> str | None:
        """The missing-bootstrap rule in force; None for estimators that read no V(s_{t+1})."""
        return self.call_options()[1].get("missing_bootstrap")

    def replace(self, **changes: Any) -> RunOptions:
        return dataclasses.replace(self, **changes)
