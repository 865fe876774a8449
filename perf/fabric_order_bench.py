#!/usr/bin/env python3
"""One rank of perf/fabric_order_bench.sh (issue 19's rank-order bar, docs/MODEL.md section
12): the job's flat dispatch AllToAll through python/monta (every EP group at once) timed with the ranks in the
launcher's order and in the order the planner advises, against the planner's predictions.

Launched torchrun-style (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
MONTA_NODE_NAME) with a python3 that has monta installed. Rank 0 asks the planner for the
job on the nodes in the launcher's order (monta.plan_on_nodes: GetStrategy with their
names), every rank builds the groups twice (MoeGroups.build, then with the advised
node_order), and each layout's AllToAll of --mib MiB per rank runs --iters times after
--warmup; the time of one run is its slowest rank's, the median over runs is reported.
Rank 0 prints a table and one line `FABRIC_ORDER_BENCH_JSON {...}`.
"""

import argparse
import datetime
import json
import os
import statistics
import time

import torch
import torch.distributed as dist

import monta  # installed: pip install --no-build-isolation ./python


def job_for(args):
    # D = E * C * M * b with C = S / E (top-1, capacity factor 1): D = S * M * b.
    tokens = args.mib * (1 << 20) // (args.hidden * 2)
    return {"name": "fabric-order-bench", "hidden_size": args.hidden,
            "num_experts": args.ep, "top_k": 1, "capacity_factor": 1,
            "micro_batch_size": 1, "sequence_length": tokens, "bytes_per_element": 2,
            "moe_layers": 1, "world_size": args.world, "tensor_parallel_size": 1,
            "expert_parallel_size": args.ep, "pipeline_parallel_size": 1,
            "data_parallel_size": args.world}


def timed_alltoall(groups, ep, mib, warmup, iters, active=True):
    """Median over runs of the slowest rank's flat dispatch of `mib` MiB per rank on
    `groups` (monta.dispatch, what the job runs: on Gloo python/monta's pairwise AllToAll,
    every receive posted first, not torch's all_to_all_single, whose gloo::alltoall is
    bimodal across a shaped link). A rank that is not `active` only joins the barrier and
    the timing's reduction."""
    # float32 (the same bytes as the job's 2-byte elements), [E, rows, 1024]: dim 0 splits
    # over the EP group.
    hidden = 1024
    rows = mib * (1 << 20) // (4 * hidden * ep)
    x = torch.ones(ep, rows, hidden, dtype=torch.float32)
    flat = monta.Plan(strategy=monta.FLAT, expert_layout=monta.NOT_TENSOR_PARALLEL)
    samples = []
    for i in range(warmup + iters):
        dist.barrier()
        start = time.perf_counter()
        if active:
            monta.dispatch(x, flat, groups)
        took = torch.tensor([time.perf_counter() - start if active else 0.0],
                            dtype=torch.float64)
        dist.all_reduce(took, op=dist.ReduceOp.MAX)
        if i >= warmup:
            samples.append(took.item())
    return statistics.median(samples)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--planner", required=True)
    parser.add_argument("--world", type=int, default=8)
    parser.add_argument("--ranks_per_node", type=int, default=2)
    parser.add_argument("--ep", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--mib", type=int, default=16)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--timeout_s", type=float, default=600)
    # Also time the advised layout with only its first EP group running (the others idle):
    # what the job's EP groups running at once cost beyond one group alone.
    parser.add_argument("--alone", action="store_true")
    args = parser.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    rank = dist.get_rank()
    g = args.ranks_per_node
    plan = monta.plan_on_nodes(args.planner, job_for(args), g)
    order = plan.node_order()
    if order is None:
        raise SystemExit("fabric_order_bench: the planner gave no rank order (is the fabric "
                         "map loaded and are the nodes in it?)")
    given = monta.MoeGroups.build(1, args.ep, g)
    advised = monta.MoeGroups.build(1, args.ep, g, node_order=order)
    measured = {
        "given": timed_alltoall(given, args.ep, args.mib, args.warmup, args.iters),
        "advised": timed_alltoall(advised, args.ep, args.mib, args.warmup, args.iters),
    }
    if args.alone:
        first = dist.get_process_group_ranks(advised.ep_group)
        measured["advised_alone"] = timed_alltoall(
            advised, args.ep, args.mib, args.warmup, args.iters,
            active=order[0] * g in first)
    if rank != 0:
        dist.destroy_process_group()
        return
    predicted = {"given": plan.predicted_given_dispatch_seconds,
                 "advised": plan.predicted_advised_dispatch_seconds}
    rows = []
    print(f"# {args.world} ranks, {g} per node, EP {args.ep}, {args.mib} MiB per rank per "
          f"AllToAll; given order {','.join(plan.given_nodes)}, advised "
          f"{','.join(plan.rank_order)}")
    print(f"{'ORDER':8} {'PREDICTED':>10} {'MEASURED':>10} {'ERROR':>8}")
    for name in ("given", "advised"):
        error = predicted[name] / measured[name] - 1
        rows.append({"order": name, "predicted_seconds": predicted[name],
                     "measured_seconds": measured[name], "error_ratio": error})
        print(f"{name:8} {predicted[name]:10.3f} {measured[name]:10.3f} {100 * error:7.1f}%")
    speedup = measured["given"] / measured["advised"]
    if args.alone:
        print(f"{'advised, one EP group alone':28} measured {measured['advised_alone']:.3f}"
              f" (all at once {measured['advised']:.3f}: "
              f"{measured['advised'] / measured['advised_alone']:.2f}x)")
        rows.append({"order": "advised_one_group_alone",
                     "measured_seconds": measured["advised_alone"]})
    print(f"advised order {speedup:.2f}x faster measured (bar: >= 2x); "
          f"|error| bar: <= 15% each")
    print("FABRIC_ORDER_BENCH_JSON " + json.dumps({
        "mib": args.mib, "given_nodes": list(plan.given_nodes),
        "advised_nodes": list(plan.rank_order), "rows": rows,
        "measured_speedup": speedup}))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
