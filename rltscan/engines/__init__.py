"""The engines: how a plan is executed over an input, in one place.

* :mod:`rltscan.engines.stream`: the one walk (windows of blocks with the recurrence
  carried between them) and the single-file run built on it; a whole file is that walk
  with one window;
* :mod:`rltscan.engines.shards`: a sharded dataset as shard tasks, each the same walk
  with a carry in and a carry out, joined by a driver;
* :mod:`rltscan.engines.ray`: the same shard task on Ray.

May import: :mod:`rltscan.plan`, :mod:`rltscan.options`, :mod:`rltscan.stats`,
:mod:`rltscan.report`, :mod:`rltscan.io`, :mod:`rltscan.estimators` and the helpers
beside them (errors, devices, defaults). Never :mod:`rltscan.api` or :mod:`rltscan.cli`
(tests/repo/test_architecture.py keeps the direction). Importing this package loads nothing.
"""
