"""Minari dataset directories (docs/CONVENTIONS.md §7.2) as a registry row, composed on
the HDF5, Parquet and Arrow IPC rows: ``data/metadata.json`` plus either
``data/main_data.hdf5`` (episode groups, read and written by the HDF5 row's code) or
``data/<id>/*.parquet|*.arrow`` (one part file per episode, read and written through the
Parquet or Arrow row as a :class:`~rltscan.io.formats.protocol.TableFile`).

Owns: detecting a dataset and its ``data_format`` (the backend), Minari's layout rules
on top of its backend (one episode per group or directory; the columnar backends' ``T+1``
padding row dropped on read and written as NaN; outputs also written as infos), which
output names exist, writing back into every episode, and the dataset as one table
(:func:`table_of_columnar`). What the engines share of it (the infos struct, the
``dataset_size`` update, the episode directories) is :mod:`rltscan.io.minari`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from rltscan.errors import DataError, InputFileError
from rltscan.io.formats.protocol import Format, OpenOptions, Sniffed, Tabled, TableFile, Writing

if TYPE_CHECKING:
    import numpy as np

    from rltscan.io.layout import Prepared
    from rltscan.io.source import Layout, Source

WORD = "minari"
HDF5 = "hdf5"  # Minari's data_format words, each the name of the rltscan row it composes on
DATA_FORMATS = (HDF5, "parquet", "arrow")
# Minari's Arrow/Parquet backends pad every column of an episode to T+1 rows; the last
# row is real only for the observations and infos (and for values of V(s_0..s_T)).
REAL_LAST_ROW = ("observations", "infos", "values", "value", "vf_preds", "state_value")


def backend_of(root: Path) -> str:
    """The ``data_format`` of the Minari dataset at ``root`` (``"hdf5"`` when absent).

    Args:
        root: the dataset directory (it has ``data/metadata.json``).

    Returns:
        ``"hdf5"``, ``"parquet"`` or ``"arrow"``.

    Raises:
        InputFileError: the metadata is not a readable JSON object, or names another format.
    """
    meta = root / "data" / "metadata.json"
    try:
        record = json.loads(meta.read_bytes().decode("utf-8"))
    except (OSError, ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise InputFileError(
            f"{meta} is not readable JSON ({err.__class__.__name__}); "
            "repair the Minari metadata or pass the main_data.hdf5 file"
        ) from None
    if not isinstance(record, dict):
        raise InputFileError(
            f"{meta} holds a JSON {type(record).__name__}, not an object; "
            "repair the Minari metadata or pass the main_data.hdf5 file"
        )
    data_format = record.get("data_format", HDF5)
    if not isinstance(data_format, str) or data_format not in DATA_FORMATS:
        shown = json.dumps(data_format)[:40]
        raise InputFileError(
            f'{meta} has data_format {shown}; rltscan reads "hdf5", "parquet", "arrow"'
        )
    return data_format


def table_file(backend: str) -> TableFile:
    """The row a columnar backend's part files are read and written through.

    Args:
        backend: ``"parquet"`` or ``"arrow"``.

    Returns:
        That registry row.
    """
    from rltscan.io.formats.registry import named

    return cast(TableFile, named(backend))  # data_format was checked (backend_of)


def part_file(directory: Path, backend: str) -> Path:
    """The one part file of an episode directory.

    Args:
        directory: ``data/<id>``.
        backend: ``"parquet"`` or ``"arrow"``.

    Returns:
        Its path.

    Raises:
        InputFileError: the directory holds none or several.
    """
    suffix = table_file(backend).suffixes[0][0]
    parts = sorted(directory.glob(f"*{suffix}"))
    if len(parts) != 1:
        raise InputFileError(
            f"{directory} has {len(parts)} {suffix} files; rltscan reads one part per episode"
        )
    return parts[0]


def open_dataset(root: Path, *, backend: str, layout: Layout | None) -> Source:
    """A Minari dataset read-only, one episode per group (HDF5) or directory.

    Args:
        root: the dataset directory.
        backend: its ``data_format``.
        layout: ``--layout`` (only ``episodes`` is accepted).

    Returns:
        The source (``format="minari"``, ``backend`` set).
    """
    from rltscan.io import hdf5

    if layout not in (None, "episodes"):
        raise DataError(
            f"{root} is a Minari dataset (one group per episode); drop --layout {layout}"
        )
    if backend == HDF5:
        main = root / "data" / "main_data.hdf5"
        if not main.is_file():
            raise InputFileError(
                f"{root} has no data/main_data.hdf5; the Minari dataset is incomplete"
            )
        source = hdf5.open_source(main, layout="episodes", display=str(root))
        source.format, source.backend = WORD, HDF5
        return source
    return _open_columnar(root, backend)


def _open_columnar(root: Path, backend: str) -> Source:
    import numpy as np

    from rltscan.io.columns import ColumnInfo
    from rltscan.io.minari import episode_dirs
    from rltscan.io.source import Source

    dirs = episode_dirs(root)
    if not dirs:
        raise InputFileError(f"{root} has no episode directories under data/; nothing to read")
    files = [part_file(d, backend) for d in dirs]
    row = table_file(backend)

    def opener(f: Path) -> Source:
        return row.open(Sniffed(backend, f), OpenOptions())

    first = opener(files[0])
    columns = {k: ColumnInfo(k, v.shape, v.dtype) for k, v in first.columns.items()}
    cache: dict[Path, Source] = {files[0]: first}

    def read(name: str) -> list[np.ndarray]:
        out = []
        for f in files:
            src = cache.setdefault(f, opener(f))
            if name not in src.columns:
                raise DataError(
                    f'{f} has no column "{name}" although {files[0]} has it; '
                    "every episode needs the same columns"
                )
            arr = src.read(name)
            out.append(np.asarray(arr))
        return out

    return Source(
        format=WORD,
        layout="episodes",
        where=str(root),
        path=root,
        columns=columns,
        read=read,
        episode_keys=[d.name for d in dirs],
        padded=True,
        backend=backend,
    )


def existing_columnar(root: Path, backend: str, names: list[str]) -> list[str]:
    """The ``names`` that are columns, or fields of the ``infos`` struct, in the first
    episode's part file.

    Args:
        root: the dataset directory.
        backend: ``"parquet"`` or ``"arrow"``.
        names: the output names.

    Returns:
        Those that exist.
    """
    import pyarrow as pa

    from rltscan.io.minari import INFOS, episode_dirs

    f = part_file(episode_dirs(root)[0], backend)
    schema = table_file(backend).schema(f, str(f))
    have = set(schema.names)
    if INFOS in have and pa.types.is_struct(schema.field(INFOS).type):
        have |= {field.name for field in schema.field(INFOS).type}  # where minari shows them
    return [n for n in names if n in have]


def write_columnar(
    root: Path,
    backend: str,
    outputs: Mapping[str, list[np.ndarray]],
    metadata: Mapping[str, Any],
    overwrite: bool,
) -> int:
    """Every episode's part file rewritten with the outputs: as columns (plus one NaN
    padding row) and as fields of the ``infos`` struct column
    (:func:`rltscan.io.minari.with_infos`).

    All temp files are written first; only then is each moved over its original,
    so an error or interrupt while writing changes nothing. ``dataset_size`` in
    ``data/metadata.json`` is brought up to date afterwards.

    Args:
        root: the dataset directory.
        backend: ``"parquet"`` or ``"arrow"``.
        outputs: output name -> one array per episode (``T`` rows).
        metadata: the ``rltscan`` key-value metadata entry.
        overwrite: ``--overwrite``.

    Returns:
        The bytes of output data written.
    """
    import numpy as np

    from rltscan.io.atomic import atomic_path
    from rltscan.io.minari import episode_dirs, update_size, with_infos
    from rltscan.io.parquet import Additions

    files = [part_file(d, backend) for d in episode_dirs(root)]
    row = table_file(backend)
    written = 0
    with contextlib.ExitStack() as stack:
        for i, f in enumerate(files):
            tmp = stack.enter_context(atomic_path(f))
            padded = {
                name: np.concatenate(
                    [parts[i], np.full((1, *parts[i].shape[1:]), np.nan, dtype=parts[i].dtype)]
                )
                for name, parts in outputs.items()
            }
            where = str(f)
            table = with_infos(row.read_table(f, where), padded, overwrite=overwrite, where=where)
            written += row.write_table(table, tmp, Additions(padded, metadata, overwrite, where))
    update_size(root)
    return written


def table_of_columnar(source: Source) -> Any:
    """A Minari Arrow/Parquet dataset as one table: episode after episode, the padding row
    dropped, the real row T of observations/infos/values as ``next_<name>``
    (:mod:`rltscan.io.convert`'s module doc).

    Args:
        source: a columnar Minari source.

    Returns:
        The pyarrow Table, its ``rltscan.convert`` metadata saying how it was laid out.
    """
    import numpy as np
    import pyarrow as pa

    from rltscan.io.columns import quoted
    from rltscan.io.convert import EPISODE, META_KEY
    from rltscan.io.minari import episode_dirs

    assert source.path is not None
    backend = source.backend or "parquet"
    row = table_file(backend)
    pieces = []
    names: list[str] | None = None
    for d in episode_dirs(source.path):
        f = part_file(d, backend)
        table = row.read_table(f, str(f))
        if names is None:
            names = table.column_names
        elif table.column_names != names:
            raise DataError(
                f"{f} has columns {quoted(table.column_names)} but the first episode has "
                f"{quoted(names)}; every episode needs the same columns"
            )
        t = table.num_rows - 1
        cols = {EPISODE: pa.array(np.full(t, int(d.name), np.int64))}
        nexts = {}
        for name in table.column_names:
            cols[name] = table.column(name).slice(0, t)
            if name.split("/")[0].split(".")[0] in REAL_LAST_ROW:
                nexts[f"next_{name}"] = table.column(name).slice(1, t)
        clash = [n for n in (*nexts, EPISODE) if n in table.column_names]
        if clash:
            raise DataError(
                f"{f} has a column {quoted(clash)} that the conversion would add; rename it first"
            )
        pieces.append(pa.table({**cols, **nexts}))
    meta = {
        "source": f"minari/{source.backend}",
        "layout": "episodes",
        "index_columns": [EPISODE],
        "next_of": {n: n[len("next_") :] for n in pieces[0].column_names if n.startswith("next_")}
        if pieces
        else {},
    }
    try:
        table = pa.concat_tables(pieces)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise DataError(
            f"{source.where}: the episodes' column types differ ({str(err).splitlines()[0]}); "
            "every episode needs the same columns"
        ) from None
    return table.replace_schema_metadata({META_KEY: json.dumps(meta, sort_keys=True).encode()})


class Minari(Format):
    """The Minari row (module doc)."""

    name = WORD
    title = "Minari"
    words = (WORD,)
    tree = True  # reports place an output per episode: PATH:GROUP/<episode>/NAME

    def sniff(self, path: Path, head: bytes | None) -> Sniffed | None:
        """A directory with ``data/metadata.json`` (its ``data_format`` the backend) or
        ``data/main_data.hdf5`` (see :meth:`Format.sniff`)."""
        if head is not None:
            return None
        if (path / "data" / "metadata.json").is_file():
            return Sniffed(WORD, path, backend_of(path))
        if (path / "data" / "main_data.hdf5").is_file():
            return Sniffed(WORD, path, HDF5)
        return None

    def open(self, sniffed: Sniffed, options: OpenOptions) -> Source:
        """See :meth:`Format.open` and :func:`open_dataset`."""
        return open_dataset(sniffed.path, backend=sniffed.backend or HDF5, layout=options.layout)

    def check_output(self, source: Source, word: str, path: Path) -> None:
        """A columnar dataset cannot be written as HDF5 (see :meth:`Format.check_output`)."""
        from rltscan.errors import ParameterError

        if word == HDF5 and source.backend != HDF5:
            raise ParameterError(
                f"cannot write the Minari {source.backend} dataset {source.where} as HDF5 "
                f"({path}); use a .parquet or .arrow output path"
            )

    def existing(self, source: Source, names: list[str]) -> list[str]:
        """Columns, or HDF5 datasets and infos, of that name (see :meth:`Format.existing`)."""
        from rltscan.io.formats import hdf5

        if source.backend != HDF5:
            assert source.path is not None
            return existing_columnar(source.path, source.backend or "parquet", names)
        return hdf5.existing(source, names, infos=True)

    def write_back(self, writing: Writing, prepared: Prepared, target: Any) -> int | None:
        """HDF5 backend: in place or to a new HDF5 file, through the HDF5 row; columnar:
        in place, every episode's part file (see :meth:`Format.write_back`)."""
        from rltscan.io.formats import hdf5
        from rltscan.io.minari import update_size

        source = writing.source
        inplace = target.kind == "inplace"
        if source.backend == HDF5 and (inplace or target.format == HDF5):
            written = hdf5.write_outputs(writing, prepared, target, infos=True)
            if inplace:
                assert source.path is not None
                update_size(source.path.parent.parent)  # <dataset>/data/main_data.hdf5
            return written
        if not inplace:
            return None
        assert source.path is not None
        split = {n: prepared.split(v) for n, v in writing.outputs.items()}
        return write_columnar(
            source.path, source.backend or "parquet", split, writing.record.entry, writing.overwrite
        )

    def to_table(self, source: Source, *, same: bool) -> Tabled:
        """See :meth:`Format.to_table`: HDF5 as the HDF5 row lays it out, columnar by
        :func:`table_of_columnar` (the target's default codecs)."""
        from rltscan.io.formats import hdf5

        if source.backend == HDF5:
            return hdf5.to_table(source)
        return Tabled(table_of_columnar(source))


FORMAT = Minari()
