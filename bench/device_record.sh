#!/usr/bin/env bash
# What a device run ran on, into the folder $1: the GPU and driver, torch and triton,
# the tree (commit and uncommitted paths). Called by the bench/device_*.sh scripts.
set -u
mkdir -p "$1"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$1/gpu.txt"
python -c "import torch, triton; print(torch.__version__, triton.__version__)" >> "$1/gpu.txt"
git log -1 --format='%H %s' > "$1/commit.txt" 2>/dev/null || true
git status --short >> "$1/commit.txt" 2>/dev/null || true
