"""The sharded engine: a dataset of Parquet shards, run as shard tasks joined by carries.

Owns :mod:`~rltscan.engines.shards.task` (the shard task, :func:`run_task`: pass 1's
affine carry summary and pass 2's outputs, both the walk of
:mod:`rltscan.engines.stream.windows` with a carry in and a carry out) and
:mod:`~rltscan.engines.shards.run` (the driver that joins the carries, commits and
reports, and the local engine). May import the stream engine, plan/options/stats/report,
io and estimators; never api or cli. Ray is reached only through
:mod:`rltscan.engines.ray`, lazily.
"""
