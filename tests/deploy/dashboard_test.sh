#!/usr/bin/env bash
# The Grafana dashboard parses, uses only Monta's metric names and defined variables, and
# every expression is valid PromQL (promtool parses them as recording rules).
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-monta}/tests/deploy/lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "$0")/lib.sh"
# shellcheck source=tests/deploy/lib.sh
source "$lib"

need_node
node "$TESTS/check_dashboard.js" "$DEPLOY/grafana/monta-alltoall.json" "$SCRATCH/dashboard-rules.yaml" ||
  fail "dashboard checks"
if command -v promtool >/dev/null 2>&1; then
  promtool check rules "$SCRATCH/dashboard-rules.yaml" || fail "dashboard PromQL does not parse"
else
  echo "note: promtool not found; PromQL syntax of the dashboard not checked"
fi
echo "PASSED: dashboard"
