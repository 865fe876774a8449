#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds everything, runs every test.
#   scripts/test.sh                  # all tests
#   scripts/test.sh --config=asan    # the same suite under AddressSanitizer
# Extra arguments go to `bazel test`. Ends with "N passed, N failed, N skipped": every test
# case of the Bazel test targets (scripts/test_summary.py) plus the checks below
# (run_checks), one entry each; each skipped case is listed with its reason above that line.
set -uo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh || exit 1

log=$(mktemp)
trap 'rm -f "$log"' EXIT

# Checks beside the GCC test run, each one more passed/failed entry in the closing line:
#   clang-thread-safety: `bazel build --config=clang` of every cc_library and cc_binary
#     (Clang's -Wthread-safety as errors; the cc_test files are not compiled twice), in its
#     own output base so the GCC build keeps its analysis cache; $MONTA_CLANG_OUTPUT_BASE
#     overrides where.
#   format: scripts/format.sh --check.
#   layers: scripts/check_layers.sh (the allowed arrows between rooms, over `bazel query`).
#   function-length: scripts/check_function_length.py (no function over 80 lines unless a
#     `// long-function:` comment above it says why).
#   fuzz: scripts/fuzz.sh builds the libFuzzer targets (//fuzz, --config=fuzz, in its own
#     output base; $MONTA_FUZZ_OUTPUT_BASE overrides where) and runs each from its committed
#     seeds for 20000 inputs or 15 s, whichever ends first; a crash, leak or timeout fails it.
checks_passed=0
checks_failed=0
check() {  # NAME COMMAND...
  local name=$1
  shift
  echo "check ${name}: $*"
  if "$@"; then
    echo "check ${name} PASSED"
    checks_passed=$((checks_passed + 1))
  else
    echo "check ${name} FAILED"
    checks_failed=$((checks_failed + 1))
  fi
}
# //... spelled as its top-level directories: from another output base, Bazel would
# descend into the GCC build's bazel-* links (they point outside its own) and fail.
top_level_packages() {
  local d
  [[ -f BUILD || -f BUILD.bazel ]] && echo "//:all"
  for d in */; do
    d=${d%/}
    [[ -L $d ]] && continue
    if [[ -n $(find "$d" \( -name BUILD -o -name BUILD.bazel \) -print -quit) ]]; then
      echo "//$d/..."
    fi
  done
}
run_checks() {
  local clang_base="${MONTA_CLANG_OUTPUT_BASE:-${HOME}/.cache/bazel/_monta_clang/$(pwd | md5sum | cut -c1-32)}"
  local packages targets
  mapfile -t packages < <(top_level_packages)
  # Every C++ library and binary, not the cc_test files: the shared state the analysis
  # checks lives in libraries (a test's own locks are few), and compiling the ~100 test
  # files a second time cost CI ~2 of its 20 minutes.
  local query="kind('cc_(library|binary)', $(IFS=+; echo "${packages[*]}"))"
  if ! mapfile -t targets < <(bazel --output_base="$clang_base" --max_idle_secs=300 \
    query "$query" 2>/dev/null) || [[ ${#targets[@]} -eq 0 ]]; then
    targets=("${packages[@]}")
  fi
  check clang-thread-safety bazel --output_base="$clang_base" --max_idle_secs=300 \
    build --config=clang --color=no --curses=no -- "${targets[@]}"
  check format ./scripts/format.sh --check
  check layers ./scripts/check_layers.sh
  check function-length python3 ./scripts/check_function_length.py
  # A fresh working corpus: CI starts from the committed seeds only.
  local fuzz_work
  fuzz_work=$(mktemp -d)
  check fuzz env MONTA_FUZZ_WORK="$fuzz_work" ./scripts/fuzz.sh --runs 20000 --seconds 15
  rm -rf "$fuzz_work"
}
bazel test --color=no --curses=no "$@" -- //... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}

# Every test case counts, not just every target (scripts/test_summary.py): GoogleTest cases
# from each target's test.xml, Python unittest cases from its verbose log, one case per
# other target. A skipped case (GTEST_SKIP, unittest's skip, a "MONTA_TEST_SKIPPED: <reason>"
# line from tests/deploy/lib.sh's skip) is listed with its reason and counted as skipped,
# also inside a target that passed. Bazel 4.2 itself has no skip status.
if ! summary=$(python3 scripts/test_summary.py "$log" bazel-testlogs); then
  echo "test.sh: scripts/test_summary.py failed" >&2
  summary="0 1 0"
fi
grep -E '^(SKIPPED|FAILED) ' <<<"$summary"
read -r passed failed skipped < <(tail -n1 <<<"$summary")
# A build failure leaves no per-target lines: count it as a failure.
if [[ $rc -ne 0 && $failed -eq 0 ]]; then failed=1; fi

run_checks
passed=$((passed + checks_passed))
failed=$((failed + checks_failed))
if [[ $rc -eq 0 && $checks_failed -gt 0 ]]; then rc=1; fi
echo "${passed} passed, ${failed} failed, ${skipped} skipped"
exit $rc
