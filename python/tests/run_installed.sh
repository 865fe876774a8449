#!/usr/bin/env bash
# run_installed.sh SCRIPT [ARGS...]: installs monta into a fresh venv (monta_venv.sh) and
# runs SCRIPT (a path under the runfiles root) with that venv's python.
set -euo pipefail
cd "${TEST_SRCDIR:-$(dirname "$0")/../..}/${TEST_WORKSPACE:-}"
source python/tests/monta_venv.sh
monta_venv
script="$MONTA_RUNFILES/$1"
shift
exec "$MONTA_PYTHON" "$script" "$@"
