#!/usr/bin/env bash
# A local Monta cluster on loopback: one planner and two agents acting as two nodes.
# Installs what is missing, builds, starts everything, waits until both nodes are
# registered, prints them, and runs until Ctrl-C.
# gRPC runs over mutual TLS with a throwaway CA and certificates made by
# scripts/dev-certs.sh in $RUN_DIR/tls (the agents' certificates name their nodes, montactl
# uses an operator's); MONTA_INSECURE=1 runs plaintext (--insecure) instead.
set -euo pipefail
cd "$(dirname "$0")/.."

PLANNER_ADDR=${MONTA_PLANNER_ADDR:-127.0.0.1:7400}
METRICS_ADDR=${MONTA_METRICS_ADDR:-127.0.0.1:7401}
RUN_DIR=${MONTA_RUN_DIR:-/tmp/monta-local}
NODES=(node-a node-b)

./scripts/setup.sh
bazel build -c opt //server:monta-planner //agent:monta-agent //client:montactl
BIN=$(bazel info -c opt bazel-bin 2>/dev/null)
mkdir -p "$RUN_DIR"
# Binaries are copied so a rebuild while the cluster runs does not pull them away.
cp -f "$BIN/server/monta-planner" "$BIN/agent/monta-agent" "$BIN/client/montactl" "$RUN_DIR/"

# tls_flags NAME: how process NAME (planner, agent-NODE, operator) secures gRPC.
if [[ "${MONTA_INSECURE:-0}" == 1 ]]; then
  tls_flags() { echo "--insecure"; }
else
  ./scripts/dev-certs.sh "$RUN_DIR/tls" "${NODES[@]}"
  tls_flags() { echo "--flagfile=$RUN_DIR/tls/$1.flags"; }
fi

pids=()
cleanup() {
  echo
  echo "stopping local cluster..."
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  echo "stopped. logs are in $RUN_DIR"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

"$RUN_DIR/monta-planner" --listen="$PLANNER_ADDR" --metrics_listen="$METRICS_ADDR" \
  "$(tls_flags planner)" --db="$RUN_DIR/planner.db" >"$RUN_DIR/planner.log" 2>&1 &
pids+=($!)
agent_metrics_port=7402
for node in "${NODES[@]}"; do
  "$RUN_DIR/monta-agent" --planner="$PLANNER_ADDR" --node_name="$node" \
    "$(tls_flags "agent-$node")" --bench_address=127.0.0.1 --metrics_listen="127.0.0.1:$agent_metrics_port" \
    >"$RUN_DIR/agent-$node.log" 2>&1 &
  pids+=($!)
  agent_metrics_port=$((agent_metrics_port + 1))
done

MONTACTL=("$RUN_DIR/montactl" --planner="$PLANNER_ADDR" "$(tls_flags operator)")
M="$RUN_DIR/montactl --planner=$PLANNER_ADDR $(tls_flags operator)"
echo "waiting for ${#NODES[@]} nodes to register..."
for _ in $(seq 1 100); do
  alive=$("${MONTACTL[@]}" --output=json nodes 2>/dev/null | grep -c '"NODE_STATE_ALIVE"' || true)
  if [[ "$alive" -ge ${#NODES[@]} ]]; then break; fi
  if ! kill -0 "${pids[0]}" 2>/dev/null; then
    echo "planner exited; see $RUN_DIR/planner.log:" >&2
    tail -5 "$RUN_DIR/planner.log" >&2
    exit 1
  fi
  sleep 0.2
done
if [[ "${alive:-0}" -lt ${#NODES[@]} ]]; then
  echo "nodes did not register in time; logs in $RUN_DIR" >&2
  exit 1
fi

# Each agent measures its node when it registers (an intra-node sweep over Gloo).
echo "waiting for the nodes to measure themselves..."
for _ in $(seq 1 150); do
  measured=$("${MONTACTL[@]}" nodes 2>/dev/null | grep -c "3 intra" || true)
  if [[ "$measured" -ge ${#NODES[@]} ]]; then break; fi
  sleep 0.2
done

echo
"${MONTACTL[@]}" nodes
cat <<EOT

Monta is running: planner on $PLANNER_ADDR, metrics on http://$METRICS_ADDR/metrics,
logs in $RUN_DIR. gRPC: $(if [[ "${MONTA_INSECURE:-0}" == 1 ]]; then echo "PLAINTEXT (--insecure)"; else echo "mutual TLS, certificates in $RUN_DIR/tls"; fi).
Try, in another terminal:

  $M nodes
  $M topology node-a
  $M bench --nodes node-a,node-b
  $M plan --job examples/cpu-dev.yaml --node_names node-a,node-b
  $M plan --job examples/monta-paper-2x70b.yaml --profile a800-hgx --nodes 2
  $M profiles
  curl -s http://$METRICS_ADDR/metrics | grep monta_

Press Ctrl-C to stop.
EOT
wait "${pids[0]}"
