#!/usr/bin/env bash
# examples/admission_to_step.py against the real monta-planner, on loopback, with monta
# installed into a fresh venv (python/tests/monta_venv.sh): as the planner chooses for a job
# that does not say its expert layout (the planner's default, not_tensor_parallel), then the
# pipelined plan for tensor-parallel experts: both layouts, webhook to training step.
set -euo pipefail
cd "${TEST_SRCDIR:-$(dirname "$0")/../..}/${TEST_WORKSPACE:-}"
source python/tests/monta_venv.sh
monta_venv
step="$MONTA_RUNFILES/examples/admission_to_step.py"
planner="$MONTA_RUNFILES/server/monta-planner"
"$MONTA_PYTHON" "$step" --planner "$planner"
# The pipelined plan for a job whose experts are tensor-parallel (the other layout).
"$MONTA_PYTHON" "$step" --planner "$planner" \
  --allowed STRATEGY_KIND_TP_DEDUP_PIPELINED --max_chunks 8 --experts_tensor_parallel true
