#!/usr/bin/env bash
# An emulated two-tier cluster on one Linux machine (root): every node is a network
# namespace with its own loopback stack, the nodes hang off one Linux bridge through
# veth pairs shaped with tc tbf, and the Monta processes run inside:
#
#   namespace NAME-hub : bridge br0 (10.213.0.1/16), monta-planner on 10.213.0.1:7400
#   namespace NAME-nI  : eth0 = 10.213.1.(I+1)/16, one monta-agent as node "node-I"
#                        benchmarking on that address (--bench_address)
#
# Traffic between ranks of one node stays on that namespace's loopback; traffic between
# nodes crosses the bridge. The link of node I is shaped in both directions at --rate: tbf
# on the node's eth0 (what the node sends) and tbf on the bridge port vI (what it
# receives). Addresses are 10.213.0.0/16 inside these namespaces only: the bridge lives in
# the hub namespace, not in the root one, so nothing of the host's network is touched and
# several clusters (different --name) can run at once with the same addresses.
#
#   scripts/emulated-cluster.sh up [--name=monta-emul] [--nodes=2] [--ranks_per_node=2]
#                                  [--rate=400mbit] [--bin_dir=DIR] [--run_dir=DIR]
#                                  [--self_bench=true] [--timeout=60]
#   scripts/emulated-cluster.sh status [--name=...]
#   scripts/emulated-cluster.sh exec [--name=...] hub|node-I -- COMMAND...
#   scripts/emulated-cluster.sh ctl [--name=...] -- MONTACTL_ARGS...   (montactl in the hub)
#   scripts/emulated-cluster.sh down [--name=...]
#
# --ranks_per_node becomes the planner's --cpu_ranks_per_node: the ranks each agent runs
# in a benchmark that does not ask for a number. --bin_dir holds monta-planner,
# monta-agent and montactl (default: built here with `bazel build -c opt`). The binaries
# and logs go to --run_dir (default /tmp/monta-emul-NAME). `down` stops every process in
# the cluster's namespaces and deletes the namespaces (the bridge and veths go with them).
#
# gRPC runs in plaintext (--insecure on the planner, the agents and montactl): the
# planner is reachable only inside the cluster's own namespaces, which nothing else on
# the host can enter without root. Authorization is therefore off in the emulated
# cluster; mutual TLS is exercised by scripts/local-cluster.sh and the tests.
#
# Exit status: 0 ok, 1 failure, 2 usage, 3 this machine cannot make namespaces, veths,
# bridges or tbf qdiscs (not root, or a kernel/container without them).
set -euo pipefail

NAME=monta-emul
NODES=2
RANKS_PER_NODE=2
RATE=400mbit
BIN_DIR=""
RUN_DIR=""
SELF_BENCH=true
TIMEOUT_S=60
HUB_ADDR=10.213.0.1
PLANNER_PORT=7400

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
  exit 2
}

die() {
  echo "emulated-cluster: $*" >&2
  exit 1
}

cannot() {
  echo "emulated-cluster: cannot build the emulated network here: $*" >&2
  exit 3
}

parse_options() {
  ARGS=()
  while (($#)); do
    local opt="$1"
    shift
    if [[ "$opt" == "--" ]]; then
      ARGS+=("$@")
      break
    fi
    if [[ "$opt" != --* ]]; then
      ARGS+=("$opt")
      continue
    fi
    local key="${opt%%=*}" value="${opt#*=}"
    [[ "$opt" == *=* ]] || die "option $opt needs a value ($opt=...)"
    key="${key//-/_}"
    case "$key" in
      __name) NAME="$value" ;;
      __nodes) NODES="$value" ;;
      __ranks_per_node) RANKS_PER_NODE="$value" ;;
      __rate) RATE="$value" ;;
      __bin_dir) BIN_DIR="$value" ;;
      __run_dir) RUN_DIR="$value" ;;
      __self_bench) SELF_BENCH="$value" ;;
      __timeout) TIMEOUT_S="$value" ;;
      *) echo "emulated-cluster: unknown option $opt" >&2; usage ;;
    esac
  done
  [[ "$NAME" =~ ^[a-z][a-z0-9-]{0,30}$ ]] || die "--name: expected [a-z][a-z0-9-]{0,30}, got '$NAME'"
  if ! [[ "$NODES" =~ ^[0-9]+$ ]] || ((NODES < 1 || NODES > 250)); then
    die "--nodes: expected 1..250"
  fi
  if ! [[ "$RANKS_PER_NODE" =~ ^[0-9]+$ ]] || ((RANKS_PER_NODE < 1 || RANKS_PER_NODE > 64)); then
    die "--ranks_per_node: expected 1..64"
  fi
  [[ "$RATE" =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit)$ ]] || die "--rate: expected e.g. 400mbit or 1gbit, got '$RATE'"
  [[ "$SELF_BENCH" == true || "$SELF_BENCH" == false ]] || die "--self_bench: true or false"
  [[ "$TIMEOUT_S" =~ ^[0-9]+$ ]] || die "--timeout: seconds"
  RUN_DIR="${RUN_DIR:-/tmp/monta-emul-$NAME}"
  HUB="$NAME-hub"
}

