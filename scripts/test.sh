#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh machine (apt, pip, npm), then runs it all.
# Usage: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install.sh
install_system_packages
install_python_env test
set +e
.venv/bin/python -m pytest -ra "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure here" >&2
  exit 1
fi
exit "$rc"
