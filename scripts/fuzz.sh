#!/usr/bin/env bash
# Builds Monta's libFuzzer targets (//fuzz, --config=fuzz: clang-14, AddressSanitizer and
# UBSan's overflow/cast/bounds checks) and runs each over its corpus.
#   scripts/fuzz.sh                          # every target, 20000 runs each
#   scripts/fuzz.sh --seconds 600 sysfs_fuzz # one target for ten minutes
#   scripts/fuzz.sh --runs 1000000 job_file_fuzz register_fuzz
#   scripts/fuzz.sh --runs 20000 --seconds 15  # each target until either limit (CI)
# Targets: the fuzz binaries in fuzz/BUILD (default: all). Each run starts from the committed
# seeds (fuzz/corpus/<target>/, read-only) plus a working corpus that keeps what the fuzzer
# found between runs ($MONTA_FUZZ_WORK, default ~/.cache/monta-fuzz/<target>), with
# fuzz/dict/<target>.dict when present. A crash, leak, timeout (-timeout=10 s per input) or
# out-of-memory (-rss_limit_mb=2048) fails the run; its reproducer is written to the work
# directory and its path printed, with the command that replays it (or, without sanitizers:
# bazel run //fuzz:<target> -- FILE). Exit status 1 when any target failed, 2 on a usage or
# build error. The build has its own output base ($MONTA_FUZZ_OUTPUT_BASE), like test.sh's
# clang build, so the GCC build keeps its cache.
set -uo pipefail
cd "$(dirname "$0")/.."

usage() {
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

runs=()
seconds=()
targets=()
number() { [[ $1 =~ ^[0-9]+$ ]] || usage; echo "$1"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --seconds) [[ $# -ge 2 ]] || usage; seconds=(-max_total_time="$(number "$2")") || exit 2; shift 2 ;;
    --seconds=*) seconds=(-max_total_time="$(number "${1#*=}")") || exit 2; shift ;;
    --runs) [[ $# -ge 2 ]] || usage; runs=(-runs="$(number "$2")") || exit 2; shift 2 ;;
    --runs=*) runs=(-runs="$(number "${1#*=}")") || exit 2; shift ;;
    -h | --help) usage ;;
    -*) echo "fuzz.sh: unknown flag $1" >&2; usage ;;
    *) targets+=("$1"); shift ;;
  esac
done
# Both given: whichever ends first.
budget=("${runs[@]}" "${seconds[@]}")
[[ ${#budget[@]} -eq 0 ]] && budget=(-runs=20000)

all_targets=$(sed -nE 's/^ *name = "([a-z0-9_]+_fuzz)",$/\1/p' fuzz/BUILD)
if [[ ${#targets[@]} -eq 0 ]]; then
  mapfile -t targets <<<"$all_targets"
fi
for t in "${targets[@]}"; do
  if ! grep -qx "$t" <<<"$all_targets"; then
    echo "fuzz.sh: unknown target $t (one of: $(echo $all_targets))" >&2
    exit 2
  fi
done

output_base="${MONTA_FUZZ_OUTPUT_BASE:-${HOME}/.cache/bazel/_monta_fuzz/$(pwd | md5sum | cut -c1-32)}"
bazel_fuzz=(bazel --output_base="$output_base" --max_idle_secs=300)
labels=("${targets[@]/#///fuzz:}")
if ! "${bazel_fuzz[@]}" build --config=fuzz --color=no --curses=no --output_filter=DONT_MATCH_ANYTHING -- "${labels[@]}"; then
  echo "fuzz.sh: build failed" >&2
  exit 2
fi
bin_dir=$("${bazel_fuzz[@]}" info --config=fuzz bazel-bin 2>/dev/null)

repo=$(pwd)
work_root="${MONTA_FUZZ_WORK:-${HOME}/.cache/monta-fuzz}"
failed=()
for t in "${targets[@]}"; do
  work="${work_root}/${t}"
  mkdir -p "$work/corpus"
  dict=()
  [[ -f fuzz/dict/${t}.dict ]] && dict=(-dict="${repo}/fuzz/dict/${t}.dict")
  echo "fuzz.sh: ${t} ${budget[*]}"
  # The first corpus directory receives new inputs; the committed seeds stay untouched.
  if (cd "$work" && "${bin_dir}/fuzz/${t}" "${budget[@]}" -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/" "${dict[@]}" \
    "$work/corpus" "${repo}/fuzz/corpus/${t}") >"$work/log" 2>&1; then
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$work/log" | tr '\n' ' '
    echo
    echo "fuzz.sh: ${t} PASSED"
  else
    # The report's head (what and where) rather than a deep stack's tail.
    grep -m1 -A24 -E '^==[0-9]+==ERROR|runtime error:|^==[0-9]+== ERROR: libFuzzer' "$work/log" ||
      tail -n 24 "$work/log"
    grep -E '^SUMMARY|Test unit written to' "$work/log" | sort -u
    echo "fuzz.sh: ${t} FAILED (log: $work/log; replay: ${bin_dir}/fuzz/${t} FILE)"
    failed+=("$t")
  fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: ${#failed[@]} of ${#targets[@]} targets failed: ${failed[*]}"
  exit 1
fi
echo "fuzz.sh: all ${#targets[@]} targets passed"