node_ns() { echo "$NAME-n$1"; }
node_addr() { echo "10.213.1.$(($1 + 1))"; }

# The namespaces of this cluster that exist now (exact names, so "a" never matches "a-b").
cluster_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NAME}-(hub|n[0-9]+)\$" || true
}

# tbf rate in bytes/s for the burst: at least one 64 KiB GSO segment, else ~2 ms of rate.
tbf_burst_bytes() {
  local number="${RATE%%[kmg]bit}" unit="${RATE#"${RATE%%[kmg]bit}"}" mult=1
  case "$unit" in kbit) mult=1000 ;; mbit) mult=1000000 ;; gbit) mult=1000000000 ;; esac
  local bytes_per_s
  bytes_per_s=$(awk -v n="$number" -v m="$mult" 'BEGIN { printf "%d", n * m / 8 }')
  local burst=$((bytes_per_s / 500))
  ((burst < 65536)) && burst=65536
  echo "$burst"
}

shape() { # shape NAMESPACE DEVICE
  tc -n "$1" qdisc replace dev "$2" root tbf rate "$RATE" burst "$(tbf_burst_bytes)" \
    latency 50ms || cannot "tc tbf on $2 in $1 failed"
}

make_network() {
  ip netns add "$HUB" 2>/dev/null || cannot "ip netns add failed (needs root and CAP_SYS_ADMIN)"
  ip -n "$HUB" link set lo up
  ip -n "$HUB" link add br0 type bridge 2>/dev/null || cannot "no Linux bridge (module 'bridge')"
  ip -n "$HUB" addr add "$HUB_ADDR/16" dev br0
  ip -n "$HUB" link set br0 up
  local i ns
  for ((i = 0; i < NODES; i++)); do
    ns="$(node_ns "$i")"
    ip netns add "$ns" || cannot "ip netns add $ns failed"
    ip -n "$ns" link set lo up
    ip -n "$HUB" link add "v$i" type veth peer name eth0 netns "$ns" 2>/dev/null ||
      cannot "no veth pairs (module 'veth')"
    ip -n "$HUB" link set "v$i" master br0
    ip -n "$HUB" link set "v$i" up
    ip -n "$ns" addr add "$(node_addr "$i")/16" dev eth0
    ip -n "$ns" link set eth0 up
    shape "$ns" eth0 # what node i sends
    shape "$HUB" "v$i" # what node i receives
  done
}

