# Shared install steps for scripts/test.sh and scripts/lab.sh (sourced, not run).
# torch is pinned to the CPU build that this kind of machine keeps on disk; an unpinned torch
# would pull a multi-GB CUDA build.
TORCH_PIN="torch==2.13.0"

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# The lab extension build (rspack, run by `pip install`) needs Node.js >= 20.19; the UI tests
# drive Debian's chromium through playwright-core (an npm devDependency: never a browser download).
NODE_MIN="20.19"

install_system_packages() {
  local missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v node >/dev/null 2>&1 || missing+=(nodejs)
  # The real-bindings GPU tests compile a fake libcuda.so.1 (tests/fakecuda) with cc.
  command -v cc >/dev/null 2>&1 || missing+=(gcc)
  # tests/test_monitoring.py runs promtool (check/test rules) and Prometheus itself on
  # deploy/monitoring: Debian's prometheus package ships both.
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  if [ "${#missing[@]}" -gt 0 ]; then
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  # The JupyterHub end-to-end test runs a real Hub, whose proxy comes from npm.
  command -v configurable-http-proxy >/dev/null 2>&1 ||
    as_root npm install -g --silent configurable-http-proxy >/dev/null
}

require_node() {
  local have
  have="$(node -p 'process.versions.node' 2>/dev/null || echo none)"
  if ! node -e "const [a,b]=process.versions.node.split('.').map(Number);
      const [x,y]='$NODE_MIN'.split('.').map(Number); process.exit(a>x||(a==x&&b>=y)?0:1)" \
      2>/dev/null; then
    echo "Node.js >= $NODE_MIN is needed to build the lab extension; found: $have." >&2
    echo "Install it (e.g. from nodesource) and re-run." >&2
    return 1
  fi
}

install_python_env() {  # $1: "test" or "lab"; pip builds the lab extension (needs Node.js)
  require_node
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  # One pip run (one resolve) for the pinned torch, numpy and the package.
  if [ "$1" = "test" ]; then
    .venv/bin/python -m pip install -q "$TORCH_PIN" numpy -e ".[test]"
  else
    .venv/bin/python -m pip install -q "$TORCH_PIN" numpy -e ".[gcs,kubeflow]" jupyterlab
  fi
}
