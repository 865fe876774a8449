#!/usr/bin/env bash
# Encodes the readable seeds (fuzz/seeds/<target>/NAME.txtpb, protobuf text format) into the
# binary corpus the proto fuzz targets read (fuzz/corpus/<target>/NAME.pb). Run after editing
# a seed and commit both; //fuzz:seeds_test (this script with --check) fails when they differ.
#   fuzz/seeds/encode.sh [--check]
set -euo pipefail
# Under `bazel test` the working directory is already the workspace root (runfiles).
[[ -n ${TEST_SRCDIR:-} ]] || cd "$(dirname "$0")/../.."
check=0
[[ ${1:-} == --check ]] && check=1
declare -A message=(
  [strategy_request_fuzz]=monta.v1.StrategyRequest:proto/monta/v1/strategy.proto
  [register_fuzz]=monta.v1.RegisterRequest:proto/monta/v1/agent.proto
  [report_benchmark_fuzz]=monta.v1.ReportBenchmarkRequest:proto/monta/v1/agent.proto
)
status=0
for target in "${!message[@]}"; do
  type=${message[$target]%%:*}
  file=${message[$target]#*:}
  [[ $check -eq 1 ]] || mkdir -p "fuzz/corpus/$target"
  for seed in fuzz/seeds/"$target"/*.txtpb; do
    out="fuzz/corpus/$target/$(basename "$seed" .txtpb).pb"
    encoded=$(mktemp)
    protoc -I. --encode="$type" "$file" <"$seed" >"$encoded"
    if [[ $check -eq 1 ]]; then
      if ! cmp -s "$encoded" "$out"; then
        echo "encode.sh: $out is not the encoding of $seed (run fuzz/seeds/encode.sh)" >&2
        status=1
      fi
    else
      mv "$encoded" "$out"
      chmod 644 "$out"
    fi
    rm -f "$encoded"
  done
done
exit $status
