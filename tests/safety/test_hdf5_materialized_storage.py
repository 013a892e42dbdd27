"""``-o`` to another directory materialises an external link (README "Write-back
rules"); the dataset it makes stores the data as the linked dataset did: its filters
and their levels, its layout and chunk shape, its maximum shape and its fill value,
never a plain contiguous copy of a compressed column (nor a chunked one of a contiguous
column)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np

from rltscan import api

N = 1000


def storage(ds: h5py.Dataset) -> tuple:
    plist = ds.id.get_create_plist()
    filters = tuple(plist.get_filter(i)[:3] for i in range(plist.get_nfilters()))
    return filters, plist.get_layout(), ds.chunks, ds.maxshape, ds.fillvalue, str(ds.dtype)


def test_a_materialised_external_link_keeps_the_linked_storage(tmp_path: Path) -> None:
    src, out = tmp_path / "src", tmp_path / "out"
    src.mkdir()
    out.mkdir()
    rng = np.random.default_rng(0)
    terminated = np.zeros(N, bool)
    terminated[[300, N - 1]] = True
    with h5py.File(src / "raw.h5", "w") as raw:
        raw.create_dataset(
            "observations",
            data=rng.standard_normal((N, 3)).astype(">f8"),
            compression="gzip",
            compression_opts=7,
            shuffle=True,
            fletcher32=True,
            chunks=(128, 3),
            maxshape=(None, 3),
            fillvalue=-1.0,
        )
        raw.create_dataset("actions", data=rng.integers(0, 4, N).astype(np.int16))  # contiguous
    with h5py.File(src / "data.h5", "w") as f:
        f["rewards"] = rng.standard_normal(N).astype(np.float32)
        f["values"] = rng.standard_normal(N).astype(np.float32)
        f["terminated"] = terminated
        for name in ("observations", "actions"):
            f[name] = h5py.ExternalLink(str(src / "raw.h5"), name)
    api.run("gae", str(src / "data.h5"), output=str(out / "out.h5"), device="cpu")
    with h5py.File(src / "raw.h5", "r") as raw, h5py.File(out / "out.h5", "r") as got:
        for name in ("observations", "actions"):
            assert isinstance(got.get(name, getlink=True), h5py.HardLink), name
            assert storage(got[name]) == storage(raw[name]), name
            assert np.array_equal(got[name][()], raw[name][()]), name
