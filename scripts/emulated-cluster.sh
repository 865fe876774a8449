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
# With --racks=R the cluster is a fabric: R racks of --nodes nodes each, every rack a
# bridge in the hub namespace (rk0, rk1, ...), the racks joined through a spine:
#
#   R = 2    the two rack bridges joined by one veth pair (sp0 on rk0, sp1 on rk1), tbf at
#            --uplink_rate on both ends (each direction of the spine link);
#   R > 2    a spine bridge (spine) and, per rack r, an uplink veth pair (urR on rkR, usR on
#            spine), tbf at --uplink_rate on both ends;
#   namespace NAME-rR-nI : eth0 = 10.213.(R+1).(I+1)/16, agent as node "rR-nI" on rack rR's
#            bridge, shaped both ways at --rate as above;
#   the planner's address (10.213.0.1) on rk0 (R <= 2) or the spine bridge (R > 2).
# The script writes the matching fabric map (RUN_DIR/fabric-map.yaml: racks rR, their
# nodes, each uplink at --uplink_rate) and starts the planner with --fabric_map_file, so
# `ctl -- topology --fabric` shows the racks. Without --racks the cluster is flat, as above.
#
#   scripts/emulated-cluster.sh up [--name=monta-emul] [--nodes=2] [--ranks_per_node=2]
#                                  [--rate=400mbit] [--racks=R [--uplink_rate=RATE]]
#                                  [--bin_dir=DIR] [--run_dir=DIR]
#                                  [--self_bench=true] [--timeout=60]
#   scripts/emulated-cluster.sh status [--name=...]
#   scripts/emulated-cluster.sh exec [--name=...] hub|node-I|rR-nI -- COMMAND...
#   scripts/emulated-cluster.sh ctl [--name=...] -- MONTACTL_ARGS...   (montactl in the hub)
#   scripts/emulated-cluster.sh down [--name=...]
#
# --nodes is the number of nodes, or with --racks the nodes of each rack (at most 250 in
# all). --uplink_rate defaults to --rate. --ranks_per_node becomes the planner's
# --cpu_ranks_per_node: the ranks each agent runs in a benchmark that does not ask for a
# number. --bin_dir holds monta-planner,
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
RACKS=""
UPLINK_RATE=""
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
      __racks) RACKS="$value" ;;
      __uplink_rate) UPLINK_RATE="$value" ;;
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
  if [[ -n "$RACKS" ]]; then
    if ! [[ "$RACKS" =~ ^[0-9]+$ ]] || ((RACKS < 1 || RACKS > 16)); then
      die "--racks: expected 1..16"
    fi
    ((RACKS * NODES <= 250)) || die "--racks x --nodes: at most 250 nodes in all"
    UPLINK_RATE="${UPLINK_RATE:-$RATE}"
    [[ "$UPLINK_RATE" =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit)$ ]] ||
      die "--uplink_rate: expected e.g. 100mbit or 1gbit, got '$UPLINK_RATE'"
  elif [[ -n "$UPLINK_RATE" ]]; then
    die "--uplink_rate needs --racks"
  fi
  [[ "$SELF_BENCH" == true || "$SELF_BENCH" == false ]] || die "--self_bench: true or false"
  [[ "$TIMEOUT_S" =~ ^[0-9]+$ ]] || die "--timeout: seconds"
  RUN_DIR="${RUN_DIR:-/tmp/monta-emul-$NAME}"
  HUB="$NAME-hub"
}

node_ns() { echo "$NAME-n$1"; }
node_addr() { echo "10.213.1.$(($1 + 1))"; }
# Rack r's node i (a fabric, --racks): name, namespace, address.
rack_node() { echo "r$1-n$2"; }
rack_node_ns() { echo "$NAME-r$1-n$2"; }
rack_node_addr() { echo "10.213.$(($1 + 1)).$(($2 + 1))"; }

# Every node of the cluster as "NAME NAMESPACE ADDRESS", one per line.
cluster_nodes() {
  local r i
  if [[ -z "$RACKS" ]]; then
    for ((i = 0; i < NODES; i++)); do echo "node-$i $(node_ns "$i") $(node_addr "$i")"; done
    return
  fi
  for ((r = 0; r < RACKS; r++)); do
    for ((i = 0; i < NODES; i++)); do
      echo "$(rack_node "$r" "$i") $(rack_node_ns "$r" "$i") $(rack_node_addr "$r" "$i")"
    done
  done
}

