#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds everything, runs every test.
#   scripts/test.sh                  # all tests
#   scripts/test.sh --config=asan    # the same suite under AddressSanitizer
# Extra arguments go to `bazel test`. Ends with "N passed, N failed, N skipped" (Bazel
# targets), the skipped ones listed with their reason above that line.
set -uo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT
bazel test --color=no --curses=no "$@" -- //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

# Bazel 4.2 has no skip status: a skipped target passes. It counts as skipped when its
# test.log has a "MONTA_TEST_SKIPPED: <reason>" line (tests/deploy/lib.sh's skip), or when
# it is a gtest binary whose every test called GTEST_SKIP (e.g. GPU tests without a GPU).
skip_reason() {
  local target="${1#//}" log line
  log="bazel-testlogs/${target/://}/test.log"
  [[ -f "$log" ]] || return 1
  if line=$(grep -m1 '^MONTA_TEST_SKIPPED: ' "$log"); then
    echo "${line#MONTA_TEST_SKIPPED: }"
  elif grep -q '^\[  PASSED  \] 0 tests' "$log" && grep -q '^\[  SKIPPED \]' "$log"; then
    line=$(grep -m1 -A1 ': Skipped$' "$log" | tail -n1)
    echo "every gtest test skipped${line:+: $line}"
  else
    return 1
  fi
}
passed=0
skipped=0
for target in $(grep -oE '^//[^ ]+ +(\(cached\) )?PASSED' "$log" | cut -d' ' -f1); do
  if reason=$(skip_reason "$target"); then
    echo "SKIPPED ${target}: ${reason}"
    skipped=$((skipped + 1))
  else
    passed=$((passed + 1))
  fi
done
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|NO STATUS|FLAKY|INCOMPLETE)' "$log")
# A build failure leaves no per-target lines: count it as a failure.
if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit $rc
