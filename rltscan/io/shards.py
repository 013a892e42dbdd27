"""Sharded Parquet datasets: which files, in which order, and where outputs are staged.

A *sharded dataset* is one flat table split into Parquet files (docs/CONVENTIONS.md §2.4:
"shards are chunks too"): a directory of ``*.parquet`` files (searched
recursively; names starting with ``.`` or ``_`` are skipped, as pyarrow does), a
glob, or a Minari dataset with the Parquet backend (one episode per shard). The
order is the natural sort of the paths relative to the dataset root
(``part-2`` before ``part-10``), or the first value of an index column when the
user names one. Episodes may cross shard boundaries.

:func:`shard_view` gives a shard as a :class:`Source` that also sees the first row
of the next shard as one extra step, so that flags derived from the next row
(episode-start dones, episode-id changes) are right at the shard's last step.

:class:`Staging` keeps every output out of sight until every shard succeeded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import glob
import itertools
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from rltscan.errors import (
    AmbiguousInputError,
    DataError,
    InputFileError,
    OutputRefusedError,
    ParameterError,
)
from rltscan.io import lerobot, parquet
from rltscan.io.atomic import TMP_MARK, deferred_signals, fsync_all, fsync_dir, wait_writebacks
from rltscan.io.columns import ColumnInfo
from rltscan.io.formats import DIRECTORIES
from rltscan.io.source import Source
from rltscan.io.torchrl import storage_kind

SUFFIXES = (".parquet", ".pq")
_GLOB = re.compile(r"[*?\[]")


@dataclass(frozen=True)
class Shard:
    """One file of a sharded dataset. ``rel`` (relative to the root) names its output."""

    path: str
    rel: str
    episode: str | None = None  # Minari: the episode id (the directory name)
    kind: str = "parquet"  # "lerobot": a LeRobot data file (its conventions apply)


@dataclass(frozen=True)
class _Kind:
    """What one kind of sharded dataset is to the shard engines and the staging; each
    field is read through the :class:`Dataset` property of its name, which says what it
    means."""

    format: str
    order: str | None = None  # None: the files' own order (by name, or --order-by)
    episode_shards: bool = False
    final_rows: int = 0
    outputs_in_infos: bool = False
    meta_describes_data: bool = False
    records_size: bool = False


# "parquet" (flat rows, episodes may cross shards) | "minari" (one episode each) |
# "lerobot" (flat rows, whole episodes per file; meta/info.json declares the columns)
DatasetKind = Literal["parquet", "minari", "lerobot"]
_KINDS: dict[DatasetKind, _Kind] = {
    "parquet": _Kind("parquet shards"),
    "minari": _Kind(
        "minari/parquet shards",
        order="episode",
        episode_shards=True,
        final_rows=1,
        outputs_in_infos=True,
        records_size=True,
    ),
    "lerobot": _Kind("lerobot/parquet shards", order="episode (path)", meta_describes_data=True),
}


@dataclass(frozen=True)
class Dataset:
    """The shards of a dataset in data order (the order of its steps).

    What its ``kind`` means to the shard engines and the staging is asked of the
    properties and methods below (one table, ``_KINDS``, answers them); nothing else
    compares the kind.
    """

    kind: DatasetKind
    root: str  # the directory the shards' ``rel`` paths are relative to
    where: str  # the input as the user named it
    shards: tuple[Shard, ...]
    extra_files: tuple[str, ...] = ()  # other files under a directory input (copied by -o)

    @property
    def episode_shards(self) -> bool:
        """Whether every shard is one whole episode, read whole (Minari: one part file per
        episode directory); then no episode, and no carry, crosses a shard edge."""
        return _KINDS[self.kind].episode_shards

    @property
    def final_rows(self) -> int:
        """Rows a shard holds past its last step, where outputs get NaN: Minari's final
        observation (an episode of T steps has T+1 rows); none elsewhere."""
        return _KINDS[self.kind].final_rows

    @property
    def outputs_in_infos(self) -> bool:
        """Whether outputs also go into each shard's ``infos`` struct column, as Minari
        keeps per-step extras (:func:`rltscan.io.minari.with_infos`)."""
        return _KINDS[self.kind].outputs_in_infos

    @property
    def meta_describes_data(self) -> bool:
        """Whether the dataset's ``meta/`` files declare its data files' columns and
        statistics, so a commit brings them up to date with the outputs (LeRobot)."""
        return _KINDS[self.kind].meta_describes_data

    @property
    def records_size(self) -> bool:
        """Whether the dataset's metadata records its size, brought up to date after a
        commit (Minari's ``dataset_size``)."""
        return _KINDS[self.kind].records_size

    @property
    def layout(self) -> str:
        """The layout the report names: ``episodes`` where every shard is one, else
        ``flat`` (one sequence of steps)."""
        return "episodes" if self.episode_shards else "flat"

    @property
    def format(self) -> str:
        """The format the report names (``minari/parquet shards``, ...)."""
        return _KINDS[self.kind].format

    @property
    def sequences(self) -> int:
        """The sequences the report counts: one per shard where every shard is an
        episode, else one (the shards' steps are one sequence)."""
        return len(self.shards) if self.episode_shards else 1

    def order(self, order_by: str | None) -> str:
        """The order the report says the shards run in: by ``--order-by`` where it was
        given (``order_by``; :func:`discover` sorts by it, and refuses it for Minari),
        else the episodes' for Minari and LeRobot (its data files' paths), else by file
        name."""
        if order_by:
            return "--order-by"
        return _KINDS[self.kind].order or "file-name"

    def steps(self, shard: Shard) -> int:
        """The steps of ``shard``: its rows (from its footer) less :attr:`final_rows`."""
        return int(open_shard(shard).steps or 0) - self.final_rows


def is_sharded(input: str, engine: str | None) -> bool:
    """Whether ``input`` is a sharded dataset for the shard engines.

    Directories of Parquet files and globs always are; a Minari dataset is one only
    when an engine is asked for (otherwise it is read whole, as before).
    """
    if input == "-":
        return False
    path = Path(input)
    if not path.exists():
        return bool(_GLOB.search(input))
    if not path.is_dir():
        return False
    if _minari_format(path) is not None:
        return engine is not None
    return storage_kind(path) is None  # a TorchRL storage is read whole


def _minari_format(path: Path) -> str | None:
    if (path / "data" / "metadata.json").is_file() or (path / "data" / "main_data.hdf5").is_file():
        from rltscan.io.formats import sniff_path

        return sniff_path(path).backend or "hdf5"
    return None


def natural_key(rel: str) -> list[tuple[int, int, str]]:
    """Sort key: digit runs compare as numbers (``part-2`` before ``part-10``)."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", rel) if t]


def _hidden(rel: str) -> bool:
    return any(part.startswith((".", "_")) for part in Path(rel).parts)


def _carried(root: Path, shards: set[str]) -> list[str]:
    """The files under ``root`` that ``-o`` copies: neither a shard (``shards``: their
    POSIX paths relative to ``root``) nor hidden, sorted."""
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file()
        and p.relative_to(root).as_posix() not in shards
        and not _hidden(str(p.relative_to(root)))
    )


def discover(input: str, *, order_by: str | None = None) -> Dataset:
    """The shards of a directory, glob or Minari Parquet dataset, in data order."""
    path = Path(input)
    if path.is_dir() and lerobot.is_dataset(path):
        return _lerobot(path, input, order_by)
    if path.is_dir():
        backend = _minari_format(path)
        if backend is not None:
            if order_by is not None:
                raise ParameterError(
                    f"{input} is a Minari dataset (one episode per shard, in episode order); "
                    "drop --order-by"
                )
            return _minari(path, backend, input)
        found = [
            p
            for p in path.rglob("*")
            if p.suffix.lower() in SUFFIXES
            and p.is_file()
            and not _hidden(str(p.relative_to(path)))
        ]
        if not found:
            raise InputFileError(f"{input} is a directory that {DIRECTORIES}")
        root = path.absolute()
        extra = _carried(path, {p.relative_to(path).as_posix() for p in found})
    else:
        found = [Path(p) for p in glob.glob(input, recursive=True) if Path(p).is_file()]
        if not found:
            raise InputFileError(f"no file matches {input}; check the path or the pattern")
        parents = [str(p.absolute().parent) for p in found]
        root = Path(os.path.commonpath(parents))
        extra = []
    shards = [Shard(str(p.absolute()), p.absolute().relative_to(root).as_posix()) for p in found]
    shards.sort(key=lambda s: (natural_key(s.rel), s.rel))
    if order_by is not None:
        shards = _ordered_by(shards, order_by)
    else:
        _refuse_hive_partitions(shards, input)
    return Dataset("parquet", str(root), input, tuple(shards), tuple(extra))


_HIVE = re.compile(r"^([^=]+)=(.*)$")


def _refuse_hive_partitions(shards: list[Shard], input: str) -> None:
    """Hive partitions (``env=0/``, ``env=1/``: polars ``partition_by``, pandas
    ``partition_cols``) split a table by a column's value, which the files no longer
    hold: the rows of ``env=1`` do not go on from the last row of ``env=0``. Read as
    one table, a shard boundary is not a cut and the last step of one partition would
    bootstrap from the next partition's first value; whether the partitions are one
    stream cannot be read from the files, so a change of value between shards stops."""

    def keys(rel: str) -> dict[str, str]:
        parts = (_HIVE.match(part) for part in rel.split("/")[:-1])
        return {m.group(1): m.group(2) for m in parts if m}

    for a, b in itertools.pairwise(shards):
        ka, kb = keys(a.rel), keys(b.rel)
        changed = sorted(k for k in ka.keys() | kb.keys() if ka.get(k) != kb.get(k))
        if changed:
            k = changed[0]
            raise AmbiguousInputError(
                f"{input}: {a.rel} and {b.rel} are hive partitions of different "
                f"{k} ({k}={ka.get(k)}, {k}={kb.get(k)}): the steps of one need not go on "
                "in the next",
                f"run each partition directory on its own (rltscan ... {input}/{k}="
                f"{ka.get(k)}), or pass --order-by COLUMN if the partitions are one "
                "stream of steps in that column's order",
            )


def _minari(root: Path, backend: str, input: str) -> Dataset:
    if backend != "parquet":
        raise ParameterError(
            f"{input} is a Minari dataset with the {backend} backend; the shard engines read "
            "Parquet shards, so drop --engine (it runs on one machine)"
        )
    from rltscan.io.minari import episode_dirs

    shards = []
    for d in episode_dirs(root):
        parts = sorted(d.glob("*.parquet"))
        if len(parts) != 1:
            raise InputFileError(
                f"{d} has {len(parts)} .parquet files; rltscan reads one part per episode"
            )
        p = parts[0].absolute()
        shards.append(Shard(str(p), p.relative_to(root.absolute()).as_posix(), episode=d.name))
    if not shards:
        raise InputFileError(f"{input} has no episode directories under data/; nothing to read")
    extra = _carried(root, {s.rel for s in shards})
    return Dataset("minari", str(root.absolute()), input, tuple(shards), tuple(extra))


def _lerobot(root: Path, input: str, order_by: str | None) -> Dataset:
    """A LeRobot dataset: its ``data/<chunk>/<file>.parquet`` files in path order (episode
    order); ``meta/``, ``videos/`` and the rest are carried by ``-o``."""
    lerobot.read_info(root)  # a version rltscan can keep loadable, or one line
    found = [p for p in lerobot.data_files(root) if not _hidden(str(p.relative_to(root)))]
    top = root.absolute()
    shards = [
        Shard(str(p.absolute()), p.absolute().relative_to(top).as_posix(), kind="lerobot")
        for p in found
    ]
    shards.sort(key=lambda s: (natural_key(s.rel), s.rel))
    if order_by is not None:
        shards = _ordered_by(shards, order_by)
    extra = _carried(root, {s.rel for s in shards})
    return Dataset("lerobot", str(top), input, tuple(shards), tuple(extra))


def _ordered_by(shards: list[Shard], column: str) -> list[Shard]:
    """Shards sorted by the first value of ``column`` (empty shards go last).

    In that order, each shard's ``column`` must go on from where the one before ended
    (its last value no greater than the next shard's first; within a shard, its first no
    greater than its last): shards that overlap in that column's order (the hive
    partitions of two envs, each with its own clock) are not one stream of steps, and
    read as one they ran one env's open episode into the next env's with exit 0.
    Checked at the shards' edges, two rows each; the rows within a shard are read in
    file order."""
    keyed = []
    for shard in shards:
        src = open_shard(shard)
        if column not in src.columns:
            raise DataError(
                f'{shard.rel} has no column "{column}" (given by --order-by); '
                "pass a column every shard has"
            )
        n = int(src.steps or 0)
        edges = (_value(src, column, 0), _value(src, column, n - 1)) if n else (None, None)
        if n and not edges[0] <= edges[1]:
            raise DataError(
                f'{shard.rel}: "{column}" (given by --order-by) starts at {edges[0]!r} and '
                f"ends at {edges[1]!r}, so the shard's rows are not in that column's order",
                "order the shards by a column that grows along the steps, or run each shard "
                "on its own",
            )
        keyed.append(((1, 0) if n == 0 else (0, edges[0]), edges, shard))
    keyed.sort(key=lambda ks: (ks[0], natural_key(ks[2].rel)))
    full = [(edges, shard) for key, edges, shard in keyed if key[0] == 0]
    for (before, a), (after, b) in itertools.pairwise(full):
        if not before[1] <= after[0]:
            raise DataError(
                f"--order-by {column}: {a.rel} runs to {before[1]!r} but {b.rel}, next in that "
                f"order, starts at {after[0]!r}: the shards overlap in that column, so they "
                "are not one stream of steps",
                "run each shard (each partition directory) on its own, or order the shards "
                "by a column whose values go on from one shard to the next",
            )
    return [shard for _, _, shard in keyed]


def _value(src: Source, column: str, row: int) -> Any:
    """Row ``row`` of ``column``, as a Python value."""
    assert src.read_range is not None  # a shard is a Parquet file
    return src.read_range(column, row, row + 1)[0].item()


# --------------------------------------------------------------------------- reading


def open_shard(shard: Shard) -> Source:
    """A shard as a flat Parquet source (its rows are steps); a bad file is an InputFileError.
    A LeRobot data file carries LeRobot's conventions (:data:`rltscan.io.lerobot.CONVENTIONS`)."""
    src = parquet.open_parquet(Path(shard.path), display=shard.rel)
    if shard.kind == "lerobot":
        src.conventions = dict(lerobot.CONVENTIONS)
    return src


