#!/usr/bin/env bash
# MoE training step with the planner's strategy against flat, on the emulated two-tier
# cluster (scripts/emulated-cluster.sh; as root). Brings up 2 node namespaces x 2 ranks
# with the links shaped at --rate (or uses --cluster=NAME, already up), has the agents
# measure up to 64 MiB (each node alone, then across the link), runs the Verify RPC on the
# same layer at 4 and 32 MiB so that the planner calibrates its model for these nodes
# (driver flag --calibrate_mib; sizes other than the scored ones), starts 4 torch.distributed
# Gloo ranks, each inside its node's namespace (TCP store on node-0's address, Gloo on
# eth0: ranks of one node meet on its local stack, the others across the shaped link),
# and runs perf/moe_step_bench.py: per dispatch size, the plan from GetStrategy, step
# time planned vs flat, the dispatch AllToAll measured vs predicted, and one MoE layer's
# communication in isolation (dispatch and combine, forward and backward, through
# python/monta; the slowest rank, median of --layer_rounds) beside the planner's
# total_seconds_per_layer, then one line `MOE_STEP_BENCH_JSON {...}`. A cluster it
# brought up is torn down on any exit.
#
#   perf/moe_step_bench.sh [--rate=400mbit] [--mib=16,64] [--cluster=NAME]
#                          [--measure=true] [--bin_dir=DIR] [--timeout_s=900]
#                          [-- DRIVER_FLAGS...]      e.g. -- --steps=5 --layer_rounds=7
#
# --cluster=NAME: an emulated cluster of 2 nodes x 2 ranks that is up (e.g. one on which
#   `montactl verify` ran); left up afterwards. --measure=false skips the RunBenchmark
#   and Verify tasks (the planner answers from the curves and calibration it has). --bin_dir: prebuilt monta-planner,
#   monta-agent, montactl (default: bazel build -c opt here). DRIVER_FLAGS: see
#   `python3 perf/moe_step_bench.py --help` with monta installed (--steps, --op_iters,
#   --layer_rounds, --warmup,
#   --hidden, --capacity_factor, --ffn, ...). Exit status: 0 when every rank finished
#   (the bars are printed, not enforced: numbers on a shared host are noisy).
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=400mbit MIB=16,64 CLUSTER="" MEASURE=true BIN_DIR="" TIMEOUT_S=900
while (($#)); do
  case "$1" in
    --rate=*) RATE="${1#*=}" ;;
    --mib=*) MIB="${1#*=}" ;;
    --cluster=*) CLUSTER="${1#*=}" ;;
    --measure=*) MEASURE="${1#*=}" ;;
    --bin_dir=* | --bin-dir=*) BIN_DIR="${1#*=}" ;;
    --timeout_s=*) TIMEOUT_S="${1#*=}" ;;
    --) shift; break ;;
    *) echo "moe_step_bench: unknown option $1 (driver flags go after --)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$MEASURE" == true || "$MEASURE" == false ]] || { echo "moe_step_bench: --measure: true or false" >&2; exit 2; }
[[ "$TIMEOUT_S" =~ ^[0-9]+$ ]] || { echo "moe_step_bench: --timeout_s: seconds" >&2; exit 2; }
/usr/bin/python3 -c 'import torch, grpc' 2>/dev/null ||
  { echo "moe_step_bench: /usr/bin/python3 lacks torch or grpc: run ./scripts/setup.sh" >&2; exit 1; }

CL=(./scripts/emulated-cluster.sh)
WORK="$(mktemp -d /tmp/monta-moe-step-bench.XXXXXX)"
if [[ -z "$CLUSTER" ]]; then
  NAME="msb$$"
  OWN=true
else
  NAME="$CLUSTER"
  OWN=false
  if [[ -f "/tmp/monta-emul-$NAME/cluster.env" ]]; then
    RATE="$(sed -n 's/^RATE=//p' "/tmp/monta-emul-$NAME/cluster.env")"
  fi
fi
WHO=moe_step_bench
# shellcheck source=perf/torch_ranks.sh
. perf/torch_ranks.sh
torch_ranks_setup  # cleanup on exit; monta in a venv of this run: PY

if [[ "$OWN" == true ]]; then
  UP=(up --name="$NAME" --nodes=2 --ranks_per_node=2 --rate="$RATE" --self_bench=true --timeout=120)
  [[ -n "$BIN_DIR" ]] && UP+=(--bin_dir="$BIN_DIR")
  "${CL[@]}" "${UP[@]}" >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log" >&2; exit 1; }
fi
"${CL[@]}" status --name="$NAME" >/dev/null || { echo "moe_step_bench: cluster $NAME is not up" >&2; exit 1; }

export PYTHONDONTWRITEBYTECODE=1
NODE_NAMES="node-0,node-1"
COMMON=(--planner=10.213.0.1:7400 --nodes="$NODE_NAMES" --ranks_per_node=2 --world=4
  --tp=2 --ep=2 --rate="$RATE" --mib="$MIB" --prepare_out="$WORK/before-calibration.json")
echo "# emulated cluster $NAME: 2 nodes x 2 ranks, links shaped at $RATE each way; t=2 e=2"
if [[ "$MEASURE" == true ]]; then
  waited "${CL[@]}" exec --name="$NAME" hub -- timeout "$TIMEOUT_S" "$PY" perf/moe_step_bench.py \
    --role=prepare "${COMMON[@]}" "$@"
fi

# Ranks 3..1 in the background, rank 0 (which prints) in the foreground.
# Always run in a background subshell (&, or waited): exec makes the subshell's pid the
# rank's `timeout`, so killing that pid stops the rank.
# shellcheck disable=SC2317  # called by run_ranks
rank_cmd() { # rank_cmd RANK DRIVER_FLAGS...
  local r=$1 node=$(($1 / 2))
  shift
  exec "${CL[@]}" exec --name="$NAME" "node-$node" -- env RANK="$r" WORLD_SIZE=4 LOCAL_RANK=$((r % 2)) \
    LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.213.1.1 MASTER_PORT=29517 GLOO_SOCKET_IFNAME=eth0 \
    OMP_NUM_THREADS=1 timeout "$TIMEOUT_S" "$PY" perf/moe_step_bench.py --role=rank \
    "${COMMON[@]}" "$@"
}
worst=0
run_ranks 4 rank_cmd "$@" || worst=$?
exit "$worst"
