"""The benchmark scripts (``python -m bench.table``, ``bash bench/device.sh``): what they
measure and how to run them is in ``bench/README.md``; shared measuring helpers live in
``rltscan.bench``."""