def shard_view(src: Source, nxt: Source | None) -> Source:
    """``src`` plus the first row of ``nxt`` as one look-ahead step (``steps + 1``).

    The streaming reader asks for one step past each window to derive flags that
    depend on the next row; past the shard's last row that step is the next shard's
    first. The estimator never sees it: windows stop at the shard's own last step.
    """
    if nxt is None:
        return src
    n = int(src.steps or 0)
    own = src.read_range
    assert own is not None and nxt.read_range is not None
    ahead = nxt.read_range
    columns = {k: ColumnInfo(k, (n + 1,), v.dtype) for k, v in src.columns.items()}

    def read_range(name: str, start: int, stop: int) -> np.ndarray:
        parts = [own(name, start, min(stop, n))] if start < n else []
        if stop > n:
            if name not in nxt.columns:
                raise DataError(
                    f'{nxt.where} has no column "{name}" although {src.where} has it; '
                    "every shard needs the same columns"
                )
            tail = ahead(name, 0, 1)
            if parts and tail.dtype != parts[0].dtype and tail.dtype.kind == parts[0].dtype.kind:
                tail = tail.astype(parts[0].dtype)  # a float32 shard next to a float64 one
            parts.append(tail)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    return dataclasses.replace(src, columns=columns, read_range=read_range, steps=n + 1)


