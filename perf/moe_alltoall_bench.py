#!/usr/bin/env python3
"""Times monta's MoE AllToAll strategies (python/monta) per op: forward, and forward +
backward, at given dispatch sizes per rank. Numbers for notes, not a test.

Run with a python3 that has monta installed (pip install --no-build-isolation ./python).
On loopback, spawning the ranks itself (one emulated node of 4 ranks by default):
  python3 perf/moe_alltoall_bench.py --world 4 --gpus_per_node 4 --tp 2 --ep 2 \
      --strategies tp_dedup_pipelined:1,tp_dedup_pipelined:8 --mib 1,4,16
Under a launcher (torchrun, or one process per emulated node namespace) it uses RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT (and LOCAL_WORLD_SIZE) from the env instead.
Prints one line per (strategy, size): the median over --iters of the slowest rank of the
dispatch op (forward; forward + backward) and of one layer's four ops (dispatch -> combine,
then both gradients); with --strategies env, the admission's plan (MONTA_* env) against
flat in the plan's expert layout, and --json rows carry the measured and predicted AllToAll
seconds per layer. --expert_layout: the layout the ops run (docs/MODEL.md section 4); by
default the plan's, else the planner's default (not_tensor_parallel).
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


def parse_plans(text):
    if text == "env":  # the admission decision's plan, against flat in the same layout
        plan = monta.Plan.from_env()
        return [plan, monta.Plan(expert_layout=plan.expert_layout)]
    plans = []
    for item in text.split(","):
        name, _, k = item.partition(":")
        plans.append(monta.Plan(strategy=name, num_chunks=int(k or 1)))
    return plans


def timed(fn, iters):
    samples = []
    for _ in range(iters):
        dist.barrier()
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    # The op takes as long as its slowest rank.
    worst = torch.tensor(samples, dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return statistics.median(worst.tolist())


def bench(args):
    groups = monta.MoeGroups.build(args.tp, args.ep, args.gpus_per_node,
                                   timeout=datetime.timedelta(seconds=120),
                                   expert_layout=args.expert_layout)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" \
        else torch.device("cpu")
    experts, hidden = 2 * args.ep, args.hidden
    rows = []
    for mib in [float(m) for m in args.mib.split(",")]:
        elems = int(mib * 2**20) // torch.tensor([], dtype=dtype).element_size()
        cap = max(args.tp, elems // (experts * hidden) // args.tp * args.tp)
        x = torch.randn(experts, cap, hidden, device=device).to(dtype).requires_grad_()
        grad = torch.ones_like(x)
        for plan in parse_plans(args.strategies):
            if plan.strategy == monta.EXPERT_OVERLAP:
                if dist.get_rank() == 0:  # not a bare AllToAll: monta.dispatch refuses it
                    print(f"{plan.strategy:>20} skipped: runs with the experts "
                          "(monta.experts_overlapped), not as a dispatch op", flush=True)
                continue
            layout = plan.expert_layout_for(groups.expert_layout, "--expert_layout")
            fwd = lambda: monta.dispatch(x, plan, groups)  # noqa: E731

            def both():
                y = monta.dispatch(x, plan, groups)
                y.backward(torch.ones_like(y))

            def layer():  # dispatch -> combine, then both gradients
                z = monta.combine(monta.dispatch(x, plan, groups), plan, groups, capacity=cap)
                z.backward(grad)

            for _ in range(args.warmup):
                layer()
            row = {"strategy": plan.strategy, "K": plan.num_chunks, "expert_layout": layout,
                   "K_eff": plan.chunks_for(cap // args.tp), "mib_per_rank": mib,
                   "capacity": cap, "forward_s": timed(fwd, args.iters),
                   "forward_backward_s": timed(both, args.iters),
                   "layer_s": timed(layer, args.iters)}
            row["alltoall_seconds_per_layer"] = row["layer_s"]
            if plan.predicted_alltoall_seconds_per_layer is not None:
                row["predicted_alltoall_seconds_per_layer"] = \
                    plan.predicted_alltoall_seconds_per_layer
            rows.append(row)
            if dist.get_rank() == 0:
                print(json.dumps(row) if args.json else
                      f"{plan.strategy:>20} K={plan.num_chunks:<2} K_eff={row['K_eff']:<2} "
                      f"{layout:>19} {mib:7.2f} MiB/rank  C={cap:<6} dispatch fwd "
                      f"{row['forward_s'] * 1e3:9.3f} ms  fwd+bwd "
                      f"{row['forward_backward_s'] * 1e3:9.3f} ms  layer "
                      f"{row['layer_s'] * 1e3:9.3f} ms", flush=True)
    return rows


def rank_main(rank, world, port, ready, args):
    """One rank on this host. The store's port is taken without a race: rank 0 binds its
    TCPStore on port 0 and publishes the port the kernel gave it; the others then connect."""
    os.environ.update(OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=300)
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, world, True, timeout, wait_for_workers=False)
        port.value = store.port
        ready.set()
    else:
        if not ready.wait(timeout.total_seconds()):
            raise TimeoutError(f"rank {rank}: rank 0 published no store port")
        store = dist.TCPStore("127.0.0.1", port.value, world, False, timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    bench(args)
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--gpus_per_node", type=int, default=None)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--ep", type=int, default=2)
    parser.add_argument("--expert_layout", choices=["tensor_parallel", "not_tensor_parallel"],
                        default=None, help="the experts' layout (default: the plan's, else "
                                           "the planner's default)")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--mib", default="1,4,16", help="dispatch MiB per rank, comma list")
    parser.add_argument("--strategies", default="tp_dedup_pipelined:1,tp_dedup_pipelined:8",
                        help="name[:K],... or 'env' (Plan.from_env() and flat; the JSON rows "
                             "then carry the predicted seconds per layer)")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if "RANK" in os.environ:  # under a launcher
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
        dist.init_process_group(backend)
        bench(args)
        dist.destroy_process_group()
        return
    if args.gpus_per_node is None:
        args.gpus_per_node = args.world
    ctx = torch.multiprocessing.get_context("fork")
    port, ready = ctx.Value("i", 0), ctx.Event()
    torch.multiprocessing.start_processes(rank_main, args=(args.world, port, ready, args),
                                          nprocs=args.world, start_method="fork")


if __name__ == "__main__":
    main()
