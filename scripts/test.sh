#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds everything, runs every test.
#   scripts/test.sh                  # all tests
#   scripts/test.sh --config=asan    # the same suite under AddressSanitizer
# Extra arguments go to `bazel test`. Ends with "N passed, N failed" (Bazel targets).
set -uo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test --color=no --curses=no "$@" -- //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED' "$log")
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log")
# A build failure leaves no per-target lines: count it as a failure.
if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
echo "${passed} passed, ${failed} failed"
exit $rc