def episode_source(shard: Shard) -> Source:
    """A Minari Parquet episode file as a one-episode ``episodes`` source (T+1 rows)."""
    src = open_shard(shard)

    def read(name: str) -> list[np.ndarray]:
        return [np.asarray(src.read(name))]

    return Source(
        format="minari",
        layout="episodes",
        where=shard.rel,
        path=Path(shard.path),
        columns=src.columns,
        read=read,
        episode_keys=[shard.episode or Path(shard.path).parent.name],
        padded=True,
        backend="parquet",
        raw=src.raw,
    )


def write_empty(
    shard: Shard,
    dst: Path,
    *,
    outputs: dict[str, np.dtype],
    metadata: dict,
    overwrite: bool,
) -> int:
    """An empty shard rewritten with empty output columns (so every shard has them),
    staged at ``dst`` (made durable by :meth:`Staging.commit`, with the others)."""
    src = open_shard(shard)
    empty = {name: np.zeros(0, dtype) for name, dtype in outputs.items()}
    added = parquet.Additions(empty, metadata, overwrite, shard.rel)
    return parquet.write_parquet(src.raw, dst, added, atomic=False)


# --------------------------------------------------------------------------- staging


class Staging:
    """Outputs of every shard written under a hidden directory, moved into place at the end.

    In place (``out_dir=None``): ``<root>/.rltscan-stage-<token>/<rel>``; ``commit``
    replaces each original with ``os.replace`` once every shard is staged, so each
    shard is replaced whole. With ``-o OUT_DIR``: ``.<OUT_DIR>.rltscan-stage-<token>``
    next to it, renamed to ``OUT_DIR`` at the end (after the directory input's other
    files are copied in). ``abort`` removes the staging directory; a killed job can
    leave it behind (hidden, ignored by shard discovery) but never a partial output.
    Staged files are written without fsync; ``commit`` syncs them all in one batch
    before the journal or the rename (docs/SHARDS.md "Durability").
    """

    def __init__(self, dataset: Dataset, out_dir: str | None, *, overwrite: bool) -> None:
        self.dataset = dataset
        token = secrets.token_hex(4)
        self.final = self.check(dataset, out_dir, overwrite=overwrite)
        self.trash: Path | None = None  # -o --overwrite: the OUT_DIR being replaced
        self.notes: list[str] = []  # for the report: the dataset metadata brought up to date
        if self.final is None:
            self.dir = Path(dataset.root) / f"{TMP_MARK}stage-{token}"
        else:
            self.dir = self.final.parent / f".{self.final.name}{TMP_MARK}stage-{token}"
        self.dir.mkdir()

    @staticmethod
    def check(dataset: Dataset, out_dir: str | None, *, overwrite: bool) -> Path | None:
        """The final ``-o`` directory (None in place), refused where it cannot be one."""
        if out_dir is None:
            from rltscan.io.writeback import refuse_summarized

            refuse_summarized(Path(dataset.root))  # a _metadata file that lists the shards
            return None
        final = Path(out_dir).absolute()
        root = Path(dataset.root)
        if final == root or root in final.parents:
            raise ParameterError(
                f"-o {out_dir} is inside the input dataset {dataset.where}; "
                "pick a directory outside it, or drop -o to write in place"
            )
        if any(final == Path(s.path) or final in Path(s.path).parents for s in dataset.shards):
            raise ParameterError(f"-o {out_dir} holds input shards; pick a new directory")
        if final.exists() and not final.is_dir():
            raise OutputRefusedError(f"{out_dir} exists and is not a directory; pick another -o")
        if final.exists() and not overwrite:
            raise OutputRefusedError(f"{out_dir} already exists; pass --overwrite to replace it")
        if not final.parent.is_dir():
            raise OutputRefusedError(
                f"{final.parent} is not a directory; create it or pick another -o"
            )
        return final

    def path(self, shard: Shard) -> Path:
        return self.dir / shard.rel

    def commit(self) -> None:
        """Move every staged shard to its final name (every shard must be staged).

        In place, each original is first hard-linked into the staging directory, so
        the rename only drops a name: freeing the old file's blocks (about 20 ms per
        100 MB on a local disk) waits for :meth:`cleanup`, outside the window in which
        some shards are new and others old.
        """
        missing = [s.rel for s in self.dataset.shards if not self.path(s).is_file()]
        assert not missing, f"unstaged shards: {missing[:3]}"  # the engine staged them all
        # the shard tasks write their staged files without fsync: they are made durable
        # here, in one batch, before the journal (in place) or the rename (-o OUT_DIR)
        wait_writebacks()  # (the local engine's kicks; they only ever shorten what follows)
        fsync_all([self.path(s) for s in self.dataset.shards])
        for shard in self.dataset.shards:  # temp files are 0600; keep the shard's own mode
            with contextlib.suppress(OSError):
                shutil.copymode(shard.path, self.path(shard))
        if self.final is None:
            from rltscan.io import atomic

            root = Path(self.dataset.root)
            for shard in self.dataset.shards:  # the write-back rules (links, devices...)
                atomic.replaceable(Path(shard.path))
            for shard in self.dataset.shards:
                keep = self.dir / ".old" / shard.rel
                keep.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):  # no hard links here: replace frees at once
                    os.link(shard.path, keep)
            # The journal makes the renames one step: once it is on disk the commit is
            # decided, and a run killed among the renames is completed by the next
            # rltscan start on this dataset (recover); without it, nothing was changed.
            # (a symlinked shard is written through: its target is replaced, the link stays)
            targets = [atomic.real(Path(s.path)) for s in self.dataset.shards]
            pairs = zip(self.dataset.shards, targets, strict=True)
            moves = [[s.rel, os.path.relpath(t, root)] for s, t in pairs]
            metadata = self._stage_metadata(root)  # LeRobot's meta/info.json, same journal
            write_journal(
                self.dir, moves + [[rel, os.path.relpath(t, root)] for rel, t in metadata]
            )
            with deferred_signals():
                for shard, target in zip(self.dataset.shards, targets, strict=True):
                    os.replace(self.path(shard), target)
                    atomic.mark_committed(Path(shard.path))  # for the interrupt message
                for rel, target in metadata:
                    os.replace(self.dir / rel, target)
                    atomic.mark_committed(root / rel)
            for parent in {Path(s.path).parent for s in self.dataset.shards} | {
                t.parent for _, t in metadata
            }:
                fsync_dir(parent)
            end_journal(self.dir)
            self._after(root)
            return
        root = Path(self.dataset.root)
        for rel in self.dataset.extra_files:
            dst = self.dir / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / rel, dst)
        for rel, target in self._stage_metadata(self.dir):  # the copy's own metadata
            os.replace(self.dir / rel, target)
        self._after(self.dir)
        with deferred_signals():
            if self.final.exists():
                self.trash = self.dir.with_name(self.dir.name + "-old")
                os.rename(self.final, self.trash)
            os.rename(self.dir, self.final)
        fsync_dir(self.final.parent)

    def _stage_metadata(self, root: Path) -> list[tuple[str, Path]]:
        """LeRobot: the ``meta/`` files of the dataset at ``root`` brought up to date
        with the staged data files (``meta/info.json`` declares the outputs, else
        lerobot cannot load the data files; the stats files get their entries:
        :func:`rltscan.io.lerobot.metadata_updates`), each written under the staging
        directory. Returns ``(rel, file it replaces)`` pairs; nothing when none changes."""
        if not self.dataset.meta_describes_data:
            return []
        from rltscan.io import atomic

        written = [self.path(s) for s in self.dataset.shards]
        pairs = []
        updates = lerobot.metadata_updates(root, written)
        self.notes = [lerobot.updates_note(updates)] if updates else []
        for rel, content in updates.items():
            original = root / rel
            target = atomic.real(atomic.replaceable(original))
            staged = self.dir / f"{rel}{TMP_MARK}new"
            staged.parent.mkdir(parents=True, exist_ok=True)
            with open(staged, "wb") as f:
                f.write(content)
                f.flush()
                os.fsync(f.fileno())
            with contextlib.suppress(OSError):
                shutil.copymode(original, staged)
            pairs.append((staged.relative_to(self.dir).as_posix(), target))
        return pairs

    def _after(self, root: Path) -> None:
        """What the dataset's own metadata says about its files, brought up to date
        (Minari's ``dataset_size``)."""
        if self.dataset.records_size:
            from rltscan.io.minari import update_size

            update_size(root)

    def cleanup(self) -> None:
        """After :meth:`commit`: remove what the outputs replaced (frees the space)."""
        if self.final is None:
            shutil.rmtree(self.dir, ignore_errors=True)
        elif self.trash is not None:
            shutil.rmtree(self.trash, ignore_errors=True)

    def abort(self) -> None:
        wait_writebacks()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.dir)


