#!/usr/bin/env bash
# perf/ha_bench at a tiny size: 3 etcd members (compacting every 5 s), 3
# planner replicas (2 s leader lease), 50 agents and 2 real agents benchmarked
# every second, 1 round, then a 5 s soak at 5 decisions/s. Asserts the table
# has every row, that no acknowledged registration, decision, benchmark result
# or curve was lost (decisions against etcd's
# records; at least one benchmark result and curve, on the final leader and a
# follower), and that the soak read the members' database sizes and alarms,
# saw compaction, stored its decisions in etcd and defragmented; the times
# are printed, not asserted.
set -euo pipefail
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}"
out="${TEST_TMPDIR}/ha_bench.json"
perf/ha_bench --planner_binary=server/monta-planner \
  --agent_binary=agent/monta-agent --benchmark_every_seconds=1 --json \
  --agents=50 --rounds=1 --leader_lease_seconds=2 --etcd_pause_seconds=1 \
  --settle_seconds=1 --steady_seconds=3 --lag_probes=3 \
  --planner_args="--heartbeat_seconds=1 --lease_seconds=6" \
  --etcd_compaction_retention=5s --soak_seconds=5 --soak_sample_seconds=1 \
  --decisions_per_second=5 \
  --log_dir="${TEST_TMPDIR}/logs" >"${out}" || {
  echo "ha_bench failed:"; cat "${out}"
  tail -n 30 "${TEST_TMPDIR}"/logs/*.log; exit 1; }
cat "${out}"
python3 - "${out}" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
rows = {row["name"]: row for row in report["rows"]}
want = ["failover_sigkill_max_s", "handover_sigterm_max_s", "strategy_calls",
        "strategy_failed_calls", "strategy_p99_ms",
        "registrations_acknowledged", "lost_on_leader", "lost_on_follower",
        "decisions_acknowledged", "decisions_lost", "benchmarks_acknowledged",
        "benchmarks_not_acknowledged", "benchmark_results_lost",
        "curves_acknowledged", "curves_lost",
        "registration_storm_s", "heartbeat_p50_ms", "heartbeat_p99_ms",
        "heartbeat_errors_steady", "etcd_writes_per_s",
        "strategy_decisions_per_s", "etcd_writes_upkeep_per_s",
        "etcd_txns_per_s",
        "etcd_proposals_per_s", "etcd_writes_during_storm",
        "follower_lag_p50_ms", "follower_lag_p99_ms",
        "follower_lag_exported_max_ms", "soak_seconds", "soak_etcd_db_max_mb",
        "soak_etcd_db_in_use_max_mb", "soak_etcd_keys_max",
        "soak_etcd_compact_revision", "soak_etcd_alarm_samples",
        "soak_heartbeat_p99_ms", "soak_heartbeat_errors",
        "soak_decisions_made", "soak_decisions_failed", "soak_decision_p99_ms",
        "soak_decision_records_added", "soak_defrag_before_max_mb",
        "soak_defrag_after_max_mb"]
missing = [name for name in want if name not in rows]
assert not missing, f"rows missing: {missing}"
assert not report["errors"], report["errors"]
assert len(report["failover_seconds"]) == 1, report["failover_seconds"]
assert len(report["handover_seconds"]) == 1, report["handover_seconds"]
assert rows["registrations_acknowledged"]["value"] >= 53, rows  # 50 + 3 probes
assert rows["lost_on_leader"]["value"] == 0, rows["lost_on_leader"]
assert rows["lost_on_follower"]["value"] == 0, rows["lost_on_follower"]
assert rows["strategy_calls"]["value"] > 0, rows["strategy_calls"]
# Every acknowledged GetStrategy call of the bench (and of its soak) was
# looked for in etcd's decision records: none lost (a replica answers a
# decision only once the Txn holding its record landed).
assert rows["decisions_acknowledged"]["value"] >= rows["strategy_calls"]["value"] - rows["strategy_failed_calls"]["value"], rows
assert rows["decisions_lost"]["value"] == 0, rows["decisions_lost"]
assert report["writes"]["decisions_recorded"] >= rows["decisions_acknowledged"]["value"] - rows["decisions_lost"]["value"], report["writes"]
# The real agents' benchmarks: one acknowledged before the round at least,
# its results and curves read on the final leader and a follower.
assert rows["benchmarks_acknowledged"]["value"] >= 1, rows
assert rows["curves_acknowledged"]["value"] >= 1, rows
assert rows["benchmarks_not_acknowledged"]["value"] >= 0, rows
for name in ("benchmark_results_lost", "curves_lost"):
    assert rows[name]["value"] == 0, rows[name]
for side in ("leader", "follower"):
    for what in ("results", "curves"):
        assert report["writes"][f"{what}_lost_on_{side}"] == 0, report["writes"]
assert report["registered_after_storm"] == 50, report
# The etcd counters are read and count the planner's commits.
assert rows["etcd_writes_during_storm"]["value"] >= 50, rows
assert rows["etcd_writes_per_s"]["value"] >= 0, rows
assert rows["strategy_decisions_per_s"]["value"] > 0, rows
assert 0 <= rows["etcd_writes_upkeep_per_s"]["value"] <= rows["etcd_writes_per_s"]["value"], rows
# The followers' own monta_store_follower_lag_seconds was read from /metrics.
assert report["lag_exported_samples"] > 0, report
assert rows["follower_lag_exported_max_ms"]["value"] >= 0, rows
# The soak: every member's database size read at each sample, no alarm,
# compaction ran, its decisions are records in etcd, every member
# defragmented.
soak = report["soak"]
assert len(soak["samples"]) >= 3, soak
for sample in soak["samples"]:
    assert all(size > 0 for size in sample["db_bytes"]), sample
    assert all(size > 0 for size in sample["db_in_use_bytes"]), sample
    assert sample["alarms"] == [], sample
assert rows["soak_etcd_db_max_mb"]["pass"] is True, rows["soak_etcd_db_max_mb"]
assert rows["soak_etcd_alarm_samples"]["pass"] is True, rows
assert rows["soak_etcd_compact_revision"]["value"] > 0, rows
assert rows["soak_heartbeat_p99_ms"]["value"] > 0, rows
made = rows["soak_decisions_made"]["value"]
assert made > 0, rows["soak_decisions_made"]
assert rows["soak_decision_records_added"]["value"] >= made, rows
assert len(soak["defrag_after_bytes"]) == 3, soak
assert all(size > 0 for size in soak["defrag_after_bytes"]), soak
print("ha_bench smoke: every row, 0 lost, soak read")
PY
