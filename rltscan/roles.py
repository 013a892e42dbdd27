"""Column roles as data: one :class:`Role` row per role (docs/CONVENTIONS.md §1.11).

A *role* is what a column means (``rewards``, ``terminated``, ``episode_id``, ...); a
*column* is a name in the user's file. Each row of :data:`ROLES` says everything about
one role that is not math: the names a file may give it (first match wins, exact and
case-sensitive), the CLI option that names it, that option's other spellings and help,
the estimator argument its column becomes, the estimator inputs it can fill, and what
kind of column it is. Everyone reads the rows and restates none of them:

* the resolver (``rltscan/io/layout.py``; its column lookup: ``rltscan/io/resolve.py``)
  finds each role's column by its aliases, passes a ``step``/``bootstrap`` column as
  its ``argument``, reads a ``sequence`` column beside the steps, stops at an unnamed
  look-alike, and names the role's option in its messages;
* the CLI builds its column options and their ``--help`` from the rows that have an
  option: an estimator command shows those whose role fills one of its declared
  inputs, ``inspect`` shows every one;
* ``inspect``, the report and the provenance record (``source_columns``) name roles by
  these names, which are also the keys of ``columns=`` in ``rltscan.run``;
* docs/CONVENTIONS.md §1.11 lists every row (a test keeps the list true).

Adding a role that fills an estimator argument is adding its row (plus an oracle and a
test for its numbers); a new *kind* of meaning (how a flag combines with others) is
code in the resolver. Pure Python, no imports: ``--help`` reads it without numpy.
"""

# no ``from __future__ import annotations``: NamedTuple would compile each field's
# annotation from its string (0.1 ms a field, on every --help)
from typing import Literal, NamedTuple

# What the resolver does with a role's column:
#   step       a per-step float, passed to the estimator as ``argument``
#   bootstrap  a per-step V(s_{t+1}) source (§1.2): passed as ``argument``; while one is
#              given, none is derived (Minari's T+1 values, RLDS rows) and no [B] last
#              value is read
#   sequence   one value per sequence of a 2-D buffer (``[B]``), beside the steps
#   flag       0/1 per step, combined into terminated/truncated (§1.1, §1.4, §1.9)
#   id         episode ids: an episode ends where the id changes (§1.5)
#   evidence   read only to find episode ends nobody flagged (§1.5, hidden ends)
Kind = Literal["step", "bootstrap", "sequence", "flag", "id", "evidence"]
KINDS: tuple[Kind, ...] = ("step", "bootstrap", "sequence", "flag", "id", "evidence")


class LookAlike(NamedTuple):
    """Column names that look like a role that is read only when named: present and not
    named, they stop a run that could read the role, since they would change the numbers.
    ``what`` says what such a column would be and ``otherwise`` what ``--ignore`` keeps."""

    names: tuple[str, ...]
    what: str
    otherwise: str


class Role(NamedTuple):
    """One role: its names in files, its CLI option, and what its column becomes.

    ``aliases`` are tried in order (empty: found only when named); ``option`` is the CLI
    option that names the column (None: found by name, or ``columns=`` in Python) and
    ``also`` its other spellings; ``help`` is the option's ``--help`` line (and the docs'
    description); ``argument`` is the estimator argument the column is passed as;
    ``fills`` the estimator inputs the column can give (default: ``argument``): a command
    shows the option when it takes one of them; ``default_to`` is the role whose column
    is read when none is named (``x`` reads the rewards).

    A named tuple (immutable, as a frozen dataclass), not a dataclass: ``--help`` builds
    this class, and a 10-field frozen dataclass costs 0.8 ms to create against 0.2 ms."""

    name: str
    kind: Kind
    help: str
    aliases: tuple[str, ...] = ()
    option: str | None = None
    also: tuple[str, ...] = ()
    argument: str | None = None
    fills: tuple[str, ...] = ()
    default_to: str | None = None
    look_alike: LookAlike | None = None

    @property
    def inputs(self) -> tuple[str, ...]:
        """The estimator inputs this role's column can fill."""
        return self.fills or ((self.argument,) if self.argument else ())

    @property
    def options(self) -> tuple[str, ...]:
        """Every spelling of the role's CLI option (none when it has no option)."""
        return (self.option, *self.also) if self.option else ()

    @property
    def keyword(self) -> str | None:
        """The option's Python name in the CLI (``--lam-column``: ``lam_column``)."""
        return self.option.removeprefix("--").replace("-", "_") if self.option else None


