"""What a Python call's arguments mean, before the driver runs (docs/CONVENTIONS.md §8).

Three readings that peers' users rely on, each exact or refused with the fix:

* a TensorDict in place of the arrays, read with TorchRL's keys
  (:func:`from_tensordict`; its outputs written back under TorchRL's keys);
* ``gamma``/``lam`` given as a tensor or array, read as TorchRL reads them: one value,
  or one per step (:func:`tensor_parameters`); a Python list or tuple stays several
  settings;
* ``dones`` (with ``dones_mean``), ``episode_starts`` and ``last_dones``, turned into
  terminated/truncated flags by the rules the file resolver follows
  (:func:`ends_of`, :mod:`rltscan.dones`).

These run on the first call of a shape only: a call with any of them is never bound
(the public functions skip the call key for it), so repeated bound calls pay nothing.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rltscan.dones import DONES_MEANINGS, ENDS_ARE, unexplained_ends
from rltscan.errors import AmbiguousInputError, DataError, ParameterError
from rltscan.estimators.declaration import BOOTSTRAP_INPUTS, PER_STEP_OF, Declaration
from rltscan.roles import N_STEP_REWARDS

# The arguments that turn episode-start or end flags into terminated/truncated
ENDS_ARGUMENTS = ("dones", "dones_mean", "episode_starts", "last_dones", "ends_are")
_COLUMN_OF = {param: column for column, param in PER_STEP_OF.items()}  # gamma -> discount


# --------------------------------------------------------------------------- γ, λ as tensors


def _is_array(value: Any) -> bool:
    return isinstance(value, (torch.Tensor, np.ndarray))


def tensor_parameters(d: Declaration, args: dict[str, Any]) -> dict[str, Any]:
    """``gamma``/``lam`` given as a tensor (or numpy array) read as TorchRL reads them.

    A 0-d or one-element tensor is one number (the outputs keep their shape). A tensor
    shaped like the rewards, or broadcastable to them with as many axes (``[B, 1, 1]``
    beside ``[B, T, 1]``: one γ per sequence), is a per-step γ_t/λ_t: it becomes the
    per-step column (``discount``/``lam_per_step``, docs/CONVENTIONS.md §1.7). Any
    other shape is refused; several settings are a Python list or tuple.

    Args:
        d: the estimator's declaration.
        args: the call's arguments (not modified).

    Returns:
        The arguments with each such tensor replaced by a number or a per-step column.
    """
    out = args
    for name in ("gamma", "lam"):
        value = args.get(name)
        if name not in d.params or not _is_array(value):
            continue
        if out is args:
            out = dict(args)
        dtype = value.dtype
        real = dtype.is_floating_point or (not dtype.is_complex and dtype != torch.bool) \
            if isinstance(value, torch.Tensor) else dtype.kind in "iuf"  # fmt: skip
        if not real:
            raise ParameterError(f"{name} must hold real numbers, got dtype {dtype}", "pass floats")
        size = value.numel() if isinstance(value, torch.Tensor) else value.size
        if size == 1:
            out[name] = float(value.reshape(-1)[0].item())
            continue
        out[_COLUMN_OF[name]] = _per_step(d, args, name, value)
        out[name] = d.defaults()[name]
    return out


def _per_step(d: Declaration, args: dict[str, Any], name: str, value: Any) -> Any:
    """A γ/λ tensor of several values as the per-step column, or the refusal."""
    column = _COLUMN_OF[name]
    shape = tuple(value.shape)
    several = f"gamma={[0.9, 0.99]!r}" if name == "gamma" else f"lam={[0.9, 0.95]!r}"
    if column not in d.inputs:
        raise ParameterError(
            f"{d.function_name} takes one {name}, got a tensor of shape {shape}",
            f"pass one number, or a list for several settings ({several})",
        )
    if args.get(column) is not None:
        raise ParameterError(
            f'{name} is a tensor of shape {shape} and "{column}" gives {name} per step too',
            "pass one of them",
        )
    ref = d.inputs[0]
    want = tuple(np.shape(args[ref])) if args.get(ref) is not None else None
    if want is not None and shape != want and len(shape) == len(want):
        try:
            np.broadcast_shapes(shape, want)
        except ValueError:
            pass
        else:
            if np.broadcast_shapes(shape, want) == want:  # one γ per sequence, per step, ...
                if isinstance(value, torch.Tensor):
                    return value.expand(want).contiguous()
                return np.ascontiguousarray(np.broadcast_to(value, want))
    if shape != want:
        raise ParameterError(
            f'{name} is a tensor of shape {shape} but "{ref}" has shape {want}',
            f"pass one number (a 0-d or one-element tensor), a tensor of the rewards' shape "
            f"({name} per step, docs/CONVENTIONS.md §8), or a Python list for several "
            f"settings ({several})",
        )
    return value


# --------------------------------------------------------------------------- dones


@dataclasses.dataclass(frozen=True)
class Ends:
    """Episode ends given as ``dones``/``episode_starts`` (docs/CONVENTIONS.md §1.4, §8).

    ``name`` is the per-step argument (``"dones"`` or ``"episode_starts"``), ``flags``
    its array, ``meaning`` ``"ended"`` or ``"starts"``; ``last`` the final done of each
    sequence (starts only); ``kind`` what an end that no terminated/truncated flag
    explains is: ``"terminal"`` or ``"truncated"``.
    """

    name: str
    flags: Any
    meaning: str
    last: Any
    kind: str


def ends_of(d: Declaration, args: dict[str, Any]) -> Ends | None:
    """The ``dones``-style arguments checked and read (the rules of
    :mod:`rltscan.dones`, as the file resolver follows them), or None when none is given.

    A per-step ``dones`` needs ``dones_mean``; ``episode_starts`` means starts. A
    ``dones`` with one value per sequence beside ``episode_starts`` is the final done
    of each sequence (Stable-Baselines3's ``dones``), as ``last_dones`` is. Where the
    flags given beside them do not say whether an end terminated or was truncated,
    ``ends_are`` must (estimators that read no next-state value do not ask).
    """
    dones, mean, starts = args.get("dones"), args.get("dones_mean"), args.get("episode_starts")
    last, ends_are = args.get("last_dones"), args.get("ends_are")
    if mean is not None and mean not in DONES_MEANINGS:
        raise ParameterError(
            f"dones_mean must be one of {', '.join(DONES_MEANINGS)}, got {mean!r}",
            'pass dones_mean="ended" (the episode ended after step t) or "starts" (step t '
            "starts an episode: CleanRL's dones)",
        )
    if ends_are is not None and ends_are not in ENDS_ARE:
        raise ParameterError(
            f"ends_are must be one of {', '.join(ENDS_ARE)}, got {ends_are!r}",
            'pass ends_are="terminal" or ends_are="truncated"',
        )
    if dones is not None and starts is not None:
        if mean is None and last is None and np.ndim(dones) < np.ndim(starts):
            dones, last = None, dones  # SB3: episode_starts [T, B] + the final dones [B]
        else:
            raise ParameterError(
                '"dones" and "episode_starts" were both given',
                "pass one; a dones with one value per sequence beside episode_starts is the "
                "final done of each sequence (Stable-Baselines3)",
            )
    if dones is None and starts is None:
        unused = next((n for n in ENDS_ARGUMENTS if args.get(n) is not None), None)
        if unused is not None:
            raise ParameterError(
                f"{unused} describes dones or episode starts, but neither was given",
                f"pass dones= (with dones_mean=) or episode_starts=, or drop {unused}",
            )
        return None
    if "is_first" in d.inputs and args.get("is_first") is not None:
        raise ParameterError(
            '"is_first" and dones/episode_starts both mark episode starts', "pass one of them"
        )
    if starts is not None:
        if mean is not None:
            raise ParameterError(
                "dones_mean describes dones, and episode_starts already mark starts",
                "drop dones_mean",
            )
        name, flags, meaning = "episode_starts", starts, "starts"
    elif mean is None:
        raise AmbiguousInputError(
            '"dones" may mean "the episode ended after step t" or "step t starts an '
            'episode" (CleanRL)',
            'pass dones_mean="ended" or dones_mean="starts"',
        )
    else:
        name, flags, meaning = "dones", dones, mean
    if last is not None and meaning != "starts":
        raise ParameterError(
            '"last_dones" (the final done of each sequence) goes with episode starts; '
            f'with dones_mean="ended" the last step is flagged in "{name}"',
            "drop last_dones",
        )
    how = unexplained_ends(meaning, args.get("terminated") is not None, _given(args, "truncated"))
    if how != "ask":
        if ends_are is not None:
            flag = "terminated" if how == "truncated" else "truncated"
            raise ParameterError(
                f'ends_are is not used: beside "{flag}", an end "{name}" marks that is not '
                f"{'a termination' if flag == 'terminated' else 'a truncation'} is {how}",
                "drop ends_are",
            )
        kind = how
    elif ends_are is not None:
        kind = ends_are
    elif not d.bootstraps:
        kind = "truncated"  # both just end the episode here: the numbers are the same
    else:
        raise AmbiguousInputError(
            f'"{name}" marks where episodes end but not whether they terminated or were truncated',
            'pass ends_are="terminal" or ends_are="truncated" (or terminated=/truncated= '
            "flags that say it)",
        )
    return Ends(name, flags, meaning, last, kind)


def _given(args: dict[str, Any], name: str) -> bool:
    return args.get(name) is not None


# --------------------------------------------------------------------------- TensorDict

# Per estimator: TorchRL's value module that computes it, and where its outputs go
# (rltscan output -> TorchRL key). TD(λ) also writes ``advantage = value_target −
# state_value``, as TorchRL's TDLambdaEstimator does.
TORCHRL_OUTPUTS = {
    "gae": {"advantages": "advantage", "value_targets": "value_target"},
    "td_lambda": {"lambda_returns": "value_target"},
    "vtrace": {"pg_advantages": "advantage", "vs": "value_target"},
}
_BEHAVIOUR_LOGP = ("sample_log_prob", "action_log_prob")  # TorchRL's names, old and new


def _slashed(key: str | tuple[str, ...]) -> str:
    """A TensorDict key as a file's column names it: nested keys joined by "/"."""
    return key if isinstance(key, str) else "/".join(key)


def is_tensordict(x: Any) -> bool:
    """A TensorDict (tensordict is only looked at when it is already imported)."""
    td = sys.modules.get("tensordict")
    return td is not None and isinstance(x, td.TensorDictBase)


def from_tensordict(
    d: Declaration, args: dict[str, Any]
) -> tuple[dict[str, Any], Callable[[Any], None]]:
    """The arrays of a call whose first argument is a TorchRL TensorDict, and the
    function that writes the results back into it under TorchRL's keys.

    Read as TorchRL's value modules read them: rewards ``("next", "reward")``, values
    ``"state_value"``, next values ``("next", "state_value")``, ``("next", "done")``
    (ended after step t) with ``("next", "terminated")`` (an end that is not a
    termination is a truncation), the behaviour log-probability ``"sample_log_prob"``
    or ``"action_log_prob"``; time is the TensorDict's last batch dimension (or the
    one named ``"time"``), and ``time_dim`` counts its batch dimensions. Arguments given
    explicitly are used as given.

    Args:
        d: the estimator's declaration.
        args: the call's arguments, the TensorDict first.

    Returns:
        ``(arguments, write)``: ``write(result)`` sets TorchRL's output keys.
    """
    td = args[d.inputs[0]]
    outputs = TORCHRL_OUTPUTS.get(d.name)
    if outputs is None:
        raise ParameterError(
            f"{d.function_name} takes no TensorDict (no TorchRL value module computes it)",
            f'pass tensors, e.g. {d.inputs[0]}=td["next", "reward"], time_dim=-2',
        )
    if any(isinstance(args.get(n), (list, tuple)) for n in ("gamma", "lam")):
        raise ParameterError(
            "a TensorDict takes one setting (its results are written under TorchRL's keys)",
            "call once per gamma/lam, or pass tensors",
        )
    if td.batch_dims < 1:
        raise DataError(
            f"the TensorDict has batch size {tuple(td.batch_size)}, with no time dimension",
            "pass a TensorDict of batch size [*B, T]",
        )
    out = dict(args)
    out[d.inputs[0]] = None
    keys = set(td.keys(include_nested=True))
    # what TorchRL's MultiStep leaves beside the n-step rewards it wrote, as a file's
    # columns name it (("next", "original_reward") is "next/original_reward")
    n_step = next((k for k in keys if _slashed(k) in N_STEP_REWARDS.names), None)
    gamma = args.get("gamma")
    # a γ per step (not a 0-d tensor: a value module's own .gamma buffer is one number)
    per_step = (
        _is_array(gamma)
        and len(gamma.shape) >= td.batch_dims
        and math.prod(gamma.shape) == td.numel()
    )
    if n_step is not None and not per_step:
        raise AmbiguousInputError(
            f"the TensorDict has {n_step!r}: TorchRL's MultiStep made its rewards n-step "
            "returns, which TorchRL's value modules discount by gamma ** steps_to_next_obs "
            "and one gamma for every step would not",
            'pass gamma=gamma ** td["steps_to_next_obs"] (as TorchRL reads them), or '
            "compute on the batch before MultiStep",
        )

    def take(arg: str, key: Any, what: str) -> None:
        if out.get(arg) is not None:
            return  # given explicitly
        if key not in keys:
            raise DataError(f"the TensorDict has no {key!r} ({what})", f"pass {arg}=")
        out[arg] = td.get(key)

    take("rewards", ("next", "reward"), "the reward of each step")
    if not any(args.get(n) is not None for n in BOOTSTRAP_INPUTS):
        take("next_values", ("next", "state_value"), "V(s_{t+1}), the critic on td['next']")
    if "values" in d.required:
        take("values", "state_value", "V(s_t)")
    if "logp_behavior" in d.inputs and out.get("logp_behavior") is None:
        found = [k for k in _BEHAVIOUR_LOGP if k in keys]
        if len(found) != 1:
            raise DataError(
                f"the TensorDict has {' and '.join(map(repr, found)) or 'no'} behaviour "
                f"log-probability ({' or '.join(map(repr, _BEHAVIOUR_LOGP))})",
                "pass logp_behavior=",
            )
        out["logp_behavior"] = td.get(found[0])
    flags = ("terminated", "truncated", "dones", "episode_starts")
    if not any(args.get(n) is not None for n in flags):
        if ("next", "done") in keys:
            out["dones"], out["dones_mean"] = td.get(("next", "done")), "ended"
            if ("next", "terminated") in keys:
                out["terminated"] = td.get(("next", "terminated"))
        elif ("next", "terminated") in keys:
            out["terminated"] = td.get(("next", "terminated"))
            if ("next", "truncated") in keys:
                out["truncated"] = td.get(("next", "truncated"))
        else:
            raise DataError(
                "the TensorDict has no ('next', 'done') or ('next', 'terminated')",
                "pass terminated= (and truncated=)",
            )
    out["time_dim"] = _time_dim(td, args.get("time_dim"))
    value = td.get("state_value") if d.name == "td_lambda" and "state_value" in keys else None

    def write(result: Any) -> None:
        for name, key in outputs.items():
            td.set(key, getattr(result, name))
        if value is not None:  # TorchRL's TD(λ) advantage
            td.set("advantage", result.lambda_returns - value)

    return out, write


def _time_dim(td: Any, time_dim: int | None) -> int:
    """The time axis of the TensorDict's tensors: its last batch dimension, or the one
    named "time", or ``time_dim`` counted in its batch dimensions (as TorchRL does)."""
    n = td.batch_dims
    if time_dim is None:
        names = list(getattr(td, "names", None) or ())
        return names.index("time") if "time" in names else n - 1
    if isinstance(time_dim, bool) or not isinstance(time_dim, int) or not -n <= time_dim < n:
        raise ParameterError(
            f"time_dim = {time_dim!r} is not a batch dimension of the TensorDict "
            f"(batch size {tuple(td.batch_size)})",
            f"pass a value in [{-n}, {n - 1}], or leave it out (time is the last)",
        )
    return time_dim % n
