#!/usr/bin/env bash
# Issue 19's rank-order bar on the emulated fabric (scripts/emulated-cluster.sh --racks=2;
# as root): 2 racks x 2 nodes x 2 ranks, node links shaped at --rate, the racks joined by
# one link at --uplink_rate (default 400mbit and 100mbit: the 4:1 fabric). A job with EP
# groups of 2 nodes (e = 4, t = 1) and data parallel 2, launched in the worst order (the
# racks interleaved: every EP group crosses the racks). The agents measure each node alone,
# then one round of fabric level measurements (perf/fabric_levels.sh: a pair inside each
# rack, both racks' at once; a pair across; all four nodes at once) up to --mib: the
# planner prices the node links from the pairs inside the racks and each rack uplink from
# its level measurement (FabricLink.measured), as any job on these nodes would be priced.
# Then 8 torch.distributed Gloo ranks, each inside its node's namespace, run
# perf/fabric_order_bench.py: rank 0 asks GetStrategy on the nodes in launch order
# (monta.plan_on_nodes), every rank builds the groups as launched and in the advised order
# (MoeGroups.build(node_order=...)), and each layout's AllToAll of --mib MiB per rank is
# timed. Prints predicted vs measured per order and `FABRIC_ORDER_BENCH_JSON {...}`.
# The bars (advised >= 2x faster than the given order, both predictions within 15%) are
# printed, not enforced: a shared host's numbers are noisy. A cluster it brought up is torn
# down on any exit.
#
#   perf/fabric_order_bench.sh [--rate=400mbit] [--uplink_rate=100mbit] [--mib=16]
#                              [--cluster=NAME] [--bin_dir=DIR] [--timeout_s=600]
#                              [-- DRIVER_FLAGS...]       e.g. -- --iters=7 --warmup=2
#
# --cluster=NAME: an emulated fabric of 2 racks x 2 nodes x 2 ranks that is up (left up
# afterwards; its pairs are measured again). --bin_dir: prebuilt monta-planner,
# monta-agent, montactl (default: bazel build -c opt here). Exit status: 0 when every rank
# finished.
set -euo pipefail
cd "$(dirname "$0")/.."

RATE=400mbit UPLINK=100mbit MIB=16 CLUSTER="" BIN_DIR="" TIMEOUT_S=600
while (($#)); do
  case "$1" in
    --rate=*) RATE="${1#*=}" ;;
    --uplink_rate=*) UPLINK="${1#*=}" ;;
    --mib=*) MIB="${1#*=}" ;;
    --cluster=*) CLUSTER="${1#*=}" ;;
    --bin_dir=* | --bin-dir=*) BIN_DIR="${1#*=}" ;;
    --timeout_s=*) TIMEOUT_S="${1#*=}" ;;
    --) shift; break ;;
    *) echo "fabric_order_bench: unknown option $1 (driver flags go after --)" >&2; exit 2 ;;
  esac
  shift
done
[[ "$MIB" =~ ^[1-9][0-9]*$ ]] || { echo "fabric_order_bench: --mib: a positive integer" >&2; exit 2; }
[[ "$TIMEOUT_S" =~ ^[0-9]+$ ]] || { echo "fabric_order_bench: --timeout_s: seconds" >&2; exit 2; }
/usr/bin/python3 -c 'import torch, grpc' 2>/dev/null ||
  { echo "fabric_order_bench: /usr/bin/python3 lacks torch or grpc: run ./scripts/setup.sh" >&2; exit 1; }

CL=(./scripts/emulated-cluster.sh)
WORK="$(mktemp -d /tmp/monta-fabric-order-bench.XXXXXX)"
if [[ -z "$CLUSTER" ]]; then
  NAME="fob$$"
  OWN=true
else
  NAME="$CLUSTER"
  OWN=false
fi
WHO=fabric_order_bench
# shellcheck source=perf/torch_ranks.sh
. perf/torch_ranks.sh
torch_ranks_setup  # cleanup on exit; monta in a venv of this run: PY

if [[ "$OWN" == true ]]; then
  UP=(up --name="$NAME" --racks=2 --nodes=2 --ranks_per_node=2 --rate="$RATE"
    --uplink_rate="$UPLINK" --self_bench=true --timeout=120)
  [[ -n "$BIN_DIR" ]] && UP+=(--bin_dir="$BIN_DIR")
  waited "${CL[@]}" "${UP[@]}" >"$WORK/up.log" 2>&1 || { cat "$WORK/up.log" >&2; exit 1; }
fi
"${CL[@]}" status --name="$NAME" >/dev/null || { echo "fabric_order_bench: cluster $NAME is not up" >&2; exit 1; }
echo "# emulated fabric $NAME: 2 racks x 2 nodes x 2 ranks, node links $RATE, racks joined at $UPLINK"
# The levels: node links inside each rack, each rack's uplink with all four nodes at once.
# shellcheck source=perf/fabric_levels.sh
. perf/fabric_levels.sh
waited fabric_level_round "$NAME" $((MIB << 20)) "$WORK/fabric" ||
  { cat "$WORK/fabric-levels.txt" >&2; exit 1; }
cat "$WORK/fabric-fabric.txt"

export PYTHONDONTWRITEBYTECODE=1
# Launch order: the racks interleaved, so that every EP group (2 consecutive nodes) crosses.
NODES=(r0-n0 r1-n0 r0-n1 r1-n1)
DRIVER=(perf/fabric_order_bench.py --planner=10.213.0.1:7400 --world=8 --ranks_per_node=2
  --ep=4 --mib="$MIB" --timeout_s="$TIMEOUT_S")
# shellcheck disable=SC2317  # called by run_ranks
rank_cmd() { # rank_cmd RANK DRIVER_FLAGS...
  local r=$1 node=${NODES[$(($1 / 2))]}
  shift
  exec "${CL[@]}" exec --name="$NAME" "$node" -- env RANK="$r" WORLD_SIZE=8 \
    LOCAL_RANK=$((r % 2)) LOCAL_WORLD_SIZE=2 MASTER_ADDR=10.213.1.1 MASTER_PORT=29519 \
    GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 MONTA_NODE_NAME="$node" \
    timeout "$TIMEOUT_S" "$PY" "${DRIVER[@]}" "$@"
}
worst=0
run_ranks 8 rank_cmd "$@" || worst=$?
exit "$worst"
