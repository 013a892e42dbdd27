"""Column roles, their aliases (docs/CONVENTIONS.md §1.4-1.9) and how a role is resolved
to a column.

Pure Python: no h5py or pyarrow. A *role* is what a column means to an estimator
(``rewards``, ``terminated``, ...); a *column* is a name in the user's file. This table
is the one place a role's names live: the resolver (``io/layout.py``) reads it and
restates none of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from rltscan.errors import DataError

# role -> names tried in order (first match wins). Exact and case-sensitive.
ALIASES: dict[str, tuple[str, ...]] = {
    # TorchRL keeps what step t led to under "next" (an HDF5 group next/ written by
    # TensorDict.to_h5, or next.<key> once flattened): see NEXT_PREFIXES
    "rewards": ("rewards", "reward", "next.reward", "next/reward", "rew", "r"),
    "terminated": (
        "terminals",
        "terminations",
        "terminated",
        "terminateds",
        "is_terminal",
        "next.terminated",
        "next/terminated",
    ),
    "truncated": (
        "timeouts",
        "truncations",
        "truncated",
        "truncateds",
        "time_limit",
        "TimeLimit.truncated",
        "next.truncated",
        "next/truncated",
    ),
    "dones": ("dones", "done", "next.done", "next/done", "is_last"),
    # RLDS: the row that holds an episode's last observation; whether it is also a
    # transition is a decision (--is-last-row, docs/CONVENTIONS.md §1.9). It ends the
    # episode either way (the "dones" alias above, read as "ended").
    "last_row": ("is_last",),
    "episode_starts": ("episode_starts", "is_first"),
    "episode_id": (
        "episode_id",
        "episode_index",
        "eps_id",
        "episode",
        "traj_id",
        "trajectory_id",
        "ep_id",
        "collector.traj_ids",  # TorchRL collectors
        "collector/traj_ids",
    ),
    # s_t and s_{t+1} of a flat (D4RL-style) file: a jump between the two rows is a
    # hidden episode end (read only to check continuity, never computed with)
    "observations": ("observations", "obs", "observation"),
    "next_observations": (
        "next_observations",
        "next_obs",
        "next_observation",
        "next.observation",
        "next/observation",
    ),
    # step within the episode: a jump (not +1) starts an episode, so it must meet an end
    "step": ("step", "frame_index", "timestep", "episode_step", "t"),
    "values": ("values", "value", "vf_preds", "state_value", "v", "infos/value"),
    # V(s_{t+1}) of every step (TorchRL's value module run on ("next", "observation"))
    "next_values": (
        "next_values",
        "next_value",
        "next_state_value",
        "next.state_value",
        "next/state_value",
    ),
    "last_values": ("last_values", "last_value", "next_value", "bootstrap_value"),
    # [B] only (the extra pool): CleanRL's next_done, SB3's final `dones` beside
    # `episode_starts` (compute_returns_and_advantage(last_values, dones))
    "last_dones": ("next_done", "last_dones", "next_dones", "dones"),
    "logp_behavior": (
        "logp_behavior",
        "log_probs",
        "logprobs",
        "logp",
        "action_logp",
        "action_log_prob",
        "sample_log_prob",
        "infos/action_log_probs",
        "behavior_logp",
        "log_mu",
    ),
    "logp_target": ("logp_target", "target_logp", "pi_logp", "log_pi"),
    "q_values": ("q_values", "q", "qs"),
    "next_expected_q": ("next_expected_q", "expected_next_q", "ev_next", "next_v_pi"),
    "v_pi": ("v_pi",),
    "x": (),
    # per-step γ_t and λ_t replace --gamma/--lam only when named (--discount,
    # --lam-column): never found by name, but a column that looks like one stops a run
    # that would not read it (DISCOUNT_LIKE)
    "discount": (),
    "lam_per_step": (),
}
# Prefixes under which a producer stores the OUTCOME of step t (TorchRL: ("next", key)):
# when a role finds both "next/<k>" (or "next.<k>") and a root "<k>", the root one
# describes s_t (TorchRL's root done/terminated/truncated are those of the observation,
# all False after an automatic reset) and is not read for that role; the report notes it
# (docs/CONVENTIONS.md §1.8).
NEXT_PREFIXES = ("next/", "next.")

# Columns that describe the OBSERVATION of their row, not the step taken from it
# (RLDS: "is_terminal" marks a terminal observation; docs/CONVENTIONS.md §1.9). With
# --is-last-row observation they are read one row later: the transition before the
# final observation ends as the final observation says.
OBSERVATION_FLAGS = ("is_terminal", "is_last")

# "dones"-like columns whose producer defines them as "the episode ended after this
# row" (never "this row starts one"), with the producer's rule for what such an end is
# when no terminal flag is set on it. RLDS: "an episode that ends in a step where
# is_terminal = False has been truncated". (Columns under NEXT_PREFIXES are step
# outcomes, so "ended" too; what their unflagged ends are stays a decision.)
ENDED_BY_DEFINITION = {"is_last": "truncated"}

# Names of a per-step discount (RLDS, dm_env exports): present and not named, they stop
# an estimator that could read one, with the flag to pass.
DISCOUNT_LIKE = ("discount", "discounts", "discount_t", "gammas")

# role -> the CLI option that overrides it (used in error messages).
OPTION: dict[str, str] = {
    "rewards": "--rewards",
    "terminated": "--terminals",
    "truncated": "--timeouts",
    "dones": "--dones",
    "episode_id": "--episode-id",
    "values": "--values",
    "next_values": "--next-values",
    "last_values": "--last-values",
    "logp_behavior": "--logp-behavior",
    "logp_target": "--logp-target",
    "q_values": "--q-values",
    "next_expected_q": "--next-expected-q",
    "v_pi": "--v-pi",
    "x": "--x",
    "discount": "--discount",
    "lam_per_step": "--lam-column",
}

# estimator argument name -> the role that feeds it
ARGUMENT_ROLE: dict[str, str] = {
    "rewards": "rewards",
    "values": "values",
    "next_values": "next_values",
    "last_value": "last_values",
    "logp_behavior": "logp_behavior",
    "logp_target": "logp_target",
    "q_values": "q_values",
    "next_expected_q": "next_expected_q",
    "v_pi": "v_pi",
    "x": "x",
    "discount": "discount",
    "lam_per_step": "lam_per_step",
}

FLAG_ROLES = ("terminated", "truncated", "dones", "episode_starts", "last_dones", "last_row")


@dataclass(frozen=True)
class ColumnInfo:
    """A column the file holds: its name, shape (whole column) and dtype string."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def describe(self) -> str:
        dims = ", ".join(str(d) for d in self.shape)
        return f'"{self.name}" ({dims}{"," if len(self.shape) == 1 else ""}) {self.dtype}'


