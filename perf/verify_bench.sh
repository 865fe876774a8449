#!/usr/bin/env bash
# Issue 18's verify benchmark: layer-scope `montactl verify` (each candidate runs one MoE
# layer's dispatch and combine, forward and backward, in the job's expert layout) on
# emulated clusters (scripts/emulated-cluster.sh, as root), scored by
# perf/verify_summary.py.
#
# For each configuration (NODESxRATE, 2 ranks per node) and each expert layout (tp:
# experts_tensor_parallel true; not_tp: false): bring the cluster up, measure the inter-node
# AllToAll curve (montactl bench), calibrate the model on the CALIBRATE sizes (verify,
# calibration on), then score the SCORE sizes with `verify --skip_calibration`, so every
# scored prediction comes from a calibration fitted on other sizes; the same replies carry
# each candidate's uncalibrated prediction, scored too. Jobs are examples/cpu-dev.yaml (TP 2,
# E 8, top-2, M 1024, bf16) with the sequence length that gives the dispatch size:
# D = 4096 bytes x sequence length per rank (1024 -> 4 MiB, 4096 -> 16 MiB, 16384 -> 64 MiB).
#
#   perf/verify_bench.sh [--out=DIR] [--configs="2x400mbit 2x1gbit"] [--layouts="tp not_tp"]
#                        [--calibrate_mib="8 32"] [--score_mib="4 16 64"] [--iterations=N]
#                        [--scope=layer|op] [--bin_dir=DIR]
#   perf/verify_bench.sh --smallest     # one config, both layouts, 8 -> 4 MiB, 3 iterations
#
# Writes DIR/<config>-<layout>-<role>-<MiB>mib.json (the VerifyReply) and
# DIR/<config>-planner.db (the planner's file: the curves every prediction was priced from and
# the runs in order; `bazel run //perf:calibration_replay -- --db=... --config=... --out=...`
# replays them through another build's planning code), and prints the summary with the
# issue's bars. Exit status: 0 every bar met, 1 a bar missed, 2 usage, 3 no
# namespaces here.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="" CONFIGS="2x400mbit 2x1gbit" LAYOUTS="tp not_tp" BIN_DIR=""
CALIBRATE_MIB="8 32" SCORE_MIB="4 16 64" ITERATIONS=0 SCOPE=layer
while (($#)); do
  case "$1" in
    --out=*) OUT="${1#*=}" ;;
    --configs=*) CONFIGS="${1#*=}" ;;
    --layouts=*) LAYOUTS="${1#*=}" ;;
    --calibrate_mib=*) CALIBRATE_MIB="${1#*=}" ;;
    --score_mib=*) SCORE_MIB="${1#*=}" ;;
    --iterations=*) ITERATIONS="${1#*=}" ;;
    --scope=*) SCOPE="${1#*=}" ;;
    --smallest) CONFIGS="2x1gbit" CALIBRATE_MIB="8" SCORE_MIB="4" ITERATIONS=3 ;;
    --bin_dir=* | --bin-dir=*) BIN_DIR="${1#*=}" ;;
    *) echo "verify_bench: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
for layout in $LAYOUTS; do
  [[ "$layout" == tp || "$layout" == not_tp ]] ||
    { echo "verify_bench: --layouts: tp or not_tp, got $layout" >&2; exit 2; }
done
OUT="${OUT:-$(mktemp -d /tmp/monta-verify-bench.XXXXXX)}"
mkdir -p "$OUT"
if [[ -z "$BIN_DIR" ]]; then
  bazel build -c opt //server:monta-planner //agent:monta-agent //client:montactl >&2
  BIN_DIR="$OUT/bin"
  mkdir -p "$BIN_DIR"
  BAZEL_BIN="$(bazel info -c opt bazel-bin 2>/dev/null)"
  cp -f "$BAZEL_BIN/server/monta-planner" "$BAZEL_BIN/agent/monta-agent" \
    "$BAZEL_BIN/client/montactl" "$BIN_DIR/"
fi

NAME="vb$$"
CLUSTER=(./scripts/emulated-cluster.sh)
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() { "${CLUSTER[@]}" down --name="$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# job NODES MIB LAYOUT -> a job file: TP 2 inside a node, EP = NODES across them, D = MIB.
job() {
  local nodes=$1 seq=$(($2 * 256)) layout=$3
  local f="$OUT/job-${nodes}n-$2mib-$layout.yaml"
  local tp=true
  [[ "$layout" == not_tp ]] && tp=false
  sed -e "s/sequence_length: 2048/sequence_length: $seq/" \
    -e "s/name: cpu-dev/name: verify-${nodes}n-$2mib-$layout/" \
    -e "s/world_size: 4/world_size: $((2 * nodes))/" \
    -e "s/expert_parallel_size: 2/expert_parallel_size: $nodes/" \
    -e "s/data_parallel_size: 2/data_parallel_size: $nodes/" \
    -e "s/experts_tensor_parallel: true/experts_tensor_parallel: $tp/" \
    examples/cpu-dev.yaml >"$f"
  echo "$f"
}

# verify CONFIG LAYOUT ROLE NODES MIB [FLAGS...]
verify() {
  local config=$1 layout=$2 role=$3 nodes=$4 mib=$5
  shift 5
  local names
  names=$(seq -s, -f "node-%g" 0 $((nodes - 1)))
  local base="$OUT/$config-$layout-$role-${mib}mib"
  echo "# $config $layout: verify ($SCOPE) $role at $mib MiB per rank" >&2
  "${CLUSTER[@]}" ctl --name="$NAME" -- --output=json verify --job "$(job "$nodes" "$mib" "$layout")" \
    --node_names "$names" --scope="$SCOPE" --iterations="$ITERATIONS" --svg "$base.svg" \
    --verify_timeout_seconds=1200 "$@" >"$base.json" || echo "# verify failed" >&2
}

for config in $CONFIGS; do
  nodes="${config%%x*}" rate="${config#*x}"
  set +e
  "${CLUSTER[@]}" up --name="$NAME" --nodes="$nodes" --ranks_per_node=2 --rate="$rate" \
    --bin_dir="$BIN_DIR" >/dev/null
  up=$?
  set -e
  ((up == 0)) || exit "$up"
  names=$(seq -s, -f "node-%g" 0 $((nodes - 1)))
  "${CLUSTER[@]}" ctl --name="$NAME" -- bench --nodes "$names" \
    --bench_timeout_seconds=300 >"$OUT/$config-bench.txt"
  for layout in $LAYOUTS; do
    for mib in $CALIBRATE_MIB; do verify "$config" "$layout" calibrate "$nodes" "$mib"; done
    for mib in $SCORE_MIB; do
      verify "$config" "$layout" score "$nodes" "$mib" --skip_calibration
    done
  done
  "${CLUSTER[@]}" down --name="$NAME" >/dev/null
  # The planner's file (its curves, and every verify request and reply in
  # order), for perf/calibration_replay: the cluster's default run directory.
  db="/tmp/monta-emul-$NAME/planner.db"
  if [[ -f "$db" ]]; then cp -f "$db" "$OUT/$config-planner.db"; fi
done
/usr/bin/python3 perf/verify_summary.py "$OUT"
