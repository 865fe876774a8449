#!/usr/bin/env bash
# examples/admission_to_step.py against the real monta-planner, on loopback.
set -euo pipefail
runner="python/tests/run_py.sh"  # the test starts in the runfiles root
"$runner" examples/admission_to_step.py --planner server/monta-planner
"$runner" examples/admission_to_step.py --planner server/monta-planner \
  --allowed STRATEGY_KIND_TP_DEDUP_PIPELINED --max_chunks 8
