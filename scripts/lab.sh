#!/usr/bin/env bash
# Installs jupyter-gkeresume into .venv with everything enabled and starts JupyterLab on the
# local default store. Usage: bash scripts/lab.sh [jupyter lab args]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install.sh
install_python_env lab
args=()
[ "$(id -u)" -ne 0 ] || args+=(--allow-root)  # containers often run as root
exec .venv/bin/jupyter lab "${args[@]}" "$@"
