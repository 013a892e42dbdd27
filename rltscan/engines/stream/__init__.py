"""The streaming engine: one file walked in windows, outputs written as they come.

Owns :mod:`~rltscan.engines.stream.windows` (the window/block grid and the three-thread
walk that carries the recurrence between blocks; every engine computes through it) and
:mod:`~rltscan.engines.stream.run` (a single file's run: plan, walk, sink, report).
May import plan/options/stats/report, io and estimators; never api, cli or the other
engines.
"""
