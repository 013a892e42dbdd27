"""Errors are data (issue 11, item 3): an error carries its column, index, location and
fix as fields; ``str()`` formats the one line; nothing downstream parses a message.

* the formatting of the fields, and every class keeping its bases and exit code;
* errors travel as plain data (pickle, JSON) and come back equal, class included;
* the estimators' index errors carry the index as data, and the streaming and shard
  engines report the step of the file by shifting that field;
* ``inspect`` reads what is missing from the fields;
* one parameter table: the Python functions and the file runs refuse the same values
  with one wording (the name is the option's at the CLI).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

import rltscan
from rltscan import api, errors
from rltscan.errors import (
    DataError,
    InputFileError,
    MissingBootstrapError,
    ParameterError,
    RltscanError,
)
from rltscan.estimators import check_params, parameter_table
from rltscan.io.columns import missing_column_error
from tests.shard_helpers import SIZES, table, write_shards

CLASSES = [
    c
    for c in vars(errors).values()
    if isinstance(c, type) and issubclass(c, RltscanError) and c is not RltscanError
] + [RltscanError]


def test_fields_format_one_line() -> None:
    err = DataError(
        '"rewards" has NaN at index {index}, an entry that is read',
        "fix or mask the data",
        column="rewards",
        index=(2, 7),
        time_axis=1,
        where="run.h5",
    )
    assert (
        str(err)
        == 'run.h5: "rewards" has NaN at index (2, 7), an entry that is read; fix or mask the data'
    )
    assert err.args == (str(err),)
    # without a slot the index follows the sentence; a 1-d index prints as a number
    assert str(DataError("bad flag", "pass 0/1", index=5)) == "bad flag at index 5; pass 0/1"
    assert DataError("bad flag", index=[5]).index == (5,)
    # a plain message stays what it was
    assert str(DataError("x is wrong; do y")) == "x is wrong; do y"
    assert DataError("x is wrong; do y").fix is None  # not parsed out of the text


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_errors_travel_as_data(cls: type[RltscanError]) -> None:
    err = cls("it broke at index {index}", "do this", column="c", index=(1, 2), time_axis=0,
              where="part-3.parquet", option="--c KEY")  # fmt: skip
    for back in (
        pickle.loads(pickle.dumps(err)),
        RltscanError.from_dict(json.loads(json.dumps(err.to_dict()))),
    ):
        assert type(back) is cls
        assert back.fields() == err.fields()
        assert str(back) == str(err)
        assert back.exit_code == cls.exit_code
    assert json.loads(json.dumps(err.to_dict()))["type"] == cls.__name__


def test_unknown_class_comes_back_as_the_base() -> None:
    back = RltscanError.from_dict({"type": "NoSuchError", "what": "odd", "fix": "retry"})
    assert type(back) is RltscanError and str(back) == "odd; retry"


def test_bases_and_exit_codes_are_kept() -> None:
    assert isinstance(InputFileError("gone", "pass a file"), OSError)
    assert InputFileError("gone", "pass a file").exit_code == 3
    assert isinstance(ParameterError("x"), ValueError) and ParameterError.exit_code == 2
    assert issubclass(MissingBootstrapError, DataError) and MissingBootstrapError.exit_code == 4


def test_replace_and_shift_keep_the_rest() -> None:
    err = MissingBootstrapError("the episode is truncated at index {index} without termination",
                                "pass next_values", index=(3, 1), time_axis=0)  # fmt: skip
    cli = err.replace(fix="pass --next-values KEY")
    assert type(cli) is MissingBootstrapError
    assert (cli.index, cli.time_axis, cli.fix) == ((3, 1), 0, "pass --next-values KEY")
    assert cli.shifted(100).index == (103, 1)  # only the time step moves
    assert cli.shifted(0) is cli
    per_row = DataError('"last_value" has NaN', "pass finite values", index=4)  # no time axis
    assert per_row.shifted(100) is per_row
    with pytest.raises(TypeError):
        err.replace(message="x")


def test_estimator_errors_carry_the_index() -> None:
    rewards = np.zeros((3, 10))
    rewards[1, 6] = np.nan
    with pytest.raises(DataError) as ei:
        rltscan.gae(
            rewards, np.zeros((3, 10)), terminated=np.zeros((3, 10)), missing_bootstrap="zero"
        )
    err = ei.value
    assert (err.column, err.index, err.time_axis) == ("rewards", (1, 6), 1)
    assert str(err).startswith('"rewards" has NaN or Inf at index (1, 6), an entry that is read; ')
    flags = np.zeros(10)
    flags[4] = 2
    with pytest.raises(DataError) as ei:
        rltscan.discounted_returns(np.zeros(10), terminated=flags, missing_bootstrap="zero")
    assert (ei.value.column, ei.value.index, ei.value.time_axis) == ("terminated", (4,), 0)
    with pytest.raises(MissingBootstrapError) as mb:
        rltscan.gae(np.zeros((4, 2)), np.zeros((4, 2)), terminated=np.zeros((4, 2)), time_dim=0)
    assert (mb.value.index, mb.value.time_axis) == ((3, 0), 0)
    assert "missing_bootstrap" in mb.value.fix


def _stream_input(tmp_path: Path, bad_step: int) -> Path:
    import h5py

    rng = np.random.default_rng(3)
    n = 100
    with h5py.File(tmp_path / "in.h5", "w") as f:
        rewards = rng.standard_normal(n).astype(np.float32)
        rewards[bad_step] = np.nan
        f["rewards"] = rewards
        f["values"] = rng.standard_normal(n).astype(np.float32)
        f["next_values"] = rng.standard_normal(n).astype(np.float32)
        f["terminals"] = np.arange(n) % 17 == 16
        f["timeouts"] = np.zeros(n, bool)
    return tmp_path / "in.h5"


def test_streamed_error_names_the_file_step_as_data(tmp_path: Path) -> None:
    src = _stream_input(tmp_path, 37)
    with pytest.raises(DataError) as ei:
        api.run("gae", str(src), device="cpu", chunk_steps=16, block_steps=8)
    assert (ei.value.column, ei.value.index, ei.value.where) == ("rewards", (37,), str(src))
    assert str(ei.value).startswith(f'{src}: column "rewards" holds NaN at row 37,')


def test_shard_errors_come_back_with_their_fields(tmp_path: Path) -> None:
    whole = table(sum(SIZES), 0.05)
    rewards = whole.column("rewards").to_numpy().copy()
    bad = SIZES[0] + SIZES[1] + 40  # row 40 of the fourth shard
    rewards[bad] = np.nan
    whole = whole.set_column(whole.schema.get_field_index("rewards"), "rewards", [rewards])
    paths = write_shards(tmp_path / "shards", whole)
    with pytest.raises(DataError) as ei:
        api.run("returns", str(tmp_path / "shards"), device="cpu", missing_bootstrap="zero",
                chunk_steps=16, block_steps=8)  # fmt: skip
    err = ei.value
    assert err.column == "rewards"
    assert err.index == (40,)  # the step of the shard
    assert err.where is not None and err.where.startswith(paths[3].name)
    assert str(err).startswith(f"{paths[3].name}: ")
    assert pq.read_table(paths[3]).num_rows == SIZES[3]  # nothing written


def test_inspect_reads_what_is_missing_from_the_fields() -> None:
    err = missing_column_error("values", {}, "x.h5")
    assert (err.column, err.option) == ("values", "--values KEY")
    assert str(err) == 'x.h5 has no column "values"; pass --values KEY (found: no per-step columns)'
    assert api._needs(err) == 'a "values" column (--values KEY)'
    assert api._needs(DataError("x.h5: the ends are unclear", "pass --ends-are truncated")) == (
        "pass --ends-are truncated"
    )
    assert api._needs(DataError("no fix known")) == "no fix known"


@pytest.mark.parametrize(
    ("name", "value", "tail"),
    [
        ("gamma", 1.5, "must be in [0, 1], got 1.5; pass a value like 0.95"),
        ("lam", -0.1, "must be in [0, 1], got -0.1; pass a value like 0.95"),
        ("c_clip", 0.0, "must be > 0, got 0.0; pass a value like 1.0"),
        # rho_clip=inf: no clipping in Python, refused on the command line (test_peer_parity)
        ("rho_clip", -1.0, "must be > 0, got -1.0; pass a value like 1.0"),
        ("gamma", float("nan"), "must be a finite number, got nan; pass a value like 0.95"),
    ],
)
def test_one_wording_for_functions_and_files(name: str, value: float, tail: str) -> None:
    with pytest.raises(ParameterError) as py:
        check_params({name: value})
    with pytest.raises(ParameterError) as cli:
        api.check_params({name: value})
    assert str(py.value) == f"{name} {tail}"
    assert str(cli.value) == f"--{name.replace('_', '-')} {tail}"
    assert py.value.fix == cli.value.fix
    # and the public functions say the same
    fn = rltscan.vtrace if name in ("rho_clip", "c_clip") else rltscan.gae
    args = (np.zeros(4), np.zeros(4))
    extra = (
        {"logp_target": np.zeros(4), "logp_behavior": np.zeros(4)} if fn is rltscan.vtrace else {}
    )
    with pytest.raises(ParameterError) as called:
        fn(*args, **extra, terminated=np.zeros(4), missing_bootstrap="zero", **{name: value})
    assert str(called.value) == str(py.value)


def test_the_table_is_the_declarations() -> None:
    from rltscan.estimators import DECLARATIONS

    declared = {p.name for d in DECLARATIONS.values() for p in d.parameters}
    assert set(parameter_table()) == declared
    assert not hasattr(api, "UNIT_RANGE") and not hasattr(api, "POSITIVE")