copy_binaries() {
  if [[ -z "$BIN_DIR" ]]; then
    (cd "$(dirname "$0")/.." &&
      bazel build -c opt //server:monta-planner //agent:monta-agent //client:montactl >&2)
    local bin
    bin="$(cd "$(dirname "$0")/.." && bazel info -c opt bazel-bin 2>/dev/null)"
    cp -f "$bin/server/monta-planner" "$bin/agent/monta-agent" "$bin/client/montactl" "$RUN_DIR/"
  else
    local b
    for b in monta-planner monta-agent montactl; do
      [[ -x "$BIN_DIR/$b" ]] || die "--bin_dir: $BIN_DIR/$b missing"
      cp -fL "$BIN_DIR/$b" "$RUN_DIR/$b"
    done
  fi
}

montactl_in_hub() {
  ip netns exec "$HUB" "$RUN_DIR/montactl" --planner="$HUB_ADDR:$PLANNER_PORT" --insecure "$@"
}

# Polls until `montactl nodes` shows $NODES alive nodes (and, with self_bench, their
# intra-node curves), or fails after $TIMEOUT_S.
wait_ready() {
  local deadline=$((SECONDS + TIMEOUT_S)) json alive measured
  while ((SECONDS < deadline)); do
    json="$(montactl_in_hub --output=json nodes 2>/dev/null || true)"
    alive=$(grep -c '"NODE_STATE_ALIVE"' <<<"$json" || true)
    measured=$(grep -c '"SCOPE_INTRA_NODE"' <<<"$json" || true)
    if ((alive >= NODES)) && { [[ "$SELF_BENCH" == false ]] || ((measured >= NODES)); }; then
      return 0
    fi
    local pid
    local pidfile
    for pidfile in "$RUN_DIR"/*.pid; do
      kill -0 "$(<"$pidfile")" 2>/dev/null || die "$(basename "$pidfile" .pid) exited; logs in $RUN_DIR"
    done
    sleep 0.5
  done
  die "$alive of $NODES nodes alive (intra-node curves: $measured) after ${TIMEOUT_S}s; logs in $RUN_DIR"
}

start_processes() {
  ip netns exec "$HUB" "$RUN_DIR/monta-planner" --listen="$HUB_ADDR:$PLANNER_PORT" --insecure \
    --metrics_listen="$HUB_ADDR:7401" --db="$RUN_DIR/planner.db" \
    --cpu_ranks_per_node="$RANKS_PER_NODE" --bench_on_register="$SELF_BENCH" \
    </dev/null >"$RUN_DIR/planner.log" 2>&1 &
  echo $! >"$RUN_DIR/planner.pid"
  local i
  for ((i = 0; i < NODES; i++)); do
    ip netns exec "$(node_ns "$i")" "$RUN_DIR/monta-agent" --planner="$HUB_ADDR:$PLANNER_PORT" --insecure \
      --node_name="node-$i" --bench_address="$(node_addr "$i")" \
      --metrics_listen="$(node_addr "$i"):7402" </dev/null >"$RUN_DIR/agent-node-$i.log" 2>&1 &
    echo $! >"$RUN_DIR/agent-node-$i.pid"
  done
}

# EXIT trap while `up` runs: a failed start leaves nothing behind (status kept).
undo_failed_up() {
  local rc=$?
  if ((rc != 0)); then cmd_down >/dev/null 2>&1 || true; fi
  exit "$rc"
}

cmd_up() {
  [[ $EUID -eq 0 ]] || cannot "needs root (network namespaces)"
  if ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    cannot "needs iproute2 (ip, tc)"
  fi
  [[ -z "$(cluster_namespaces)" ]] || die "cluster '$NAME' is already up; run: $0 down --name=$NAME"
  mkdir -p "$RUN_DIR"
  rm -f "$RUN_DIR"/*.pid "$RUN_DIR/planner.db"
  trap undo_failed_up EXIT
  make_network
  copy_binaries
  start_processes
  wait_ready
  trap - EXIT
  cat >"$RUN_DIR/cluster.env" <<EOT
NAME=$NAME
NODES=$NODES
RANKS_PER_NODE=$RANKS_PER_NODE
RATE=$RATE
EOT
  local nodes
  nodes="$(seq -s, -f 'node-%g' 0 $((NODES - 1)))"
  montactl_in_hub nodes
  cat <<EOT

Emulated cluster '$NAME' is up: $NODES nodes x $RANKS_PER_NODE ranks, node links shaped
at $RATE each way, planner on $HUB_ADDR:$PLANNER_PORT in namespace $HUB, logs in $RUN_DIR.

  $0 ctl --name=$NAME -- nodes
  $0 ctl --name=$NAME -- bench --nodes $nodes
  $0 ctl --name=$NAME -- plan --job examples/cpu-dev.yaml --node_names $nodes
  $0 exec --name=$NAME node-0 -- ip addr
  $0 down --name=$NAME
EOT
}

cmd_down() {
  local ns pids pid deadline
  for ns in $(cluster_namespaces); do
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    for pid in $pids; do kill -TERM "$pid" 2>/dev/null || true; done
  done
  # Agents deregister on SIGTERM; give everything a few seconds, then SIGKILL.
  deadline=$((SECONDS + 5))
  for ns in $(cluster_namespaces); do
    while [[ -n "$(ip netns pids "$ns" 2>/dev/null)" ]] && ((SECONDS < deadline)); do sleep 0.1; done
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for ns in $(cluster_namespaces); do
    ip netns del "$ns" || echo "emulated-cluster: could not delete namespace $ns" >&2
  done
  rm -f "$RUN_DIR"/*.pid "$RUN_DIR/cluster.env" 2>/dev/null || true
  [[ -z "$(cluster_namespaces)" ]] || die "namespaces left: $(cluster_namespaces | tr '\n' ' ')"
  echo "emulated cluster '$NAME' is down (logs in $RUN_DIR)"
}

cmd_status() {
  local namespaces
  namespaces="$(cluster_namespaces)"
  if [[ -z "$namespaces" ]]; then
    echo "emulated cluster '$NAME' is down"
    return 1
  fi
  [[ -f "$RUN_DIR/cluster.env" ]] && sed 's/^/  /' "$RUN_DIR/cluster.env"
  local ns
  for ns in $namespaces; do
    echo "namespace $ns: processes $(ip netns pids "$ns" | tr '\n' ' ')"
    tc -n "$ns" -s qdisc show | grep -A2 '^qdisc tbf' | sed 's/^/    /' || true
  done
  montactl_in_hub nodes
}

# Resolves hub | node-I | I to a namespace of this cluster.
target_ns() {
  case "$1" in
    hub) echo "$HUB" ;;
    node-[0-9]*) node_ns "${1#node-}" ;;
    [0-9]*) node_ns "$1" ;;
    *) die "expected hub or node-I, got '$1'" ;;
  esac
}

main() {
  local cmd="${1:-}"
  (($#)) && shift
  parse_options "$@"
  case "$cmd" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    exec)
      ((${#ARGS[@]} >= 2)) || usage
      exec ip netns exec "$(target_ns "${ARGS[0]}")" "${ARGS[@]:1}"
      ;;
    ctl) montactl_in_hub "${ARGS[@]}" ;;
    *) usage ;;
  esac
}

main "$@"
