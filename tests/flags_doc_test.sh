#!/usr/bin/env bash
# docs/FLAGS.md matches every binary's --helpfull (scripts/flags_md.py --write regenerates it).
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
exec python3 scripts/flags_md.py --check docs/FLAGS.md server/monta-planner agent/monta-agent \
  client/montactl perf/monta-a2a-bench
