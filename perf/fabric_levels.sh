# shellcheck shell=bash
# Sourced by perf/fabric_bench.sh and perf/fabric_order_bench.sh: one round of fabric level
# measurements on an emulated fabric of 2 racks x 2 nodes (scripts/emulated-cluster.sh),
# and the wait until it landed in the planner's tree.
#
#   fabric_level_round NAME MAX_BYTES PREFIX
#
# waits (up to 5 minutes) until a dry run plans the whole round (4 tasks: a node still
# busy, e.g. with its sweep on registering, would leave its rack out), then
# runs `montactl bench --fabric --max_bytes=MAX_BYTES` on cluster NAME (inside each rack a
# pair, the two racks' pairs on disjoint nodes at once; a pair across; all four nodes at
# once), then polls `montactl topology --fabric` (up to 20 minutes) until both racks'
# uplinks show a measurement of 4 nodes at once and each rack its inside. Writes
# PREFIX-levels.txt, PREFIX-fabric.json and PREFIX-fabric.txt; returns 1 when the round
# did not land.

fabric_level_round() {
  local name=$1 max_bytes=$2 prefix=$3 deadline=$((SECONDS + 1200))
  local ctl=(./scripts/emulated-cluster.sh ctl --name="$name" --) idle_deadline=$((SECONDS + 300))
  until "${ctl[@]}" --output=json bench --fabric --dry_run |
    /usr/bin/python3 -c 'import json, sys; sys.exit(len(json.load(sys.stdin).get("fabric_tasks", [])) < 4)'; do
    if ((SECONDS >= idle_deadline)); then
      echo "fabric_level_round: $name: nodes still busy after 5 minutes" >&2
      return 1
    fi
    sleep 3
  done
  "${ctl[@]}" bench --fabric --max_bytes="$max_bytes" --bench_timeout_seconds=600 \
    >"$prefix-levels.txt" || return 1
  while ((SECONDS < deadline)); do
    "${ctl[@]}" --output=json topology --fabric >"$prefix-fabric.json"
    if /usr/bin/python3 - "$prefix-fabric.json" <<'PY'
import json, sys
tree = json.load(open(sys.argv[1]))
racks = [r for b in tree.get("blocks", []) for r in b.get("racks", [])]
ok = racks and all(r.get("uplink", {}).get("measured", {}).get("concurrent_nodes", 0) >= 4
                   and "inside" in r for r in racks)
sys.exit(0 if ok else 1)
PY
    then
      "${ctl[@]}" topology --fabric >"$prefix-fabric.txt"
      return 0
    fi
    sleep 5
  done
  echo "fabric_level_round: $name: the level measurements did not land in 20 minutes" >&2
  return 1
}
