"""The benchmark scripts (``python -m bench.table``, ``bash bench/device.sh``): what they
measure and how to run them is in ``bench/README.md``. They measure with the code of
``rltscan bench`` (``rltscan.bench``: inputs, calls, the float64 check, ``timed_us``, the
copy floor, the torch.compile baseline); what only they use is ``bench.harness``."""
