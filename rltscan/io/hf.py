"""Hugging Face ``datasets`` features kept in a Parquet/Arrow file's schema metadata.

A file written by ``datasets`` (``Dataset.to_parquet``, ``push_to_hub``, LeRobot's data
files) carries its features as JSON under the schema metadata key ``huggingface``:
``{"info": {"features": {column: {"dtype": "float32", "_type": "Value"}, ...}}}``.
``datasets`` reads the columns it lists with those features; a column rltscan adds is
declared there too (:func:`declared`), as ``datasets`` itself declares a scalar
column, so the file says what every column is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

KEY = b"huggingface"


def value_feature(dtype: str) -> dict[str, str]:
    """A scalar column's feature, as ``datasets.Value(dtype)`` writes it (``dtype``: a
    numpy dtype name such as ``"float32"``, which is also the name ``datasets`` uses)."""
    return {"dtype": dtype, "_type": "Value"}


def declared(meta: Mapping[bytes, bytes], columns: Mapping[str, str]) -> dict[bytes, bytes]:
    """``meta`` with ``columns`` (name -> numpy dtype name) declared in its ``huggingface``
    features, each as :func:`value_feature`, replacing an earlier declaration of the same
    name. Metadata without a ``huggingface`` entry, or with one that holds no features
    object, comes back as it was (nothing of it is guessed).

    Args:
        meta: schema key-value metadata.
        columns: the columns to declare, by name, with their numpy dtype names.

    Returns:
        The new metadata (a copy).
    """
    out = dict(meta)
    if KEY not in out or not columns:
        return out
    try:
        record = json.loads(out[KEY])
        features = record["info"]["features"]
    except (KeyError, TypeError, ValueError):
        return out
    if not isinstance(features, dict):
        return out
    for name, dtype in columns.items():
        features[name] = value_feature(dtype)
    out[KEY] = json.dumps(record).encode("utf-8")
    return out
