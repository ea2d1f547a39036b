#!/usr/bin/env bash
# Runs the GCS transfer tests against the oldest gcsfs that pyproject.toml allows (the floor),
# in a separate venv layered over the project's .venv: only gcsfs and the fsspec it pins are
# replaced, everything else (pytest, fake-gcs-server, aiohttp, ...) comes from the base venv.
# Usage: bash scripts/test_gcsfs_floor.sh [pytest args]     (BASE_VENV=.venv, FLOOR_VENV=...)
# Not part of .ci/run (see docs/gcs.md, "Tests": about a minute, needs the package index).
set -euo pipefail
cd "$(dirname "$0")/.."
base=${BASE_VENV:-.venv}
floor=$(sed -n 's/.*"gcsfs>=\([0-9.]*\)".*/\1/p' pyproject.toml | head -1)
[ -n "$floor" ] || { echo "no gcsfs floor found in pyproject.toml" >&2; exit 1; }
venv=${FLOOR_VENV:-${TMPDIR:-/tmp}/gkeresume-gcsfs-$floor}
if [ ! -x "$venv/bin/python" ]; then
  "$base/bin/python" -m venv "$venv"
  # the base venv's packages, after the floor venv's own (a .pth line appends to sys.path)
  "$base/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' \
    > "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/base-venv.pth"
  # gcsfs pins fsspec to its own release number
  "$venv/bin/python" -m pip install --quiet --no-deps "gcsfs==$floor" "fsspec==$floor"
fi
"$venv/bin/python" -c 'import gcsfs, fsspec; print(f"gcsfs {gcsfs.__version__}, fsspec {fsspec.__version__}")'
PYTHONPATH=$PWD exec "$venv/bin/python" -m pytest -q -p no:cacheprovider \
  tests/test_gcs_transfer.py tests/test_gcs_transfer_plan.py tests/test_gcs_store.py tests/test_gcs_faults.py \
  -m "not slow" "$@"
