#!/usr/bin/env bash
# The layering check: asserts the allowed arrows between Monta's rooms over the real
# Bazel graph (`bazel query`), so a new wrong dependency fails CI with a message that
# names it:
#
#   //client:montactl -> //server/planning:request_validation violates: client may depend only on proto/ and common/
#
# Each rule takes the shipped targets of a room (cc_library and cc_binary, minus test
# and testonly targets: tests may cross rooms, e.g. client's topology_render_test
# renders what agent discovery produces) and walks everything they depend on,
# transitively. Every edge a -> b in that graph that steps out of the rule's allowed
# set (a inside, b outside) is reported: the message names the step out of bounds,
# not the far end of a chain. Visibility (in each BUILD file) keeps packages private
# to their room; this check says which rooms may use which, including the public
# ones (common/, proto/, third_party/) that visibility cannot police.
#
# Usage: scripts/check_layers.sh [bazel query flags]. Exit status 1 on a violation.
set -uo pipefail
cd "$(dirname "$0")/.."

QUERY_FLAGS=("$@")
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
violations=0
checked=0

# Edges "a b" of the rule graph reachable from the shipped targets of `room` (a
# query expression), without toolchains and implicit dependencies.
edges() {
  local room=$1 graph
  local sources="kind('cc_library|cc_binary', $room) except attr(testonly, 1, $room)"
  if ! graph=$(bazel query "${QUERY_FLAGS[@]}" --noimplicit_deps --notool_deps \
    --output=graph --nograph:factored "kind(rule, deps($sources))" 2>"$errors"); then
    cat "$errors" >&2
    echo "check_layers: bazel query failed for $room" >&2
    exit 2
  fi
  sed -nE 's/^ *"([^"]+)" -> "([^"]+)"$/\1 \2/p' <<<"$graph"
}

