"""What an estimator is, declared without torch: the types of each module's ``DECLARATION``.

Each estimator module (``gae.py``, ``vtrace.py``, ...) states its name, CLI command,
direction, inputs (and which are required), parameters (default and range),
outputs, missing-bootstrap default and one-line help as a :class:`Declaration`.
Importing a module for its declaration imports no torch: the CLI builds its
commands and ``--help`` from these, the file layer plans runs from them, and
:mod:`rltscan.estimators.functions` builds the registry (``ESTIMATORS``) beside
the torch code. See docs/CONVENTIONS.md for the conventions the estimators follow.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

# The bootstrap forms of the estimators that read V(s_t+1) (docs/CONVENTIONS.md §1.2)
BOOTSTRAP_INPUTS = ("next_values", "bootstrap_values", "last_value")
# Inputs that are 1-byte flags, and inputs that hold one value per sequence (no time axis)
FLAG_INPUTS = ("terminated", "truncated", "is_first")
# Per-step columns that replace a scalar parameter (docs/CONVENTIONS.md §1.7): γ_t, λ_t
PER_STEP_PARAMETERS = ("discount", "lam_per_step")
PER_STEP_OF = {"discount": "gamma", "lam_per_step": "lam"}
PER_ROW_INPUTS = ("last_value", "init")
# The inputs of the estimators that bootstrap from a critic V (GAE, TD(λ))
CRITIC_INPUTS = ("rewards", "values", "terminated", "truncated", *BOOTSTRAP_INPUTS,
                 *PER_STEP_PARAMETERS)  # fmt: skip

# When an entry of a float input is read (docs/CONVENTIONS.md §5: only read entries are
# checked). The estimators' ``reads`` name these; ``_checks.read_mask`` implements them.
READ_ALL = "all"
READ_NOT_TERMINATED = "not_terminated"  # nv-like: ignored after a terminal step
READ_BOOT = "boot"  # bootstrap_values: only where boot_t
READ_AFTER_UNCUT = "after_uncut"  # read at t iff t >= 1 and not cut_{t-1} (values_{t+1}, c_{t+1})
# What a bootstrap input's entries are read for unless a declaration says otherwise
DEFAULT_READS = {"next_values": READ_NOT_TERMINATED, "bootstrap_values": READ_BOOT}


@dataclass(frozen=True)
class Param:
    """A parameter: a scalar with its default and range (``low`` < or <= value <= ``high``),
    or, with ``choices``, one word out of a fixed list (Retrace's ``trace``)."""

    name: str
    default: Any
    help: str
    low: float = 0.0
    high: float | None = None  # None: no upper bound
    low_open: bool = False  # True: the value must be > low
    fallback: str | None = None  # a None default means "the value of this parameter"
    example: float | None = None  # the value a range error suggests (None: the default)
    choices: tuple[str, ...] | None = None  # a word parameter: its accepted values
    # what +inf means where a Python call may pass it (a clip: "no clipping"); None: refused
    infinite: str | None = None

    @property
    def range_text(self) -> str:
        """The declared range as the messages and ``--help`` say it: ``in [0, 1]``, ``> 0``."""
        if self.choices is not None:
            return "one of " + ", ".join(self.choices)
        if self.high is not None:
            return f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}]"
        return f"{'>' if self.low_open else '>='} {self.low:g}"

    def violation(self, value: Any, *, infinite: bool = True) -> tuple[str, str] | None:
        """Why ``value`` is refused, as ``(what, fix)`` where ``what`` follows the
        parameter's name (``must be in [0, 1], got 1.5``); None when it is accepted.
        Values must be finite, except that a parameter declaring what +inf means (a clip
        threshold: no clipping, as rlax and TorchRL read it) takes +inf when
        ``infinite`` (Python calls; on the command line the value is recorded in the
        outputs' JSON provenance, which has no infinity)."""
        if self.choices is not None:
            if isinstance(value, str) and value in self.choices:
                return None
            return f"must be {self.range_text}, got {value!r}", f'pass e.g. "{self.default}"'
        if isinstance(value, str):
            return f"must be a number, got {value!r}", "pass a number"
        v = float(value)
        like = self.example if self.example is not None else self.default
        fix = "pass a finite number" if like is None else f"pass a value like {like}"
        if self.infinite is not None and infinite and not math.isfinite(v):
            if v == math.inf:
                return None
            return f"must be {self.range_text} or inf ({self.infinite}), got {v!r}", fix
        if not math.isfinite(v):
            return f"must be a finite number, got {v!r}", fix
        above = v > self.low if self.low_open else v >= self.low
        if above and (self.high is None or v <= self.high):
            return None
        return f"must be {self.range_text}, got {v!r}", fix

    @classmethod
    def unit(cls, name: str, default: float, help: str) -> Param:
        """A parameter in [0, 1] (γ, λ)."""
        return cls(name, default, help, low=0.0, high=1.0, example=0.95)

    @classmethod
    def choice(cls, name: str, default: str, choices: tuple[str, ...], help: str) -> Param:
        """A word out of ``choices`` (``--trace tree-backup``)."""
        return cls(name, default, help, choices=choices)

    @classmethod
    def positive(
        cls, name: str, default: float | None, help: str, fallback: str | None = None
    ) -> Param:
        """A parameter > 0 (``scale``)."""
        return cls(name, default, help, low=0.0, low_open=True, fallback=fallback, example=1.0)

    @classmethod
    def clip(
        cls, name: str, default: float | None, help: str, fallback: str | None = None
    ) -> Param:
        """A clip threshold: > 0, and from Python +inf for no clipping (docs/CONVENTIONS.md §5)."""
        return dataclasses.replace(
            cls.positive(name, default, help, fallback), infinite="no clipping"
        )


