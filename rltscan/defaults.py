"""The defaults of a file run, importable without numpy or torch.

``rltscan.run`` (its signature), :class:`~rltscan.options.RunOptions`, the streaming
engine and the CLI's help all use these values; the CLI reads them here so that
``rltscan CMD --help`` starts without numpy (tests/cli/test_startup.py checks that the
signatures agree with this table).
"""

from __future__ import annotations

PREFIX = ""  # prefix of the output names
DEVICE = "auto"  # CUDA when available, else the CPU
BACKEND = "auto"  # triton on CUDA (torch when triton is missing), torch on the CPU
CHUNK_STEPS = 1 << 22  # steps (time × sequences) per streamed window
BLOCK_STEPS = 1 << 22  # steps per estimator call; the bit-level result depends on it
