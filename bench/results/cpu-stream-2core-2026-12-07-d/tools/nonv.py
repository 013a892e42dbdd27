"""The 3e6-step file with no next values and episodes that end on terminations only (so
GAE's and TD(lambda)'s default missing-bootstrap rule is in force and passes), as HDF5
and Parquet, for tools/hashes.sh."""

import h5py
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

rng = np.random.default_rng(3)
n = 3_000_000
term = rng.random(n) < 0.002
term[-1] = True
cols = {
    "rewards": rng.standard_normal(n, dtype=np.float32),
    "values": rng.standard_normal(n, dtype=np.float32),
    "terminals": term,
    "timeouts": np.zeros(n, bool),
}
with h5py.File("/tmp/gapb/nonv.h5", "w") as f:
    for k, v in cols.items():
        f.create_dataset(k, data=v, chunks=(1 << 20,))
pq.write_table(pa.table(cols), "/tmp/gapb/nonv.parquet", row_group_size=1 << 20)