@dataclass(frozen=True)
class Declaration:
    """One estimator, as the CLI, the file layer and the registry see it (torch-free).

    It answers the same attribute names as :class:`~rltscan.estimators.EstimatorSpec`
    (``name``, ``command``, ``inputs``, ``required``, ``outputs``, ``params``,
    ``reverse``); ``function`` loads the torch code on first use.
    """

    name: str  # Problem.kind / module key
    command: str  # CLI subcommand
    function_name: str  # the public function in rltscan / rltscan.estimators
    direction: Literal["backward", "forward"]  # the scan's direction over time
    inputs: tuple[str, ...]  # every array argument the function can take
    required: tuple[str, ...]  # arrays it always needs
    outputs: tuple[str, ...]
    parameters: tuple[Param, ...]
    missing_bootstrap: str | None  # the default of ``missing_bootstrap``; None: no such option
    help: str  # one line, the CLI command's help
    # --- the public function (estimators/functions.py; rltscan.ops reads these)
    positional: int = 1  # how many leading arguments are positional (the rest keyword-only)
    # its arguments (arrays and parameters) in order; None: the inputs less ``init``, then
    # ``extra_arguments``, the parameters, and ``init`` last
    arguments: tuple[str, ...] | None = None
    extra_arguments: tuple[str, ...] = ()  # arrays it takes that are not inputs (prepare() uses)
    derivable: tuple[str, ...] = ()  # required inputs that prepare() may build (default None)
    reads: tuple[tuple[str, str], ...] = ()  # input -> READ_* where not DEFAULT_READS/READ_ALL
    features: bool = False  # the first input may carry trailing feature axes ([T, D])
    optional_outputs: tuple[tuple[str, str], ...] = ()  # output -> the input it needs
    contraction_warning: bool = False  # warn when γ·λ·c̄ > 1 (V-trace, Retrace)
    carry_base: str | None = None  # y = first output − this input (V-trace's vs = V + y)
    # inputs read only for some value of a word parameter: (parameter, value, inputs
    # it reads); an input named here for no value of the parameter in force is not read
    choice_inputs: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    # parameters that apply only with one value of a word parameter: (parameter, word
    # parameter, value); anything but the parameter's default with another value is refused
    only_with: tuple[tuple[str, str, str], ...] = ()
    # advantage outputs that ``--normalize`` may standardise by the dataset's mean and std
    normalizable: tuple[str, ...] = ()
    result: str | None = None  # the result class; None: CamelCase(name) + "Result"
    # a termination and a truncation give different numbers (a next-state value is read);
    # False (traces, prefix sums, return-to-go): both just end the episode, so the Python
    # API asks no ``ends_are`` for the ends a ``dones`` flag marks
    bootstraps: bool = True

    @property
    def reverse(self) -> bool:
        return self.direction == "backward"

    @property
    def params(self) -> tuple[str, ...]:
        """The parameter names, in declaration order (as ``EstimatorSpec.params``)."""
        return tuple(p.name for p in self.parameters)

    @property
    def result_name(self) -> str:
        """The result class's name (``GAEResult``, ``ReturnToGoResult``)."""
        if self.result is not None:
            return self.result
        return "".join(w.capitalize() for w in self.name.split("_")) + "Result"

    @property
    def signature(self) -> tuple[str, ...]:
        """The function's array and parameter arguments, in order (then the controls)."""
        if self.arguments is not None:
            return self.arguments
        arrays = tuple(i for i in self.inputs if i != "init") + self.extra_arguments
        tail = ("init",) if "init" in self.inputs else ()
        return (*arrays, *self.params, *tail)

    def _unread(self, used: Mapping[str, Any]) -> set[str]:
        """Inputs the word parameters in ``used`` (defaults filled) leave unread."""
        by_param: dict[str, set[str]] = {}
        read: set[str] = set()
        for param, value, inputs in self.choice_inputs:
            by_param.setdefault(param, set()).update(inputs)
            chosen = used.get(param)
            if chosen is None:
                chosen = self.defaults().get(param)
            if chosen == value:
                read.update(inputs)
        return set().union(*by_param.values()) - read if by_param else set()

    def inputs_for(self, used: Mapping[str, Any]) -> tuple[str, ...]:
        """The inputs a call with parameters ``used`` reads (``inputs`` less those a
        word parameter leaves unread: Q(λ) reads no log-probabilities)."""
        unread = self._unread(used)
        return tuple(i for i in self.inputs if i not in unread)

    def required_for(self, used: Mapping[str, Any]) -> tuple[str, ...]:
        """The inputs a call with parameters ``used`` needs: ``required`` plus the inputs
        the chosen words read."""
        unread = self._unread(used)
        chosen = {i for _, _, inputs in self.choice_inputs for i in inputs} - unread
        return tuple(i for i in self.inputs if (i in self.required or i in chosen))

    def misused(self, given: Mapping[str, Any], *, options: bool = False) -> str | None:
        """The one-line refusal when a parameter in ``given`` does not apply with the
        word parameters given (``c_clip`` with ``trace="is"``); None when all apply."""
        defaults = self.defaults()
        for name, word, value in self.only_with:
            chosen = given.get(word) if given.get(word) is not None else defaults.get(word)
            v = given.get(name)
            if chosen != value and v is not None and float(v) != float(defaults[name]):
                if options:
                    name, word = "--" + name.replace("_", "-"), "--" + word.replace("_", "-")
                    want, got = f"{word} {value}", f"{word} {chosen}"
                else:
                    want, got = f'{word}="{value}"', f'{word}="{chosen}"'
                return f"{name} applies only with {want}, not {got}; drop {name} or pass {want}"
        return None

    def read_rule(self, name: str) -> str:
        """When the entries of float input ``name`` are read (a ``READ_*``)."""
        return dict(self.reads).get(name, DEFAULT_READS.get(name, READ_ALL))

    @property
    def float_inputs(self) -> tuple[str, ...]:
        """The per-step float inputs (not flags, not per-sequence values), in the order
        they are checked: as declared, except that the V(s_t+1) sources follow ``values``."""
        skip = (*FLAG_INPUTS, *PER_ROW_INPUTS)
        names = [i for i in self.inputs if i not in skip]
        if "values" in names:
            nv = [i for i in names if i in BOOTSTRAP_INPUTS]
            names = [i for i in names if i not in nv]
            at = names.index("values") + 1
            names[at:at] = nv
        return tuple(names)

    def defaults(self) -> dict[str, Any]:
        """Keyword → default of the public function: each parameter, ``missing_bootstrap``."""
        out: dict[str, Any] = {p.name: p.default for p in self.parameters}
        if self.missing_bootstrap is not None:
            out["missing_bootstrap"] = self.missing_bootstrap
        return out

    def with_fallbacks(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """``values`` (parameter -> value as given) with each ``None`` that has a fallback
        replaced by its fallback's value (``pg_rho_clip`` takes ``rho_clip``)."""
        out = dict(values)
        for p in self.parameters:
            if out.get(p.name) is None and p.fallback is not None:
                out[p.name] = out[p.fallback]
        return out

    @property
    def function(self) -> Callable[..., Any]:
        """The public function, as registered in ``ESTIMATORS`` (imports torch)."""
        functions = importlib.import_module("rltscan.estimators.functions")
        return functions.ESTIMATORS[self.command].function


def gamma_param(default: float = 0.99) -> Param:
    """γ, shared by every discounting estimator."""
    return Param.unit("gamma", default, "Discount γ in [0, 1].")


def lam_param(default: float) -> Param:
    """λ, the trace decay (its default differs per estimator)."""
    return Param.unit("lam", default, "λ in [0, 1].")


def c_clip_param(default: float = 1.0) -> Param:
    """c̄, the clip of the trace coefficient (V-trace, Retrace)."""
    return Param.clip("c_clip", default, "c̄, clip of the trace coefficient (> 0).")


TRACES = ("retrace", "tree-backup", "q-lambda", "is")


def trace_param(default: str = "retrace") -> Param:
    """The off-policy trace coefficient c of the general off-policy return."""
    return Param.choice(
        "trace",
        default,
        TRACES,
        "Trace c: retrace λmin(c̄,π/μ), tree-backup λπ, q-lambda λ, is λπ/μ.",
    )


# --------------------------------------------------------------------------- settings

# Parameters that take several values in one pass (``gamma=[0.9, 0.99]``, ``--gamma
# 0.9,0.99``): every combination is computed from one read of the inputs.
SWEEPABLE = ("gamma", "lam")


def is_sweep(value: Any) -> bool:
    """A list of settings: a Python list or tuple (docs/CONVENTIONS.md §8: an array or a
    tensor means what TorchRL means, one value or one per step)."""
    return isinstance(value, (list, tuple))


def sweep_refusal(values: Any) -> str | None:
    """Why a list of settings is refused (after the parameter's name), or None: it is
    empty, or a value is listed twice (two settings would write one column)."""
    given = [float(v) for v in values]
    if not given:
        return "is an empty list; pass at least one value"
    twice = next((x for i, x in enumerate(given) if x in given[:i]), None)
    if twice is not None:
        return f"lists {twice!r} twice; pass each value once"
    return None


def settings_of(d: Declaration, values: Mapping[str, Any]) -> tuple[dict[str, float], ...] | None:
    """Every combination of the swept parameters (γ outer, λ inner), or None when each is
    one number. A parameter left out takes its declared default. The lists were checked
    before (``sweep_refusal``, by the option and function checks)."""
    names = [n for n in SWEEPABLE if n in d.params]
    if not any(is_sweep(values.get(n)) for n in names):
        return None
    defaults = d.defaults()
    lists = []
    for n in names:
        v = values.get(n)
        v = defaults[n] if v is None else v
        lists.append([float(x) for x in v] if is_sweep(v) else [float(v)])
    combos: list[dict[str, float]] = [{}]
    for n, vals in zip(names, lists, strict=True):
        combos = [{**c, n: x} for c in combos for x in vals]
    return tuple(combos)


def setting_suffix(setting: Mapping[str, float]) -> str:
    """``_g0.99_l0.95`` (estimators without λ: ``_g0.99``), floats as Python prints them."""
    tags = {"gamma": "g", "lam": "l"}
    return "".join(f"_{tags[n]}{float(setting[n])!r}" for n in SWEEPABLE if n in setting)


def setting_columns(
    outputs: tuple[str, ...] | list[str], settings: tuple[dict[str, float], ...] | None
) -> list[tuple[str, str, int]]:
    """``(column name, output, setting index)`` for every written column, settings outer."""
    if settings is None:
        return [(o, o, -1) for o in outputs]
    return [(o + setting_suffix(s), o, k) for k, s in enumerate(settings) for o in outputs]