# The namespaces of this cluster that exist now (exact names, so "a" never matches "a-b").
cluster_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' |
    grep -E "^${NAME}-(hub|n[0-9]+|r[0-9]+-n[0-9]+)\$" || true
}

# tbf burst in bytes for RATE (default --rate): at least one 64 KiB GSO segment, else
# ~2 ms of rate.
tbf_burst_bytes() {
  local rate="${1:-$RATE}"
  local number="${rate%%[kmg]bit}" unit="${rate#"${rate%%[kmg]bit}"}" mult=1
  case "$unit" in kbit) mult=1000 ;; mbit) mult=1000000 ;; gbit) mult=1000000000 ;; esac
  local bytes_per_s
  bytes_per_s=$(awk -v n="$number" -v m="$mult" 'BEGIN { printf "%d", n * m / 8 }')
  local burst=$((bytes_per_s / 500))
  ((burst < 65536)) && burst=65536
  echo "$burst"
}

shape() { # shape NAMESPACE DEVICE [RATE]
  local rate="${3:-$RATE}"
  tc -n "$1" qdisc replace dev "$2" root tbf rate "$rate" burst "$(tbf_burst_bytes "$rate")" \
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

# A bridge in the hub, up.
hub_bridge() {
  ip -n "$HUB" link add "$1" type bridge 2>/dev/null || cannot "no Linux bridge (module 'bridge')"
  ip -n "$HUB" link set "$1" up
}

# Joins bridges $1 and $2 of the hub with a veth pair ($3 on $1, $4 on $2), each end
# shaped at --uplink_rate: $3 shapes what leaves $1 through it, $4 what leaves $2.
uplink() {
  ip -n "$HUB" link add "$3" type veth peer name "$4" 2>/dev/null || cannot "no veth pairs (module 'veth')"
  ip -n "$HUB" link set "$3" master "$1"
  ip -n "$HUB" link set "$4" master "$2"
  ip -n "$HUB" link set "$3" up
  ip -n "$HUB" link set "$4" up
  shape "$HUB" "$3" "$UPLINK_RATE"
  shape "$HUB" "$4" "$UPLINK_RATE"
}

# The fabric (--racks): a bridge per rack, joined through the spine (see the top).
make_fabric_network() {
  ip netns add "$HUB" 2>/dev/null || cannot "ip netns add failed (needs root and CAP_SYS_ADMIN)"
  ip -n "$HUB" link set lo up
  local r i ns port
  for ((r = 0; r < RACKS; r++)); do hub_bridge "rk$r"; done
  if ((RACKS == 2)); then
    uplink rk0 rk1 sp0 sp1
  elif ((RACKS > 2)); then
    hub_bridge spine
    for ((r = 0; r < RACKS; r++)); do uplink "rk$r" spine "ur$r" "us$r"; done
  fi
  ip -n "$HUB" addr add "$HUB_ADDR/16" dev "$( ((RACKS > 2)) && echo spine || echo rk0)"
  for ((r = 0; r < RACKS; r++)); do
    for ((i = 0; i < NODES; i++)); do
      ns="$(rack_node_ns "$r" "$i")"
      port="v$r-$i"
      ip netns add "$ns" || cannot "ip netns add $ns failed"
      ip -n "$ns" link set lo up
      ip -n "$HUB" link add "$port" type veth peer name eth0 netns "$ns" 2>/dev/null ||
        cannot "no veth pairs (module 'veth')"
      ip -n "$HUB" link set "$port" master "rk$r"
      ip -n "$HUB" link set "$port" up
      ip -n "$ns" addr add "$(rack_node_addr "$r" "$i")/16" dev eth0
      ip -n "$ns" link set eth0 up
      shape "$ns" eth0      # what the node sends
      shape "$HUB" "$port"  # what it receives
    done
  done
}

# The fabric map of the racks (server/fabric/fabric_map.h), for the planner.
write_fabric_map() {
  local r i nodes
  {
    echo "# Written by scripts/emulated-cluster.sh for cluster '$NAME'."
    echo "version: 1"
    echo "racks:"
    for ((r = 0; r < RACKS; r++)); do
      nodes=""
      for ((i = 0; i < NODES; i++)); do nodes+="${nodes:+, }$(rack_node "$r" "$i")"; done
      echo "- name: r$r"
      echo "  uplink_bits_per_second: $UPLINK_RATE"
      echo "  nodes: [$nodes]"
    done
  } >"$RUN_DIR/fabric-map.yaml"
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

# Polls until `montactl nodes` shows every node alive (and, with self_bench, their
# intra-node curves), or fails after $TIMEOUT_S.
wait_ready() {
  local deadline=$((SECONDS + TIMEOUT_S)) json alive measured total
  total=$(cluster_nodes | wc -l)
  while ((SECONDS < deadline)); do
    json="$(montactl_in_hub --output=json nodes 2>/dev/null || true)"
    alive=$(grep -c '"NODE_STATE_ALIVE"' <<<"$json" || true)
    measured=$(grep -c '"SCOPE_INTRA_NODE"' <<<"$json" || true)
    if ((alive >= total)) && { [[ "$SELF_BENCH" == false ]] || ((measured >= total)); }; then
      return 0
    fi
    local pid
    local pidfile
    for pidfile in "$RUN_DIR"/*.pid; do
      kill -0 "$(<"$pidfile")" 2>/dev/null || die "$(basename "$pidfile" .pid) exited; logs in $RUN_DIR"
    done
    sleep 0.5
  done
  die "$alive of $total nodes alive (intra-node curves: $measured) after ${TIMEOUT_S}s; logs in $RUN_DIR"
}

start_processes() {
  local fabric=()
  [[ -n "$RACKS" ]] && fabric=(--fabric_map_file="$RUN_DIR/fabric-map.yaml")
  ip netns exec "$HUB" "$RUN_DIR/monta-planner" --listen="$HUB_ADDR:$PLANNER_PORT" --insecure \
    --metrics_listen="$HUB_ADDR:7401" --db="$RUN_DIR/planner.db" \
    --cpu_ranks_per_node="$RANKS_PER_NODE" --bench_on_register="$SELF_BENCH" \
    "${fabric[@]}" </dev/null >"$RUN_DIR/planner.log" 2>&1 &
  echo $! >"$RUN_DIR/planner.pid"
  local node ns addr
  while read -r node ns addr; do
    ip netns exec "$ns" "$RUN_DIR/monta-agent" --planner="$HUB_ADDR:$PLANNER_PORT" --insecure \
      --node_name="$node" --bench_address="$addr" \
      --metrics_listen="$addr:7402" </dev/null >"$RUN_DIR/agent-$node.log" 2>&1 &
    echo $! >"$RUN_DIR/agent-$node.pid"
  done < <(cluster_nodes)
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
  if [[ -z "$RACKS" ]]; then
    make_network
  else
    make_fabric_network
    write_fabric_map
  fi
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
  [[ -n "$RACKS" ]] && printf 'RACKS=%s\nUPLINK_RATE=%s\n' "$RACKS" "$UPLINK_RATE" >>"$RUN_DIR/cluster.env"
  local nodes first
  nodes="$(cluster_nodes | awk '{print $1}' | paste -sd, -)"
  first="${nodes%%,*}"
  montactl_in_hub nodes
  if [[ -n "$RACKS" ]]; then
    montactl_in_hub topology --fabric
    cat <<EOT

Emulated fabric '$NAME' is up: $RACKS racks x $NODES nodes x $RANKS_PER_NODE ranks, node
links shaped at $RATE each way, rack uplinks at $UPLINK_RATE each way, planner on
$HUB_ADDR:$PLANNER_PORT in namespace $HUB (fabric map $RUN_DIR/fabric-map.yaml), logs in
$RUN_DIR.
EOT
  else
    cat <<EOT

Emulated cluster '$NAME' is up: $NODES nodes x $RANKS_PER_NODE ranks, node links shaped
at $RATE each way, planner on $HUB_ADDR:$PLANNER_PORT in namespace $HUB, logs in $RUN_DIR.
EOT
  fi
  cat <<EOT

  $0 ctl --name=$NAME -- nodes
  $0 ctl --name=$NAME -- bench --nodes $nodes
  $0 ctl --name=$NAME -- plan --job examples/cpu-dev.yaml --node_names $nodes
  $0 exec --name=$NAME $first -- ip addr
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

# Resolves hub | node-I | I | rR-nI to a namespace of this cluster.
target_ns() {
  case "$1" in
    hub) echo "$HUB" ;;
    node-[0-9]*) node_ns "${1#node-}" ;;
    [0-9]*) node_ns "$1" ;;
    r[0-9]*-n[0-9]*) echo "$NAME-$1" ;;
    *) die "expected hub, node-I or rR-nI, got '$1'" ;;
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
