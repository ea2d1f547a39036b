#!/usr/bin/env bash
# Prepares, on a CPU machine, what the lent GPU machine lacks (shared/TOOLCHAIN.md, "The GPU
# machine": its python3 holds torch with CUDA, cuda-bindings, CuPy, numpy, safetensors; not
# jupyter_server, ipykernel, jupyter_client, blake3, pytest or this package): this package's wheel
# and the wheels of that stack for its Python, in .gpu-wheels/ (git-ignored). Pass that folder to
# the device tool as `carry` and run scripts/gpu_check.sh there.
# Usage: bash scripts/gpu_wheels.sh [python version, default 3.12]
set -euo pipefail
cd "$(dirname "$0")/.."
PYVER="${1:-3.12}"
DEST=.gpu-wheels
rm -rf "$DEST"
mkdir -p "$DEST"
.venv/bin/python -m pip wheel -q --no-deps -w "$DEST" .
# The machine's own torch, numpy and CUDA stack are never carried (and nothing here asks for them).
.venv/bin/python -m pip download -q --only-binary=:all: --implementation cp --python-version "$PYVER" \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$DEST" "$DEST"/jupyter_gkeresume-*.whl ipykernel jupyter_client pytest pytest-timeout
rm -f "$DEST"/{torch,numpy,nvidia_,cuda_,triton}*.whl
du -sh "$DEST"
