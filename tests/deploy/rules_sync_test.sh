#!/usr/bin/env bash
# The PrometheusRule in the base carries exactly the groups of the plain rules file, every
# alert is labelled and annotated, and has unit tests that fire and stay quiet.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-monta}/tests/deploy/lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "$0")/lib.sh"
# shellcheck source=tests/deploy/lib.sh
source "$lib"

need_node
node "$TESTS/check_rules_sync.js" "$DEPLOY/prometheus/monta-rules.yaml" \
  "$DEPLOY/prometheus/monta-rules_test.yaml" "$DEPLOY/base/prometheusrule.yaml" || fail "rules sync"
echo "PASSED: rules in sync"