# check ROOM MODE PATTERN MESSAGE: every edge a -> b reachable from ROOM must have b
# match PATTERN (MODE allow) or must not (MODE forbid), an ERE over Bazel labels.
check() {
  local room=$1 mode=$2 pattern=$3 message=$4 graph out
  graph=$(edges "$room") || exit 2
  if [[ -z "$graph" ]]; then
    echo "check_layers: no dependency graph for $room: does 'bazel query' work?" >&2
    exit 2
  fi
  out=$(awk -v mode="$mode" -v pattern="$pattern" -v message="$message" '
    function out(label) { return (mode == "allow") ? (label !~ pattern) : (label ~ pattern) }
    # Only the step out of bounds: edges beyond it follow from it.
    !out($1) && out($2) && !seen[$0]++ { print $1 " -> " $2 " violates: " message }' <<<"$graph")
  checked=$((checked + 1))
  if [[ -n "$out" ]]; then
    echo "$out"
    violations=$((violations + $(wc -l <<<"$out")))
  fi
}

# check_via ROOM PATTERN GATE MESSAGE: no target matching PATTERN may be reachable from
# ROOM's shipped targets except through a target matching GATE: the walk from them stops
# at GATE (what the gate room uses is its own business) and reports each edge into
# PATTERN it meets.
check_via() {
  local room=$1 pattern=$2 gate=$3 message=$4 graph sources out
  graph=$(edges "$room") || exit 2
  if ! sources=$(bazel query "${QUERY_FLAGS[@]}" \
    "kind('cc_library|cc_binary', $room) except attr(testonly, 1, $room)" 2>"$errors"); then
    cat "$errors" >&2
    echo "check_layers: bazel query failed for $room" >&2
    exit 2
  fi
  if [[ -z "$graph" || -z "$sources" ]]; then
    echo "check_layers: no dependency graph for $room: does 'bazel query' work?" >&2
    exit 2
  fi
  out=$(awk -v pattern="$pattern" -v gate="$gate" -v message="$message" '
    FNR == NR { if ($1 != "" && !seen[$1]++) queue[n++] = $1; next }
    { after[$1] = after[$1] " " $2 }
    END {
      for (i = 0; i < n; i++) {
        a = queue[i]
        if (a ~ gate) continue
        k = split(after[a], next_hops, " ")
        for (j = 1; j <= k; j++) {
          b = next_hops[j]
          if (b ~ pattern) {
            if (!said[a " " b]++) print a " -> " b " violates: " message
          } else if (!seen[b]++) {
            queue[n++] = b
          }
        }
      }
    }' <(printf '%s\n' "$sources") <(printf '%s\n' "$graph"))
  checked=$((checked + 1))
  if [[ -n "$out" ]]; then
    echo "$out"
    violations=$((violations + $(wc -l <<<"$out")))
  fi
}

check //server/model/... allow '^//(server/model|common/bandwidth|common/schedule)[:/]|^//common/strategy:strategy$|^//third_party:absl$' \
  "server/model may depend only on the standard library, Abseil and common/ (its pure part, common/bandwidth, common/schedule and common/strategy:strategy: no protobuf, no I/O)"
check //common/schedule/... allow '^//(common/schedule|common/bandwidth)[:/]' \
  "common/schedule is the schedule arithmetic the model, the agent and python/monta share: pure C++, it may depend only on common/bandwidth (no protobuf, no I/O, no Abseil)"
check //server/... allow '^//(server|common|proto|third_party)[:/]|^@etcd_protos//' \
  "the planner (server/) may depend only on server/, common/, proto/, third_party/ and etcd's stubs (@etcd_protos, through server/etcd), never on agent/ or client/"
check //agent/... allow '^//(agent|common|proto|third_party)[:/]|^@local_cuda//' \
  "the agent may depend only on agent/, common/, proto/ and third_party/, never on server/ or client/"
check //client/... allow '^//(client|common|proto|third_party)[:/]' \
  "client may depend only on proto/ and common/"
check //common/... allow '^//(common|proto|third_party)[:/]' \
  "common/ is shared by every room and may depend only on proto/ and third_party/"
check //common/replicas/... allow '^//(common/replicas|third_party)[:/]' \
  "common/replicas (a planner's replicas as clients name them) may depend only on third_party/ (Abseil, gRPC): the agent and montactl share it"
check //common/http/... allow '^//(common/http|third_party)[:/]' \
  "common/http (the HTTP edge) may depend only on third_party/, so every binary can serve HTTP without pulling in the contract"
check //proto/... allow '^//(proto|third_party)[:/]' \
  "proto/ is the contract and may depend only on third_party/"
check //fuzz/... allow '^//(fuzz|server|agent|common|proto|third_party)[:/]|^@local_cuda//' \
  "fuzz/ holds the fuzz targets of the planner's and the agent's input edges and may depend only on server/, agent/, common/, proto/ and third_party/ (never on client/, perf/ or tests/)"
# Inside the planner: api -> planning -> model, with fabric, registry and store below; no arrow
# back up. Each allowed set is closed under the arrows it allows (a room may reach what
# the rooms it uses reach), so a step out of it is an arrow the map does not have.
SERVER_BASE='common|proto|third_party'
check //server/registry/... allow "^//(server/registry|${SERVER_BASE})[:/]" \
  "server/registry (cluster state) sits below every other planner room: it may depend only on common/, proto/ and third_party/"
check //server/fabric/... allow "^//(server/fabric|server/registry|${SERVER_BASE})[:/]" \
  "server/fabric (where nodes sit: the fabric map, node labels, the tree) may depend only on server/registry, common/, proto/ and third_party/"
check //server/store/... allow "^//(server/store|server/registry|${SERVER_BASE})[:/]" \
  "server/store may depend only on server/registry (below it), common/, proto/ and third_party/"
check //server/bench/... allow "^//(server/bench|server/registry|${SERVER_BASE})[:/]" \
  "server/bench (benchmark coordination) may depend only on server/registry, common/, proto/ and third_party/"
check //server/bench:rendezvous allow '^//server/bench:rendezvous$|^//third_party[:/]' \
  "server/bench:rendezvous (the rendezvous store, leader memory only) may depend only on third_party/: no task queue, no store, no protos"
check //server/metrics/... allow "^//(server/metrics|server/model|server/fabric|server/registry|${SERVER_BASE})[:/]" \
  "server/metrics may depend only on server/model, server/fabric, server/registry, common/, proto/ and third_party/"
check //server/planning/... allow "^//(server/planning|server/model|server/fabric|server/registry|server/metrics|server/store|${SERVER_BASE})[:/]" \
  "server/planning may depend only on the rooms below it (server/model, server/fabric, server/registry, server/metrics, server/store), never on server/api, server/admission, server/verify or server/bench"
check //server/verify/... allow "^//(server/verify|server/planning|server/bench|server/model|server/fabric|server/registry|server/metrics|server/store|${SERVER_BASE})[:/]" \
  "server/verify may depend only on server/planning, server/bench and the rooms below them, never on server/api or server/admission"
check //server/admission/... allow "^//(server/admission|server/planning|server/model|server/fabric|server/registry|server/metrics|server/store|${SERVER_BASE})[:/]" \
  "server/admission may depend only on server/planning and the rooms below it, never on server/api"
check //server/api/... allow "^//(server/api|server/planning|server/verify|server/bench|server/model|server/fabric|server/registry|server/metrics|server/store|${SERVER_BASE})[:/]" \
  "server/api (the gRPC handlers) may depend on the planner's rooms below it, never on the process (//server:...) or server/admission"
check //server/etcd/... allow '^//(server/etcd|common|third_party)[:/]|^@etcd_protos//' \
  "server/etcd (the client to etcd) may depend only on common/, third_party/ and etcd's generated stubs (@etcd_protos), never on proto/ or another planner room"
check //server/election/... allow '^//(server/election|server/etcd|common|third_party)[:/]|^@etcd_protos//' \
  "server/election (leader election and fencing on etcd) may depend only on server/etcd, common/ and third_party/ (etcd's stubs only through server/etcd), never on proto/ or another planner room"
check //server/etcd_store/... allow "^//(server/etcd_store|server/store|server/registry|server/etcd|${SERVER_BASE})[:/]|^@etcd_protos//" \
  "server/etcd_store (the store seam on etcd) may depend only on server/store, server/registry, server/etcd, common/, proto/ and third_party/ (gRPC only through server/etcd)"
# Only server/etcd may use etcd's stubs: the rest of the planner goes through its client.
check_via "//server/... - //server/etcd/..." '^@etcd_protos//' '^//server/etcd[:/]' \
  "only server/etcd may depend on etcd's generated stubs (@etcd_protos); use server/etcd's client"
# Below the gRPC handlers (server/api) the planner uses messages, never services. The
# one other room that links gRPC is server/etcd, a client of etcd's services: a room
# below server/api that uses it (server/election) links gRPC only through it. A new room
# on server/etcd joins this list deliberately.
check_via "//server/model/... + //server/planning/... + //server/fabric/... + //server/registry/... + //server/store/... + //server/bench/... + //server/metrics/... + //server/admission/... + //server/verify/... + //server/election/... + //server/etcd_store/..." \
  '_grpc_proto$|^//third_party:grpc$' '^//server/etcd[:/]' \
  "nothing below server/api may depend on gRPC service headers (*_grpc_proto) or //third_party:grpc except through server/etcd; use the message targets (*_proto)"

# One namespace, one room: a `namespace monta::X` is declared in one package only (tests/
# and its subpackages count as one room). Two rooms under one name (monta::bench was both
# agent/bench and server/bench) make a reader guess which one a `bench::` means.
namespaces=$(grep -rEo --include='*.cc' --include='*.h' '^namespace monta::[a-z_:]+' \
  agent client common fuzz perf proto server tests 2>/dev/null |
  sed -E 's#^(tests)/[^:]*:namespace #\1 #; s#/[^/:]+:namespace # #' | sort -u |
  awk '{rooms[$2] = rooms[$2] " " $1; n[$2]++}
       END {for (ns in n) if (n[ns] > 1) print ns " is declared in" rooms[ns]}')
checked=$((checked + 1))
if [[ -n "$namespaces" ]]; then
  while IFS= read -r line; do echo "$line violates: one namespace per room"; done <<<"$namespaces"
  violations=$((violations + $(wc -l <<<"$namespaces")))
fi

if [[ $violations -gt 0 ]]; then
  echo "check_layers: $violations forbidden dependencies (rooms and arrows: docs/ARCHITECTURE.md)"
  exit 1
fi
echo "check_layers: $checked rules hold"
