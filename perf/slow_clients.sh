#!/usr/bin/env bash
# Slow clients against every Monta HTTP endpoint: starts a planner (admission
# webhook over HTTPS with a throwaway certificate, /metrics) and an agent
# (/metrics) on loopback, then runs perf/slow_clients (N connections at 1
# byte/s, each from its own 127.0.1.x source) against webhook /healthz,
# webhook /mutate, the planner's /metrics and the agent's /metrics, one line
# each.
#
# Usage: perf/slow_clients.sh [N]   (default 1000)
# Binaries: $PLANNER, $AGENT (default bazel-bin/server/monta-planner,
# bazel-bin/agent/monta-agent; point them at another build to compare) and
# $BENCH (default bazel-bin/perf/slow_clients). Extra bench flags: $BENCH_FLAGS.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000}
planner=${PLANNER:-bazel-bin/server/monta-planner}
agent=${AGENT:-bazel-bin/agent/monta-agent}
bench=${BENCH:-bazel-bin/perf/slow_clients}
tmp=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
  -keyout "$tmp/key.pem" -out "$tmp/cert.pem" -days 1 -subj /CN=127.0.0.1 \
  -addext subjectAltName=IP:127.0.0.1 2>/dev/null

# port NAME FILE: the port NAME from a --port_file JSON, once it is written.
port() {
  for _ in $(seq 100); do
    if [[ -s "$2" ]]; then
      python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$2" "$1"
      return
    fi
    sleep 0.1
  done
  echo "slow_clients.sh: no $2" >&2
  exit 1
}

# gRPC stays plaintext (--insecure): the bench is on loopback and measures the HTTP edges.
"$planner" --insecure --listen=127.0.0.1:0 --metrics_listen=127.0.0.1:0 \
  --webhook_listen=127.0.0.1:0 --tls_cert="$tmp/cert.pem" \
  --tls_key="$tmp/key.pem" --bench_on_register=false \
  --port_file="$tmp/planner.json" 2>"$tmp/planner.log" &
pids+=($!)
grpc=$(port grpc "$tmp/planner.json")
"$agent" --insecure --planner="127.0.0.1:$grpc" --node_name=slow-bench \
  --metrics_listen=127.0.0.1:0 --port_file="$tmp/agent.json" \
  2>"$tmp/agent.log" &
pids+=($!)
webhook=$(port webhook "$tmp/planner.json")
planner_metrics=$(port metrics "$tmp/planner.json")
agent_metrics=$(port metrics "$tmp/agent.json")

run() {
  # shellcheck disable=SC2086
  "$bench" --slow_connections="$n" ${BENCH_FLAGS:-} "$@"
}
run --target="127.0.0.1:$webhook" --tls --request=healthz
run --target="127.0.0.1:$webhook" --tls --request=mutate
run --target="127.0.0.1:$planner_metrics" --request=metrics
run --target="127.0.0.1:$agent_metrics" --request=metrics
