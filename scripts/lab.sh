#!/usr/bin/env bash
# Starts JupyterLab with jupyter-gkeresume enabled on the local default store, serving
# notebooks/ (git ignores it: notebooks never land in the repository).
# Usage: bash scripts/lab.sh [jupyter lab args]
#
# The editable install in .venv is (re)made only when what it is built from changed since the
# last one: pyproject.toml, package.json, yarn.lock, the lab extension's sources and the install
# script (Python sources need none: the install is editable). A second start with nothing
# changed skips pip and takes seconds. After editing labextension/src, this rebuilds it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install.sh

install_inputs() {  # one hash over every file the install is built from
  find pyproject.toml package.json yarn.lock install.json scripts/install.sh jupyter-config \
    labextension/src labextension/style labextension/schema -type f -print0 |
    sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}

stamp=.venv/.lab-install-inputs
inputs="$(install_inputs)"
if [ ! -x .venv/bin/jupyter-lab ] || [ "$(cat "$stamp" 2>/dev/null)" != "$inputs" ]; then
  install_python_env lab
  echo "$inputs" >"$stamp"
fi
mkdir -p notebooks
args=(--ServerApp.root_dir=notebooks)
[ "$(id -u)" -ne 0 ] || args+=(--allow-root)  # containers often run as root
exec .venv/bin/jupyter lab "${args[@]}" "$@"
