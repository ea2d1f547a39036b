#!/usr/bin/env bash
# The GPU check (issue 32), run once on the lent GPU machine through the device tool:
#   installs the carried wheels (scripts/gpu_wheels.sh made them) into a target directory, runs the
#   real-device tests (`pytest -m gpu`), then benchmarks/gpu.py (engine bandwidth; end to end with a
#   6 GiB fp16 model and a large one, each beside raw disk I/O, torch.save and safetensors), and
#   writes everything into one folder (default $OUT, the folder the device tool brings back).
# Dry run on a CPU machine against the fake driver (tests/fakecuda), before asking for a GPU, with a
# Python that holds only what the GPU machine's does (torch, numpy, safetensors, cuda-python, ...):
#   python3.11 -m venv /tmp/gpubase && /tmp/gpubase/bin/pip install torch==2.13.0 numpy \
#     safetensors fsspec xxhash cuda-python && bash scripts/gpu_wheels.sh 3.11
#   GPU_CHECK_DRY_RUN=1 GPU_PYTHON=/tmp/gpubase/bin/python bash scripts/gpu_check.sh /tmp/gpu-dry
# Budget: under 8 minutes on the H200 machine; each step has its own timeout so one hang cannot eat
# the run, and a failed step does not stop the later ones (the exit status says if any failed).
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS="${1:-${OUT:?give a result folder}}"
PY="${GPU_PYTHON:-python3}"
SITE="${GPU_SITE:-/tmp/gkeresume-site}"
LARGE_GIB="${GPU_LARGE_GIB:-30}"
mkdir -p "$RESULTS"
exec > >(tee "$RESULTS/log.txt") 2>&1
failed=0
step() {  # step NAME TIMEOUT CMD...: run, time, record the exit status
  local name="$1" limit="$2" t0=$SECONDS rc
  shift 2
  echo "== $name (limit ${limit}s) $(date -u +%T)"
  timeout "$limit" "$@"
  rc=$?
  echo "== $name: rc=$rc in $((SECONDS - t0))s"
  echo "$name $rc $((SECONDS - t0))" >>"$RESULTS/steps.txt"
  [ "$rc" -eq 0 ] || failed=1
}

export JUPYTER_DATA_DIR="$(mktemp -d)" IPYTHONDIR="$(mktemp -d)"
mkdir -p "$IPYTHONDIR/profile_default"  # kernels load the extension, as an installed package does
echo 'c.IPKernelApp.extensions = ["kernel_hooks"]' >"$IPYTHONDIR/profile_default/ipython_kernel_config.py"
if [ -n "${GPU_CHECK_DRY_RUN:-}" ]; then  # a fake libcuda.so.1 stands in for the driver
  fake="$(mktemp -d)"
  cc -shared -fPIC -O1 -o "$fake/libcuda.so.1" tests/fakecuda/fake_libcuda.c -lpthread
  export LD_LIBRARY_PATH="$fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  bench_device=(--device cpu --bytes 64MiB --model-gib 0.25 --keep-page-cache)
  LARGE_GIB=0.5
else
  bench_device=()
  nvidia-smi >"$RESULTS/nvidia-smi.txt" 2>&1
fi
step install 120 "$PY" -m pip install -q --no-index --no-deps --target "$SITE" .gpu-wheels/*.whl
# The carried package, not the checkout, is what the kernels import; tests/ for the fixture modules.
export PYTHONPATH="$SITE:$PWD/tests"
"$PY" -c "import sys, torch; print(sys.version, torch.__version__, torch.cuda.is_available())" \
  >"$RESULTS/python.txt" 2>&1

# The conftest pulls every fixture module (GCS emulator, servers, browser): only the two these
# tests use are loaded.
step pytest-gpu 240 "$PY" -m pytest -p no:cacheprovider --noconftest -p fixtures_kernels \
  -p fixtures_gpu -m gpu -v -rs --junitxml "$RESULTS/pytest-gpu.xml" tests/test_gpu_device.py
step bench-6gib 200 "$PY" benchmarks/gpu.py --peers "${bench_device[@]}" --out "$RESULTS/bench-6gib.json"
step bench-large 240 "$PY" benchmarks/gpu.py --skip-bandwidth --peers "${bench_device[@]}" \
  --model-gib "$LARGE_GIB" --out "$RESULTS/bench-large.json"
exit "$failed"
