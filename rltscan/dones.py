"""What a ``dones`` or episode-start flag means: the rules the Python API shares with the
file resolver (docs/CONVENTIONS.md §1.4). Torch-free and numpy-free: the functions
work on numpy arrays and torch tensors alike (indexing, ``&``, ``|``, ``~``).

A ``dones`` flag says that an episode ended after step t (*ended*) or that step t
starts an episode (*starts*: CleanRL's ``dones``, Stable-Baselines3's
``episode_starts``); it never says which, so a caller must. Nor does it say whether
the episode terminated or was truncated: a separate flag column may say it for some
ends (:func:`unexplained_ends`); the other ends take the meaning the caller gives
(``ends_are`` / ``--ends-are``), never a guessed one. A flag that ends a step the
``dones`` do not end contradicts them (:func:`contradicted`): refused, never read.
"""

from __future__ import annotations

from typing import Any, Literal

DonesMean = Literal["ended", "starts"]
EndsAre = Literal["terminal", "truncated"]
DONES_MEANINGS: tuple[str, ...] = ("ended", "starts")
ENDS_ARE: tuple[str, ...] = ("terminal", "truncated")


def shift_starts(starts: Any, axis: int, last: Any = None) -> Any:
    """``ended[t] = starts[t+1]`` along ``axis``: step t ended when step t+1 starts an
    episode. The last step ended as ``last`` says (one flag per sequence: CleanRL's
    ``next_done``, the ``dones`` Stable-Baselines3 passes with ``episode_starts``), or
    not at all when None: the end of the data is then a truncation (§1.3).
    ``starts[0]`` describes the step before the data and is not read.

    Args:
        starts: boolean flags, any number of axes (numpy array or torch tensor).
        axis: the time axis of ``starts``.
        last: boolean flags broadcastable to one time step of ``starts``, or None.

    Returns:
        A new boolean array of ``starts``' shape (same library, same device).
    """
    ended = starts != starts  # all False, same type, shape and device
    ndim = starts.ndim
    head, tail = [slice(None)] * ndim, [slice(None)] * ndim
    head[axis], tail[axis] = slice(None, -1), slice(1, None)
    ended[tuple(head)] = starts[tuple(tail)]
    if last is not None:
        end: list[Any] = [slice(None)] * ndim
        end[axis] = -1
        ended[tuple(end)] = last
    return ended


def unexplained_ends(meaning: DonesMean, terminated: bool, truncated: bool) -> str:
    """What an episode end that ``dones`` marks and no flag explains is.

    ``"truncated"``: *ended* dones beside a terminated flag only (old Gym's ``done``
    beside ``terminals``; TorchRL's ``("next", "done")`` beside ``("next",
    "terminated")``): an end that is not a termination is a truncation.
    ``"terminal"``: *ended* dones beside a truncation flag only (``done`` beside
    ``TimeLimit.truncated``). ``"ask"``: any other case (episode starts, no flag, or
    both flags): the caller's ``ends_are`` decides, and without it the run stops.

    Args:
        meaning: what the dones mean (``"ended"`` or ``"starts"``).
        terminated: whether a terminated flag is given beside them.
        truncated: whether a truncated flag is given beside them.

    Returns:
        ``"truncated"``, ``"terminal"`` or ``"ask"``.
    """
    if meaning == "ended" and terminated and not truncated:
        return "truncated"
    if meaning == "ended" and truncated and not terminated:
        return "terminal"
    return "ask"


def contradicted(ended: Any, terminated: Any, truncated: Any, known: Any = None) -> Any:
    """The steps that a ``terminated`` or ``truncated`` flag ends and ``ended`` (the
    dones, read as ends) does not: ``(terminated | truncated) & ~ended``, limited to the
    steps whose end the dones say (``known``; None: every step).

    ``dones`` read as ends mean ``terminated or truncated`` (TorchRL's ``done``, which
    its envs write as ``terminated | truncated``; Gymnasium's ``terminated or
    truncated``), so no producer writes such a step, and its two readings give different
    numbers: the flag ends the episode, while TorchRL's estimators (``done`` and
    ``terminated``) bootstrap nothing there but run the trace on across it. The one rule
    for the API and for files: such a step is refused (docs/CONVENTIONS.md §1.4).

    Args:
        ended: boolean ends from the dones (numpy array or torch tensor).
        terminated, truncated: boolean flags of ``ended``'s shape, or None (not given).
        known: boolean mask of the steps whose end the dones give, or None.

    Returns:
        A boolean array of ``ended``'s shape (same library), or None without flags.
    """
    flagged = None
    for flag in (terminated, truncated):
        if flag is not None:
            flagged = flag if flagged is None else flagged | flag
    if flagged is None:
        return None
    bad = flagged & ~ended
    return bad if known is None else bad & known


def contradiction(flag: str, dones: str, meaning: DonesMean, at: str) -> str:
    """What a :func:`contradicted` step is, in words: ``flag`` (the column or argument
    set there) at ``at`` (``index (0, 3)``, ``row 12``) beside ``dones`` read as
    ``meaning``. One wording for the API and the CLI; each adds its own fix."""
    if meaning == "starts":
        said = f'"{dones}" does not start an episode at the next step'
    else:
        said = f'"{dones}" (terminated or truncated) is not'
    return (
        f'"{flag}" is set at {at} but {said}: the two disagree on whether that step '
        "ended its episode"
    )


__all__ = [
    "DONES_MEANINGS",
    "ENDS_ARE",
    "DonesMean",
    "EndsAre",
    "contradicted",
    "contradiction",
    "shift_starts",
    "unexplained_ends",
]