def quoted(names: Iterable[str], limit: int = 12) -> str:
    """``"a", "b", "c"`` (at most ``limit`` names, then ``...``)."""
    names = list(names)
    text = ", ".join(f'"{n}"' for n in names[:limit])
    return text + (", ..." if len(names) > limit else "")


def find_role(role: str, available: Mapping[str, ColumnInfo]) -> str | None:
    """The first alias of ``role`` present in ``available``, else None."""
    for name in ALIASES.get(role, ()):
        if name in available:
            return name
    return None


def resolve_override(role: str, name: str, available: Mapping[str, ColumnInfo], where: str) -> str:
    """Check that an explicit ``--<role> NAME`` exists; say what does otherwise."""
    if name not in available:
        raise DataError(
            f'{where} has no column "{name}" (given by {OPTION.get(role, role)})',
            f"pass one of: {quoted(available)}",
            column=name,
        )
    return name


def missing_column_error(role: str, available: Mapping[str, ColumnInfo], where: str) -> DataError:
    """The message for a required role that no column fills."""
    default = ALIASES[role][0] if ALIASES.get(role) else role
    option = OPTION.get(role, f"--{role}")
    found = quoted(available) if available else "no per-step columns"
    return DataError(
        f'{where} has no column "{default}"',
        f"pass {option} KEY (found: {found})",
        column=default,
        option=f"{option} KEY",
    )
