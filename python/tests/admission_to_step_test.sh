#!/usr/bin/env bash
# examples/admission_to_step.py against the real monta-planner, on loopback, with monta
# installed into a fresh venv (python/tests/monta_venv.sh).
set -euo pipefail
cd "${TEST_SRCDIR:-$(dirname "$0")/../..}/${TEST_WORKSPACE:-}"
source python/tests/monta_venv.sh
monta_venv
step="$MONTA_RUNFILES/examples/admission_to_step.py"
planner="$MONTA_RUNFILES/server/monta-planner"
"$MONTA_PYTHON" "$step" --planner "$planner"
"$MONTA_PYTHON" "$step" --planner "$planner" \
  --allowed STRATEGY_KIND_TP_DEDUP_PIPELINED --max_chunks 8
