#!/usr/bin/env bash
# Issue 17's "Done when" measurements ("trust the measurements"), on a local cluster of
# the real binaries over mutual TLS on loopback (a planner with --db and the agents of
# node-a and node-b, 2 Gloo ranks each, as scripts/local-cluster.sh runs them, on free
# ports), or with --emulated on scripts/emulated-cluster.sh's network namespaces.
#
#   perf/trust_bench.sh [--scenario=all|forged|flood|honest] [--runs=20] [--emulated]
#                       [--rate=400mbit] [--bin_dir=DIR]
#
# forged  In a pair benchmark an operator scheduled, node-b's certificate reports 10 s per
#         operation dated 100 years ahead (perf/report_tool) before node-b's agent does:
#         the plan for examples/cpu-dev.yaml on node-a,node-b before, after the forgery,
#         after an honest re-measurement and after a planner restart on the same --db
#         (strategy, K, seconds per layer, the task its inter-node evidence cites), what
#         the planner excluded and why.
# flood   157 reports of node-b into one pair task (the first a real-shaped one, then
#         64 series x 1024 sizes each): how many were refused, the planner's RSS (VmRSS,
#         /proc) and monta_planner_held_bytes{kind="task_reports"} before, right after
#         the flood and after the task ended.
# honest  --runs honest pair benchmarks: exclusions (none expected) and each curve's
#         node_spread_ratio (the slowest node's median rank time over the fastest's, the
#         largest over sizes), their largest and median: the numbers behind the agreement
#         factor in docs/ARCHITECTURE.md. --emulated runs them on an emulated cluster
#         instead (needs root and network namespaces; node-0 and node-1 linked at --rate);
#         only this scenario runs there.
#
# The planner runs with --lease_seconds=60: the flood pauses node-a's agent (SIGSTOP) so
# that the task stays pending while node-b floods it.
# Run it on a quiet host: the numbers mean nothing on a loaded one. Binaries come from
# `bazel build -c opt` unless --bin_dir holds monta-planner, monta-agent, montactl and
# report_tool. Logs stay in the printed work directory.
set -euo pipefail
cd "$(dirname "$0")/.."

SCENARIO=all
RUNS=20
EMULATED=false
RATE=400mbit
BIN_DIR=""
for arg in "$@"; do
  case "$arg" in
    --scenario=*) SCENARIO=${arg#*=} ;;
    --runs=*) RUNS=${arg#*=} ;;
    --emulated) EMULATED=true ;;
    --rate=*) RATE=${arg#*=} ;;
    --bin_dir=*) BIN_DIR=${arg#*=} ;;
    -h | --help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "trust_bench.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
case "$SCENARIO" in all | forged | flood | honest) ;; *) echo "trust_bench.sh: --scenario: all, forged, flood or honest" >&2; exit 2 ;; esac
[[ "$RUNS" =~ ^[0-9]+$ ]] || { echo "trust_bench.sh: --runs: a number" >&2; exit 2; }

if [[ -z "$BIN_DIR" ]]; then
  bazel build -c opt //server:monta-planner //agent:monta-agent //client:montactl \
    //perf:report_tool >&2
  out=$(bazel info -c opt bazel-bin 2>/dev/null)
  BIN_DIR=$(mktemp -d)
  cp -f "$out/server/monta-planner" "$out/agent/monta-agent" "$out/client/montactl" \
    "$out/perf/report_tool" "$BIN_DIR/"
fi
WORK=$(mktemp -d /tmp/monta-trust-bench.XXXXXX)
echo "trust_bench.sh: work directory $WORK" >&2

# json EXPR: evaluates EXPR (Python, the document is `d`) on stdin's JSON.
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }

pids=()
EMULATED_UP=false
cleanup() {
  for pid in "${AGENT_PID[@]}"; do kill -CONT "$pid" 2>/dev/null || true; done
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do kill -TERM "${pids[$i]}" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if $EMULATED_UP; then
    scripts/emulated-cluster.sh down --name=monta-trust --run_dir="$WORK/emulated" >&2 || true
  fi
}
trap cleanup EXIT

# port NAME FILE: the port NAME of a --port_file, once written.
port() {
  for _ in $(seq 200); do
    if [[ -s "$2" ]]; then json "d['$1']" <"$2"; return; fi
    sleep 0.1
  done
  echo "trust_bench.sh: $2 never written" >&2
  exit 1
}

GRPC_PORT=0
PLANNER_PID=0
start_planner() {
  rm -f "$WORK/planner.json"
  "$BIN_DIR/monta-planner" --listen="127.0.0.1:$GRPC_PORT" --metrics_listen=127.0.0.1:0 \
    --flagfile="$WORK/tls/planner.flags" --db="$WORK/planner.db" --bench_on_register=false \
    --lease_seconds=60 \
    --port_file="$WORK/planner.json" >>"$WORK/planner.log" 2>&1 &
  PLANNER_PID=$!
  pids+=("$PLANNER_PID")
  GRPC_PORT=$(port grpc "$WORK/planner.json")
  METRICS_PORT=$(port metrics "$WORK/planner.json")
}

