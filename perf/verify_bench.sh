#!/usr/bin/env bash
# The verification issue's benchmark: montactl verify on emulated two-tier clusters
# (scripts/emulated-cluster.sh, as root), scored by perf/verify_summary.py.
#
# For each configuration: bring the cluster up, measure the inter-node AllToAll curve
# (montactl bench), calibrate the model on CALIBRATE sizes (verify, calibration on), then
# score the SCORE sizes with `verify --skip_calibration`, so every scored prediction
# comes from a calibration fitted on other sizes. Jobs are examples/cpu-dev.yaml (TP 2,
# E 8, top-2, M 1024, bf16) with the sequence length that gives the dispatch size:
# D = 4096 bytes x sequence length per rank (1024 -> 4 MiB, 4096 -> 16 MiB, 16384 -> 64 MiB).
#
#   perf/verify_bench.sh [--out=DIR] [--configs="2x400mbit 2x1gbit 4x400mbit"]
#                        [--bin_dir=DIR]
#
# Writes DIR/<nodes>x<rate>-<role>-<MiB>mib.json (the VerifyReply) and prints the
# summary with the issue's bars. Exit status: 0 every bar met, 1 a bar missed, 2 usage,
# 3 no namespaces here.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="" CONFIGS="2x400mbit 2x1gbit 4x400mbit" BIN_DIR=""
while (($#)); do
  case "$1" in
    --out=*) OUT="${1#*=}" ;;
    --configs=*) CONFIGS="${1#*=}" ;;
    --bin_dir=* | --bin-dir=*) BIN_DIR="${1#*=}" ;;
    *) echo "verify_bench: unknown option $1" >&2; exit 2 ;;
  esac
  shift
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

# job NODES SEQUENCE_LENGTH -> a job file: TP 2 inside a node, EP = NODES across them.
job() {
  local nodes=$1 seq=$2 f="$OUT/job-${1}n-${2}.yaml"
  sed -e "s/sequence_length: 2048/sequence_length: $seq/" \
    -e "s/name: cpu-dev/name: verify-${nodes}n-$seq/" \
    -e "s/world_size: 4/world_size: $((2 * nodes))/" \
    -e "s/expert_parallel_size: 2/expert_parallel_size: $nodes/" \
    -e "s/data_parallel_size: 2/data_parallel_size: $nodes/" examples/cpu-dev.yaml >"$f"
  echo "$f"
}

# verify CONFIG ROLE NODES SEQ [FLAGS...]
verify() {
  local config=$1 role=$2 nodes=$3 seq=$4
  shift 4
  local names
  names=$(seq -s, -f "node-%g" 0 $((nodes - 1)))
  local mib=$((seq * 4096 / 1048576))
  local f="$OUT/$config-$role-${mib}mib.json"
  echo "# $config: verify $role at $mib MiB per rank" >&2
  "${CLUSTER[@]}" ctl --name="$NAME" -- --output=json verify --job "$(job "$nodes" "$seq")" \
    --node_names "$names" --svg "$OUT/$config-$role-${mib}mib.svg" "$@" >"$f"
}

for config in $CONFIGS; do
  nodes="${config%%x*}" rate="${config#*x}"
  "${CLUSTER[@]}" up --name="$NAME" --nodes="$nodes" --ranks_per_node=2 --rate="$rate" \
    --bin_dir="$BIN_DIR" >/dev/null
  names=$(seq -s, -f "node-%g" 0 $((nodes - 1)))
  "${CLUSTER[@]}" ctl --name="$NAME" -- bench --nodes "$names" \
    --bench_timeout_seconds=300 >"$OUT/$config-bench.txt"
  if ((nodes == 2)); then
    verify "$config" calibrate 2 2048   # 8 MiB
    verify "$config" calibrate 2 8192   # 32 MiB
    for seq in 1024 4096 16384; do      # 4, 16, 64 MiB
      verify "$config" score 2 "$seq" --skip_calibration
    done
  else
    verify "$config" calibrate "$nodes" 2048
    verify "$config" score "$nodes" 4096 --skip_calibration
  fi
  "${CLUSTER[@]}" down --name="$NAME" >/dev/null
done
/usr/bin/python3 perf/verify_summary.py "$OUT"
