#!/usr/bin/env python3
"""Replays docs/MODEL.md §12's pipeline-under-a-shared-uplink rule on a finished
perf/fabric_bench.sh run, without rerunning it.

  perf/fabric_pipe_replay.py DIR

DIR holds fabric_bench.sh's files (<spine>-fabric.json, <spine>-<size>mib-verify.json,
job-<size>mib.yaml).
Per spine and size, per verified candidate: verify's prediction as it was (before), the
rule's (after) and the measurement, with both errors; then the median and largest
|error| and which measured candidate each would take (the chunk tolerance of
docs/MODEL.md §5 applied among the measured K only: the planner searches every K up to
its bound, so it may take one the run did not measure), with its regret.

The rule: a tp_dedup_pipelined op's chunks after the first move the uplink's bytes at its
declared capacity instead of the level measurement's rate, and each pays the inter-node
curve's launch floor; never slower than before. While the uplink bounds the pipeline's
steady-state interval before and after (the script checks it against the rack's inside
rate as the node link) and the curve's fitted latency is ~0 (as on the emulated fabric),
the layer's prediction becomes exactly

  min(before, before - ops * (K - 1) * (B * D / (t K) * (1 / measured - 1 / declared)
                                        - floor))

with ops the pipelined ops per layer (4 for tensor-parallel experts, 2 for whole ones),
B the slowest uplink's bytes per byte a rank sends, D the dispatch bytes per rank, floor
the launch floor the plans' chunk-bound note quotes (0 when no plan of that spine quotes
it). Everything else (K = 1, flat, tp_dedup) is unchanged. A replay, not the model: the model
(server/model/cost_model.cc) is what plans; //server/model:fabric_price_test pins it.
"""
import glob
import json
import os
import re
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def launch_floor_seconds(out, spine):
    for path in sorted(glob.glob(os.path.join(out, f"{spine}-*mib-*.json"))):
        notes = load(path).get("plan", {}).get("evidence", {}).get("notes", [])
        notes += load(path).get("evidence", {}).get("notes", [])
        for n in notes:
            m = re.search(r"the ([0-9.]+) ms launch floor", n)
            if m:
                return float(m.group(1)) / 1e3
    return 0.0


def plan_shape(plan):
    """(D dispatch bytes per rank, ranks per node, EP group size, EP members per
    node, pipelined ops per layer) of a plan's JSON."""
    traffic = plan["traffic"]
    ops = 4 if plan.get("expert_layout") == "EXPERT_LAYOUT_TENSOR_PARALLEL" else 2
    return (float(traffic["dispatch_bytes"]), int(traffic.get("gpus_per_node", 1)),
            int(traffic.get("ep_group_size", 1)),
            int(traffic.get("ep_members_on_node", 1)), ops)


def replay(verify, fabric, t, floor):
    plan = verify["plan"]
    d, g, e, ns, ops = plan_shape(plan)
    uplinks = plan.get("evidence", {}).get("fabric", {}).get("uplinks", [])
    if not uplinks:
        return None, "no uplink priced"
    slowest = uplinks[0]
    b = float(slowest["bytes_per_rank_byte"])
    measured = float(slowest["bytes_per_second"])
    rack = next(r for blk in fabric["blocks"] for r in blk["racks"]
                if r["name"] == slowest["name"])
    declared = float(rack["uplink"].get("declared_bytes_per_second", 0))
    inside = float(rack.get("inside", {}).get("bytes_per_second", 0))
    rows = []
    for c in verify["candidates"]:
        kind = c["kind"].replace("STRATEGY_KIND_", "").lower()
        k = int(c["chunks_effective"])
        before = float(c["predicted_seconds"])
        after = before
        note = ""
        if kind == "tp_dedup_pipelined" and k > 1 and declared > measured:
            x = d / (t * k)  # a chunk per rank
            steady = b * x / declared
            node_link = (e - ns) / e * x / (inside / g) if inside > 0 else 0
            if node_link > steady:
                note = "node link bounds tau: not exact"
            credit = b * x * (1 / measured - 1 / declared) - floor
            after = before - ops * (k - 1) * max(0.0, credit)
        rows.append((kind, k, before, after, float(c["measured_seconds"]), note))
    return rows, (measured, declared)


def score(rows, col):
    """Median and largest |error|, the measured candidate the planner's rule
    would take (the fastest predicted; for the pipeline the smallest K within
    0.5% of its fastest K, docs/MODEL.md §5) and that choice's regret."""
    errs = [abs(r[col] / r[4] - 1) for r in rows]
    first = min(rows, key=lambda r: (r[col], r[1]))
    if first[0] == "tp_dedup_pipelined":
        pipes = [r for r in rows if r[0] == first[0]]
        first = min((r for r in pipes if r[col] <= first[col] * 1.005),
                    key=lambda r: r[1])
    best = min(r[4] for r in rows)
    return statistics.median(errs), max(errs), first, first[4] / best - 1


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = sys.argv[1]
    files = sorted(glob.glob(os.path.join(out, "*-*mib-verify.json")))
    if not files:
        print(f"fabric_pipe_replay: no *-*mib-verify.json in {out}", file=sys.stderr)
        return 1
    for path in files:
        m = re.match(r"(.+)-(\d+)mib-verify\.json$", os.path.basename(path))
        spine, mib = m.group(1), m.group(2)
        with open(os.path.join(out, f"job-{mib}mib.yaml")) as f:
            t = int(re.search(r"tensor_parallel_size:\s*(\d+)", f.read()).group(1))
        floor = launch_floor_seconds(out, spine)
        rows, rates = replay(load(path),
                             load(os.path.join(out, f"{spine}-fabric.json")), t, floor)
        if rows is None:
            print(f"== spine {spine}, {mib} MiB: {rates}")
            continue
        print(f"== spine {spine}, {mib} MiB: uplink measured "
              f"{rates[0] / 1e6:.2f} MB/s, declared {rates[1] / 1e6:.2f} MB/s, "
              f"launch floor {floor * 1e3:.3f} ms")
        print(f"   {'candidate':<26}{'measured s':>11}{'before':>9}{'err':>8}"
              f"{'after':>9}{'err':>8}")
        for kind, k, before, after, meas, note in rows:
            print(f"   {kind + ' K=' + str(k):<26}{meas:>11.3f}{before:>9.3f}"
                  f"{(before / meas - 1) * 100:>+7.1f}%{after:>9.3f}"
                  f"{(after / meas - 1) * 100:>+7.1f}%  {note}")
        for label, col in (("before", 2), ("after", 3)):
            med, top, first, regret = score(rows, col)
            print(f"   {label}: median |error| {med * 100:.1f}%, largest "
                  f"{top * 100:.1f}%, takes {first[0]} K={first[1]} of the measured, "
                  f"regret {regret * 100:.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
