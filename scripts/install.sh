# Shared install steps for scripts/test.sh and scripts/lab.sh (sourced, not run).
# torch is pinned to the CPU build that this kind of machine keeps on disk; an unpinned torch
# would pull a multi-GB CUDA build.
TORCH_PIN="torch==2.13.0"

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

install_system_packages() {
  if ! command -v chromium >/dev/null 2>&1; then
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  fi
}

install_python_env() {  # $1: "test" or "lab"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q "$TORCH_PIN" numpy
  if [ "$1" = "test" ]; then
    .venv/bin/python -m pip install -q -e ".[test]"
  else
    .venv/bin/python -m pip install -q -e ".[gcs]" jupyterlab
  fi
}
