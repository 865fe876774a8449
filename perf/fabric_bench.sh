#!/usr/bin/env bash
# Issue 19's first Done-when bar on an emulated fabric (scripts/emulated-cluster.sh, as
# root): 2 racks x 2 nodes x 2 ranks, node links --rate (400 Mbit/s), the racks joined by
# one spine link at each of --spines (400 and 200 Mbit/s), an EP group across all four
# nodes (examples/cpu-dev.yaml with world 8, TP 2, EP 4: t = 2, e = 4) at each of --sizes
# MiB of dispatch per rank (16 and 64).
#
# For each spine rate:
#   1. up (each node measures itself: its intra-node sweep);
#   2. pairs: `montactl bench` of a pair inside each rack and of one pair across the racks,
#      then `montactl plan` per size: the pairs-only prediction;
#   3. levels: `montactl bench --fabric` (one round of level measurements: inside each
#      rack, a pair across, all four nodes at once), waiting until `topology --fabric`
#      shows both uplinks measured with 4 nodes at once;
#   4. per size: `montactl plan`, then `montactl verify --skip_calibration` (its default
#      scope) on r0-n0,r0-n1,r1-n0,r1-n1;
# then perf/fabric_summary.py prints, per spine and size, predicted against measured per
# candidate (the verify's prediction, and the pairs-only plan's beside it), the median and
# largest |error| and the regret, and the bar (median <= 15%, none over 30%, regret <= 10%).
#
#   perf/fabric_bench.sh [--out=DIR] [--spines="400mbit 200mbit"] [--sizes="16 64"]
#                        [--rate=400mbit] [--iterations=N] [--level_max_mib=16]
#                        [--bin_dir=DIR]
#
# --iterations is verify's timed runs per candidate (0: its default, 7). The smallest
# run that proves the script works: --spines=400mbit --sizes=1 --iterations=1
# --level_max_mib=1. Writes DIR/<spine>-<what>.{json,txt}; exit status: 0 the bar met, 1
# missed (or a step failed), 2 usage, 3 no namespaces here.
#
# The levels' prediction rests on the level measurements: the four-node task (with two
# nodes a rack, the job's own node set) prices the uplinks, never the job directly, and
# verify prices the tree as GetStrategy does (docs/MODEL.md §11-12); the summary still
# warns when a plan cites a measurement of the job's four nodes.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT="" SPINES="400mbit 200mbit" SIZES="16 64" RATE=400mbit ITERATIONS=0 LEVEL_MAX_MIB=16
BIN_DIR=""
while (($#)); do
  case "$1" in
    --out=*) OUT="${1#*=}" ;;
    --spines=*) SPINES="${1#*=}" ;;
    --sizes=*) SIZES="${1#*=}" ;;
    --rate=*) RATE="${1#*=}" ;;
    --iterations=*) ITERATIONS="${1#*=}" ;;
    --level_max_mib=*) LEVEL_MAX_MIB="${1#*=}" ;;
    --bin_dir=* | --bin-dir=*) BIN_DIR="${1#*=}" ;;
    *) echo "fabric_bench: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
for n in $SIZES $ITERATIONS $LEVEL_MAX_MIB; do
  [[ "$n" =~ ^[0-9]+$ ]] || { echo "fabric_bench: expected whole numbers, got '$n'" >&2; exit 2; }
done
OUT="${OUT:-$(mktemp -d /tmp/monta-fabric-bench.XXXXXX)}"
mkdir -p "$OUT"
# Without --bin_dir the cluster script builds the binaries (bazel build -c opt).
BIN_ARGS=()
[[ -n "$BIN_DIR" ]] && BIN_ARGS=(--bin_dir="$BIN_DIR")

NAME="fb$$"
CLUSTER=(./scripts/emulated-cluster.sh)
NODES=r0-n0,r0-n1,r1-n0,r1-n1
# shellcheck disable=SC2317  # called by the EXIT trap
cleanup() { "${CLUSTER[@]}" down --name="$NAME" >/dev/null 2>&1 || true; }
trap cleanup EXIT

ctl() { "${CLUSTER[@]}" ctl --name="$NAME" -- "$@"; }

# job MIB -> a job file: TP 2 inside a node, EP 4 across the four nodes; D = 4096 bytes x
# sequence length per rank.
job() {
  local mib=$1 f="$OUT/job-${1}mib.yaml"
  sed -e "s/sequence_length: 2048/sequence_length: $((mib * 256))/" \
    -e "s/name: cpu-dev/name: fabric-${mib}mib/" \
    -e "s/world_size: 4/world_size: 8/" \
    -e "s/expert_parallel_size: 2/expert_parallel_size: 4/" \
    -e "s/data_parallel_size: 2/data_parallel_size: 4/" examples/cpu-dev.yaml >"$f"
  echo "$f"
}

# shellcheck source=perf/fabric_levels.sh
. perf/fabric_levels.sh  # fabric_level_round

for spine in $SPINES; do
  echo "# spine $spine: up" >&2
  "${CLUSTER[@]}" up --name="$NAME" --racks=2 --nodes=2 --ranks_per_node=2 --rate="$RATE" \
    --uplink_rate="$spine" "${BIN_ARGS[@]}" --timeout=300 >/dev/null
  max_bytes=$((LEVEL_MAX_MIB << 20))
  echo "# spine $spine: pairs" >&2
  for pair in r0-n0,r0-n1 r1-n0,r1-n1 r0-n0,r1-n0; do
    ctl bench --nodes "$pair" --max_bytes="$max_bytes" --bench_timeout_seconds=600 \
      >>"$OUT/$spine-pairs.txt"
  done
  for mib in $SIZES; do
    ctl --output=json plan --job "$(job "$mib")" --node_names "$NODES" \
      >"$OUT/$spine-${mib}mib-pairs-plan.json"
  done
  echo "# spine $spine: level measurements" >&2
  fabric_level_round "$NAME" "$max_bytes" "$OUT/$spine"
  for mib in $SIZES; do
    echo "# spine $spine: plan and verify at $mib MiB" >&2
    ctl --output=json plan --job "$(job "$mib")" --node_names "$NODES" \
      >"$OUT/$spine-${mib}mib-plan.json"
    ctl --output=json --timeout_seconds=3600 verify --job "$(job "$mib")" \
      --node_names "$NODES" --skip_calibration --iterations="$ITERATIONS" \
      --verify_timeout_seconds=3000 >"$OUT/$spine-${mib}mib-verify.json"
  done
  "${CLUSTER[@]}" down --name="$NAME" >/dev/null
done
/usr/bin/python3 perf/fabric_summary.py "$OUT" "$NODES"
