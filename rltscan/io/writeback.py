"""Where results go: into the input (default), a new file (``-o PATH``) or stdout (``-o -``).

What depends on the format is asked of its registry row (:mod:`rltscan.io.formats`):
which suffix and ``--to`` word name a format, what already exists, who writes back.

Every path that replaces a file goes through ``atomic.atomic_path``: the target
is either the old file or the complete new one.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from rltscan.errors import InputFileError, OutputRefusedError, ParameterError
from rltscan.io import atomic, formats
from rltscan.io.layout import Prepared
from rltscan.io.source import Source


@dataclass(frozen=True)
class Target:
    """Where outputs will be written: ``kind`` is "inplace", "file" or "stdout"."""

    kind: str
    path: Path | None
    format: str  # a word of a registry row (rltscan.io.formats)

    def describe(self) -> str:
        if self.kind == "stdout":
            return f"stdout ({self.format})"
        return f"{self.path} ({self.format})"


def plan_target(source: Source, output: str | None, to: str | None) -> Target:
    """Decide the target from ``-o`` and ``--to``; refuse conversions we cannot do.

    Args:
        source: the opened input.
        output: ``-o`` (None: in place; ``-``: stdout).
        to: ``--to`` (a word of :data:`rltscan.io.formats.TO`), or None.

    Returns:
        Where and in which format word the outputs go.
    """
    if output == "-" or (output is None and source.path is None):
        return Target("stdout", None, formats.to_word(to, stdout=True))
    if output is None:
        assert source.path is not None
        if to is not None:
            raise ParameterError(
                f"--to {to} picks the format of -o, and written back in place {source.path} "
                f"stays {source.format}; pass -o PATH to convert, or drop --to"
            )
        _refuse_saved_shard(source.path)
        refuse_summarized(source.path)
        return Target("inplace", source.path, source.format)
    path = Path(output)
    if source.path is not None and _same_file(path, source.path):
        _refuse_saved_shard(source.path)  # -o naming the input writes it in place
        refuse_summarized(source.path)
    if path.is_dir():
        raise OutputRefusedError(f"{path} is a directory; pass a file path to -o")
    if to is not None:
        fmt = formats.to_word(to, stdout=False)
    elif path.suffix.lower() in formats.SUFFIXES:
        fmt = formats.SUFFIXES[path.suffix.lower()]
    else:
        shown = f'suffix "{path.suffix}"' if path.suffix else "no suffix"
        raise ParameterError(
            f"-o {path} has {shown}, so its format is unknown; use one of "
            f"{', '.join(formats.SUFFIXES)} (or --to {'|'.join(formats.TO)})"
        )
    formats.named(source.format).check_output(source, fmt, path)
    return Target("file", path, fmt)


def _refuse_saved_shard(path: Path) -> None:
    """Refuse to write into a shard of a Hugging Face dataset saved with ``save_to_disk``
    (its ``state.json`` beside it lists the file): the ``dataset_info.json`` beside it
    declares the shards' columns, and ``load_from_disk`` refuses every shard whose
    columns differ, so new columns in one file would make the whole dataset unloadable.
    """
    try:
        state = json.loads((path.parent / "state.json").read_text())
        listed = {entry["filename"] for entry in state["_data_files"]}
    except (OSError, ValueError, KeyError, TypeError):
        return
    if path.name in listed:
        raise OutputRefusedError(
            f"{path} is a shard of a Hugging Face dataset saved with save_to_disk, whose "
            "dataset_info.json lists its columns (load_from_disk would refuse new ones); "
            "pass -o PATH to write a new file"
        )


def refuse_summarized(path: Path) -> None:
    """Refuse to rewrite a Parquet file (or the files of a dataset directory ``path``)
    that a ``_metadata`` summary file lists (pyarrow's ``write_metadata``, Dask, Spark):
    it holds every row group's column offsets, which a rewrite moves, so readers that
    open the dataset through it (``pyarrow.dataset.parquet_dataset``) would read
    garbage. Looked for in the file's directory and those above it."""
    path = Path(os.path.abspath(path))
    here = path if path.is_dir() else path.parent
    for folder in (here, *here.parents):
        summary = folder / "_metadata"
        if not summary.is_file():
            continue
        import pyarrow.parquet as pq

        try:
            meta = pq.read_metadata(summary)
            listed = {meta.row_group(i).column(0).file_path for i in range(meta.num_row_groups)}
        except (OSError, ValueError, IndexError):
            return
        mine = path.relative_to(folder).as_posix()
        if any(mine == "." or p == mine or p.startswith(f"{mine}/") for p in listed):
            raise OutputRefusedError(
                f"{summary} lists the row groups of {path} (a Parquet summary whose offsets "
                "a rewrite would make wrong); pass -o PATH, or remove it and write it again "
                "after the run"
            )
        return


def streamable(source: Source, target: Target) -> bool:
    """Whether the streaming engine handles this input/output pair: the input read by
    ranges and written back into its own format by windows (HDF5 arrays, a Parquet file).

    Args:
        source: the opened input.
        target: where the outputs go.

    Returns:
        True where the streaming engine runs it.
    """
    if source.read_range is None or not source.steps or target.kind == "stdout":
        return False  # (an empty file goes the whole-file way, which names the problem)
    same = target.kind == "inplace" or target.format == source.format
    return same and formats.named(source.format).streams


def existing(source: Source, target: Target, names: list[str]) -> list[str]:
    """Output names that already exist at the target (empty when nothing clashes).

    A name that is not a valid output name (empty, a ``/``, an HDF5 group) is a
    ParameterError (exit 2) whatever else is there.

    Args:
        source: the opened input.
        target: where the outputs go.
        names: the output names.

    Returns:
        The names (or the ``-o`` path) that clash.
    """
    for name in names:
        check_name(name)
    if target.kind == "stdout":
        return [n for n in names if n in source.columns]
    if target.kind == "file":
        assert target.path is not None
        return [str(target.path)] if target.path.exists() else []
    return formats.named(source.format).existing(source, names)


def hdf5_attrs(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """Flatten the provenance record into HDF5 attributes (docs/CONVENTIONS.md §6):
    every key of the record (mappings and lists as JSON), plus each parameter as its own
    attribute."""
    attrs: dict[str, Any] = {}
    for key, value in metadata.items():
        if isinstance(value, (dict, list, tuple)):
            if value or key not in ("settings",):
                attrs[key] = json.dumps(value, sort_keys=True)
        elif value is not None:
            attrs[key] = value
    for key, value in metadata["params"].items():
        if value is not None and key not in attrs:
            attrs[key] = value
    return attrs


def parquet_entry(names: list[str], metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The ``rltscan`` key-value metadata entry for these outputs."""
    record = {k: v for k, v in metadata.items() if k != "rltscan_version"}
    return {
        "rltscan_version": metadata["rltscan_version"],
        "outputs": {name: record for name in names},
    }


def write(
    source: Source,
    prepared: Prepared,
    target: Target,
    outputs: Mapping[str, np.ndarray],
    *,
    metadata: Mapping[str, Any],
    overwrite: bool,
    stdout: BinaryIO | None = None,
) -> int:
    """Write ``outputs`` (shaped like the estimator inputs) to ``target``: the input's
    registry row writes what it writes itself (in place, HDF5 copies), anything else goes
    through a table (:func:`_write_table`).

    Args:
        source: the opened input.
        prepared: the estimator inputs (template column, episode splits).
        target: from :func:`plan_target`.
        outputs: output name -> array.
        metadata: the run's provenance record.
        overwrite: ``--overwrite``.
        stdout: the stream a ``stdout`` target writes to.

    Returns:
        The bytes of output data written.
    """
    names = list(outputs)
    if target.kind == "stdout":
        assert stdout is not None
        writing = formats.Writing(source, outputs, provenance(names, metadata), overwrite)
        return _write_table(writing, stdout, target.format)
    assert target.path is not None
    if target.kind == "file" and target.path.exists():
        if not overwrite:
            raise OutputRefusedError(
                f"{target.path} already exists; pass --overwrite to replace it"
            )
        if source.path is not None and _same_file(target.path, source.path):
            target = Target("inplace", source.path, source.format)
    writing = formats.Writing(source, outputs, provenance(names, metadata), overwrite)
    written = formats.named(source.format).write_back(writing, prepared, target)
    if written is not None:
        return written
    return _write_table(writing, target.path, target.format)


def provenance(names: list[str], metadata: Mapping[str, Any]) -> formats.Record:
    """The provenance record as a table's metadata entry and as HDF5 attributes.

    Args:
        names: the output names.
        metadata: the run's provenance record.

    Returns:
        What a format row's writer or sink takes.
    """
    return formats.Record(metadata, parquet_entry(names, metadata), hdf5_attrs(metadata))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_name(name: str, *, option: str = "--prefix") -> None:
    """An output name: not empty, no ``/`` (it would leave the group), no NUL."""
    if not name or "/" in name or "\x00" in name or name in (".", ".."):
        raise ParameterError(
            f'output name "{name}" is not a valid dataset/column name (empty, ".", ".." or '
            f'containing "/"); pass {option} without "/"'
        )


_GLOB_CHARS = re.compile(r"[*?\[]")


@contextlib.contextmanager
def guard(
    input: str,
    output: str | None,
    *,
    overwrite: bool = False,
    dry_run: bool = False,
    prefix: str = "",
    break_links: bool = False,
) -> Iterator[None]:
    """The write-back rules, checked before any work (README "Write-back rules").

    * ``--prefix`` may not put a ``/`` in an output name (exit 2);
    * an unreadable input is exit 3; an output that cannot be written (a device,
      FIFO or socket, a hard-linked file without ``--break-links``, a read-only
      file, a directory without write permission) is exit 5;
    * in place, the input is locked for the whole run: a second rltscan writing
      back into the same file (or Minari/sharded dataset directory) waits until
      the first has committed, then reads its result;
    * the input's identity (device, inode, size, mtime) is registered: copies are
      made from that very file and the final rename checks it is still there
      (:func:`rltscan.io.atomic.check_unchanged`);
    * in a sharded dataset directory, a commit that a kill interrupted is
      completed first (:func:`rltscan.io.shards.recover`).
    """
    if prefix and ("/" in prefix or "\x00" in prefix):
        raise ParameterError(
            f'--prefix "{prefix}" contains "/"; output names may not contain "/" '
            "(they would be written outside the group), pass a prefix without it"
        )
    run = atomic.begin_run(break_links=break_links)
    held: atomic.Lock | None = None
    try:
        if input != "-" and not dry_run:
            held = _preflight(input, output, overwrite=overwrite)
        yield
    finally:
        if held is not None:
            held.release()
        run.finish()


def guarded(run: Callable[..., Any]) -> Callable[..., Any]:
    """``run`` (:func:`rltscan.api.run`) inside :func:`guard`, from its own arguments."""
    signature = inspect.signature(run)

    @functools.wraps(run)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        with guard(
            a["input"],
            a["output"],
            overwrite=a["overwrite"],
            dry_run=a["dry_run"],
            prefix=a["prefix"],
            break_links=a["break_links"],
        ):
            return run(*args, **kwargs)

    return wrapper


def _preflight(input: str, output: str | None, *, overwrite: bool) -> atomic.Lock | None:
    path = Path(input)
    if not path.exists():
        if _GLOB_CHARS.search(input) and output is None:
            from rltscan.io import shards as io_shards

            root = io_shards.glob_root(input)
            if root is not None:
                return _lock_dir(root, input)
        return None  # open_input says it is missing
    try:
        st = os.stat(path)
    except OSError as err:
        raise InputFileError(f"cannot read {input} ({err.strerror}); check the path") from None
    readable = os.access(path, os.R_OK | (os.X_OK if stat.S_ISDIR(st.st_mode) else 0))
    if not readable:
        raise InputFileError(
            f"cannot read {input} (permission denied); make it readable (chmod u+r) or run as "
            "its owner"
        )
    in_place = output is None or (output != "-" and _same_file(Path(output), path))
    if not in_place:
        if stat.S_ISREG(st.st_mode):
            atomic.expect(path, atomic.identity(st))
        if output != "-" and not stat.S_ISDIR(st.st_mode):
            _check_output(Path(output), overwrite=overwrite)
        return None
    if stat.S_ISDIR(st.st_mode):
        return _lock_dir(path, input)
    if not stat.S_ISREG(st.st_mode):
        raise OutputRefusedError(
            f"{input} is {atomic.kind_of(st.st_mode)} and cannot be written back in place; "
            "pass -o PATH (or -o - for stdout)"
        )
    atomic.replaceable(path, shown=path)
    return atomic.lock(path)


def _check_output(out: Path, *, overwrite: bool) -> None:
    """``-o PATH`` refusals that need no reading: special files, and what --overwrite
    would break."""
    try:
        st = os.stat(out)
    except OSError:
        st = None
    if st is not None and stat.S_ISDIR(st.st_mode):
        return  # plan_target names that problem
    if st is not None and not stat.S_ISREG(st.st_mode):
        atomic.replaceable(out, shown=out)  # raises: never replaced
    if st is None or overwrite:
        atomic.replaceable(out, shown=out)


def _lock_dir(root: Path, input: str) -> atomic.Lock:
    if not os.access(root, os.W_OK | os.X_OK):
        raise OutputRefusedError(
            f"cannot create files in {input} (permission denied); make it writable or pass "
            "-o PATH elsewhere"
        )
    held = atomic.lock(root)
    from rltscan.io import shards as io_shards

    io_shards.recover(root)
    return held


def _write_table(writing: formats.Writing, sink: Path | BinaryIO, fmt: str) -> int:
    """The input as a table plus the outputs, in ``fmt`` (Parquet, Arrow, or HDF5 from a
    table): the input's row gives the table, the target's row writes it. Conversions
    carry every column or refuse by name (:mod:`rltscan.io.convert`).

    Args:
        writing: the outputs (shaped like the estimator inputs), from the opened input.
        sink: a new file's path, or stdout.
        fmt: the target's format word.

    Returns:
        The bytes of output data written.
    """
    row, out = formats.named(writing.source.format), formats.named(fmt)
    tabled = row.to_table(writing.source, same=row is out)
    return out.from_table(tabled, sink, fmt, writing)