M() { "$BIN_DIR/montactl" --planner="127.0.0.1:$GRPC_PORT" --flagfile="$WORK/tls/operator.flags" "$@"; }

wait_alive() { # NODE...
  for _ in $(seq 300); do
    local alive
    alive=$("$@" --output=json nodes 2>/dev/null | grep -c '"NODE_STATE_ALIVE"' || true)
    [[ "$alive" -ge 2 ]] && return 0
    sleep 0.2
  done
  echo "trust_bench.sh: the nodes did not come up; logs in $WORK" >&2
  exit 1
}

declare -A AGENT_PID
start_local_cluster() {
  scripts/dev-certs.sh "$WORK/tls" node-a node-b >/dev/null
  start_planner
  for node in node-a node-b; do
    "$BIN_DIR/monta-agent" --planner="127.0.0.1:$GRPC_PORT" --node_name="$node" \
      --flagfile="$WORK/tls/agent-$node.flags" --bench_address=127.0.0.1 \
      --metrics_listen=127.0.0.1:0 >"$WORK/agent-$node.log" 2>&1 &
    pids+=($!)
    AGENT_PID[$node]=$!
  done
  wait_alive M
}

metric() { # SERIES: its value on the planner's /metrics (0 when absent)
  python3 -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:$METRICS_PORT/metrics').read().decode())" |
    awk -v s="$1" '$1 == s { print $2; f = 1 } END { if (!f) print 0 }'
}
rss_mb() { awk '/^VmRSS/ { printf "%.1f", $2 / 1024 }' "/proc/$PLANNER_PID/status"; }

# bench: an honest pair benchmark (waits); prints its status JSON.
bench() { "${CTL[@]}" --output=json bench --nodes="$NODES" --ranks_per_node=2 --bench_timeout_seconds=300; }

PLAN_JOB=examples/cpu-dev.yaml
# plan LABEL: plans the cpu-dev job on the pair and prints one line.
plan() {
  "${CTL[@]}" --output=json plan --job="$PLAN_JOB" --node_names="$NODES" >"$WORK/plan-$1.json"
  json "'%-26s %s K=%s %.6f s/layer, inter-node evidence: task %s' % ('$1:', d['chosen']['kind'], d['chosen'].get('chunks_effective', 0), d['chosen'].get('total_seconds_per_layer', 0), ([c.get('task_id', '-') for c in d['evidence']['curves'] if c['used_as'] == 'CURVE_ROLE_ALLTOALL_INTER'] or ['-'])[0])" <"$WORK/plan-$1.json"
}
plan_field() { json "$2" <"$WORK/plan-$1.json"; }

# until_done TASK: waits until TASK's curve is kept or excluded (node-a's evidence).
until_done() {
  for _ in $(seq 900); do
    if "${CTL[@]}" --output=json curves "${NODES%%,*}" | json "any(c.get('task_id') == '$1' for c in d.get('curves', [])) or any(e['curve'].get('task_id') == '$1' for e in d.get('excluded', []))" | grep -q True; then
      return 0
    fi
    sleep 0.2
  done
  echo "trust_bench.sh: task $1 never finished; logs in $WORK" >&2
  exit 1
}

scenario_forged() {
  echo "== forged: node-b reports 10 s per operation, measured_at 100 years ahead"
  local honest forged again line
  honest=$(bench | json "d['status']['task_id']")
  plan before
  forged=$("${CTL[@]}" --output=json bench --nodes="$NODES" --ranks_per_node=2 --wait=false | json "d['status']['task_id']")
  line=$("$BIN_DIR/report_tool" --planner="127.0.0.1:$GRPC_PORT" --flagfile="$WORK/tls/agent-node-b.flags" \
    --task_id="$forged" --node=node-b --nodes="$NODES" --seconds=10 --measured_at_offset_seconds=3155760000)
  echo "forged report of task $forged: $line"
  until_done "$forged"
  "${CTL[@]}" --output=json curves node-a | json "'\n'.join('excluded: task %s (%s): %s' % (e['curve']['task_id'], e['reason'], e['detail']) for e in d.get('excluded', []) if e['curve']['task_id'] == '$forged') or 'NOT EXCLUDED'"
  plan after-forgery
  again=$(bench | json "d['status']['task_id']")
  plan after-remeasurement
  kill -TERM "$PLANNER_PID"
  wait "$PLANNER_PID" 2>/dev/null || true
  start_planner
  wait_alive M
  plan after-restart
  for label in after-forgery after-remeasurement after-restart; do
    python3 - "$WORK/plan-before.json" "$WORK/plan-$label.json" "$label" <<'EOF'
import json, sys
b, a = (json.load(open(p))['chosen'] for p in sys.argv[1:3])
same = (b['kind'], b.get('chunks_effective')) == (a['kind'], a.get('chunks_effective'))
ratio = a.get('total_seconds_per_layer', 0) / b.get('total_seconds_per_layer', 1)
print('%-26s same strategy and K: %s, time per layer %.3fx of before (%s)' % (
    sys.argv[3] + ':', same, ratio, 'within 10%' if abs(ratio - 1) <= 0.10 else 'NOT within 10%'))
EOF
  done
  echo "honest tasks: $honest (before), $again (re-measurement); evidence after the restart: task $(plan_field after-restart "[c.get('task_id') for c in d['evidence']['curves'] if c['used_as'] == 'CURVE_ROLE_ALLTOALL_INTER'][0]")"
}