# --------------------------------------------------------------------------- commit journal

JOURNAL = "JOURNAL"
STAGE_GLOB = f"{TMP_MARK}stage-*"


def write_journal(stage: Path, moves: list[list[str]]) -> None:
    """The shards to move, ``[staged name, target]`` relative to the dataset root and
    to the staging directory, durably on disk."""
    tmp = stage / f"{JOURNAL}.tmp"
    with open(tmp, "w") as f:
        json.dump({"version": 1, "moves": moves}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, stage / JOURNAL)
    fsync_dir(stage)


def end_journal(stage: Path) -> None:
    with contextlib.suppress(OSError):
        (stage / JOURNAL).unlink()
    fsync_dir(stage)


def recover(root: Path) -> list[str]:
    """Finish or roll back in-place commits of ``root`` that a kill interrupted.

    A staging directory with a journal was killed among its renames: the shards
    not yet moved are moved now (roll forward: every staged shard was complete and
    on disk before the journal was written). One without a journal never started
    its renames: it is removed (nothing in the dataset was changed). Call it with
    the dataset's lock held (:func:`rltscan.io.writeback.guard`), so that no running
    job's staging directory is touched. Returns the shards moved.
    """
    moved: list[str] = []
    root = Path(root)
    for stage in sorted(root.glob(STAGE_GLOB)):
        if not stage.is_dir():
            continue
        journal = stage / JOURNAL
        if journal.is_file():
            try:
                moves = json.loads(journal.read_text())["moves"]
            except (OSError, ValueError, KeyError, TypeError):
                raise InputFileError(
                    f"{journal} (an interrupted rltscan commit) cannot be read; move the "
                    f"staged shards in {stage} by hand or delete it to keep the old data"
                ) from None
            with deferred_signals():
                for rel, target in moves:
                    staged = stage / rel
                    if staged.is_file():
                        os.replace(staged, root / target)
                        moved.append(target)
            for _, target in moves:
                fsync_dir((root / target).parent)
            end_journal(stage)
        shutil.rmtree(stage, ignore_errors=True)
    return moved


def glob_root(pattern: str) -> Path | None:
    """The directory a glob's shards are relative to (as :func:`discover` computes it)."""
    found = [Path(p) for p in glob.glob(pattern, recursive=True) if Path(p).is_file()]
    if not found:
        return None
    return Path(os.path.commonpath([str(p.absolute().parent) for p in found]))
