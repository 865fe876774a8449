#!/usr/bin/env bash
# promtool accepts deploy/prometheus/monta-rules.yaml and its unit tests pass.
lib="${TEST_SRCDIR:-}/${TEST_WORKSPACE:-monta}/tests/deploy/lib.sh"
[[ -f "$lib" ]] || lib="$(dirname "$0")/lib.sh"
# shellcheck source=tests/deploy/lib.sh
source "$lib"

command -v promtool >/dev/null 2>&1 || skip "promtool not found (Debian package prometheus)"
promtool check rules "$DEPLOY/prometheus/monta-rules.yaml" || fail "promtool check rules"
# promtool resolves rule_files relative to the test file.
(cd "$DEPLOY/prometheus" && promtool test rules monta-rules_test.yaml) || fail "promtool test rules"
echo "PASSED: promtool check rules + test rules"