scenario_flood() {
  echo "== flood: 157 reports of node-b into one task (1 real-shaped, then 156 of 64 series x 1024 sizes)"
  local held0 rss0 task first rest
  held0=$(metric 'monta_planner_held_bytes{kind="task_reports"}')
  rss0=$(rss_mb)
  task=$("${CTL[@]}" --output=json bench --nodes="$NODES" --ranks_per_node=2 --wait=false | json "d['status']['task_id']")
  # node-a's agent pauses (within its lease) so that the task stays pending for the flood.
  kill -STOP "${AGENT_PID[node-a]}"
  first=$("$BIN_DIR/report_tool" --planner="127.0.0.1:$GRPC_PORT" --flagfile="$WORK/tls/agent-node-b.flags" \
    --task_id="$task" --node=node-b --nodes="$NODES" --seconds=0.01)
  local start=$SECONDS
  rest=$("$BIN_DIR/report_tool" --planner="127.0.0.1:$GRPC_PORT" --flagfile="$WORK/tls/agent-node-b.flags" \
    --task_id="$task" --node=node-b --nodes="$NODES" --seconds=0.01 --count=156 --oversize)
  local took=$((SECONDS - start)) held1 rss1
  held1=$(metric 'monta_planner_held_bytes{kind="task_reports"}')
  rss1=$(rss_mb)
  kill -CONT "${AGENT_PID[node-a]}"
  until_done "$task"
  sleep 1
  local held2 rss2
  held2=$(metric 'monta_planner_held_bytes{kind="task_reports"}')
  rss2=$(rss_mb)
  echo "first report: $first"
  echo "156 more: $rest (${took} s)"
  echo "held bytes (task_reports): before $held0, during the flood $held1, after the task ended $held2"
  echo "planner RSS: before ${rss0} MB, right after the flood ${rss1} MB, after the task ended ${rss2} MB (growth $(python3 -c "print('%.1f' % ($rss2 - $rss0))") MB)"
}

scenario_honest() {
  echo "== honest: $RUNS pair benchmarks on ${1:-the local cluster}"
  local ratios=() excluded=0 i task out
  for ((i = 1; i <= RUNS; i++)); do
    out=$(bench)
    task=$(json "d['status']['task_id']" <<<"$out")
    local n_excluded
    n_excluded=$(json "len(d['status'].get('excluded', []))" <<<"$out")
    excluded=$((excluded + n_excluded))
    local ratio
    ratio=$("${CTL[@]}" --output=json curves "${NODES%%,*}" | json "([c.get('node_spread_ratio', 0) for c in d.get('curves', []) if c.get('task_id') == '$task'] + [e['curve'].get('node_spread_ratio', 0) for e in d.get('excluded', []) if e['curve'].get('task_id') == '$task'] + [0])[0]")
    ratios+=("$ratio")
    echo "run $i: task $task $(json "d['status']['state']" <<<"$out"), excluded $n_excluded, node spread ${ratio}x"
  done
  python3 - "$excluded" "${ratios[@]}" <<'EOF'
import statistics, sys
excluded, ratios = int(sys.argv[1]), [float(r) for r in sys.argv[2:]]
print('runs %d, curves excluded %d, node spread ratio: largest %.3fx, median %.3fx' % (
    len(ratios), excluded, max(ratios or [0]), statistics.median(ratios or [0])))
EOF
}

if $EMULATED; then
  [[ "$SCENARIO" == all || "$SCENARIO" == honest ]] || { echo "trust_bench.sh: --emulated runs the honest scenario only" >&2; exit 2; }
  scripts/emulated-cluster.sh up --name=monta-trust --nodes=2 --ranks_per_node=2 --rate="$RATE" \
    --bin_dir="$BIN_DIR" --self_bench=false --run_dir="$WORK/emulated" >&2
  EMULATED_UP=true
  CTL=(scripts/emulated-cluster.sh ctl --name=monta-trust --run_dir="$WORK/emulated" --)
  NODES=node-0,node-1
  scenario_honest "the emulated cluster (2 nodes x 2 ranks, $RATE links)"
  exit 0
fi

start_local_cluster
CTL=(M)
NODES=node-a,node-b
case "$SCENARIO" in
  forged) scenario_forged ;;
  flood) scenario_flood ;;
  honest) scenario_honest ;;
  all) scenario_forged; scenario_flood; scenario_honest ;;
esac