_ROWS = (
    # TorchRL keeps what step t led to under "next" (an HDF5 group next/ written by
    # TensorDict.to_h5, or next.<key> once flattened): io/columns.py NEXT_PREFIXES
    Role(
        "rewards",
        "step",
        "Rewards column (default: rewards, reward, next.reward, …).",
        aliases=("rewards", "reward", "next.reward", "next/reward", "rew", "r"),
        option="--rewards",
        argument="rewards",
        fills=("rewards", "x"),  # x reads the rewards unless --x names a column
    ),
    Role(
        "values",
        "step",
        "V(s_t) column (Minari: T+1 rows per episode).",
        aliases=("values", "value", "vf_preds", "state_value", "v", "infos/value"),
        option="--values",
        argument="values",
        fills=("values", "next_values"),  # V(s_{t+1}) from T+1 values per episode
    ),
    # V(s_{t+1}) of every step (TorchRL's value module run on ("next", "observation"))
    Role(
        "next_values",
        "bootstrap",
        "V(s_{t+1}) column.",
        aliases=(
            "next_values",
            "next_value",
            "next_state_value",
            "next.state_value",
            "next/state_value",
        ),
        option="--next-values",
        argument="next_values",
    ),
    # V(s_{t+1}) only where a step is cut without terminating (a truncation, the end of
    # the data): V of Gymnasium's final_obs, say; the other rows are never read
    Role(
        "bootstrap_values",
        "bootstrap",
        "V(s_{t+1}) read only at truncations and the data's end (other rows: NaN is fine).",
        aliases=("bootstrap_values",),
        option="--bootstrap-values",
        argument="bootstrap_values",
    ),
    Role(
        "last_values",
        "sequence",
        "[B] bootstrap values of a [T, B] buffer.",
        aliases=("last_values", "last_value", "next_value", "bootstrap_value"),
        option="--last-values",
        argument="last_value",
    ),
    Role(
        "logp_behavior",
        "step",
        "log μ(a_t|s_t) column.",
        aliases=(
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
        option="--logp-behavior",
        argument="logp_behavior",
    ),
    Role(
        "logp_target",
        "step",
        "log π(a_t|s_t) column.",
        aliases=("logp_target", "target_logp", "pi_logp", "log_pi"),
        option="--logp-target",
        argument="logp_target",
    ),
    Role(
        "q_values",
        "step",
        "Q(s_t, a_t) column.",
        aliases=("q_values", "q", "qs"),
        option="--q-values",
        argument="q_values",
    ),
    Role(
        "next_expected_q",
        "step",
        "E_π Q(s_{t+1}, ·) column (target policy at the true successor).",
        aliases=("next_expected_q", "expected_next_q", "ev_next", "next_v_pi"),
        option="--next-expected-q",
        argument="next_expected_q",
    ),
    Role(
        "v_pi",
        "step",
        "E_π Q(s_t, ·) column; adds advantages.",
        aliases=("v_pi",),
        option="--v-pi",
        argument="v_pi",
    ),
    Role(
        "x",
        "step",
        "Per-step input column (default: the rewards).",
        option="--x",
        argument="x",
        default_to="rewards",
    ),
    # per-step γ_t and λ_t replace --gamma/--lam only when named (§1.7): never found by
    # name, but a column that looks like a discount stops a run that could read one
    Role(
        "discount",
        "step",
        "Per-step discount γ_t column, in place of --gamma.",
        option="--discount",
        argument="discount",
        look_alike=LookAlike(
            ("discount", "discounts", "discount_t", "gammas", "gamma"),
            "a per-step discount, which would replace --gamma",
            "to compute with --gamma",
        ),
    ),
    Role(
        "lam_per_step",
        "step",
        "Per-step λ_t column, in place of --lam.",
        option="--lam-column",
        argument="lam_per_step",
    ),
    # the flag and id columns: every estimator reads episode ends (the option's second
    # name is gymnasium's/TorchRL's word)
    Role(
        "terminated",
        "flag",
        "Terminal flags column: s_{t+1} is terminal (gymnasium's terminated).",
        aliases=(
            "terminals",
            "terminations",
            "terminated",
            "terminateds",
            "is_terminal",
            "next.terminated",
            "next/terminated",
        ),
        option="--terminals",
        also=("--terminated",),
        fills=("terminated",),
    ),
    Role(
        "truncated",
        "flag",
        "Truncation flags column: the episode was cut after t (gymnasium's truncated).",
        aliases=(
            "timeouts",
            "truncations",
            "truncated",
            "truncateds",
            "time_limit",
            "TimeLimit.truncated",
            "next.truncated",
            "next/truncated",
        ),
        option="--timeouts",
        also=("--truncated",),
        fills=("truncated",),
    ),
    Role(
        "dones",
        "flag",
        "Ambiguous done column; needs --dones-mean.",
        aliases=("dones", "done", "next.done", "next/done", "is_last", "episode_terminals"),
        option="--dones",
        also=("--done",),
        fills=("terminated", "truncated"),
    ),
    Role(
        "episode_id",
        "id",
        "Episode id column.",
        aliases=(
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
        option="--episode-id",
        fills=("terminated", "truncated"),
    ),
    # found by name only (columns= in Python names them too)
    Role(
        "episode_starts",
        "flag",
        "Episode-start flags: step t starts an episode (read as dones that mark starts).",
        aliases=("episode_starts", "is_first"),
        fills=("terminated", "truncated"),
    ),
    # RLDS: the row that holds an episode's last observation; whether it is also a
    # transition is a decision (--is-last-row, §1.9). It ends the episode either way (the
    # "dones" alias above, read as "ended").
    Role(
        "last_row",
        "flag",
        "RLDS: the row that holds an episode's final observation (see --is-last-row).",
        aliases=("is_last",),
        fills=("terminated", "truncated"),
    ),
    # [B] only (the extra pool): CleanRL's next_done, SB3's final `dones` beside
    # `episode_starts` (compute_returns_and_advantage(last_values, dones))
    Role(
        "last_dones",
        "sequence",
        "[B] final dones of a [T, B] buffer (CleanRL's next_done).",
        aliases=("next_done", "last_dones", "next_dones", "dones"),
        fills=("terminated", "truncated"),
    ),
    # s_t and s_{t+1} of a flat (D4RL-style) file: a jump between the two rows is a
    # hidden episode end (read only to check continuity, never computed with)
    Role(
        "observations",
        "evidence",
        "s_t of a flat file: compared with the previous row's next observation.",
        aliases=("observations", "obs", "observation"),
    ),
    Role(
        "next_observations",
        "evidence",
        "s_{t+1} of a flat file: a jump to the next row's observation is a hidden end.",
        aliases=(
            "next_observations",
            "next_obs",
            "next_observation",
            "next.observation",
            "next/observation",
            "new_obs",  # RLlib's Columns.NEXT_OBS (offline output, SampleBatch)
        ),
    ),
    # step within the episode: where it starts again (does not go up) an episode starts,
    # so it must meet an end; where it skips ahead (up by more than one) the run asks
    Role(
        "step",
        "evidence",
        "Step within the episode: where it starts again, an episode starts; where it "
        "skips ahead, the run asks.",
        aliases=("step", "frame_index", "timestep", "episode_step", "t"),
    ),
    # pandas saves a DataFrame's index as this column only when it is not a RangeIndex:
    # after rows were dropped, reordered or concatenated (or exploded), so where it does
    # not go on by one the rows need not be consecutive steps
    Role(
        "row_index",
        "evidence",
        "pandas's saved index: where it does not go on by one, rows were dropped, reordered "
        "or concatenated.",
        aliases=("__index_level_0__",),
    ),
)

ROLES: dict[str, Role] = {r.name: r for r in _ROWS}

# Columns that look like a per-step mask (a sequence buffer padded to a fixed length, its
# padding marked; jaxrl's ``masks`` = 1 - done): no role reads one, every row is computed
# as a step, so one present and not set aside (``--ignore``) stops every run (§1.11).
STEP_MASKS = LookAlike(
    (
        "mask", "masks", "valid", "is_valid", "valid_mask", "padding_mask", "pad_mask",
        "is_pad", "is_padding", "padded", "attention_mask", "loss_mask",
    ),
    "a per-step mask (padded rows, or 1 - done as jaxrl writes it), which no role reads: "
    "every row is computed as a step and episodes end where the flags say",
    "if so (else drop the padded rows first, or name the flags)",
)  # fmt: skip
# Columns that say the rewards are n-step returns (TorchRL's MultiStep: r_t + γ r_{t+1} +
# ... up to the n-th step, the next observation n steps ahead, the original reward
# kept beside): a one-step estimator over them counts each reward n times.
N_STEP_REWARDS = LookAlike(
    (
        "steps_to_next_obs", "original_reward", "next.original_reward",
        "next/original_reward",
    ),
    "the mark of n-step rewards (TorchRL's MultiStep), which a one-step estimator "
    "would count n times",
    "if the rewards are one-step (else compute on the buffer before MultiStep)",
)  # fmt: skip
# Columns that name the agent of each row (multi-agent logs: PettingZoo's AEC loop,
# RLlib's ``agent_id``): several agents' steps interleaved are not one sequence, and no
# role reads the column. An all-null one (RLlib's single-agent output) says nothing.
AGENT_IDS = LookAlike(
    ("agent_id", "agent", "agent_index"),
    "the agent of each row: the steps of several agents, interleaved, are not one sequence",
    "if every row is one agent's step in order (else write one file per agent)",
)
# Look-alikes of no role: each stops every run while present and not set aside.
ROLELESS_LOOK_ALIKES = (STEP_MASKS, N_STEP_REWARDS, AGENT_IDS)
# estimator argument -> the role whose column is passed as it
_BY_ARGUMENT: dict[str, Role] = {r.argument: r for r in _ROWS if r.argument}


def of_argument(argument: str) -> Role | None:
    """The role whose column is passed as estimator argument ``argument`` (None: no
    column fills it directly, like ``terminated``, which the flag roles build)."""
    return _BY_ARGUMENT.get(argument)


def option_of(role: str) -> str | None:
    """The CLI option that names ``role``'s column; None when it has none."""
    row = ROLES.get(role)
    return row.option if row is not None else None


def with_option() -> tuple[Role, ...]:
    """The roles the CLI has an option for, in the order ``--help`` lists them."""
    return tuple(r for r in _ROWS if r.option)


def of_kind(*kinds: Kind) -> tuple[Role, ...]:
    """The roles of these kinds, in table order."""
    return tuple(r for r in _ROWS if r.kind in kinds)


__all__ = [
    "AGENT_IDS",
    "KINDS",
    "N_STEP_REWARDS",
    "ROLELESS_LOOK_ALIKES",
    "ROLES",
    "STEP_MASKS",
    "Kind",
    "LookAlike",
    "Role",
    "of_argument",
    "of_kind",
    "option_of",
    "with_option",
]
