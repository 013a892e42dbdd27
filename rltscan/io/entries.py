"""What one stored entry is, for messages: a null, NaN, +Inf, -Inf, or its value.

A float column's nulls (Parquet, Arrow) are read as NaN, so an estimator that finds a
non-finite entry cannot tell them apart; the message looks at the stored entry again
(on the error path only) and names its kind.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rltscan.io.source import Source


def describe(value: Any) -> str:
    """``NaN``, ``+Inf``, ``-Inf``, or the number as Python prints it."""
    v = float(np.asarray(value).reshape(-1)[0]) if np.ndim(value) else float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def is_null(source: Source, column: str, row: int) -> bool:
    """Whether row ``row`` of an Arrow/Parquet column is null (False where unknowable).

    Args:
        source: the opened input.
        column: the column's name.
        row: the row.

    Returns:
        True where the format keeps nulls (its registry row says so) and that entry is one.
    """
    from rltscan.io.formats import named

    raw = source.raw
    if not named(source.format).nullable or raw is None or source.layout != "flat":
        return False
    import pyarrow as pa

    try:
        data = raw.read(columns=[column]).column(0) if hasattr(raw, "read_row_group") else None
        if data is None:
            data = raw.column(column)
        return not data[row].is_valid
    except (KeyError, IndexError, pa.ArrowException):
        return False


def stored_value(source: Source, column: str, index: tuple[int, ...]) -> Any:
    """The stored entry at ``index`` (a row of a flat table, or ``(t, b)``/``(b, t)``)."""
    if len(index) == 1 and source.read_range is not None:
        return source.read_range(column, index[0], index[0] + 1)[0]
    data = source.read(column)
    if isinstance(data, list):
        data = np.concatenate(data)
    return np.asarray(data)[index]


def entry_kind(source: Source, column: str, index: tuple[int, ...], value: Any = None) -> str:
    """``a null (read as NaN)``, ``NaN``, ``+Inf``, ``-Inf`` or the value of one entry;
    ``value`` is the entry as the estimator got it (read again from the file if None)."""
    if len(index) == 1 and is_null(source, column, index[0]):
        return "a null (read as NaN)"
    if value is None:
        value = stored_value(source, column, index)
    return describe(value)
