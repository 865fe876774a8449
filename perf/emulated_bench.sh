#!/usr/bin/env bash
# monta-a2a-bench across an emulated cluster (scripts/emulated-cluster.sh, as root): brings
# up NODES node namespaces with shaped links, runs one bench host per node namespace (its
# ranks on that node's address, meeting the others in a fresh rendezvous directory),
# prints global rank 0's table, and tears the cluster down again.
#
#   perf/emulated_bench.sh [--rate=400mbit] [--nodes=2] [--ranks_per_node=2]
#                          [--bench=PATH] [--bin_dir=DIR] -- BENCH_FLAGS...
#   e.g. perf/emulated_bench.sh --rate=1gbit -- --strategy=flat \
#          --min_bytes=4194304 --max_bytes=67108864 --step_factor=4 --iters=10
#
# --bench defaults to bazel-bin/perf/monta-a2a-bench (-c opt); --bin_dir as for
# emulated-cluster.sh. Exit status: the worst of the hosts' (0 = every data check passed).
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=400mbit NODES=2 RANKS_PER_NODE=2 BENCH="" BIN_DIR=""
while (($#)); do
  case "$1" in
    --rate=*) RATE="${1#*=}" ;;
    --nodes=*) NODES="${1#*=}" ;;
    --ranks_per_node=* | --ranks-per-node=*) RANKS_PER_NODE="${1#*=}" ;;
    --bench=*) BENCH="${1#*=}" ;;
    --bin_dir=* | --bin-dir=*) BIN_DIR="${1#*=}" ;;
    --) shift; break ;;
    *) echo "emulated_bench: unknown option $1 (bench flags go after --)" >&2; exit 2 ;;
  esac
  shift
done
if [[ -z "$BENCH" ]]; then
  bazel build -c opt //perf:monta-a2a-bench >&2
  BENCH="$(bazel info -c opt bazel-bin 2>/dev/null)/perf/monta-a2a-bench"
fi

NAME="eb$$"
RV="$(mktemp -d /tmp/monta-emulated-bench.XXXXXX)"
CLUSTER=(./scripts/emulated-cluster.sh)
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() {
  "${CLUSTER[@]}" down --name="$NAME" >/dev/null 2>&1 || true
  rm -rf "$RV"
}
trap cleanup EXIT
UP=(up --name="$NAME" --nodes="$NODES" --ranks_per_node="$RANKS_PER_NODE" --rate="$RATE"
  --self_bench=false)
[[ -n "$BIN_DIR" ]] && UP+=(--bin_dir="$BIN_DIR")
"${CLUSTER[@]}" "${UP[@]}" >/dev/null

COMMON=(--world=$((NODES * RANKS_PER_NODE)) --ranks_per_host="$RANKS_PER_NODE"
  --rendezvous_dir="$RV" "$@")
echo "# emulated cluster: $NODES nodes x $RANKS_PER_NODE ranks, links shaped at $RATE each way"
pids=()
for ((i = NODES - 1; i >= 1; i--)); do
  "${CLUSTER[@]}" exec --name="$NAME" "node-$i" -- "$BENCH" "${COMMON[@]}" --host_index="$i" \
    --hostname="10.213.1.$((i + 1))" >"$RV/host$i.out" 2>&1 &
  pids+=($!)
done
worst=0
"${CLUSTER[@]}" exec --name="$NAME" node-0 -- "$BENCH" "${COMMON[@]}" --host_index=0 \
  --hostname=10.213.1.1 || worst=$?
for pid in "${pids[@]}"; do
  rc=0
  wait "$pid" || rc=$?
  ((rc > worst)) && worst=$rc
done
for ((i = 1; i < NODES; i++)); do
  [[ -s "$RV/host$i.out" ]] && sed "s/^/host $i: /" "$RV/host$i.out" >&2
done
exit "$worst"
