"""The result types: a frozen mapping of output name -> array per estimator, and the
state a chunked call hands on (``Result.carry``, docs/CONVENTIONS.md §2.4)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from rltscan.estimators.declaration import setting_columns

if TYPE_CHECKING:
    from rltscan.estimators._carry import Carry


class _MappingMixin(Mapping):
    """Lets a frozen result dataclass act as ``{name: array}`` (fields left None are absent).

    With several settings (``gamma=[0.9, 0.99]``) each output field holds the settings
    stacked on a leading axis, and the mapping's names are the written columns, one per
    setting: ``advantages_g0.9_l0.95`` -> that setting's array (``estimators.declaration
    .setting_columns``); the field names still give the stacked arrays.
    """

    def _outputs(self) -> list[str]:
        return [
            f.name
            for f in dataclasses.fields(self)
            if f.metadata.get("output", True) and getattr(self, f.name) is not None
        ]

    def _columns(self) -> dict[str, tuple[str, int]]:
        settings = getattr(self, "settings", None)
        return {c: (o, k) for c, o, k in setting_columns(self._outputs(), settings)}

    def _present(self) -> list[str]:
        return list(self._columns())

    def __getitem__(self, key: str) -> Any:
        where = self._columns().get(key)
        if where is None:
            if key in self._outputs():  # the stacked array of every setting
                return getattr(self, key)
            raise KeyError(key)
        output, k = where
        value = getattr(self, output)
        return value if k < 0 else value[k]

    def __iter__(self) -> Iterator[str]:
        return iter(self._present())

    def __len__(self) -> int:
        return len(self._present())


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Result(_MappingMixin):
    """Base of every estimator's result: a mapping of output name -> array.

    ``carry`` (not an output) is the state to hand to the next chunk in scan order
    when a long sequence is processed in pieces (see ``Carry``).
    """

    # Computed on first access only: a call that is not chunked never pays for it.
    _carry_fn: Any = dataclasses.field(
        default=None, kw_only=True, repr=False, metadata={"output": False}
    )
    # Several settings in one pass: the (γ, λ) of each entry of the leading axis.
    settings: tuple[dict[str, float], ...] | None = dataclasses.field(
        default=None, kw_only=True, repr=False, metadata={"output": False}
    )

    @property
    def carry(self) -> Carry | None:
        """The state to pass as ``carry=`` with the next chunk in scan order."""
        cached = self.__dict__.get("_carry")
        if cached is None and self._carry_fn is not None:
            cached = self._carry_fn()
            object.__setattr__(self, "_carry", cached)
        return cached

    def __repr__(self) -> str:
        parts = [
            f"{k}={tuple(v.shape)} {str(v.dtype).replace('torch.', '')}" for k, v in self.items()
        ]
        return f"{type(self).__name__}({', '.join(parts)})"


# One class per estimator: its declared outputs, in order (an optional output is None
# when its input was not given). tests/unit/test_public_functions.py checks them against
# the declarations.
_RESULT = {"frozen": True, "repr": False, "eq": False}


@dataclasses.dataclass(**_RESULT)
class GAEResult(Result):
    """The outputs of :func:`~rltscan.gae`: ``advantages`` and ``value_targets``."""

    advantages: Any
    value_targets: Any


@dataclasses.dataclass(**_RESULT)
class VTraceResult(Result):
    """The outputs of :func:`~rltscan.vtrace`: ``vs`` and ``pg_advantages``."""

    vs: Any
    pg_advantages: Any


@dataclasses.dataclass(**_RESULT)
class RetraceResult(Result):
    """The outputs of :func:`~rltscan.retrace`: ``retrace_targets``, and ``advantages``
    when ``v_pi`` was given (else None)."""

    retrace_targets: Any
    advantages: Any = None


@dataclasses.dataclass(**_RESULT)
class TDLambdaResult(Result):
    """The output of :func:`~rltscan.td_lambda`: ``lambda_returns``."""

    lambda_returns: Any


@dataclasses.dataclass(**_RESULT)
class ReturnsResult(Result):
    """The output of :func:`~rltscan.discounted_returns`: ``returns``."""

    returns: Any


@dataclasses.dataclass(**_RESULT)
class TracesResult(Result):
    """The output of :func:`~rltscan.eligibility_traces`: ``eligibility_traces``."""

    eligibility_traces: Any


@dataclasses.dataclass(**_RESULT)
class PrefixSumResult(Result):
    """The output of :func:`~rltscan.prefix_sum`: ``prefix_sums``."""

    prefix_sums: Any


@dataclasses.dataclass(**_RESULT)
class ReturnToGoResult(Result):
    """The output of :func:`~rltscan.return_to_go`: ``returns_to_go``."""

    returns_to_go: Any


# Problem.kind -> its result class
RESULTS: dict[str, type[Result]] = {
    "gae": GAEResult,
    "vtrace": VTraceResult,
    "retrace": RetraceResult,
    "td_lambda": TDLambdaResult,
    "returns": ReturnsResult,
    "traces": TracesResult,
    "prefix_sum": PrefixSumResult,
    "return_to_go": ReturnToGoResult,
}
