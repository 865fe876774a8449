#!/usr/bin/env python3
"""One rank of a toy MoE training job that runs the AllToAll its admission decided.

Launched torchrun-style (RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) with
the env the admission webhook injected plus MONTA_MOE_SPEC (the monta.io/moe annotation,
from the downward API), e.g. by examples/admission_to_step.py. Gloo on CPU; NCCL when CUDA
is there. Logs the plan and decision id, then one line per step.

Without an admission plan (no MONTA_STRATEGY) and with MONTA_PLANNER (host:port) set, the
job asks the planner itself once its pods run, naming the nodes it landed on (each rank's
MONTA_NODE_NAME, else its host name, in the launcher's node order): with a fabric the plan
carries the rank order to start in (EP groups inside a rack, data parallel across racks;
docs/MODEL.md section 12), and the process groups are built in that order.
"""

import argparse
import datetime
import json
import logging
import os

import torch
import torch.distributed as dist

import moe_layer  # beside this script
import monta  # installed: pip install --no-build-isolation ./python


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--timeout_s", type=float, default=60)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("monta").setLevel(logging.INFO)
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo",
                            timeout=datetime.timedelta(seconds=args.timeout_s))
    rank = dist.get_rank()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
    spec = json.loads(os.environ["MONTA_MOE_SPEC"])
    job = spec["job"]
    gpus_per_node = spec.get("placement", {}).get("gpus_per_node") or \
        int(os.environ.get("LOCAL_WORLD_SIZE", dist.get_world_size()))
    node_order = None
    if "MONTA_STRATEGY" not in os.environ and os.environ.get("MONTA_PLANNER"):
        # All ranks: rank 0 asks GetStrategy with the job's real nodes, all get the answer.
        plan = monta.plan_on_nodes(os.environ["MONTA_PLANNER"], job, gpus_per_node)
        node_order = plan.node_order()  # None: no fabric advice, the launcher's order
        if rank == 0 and plan.rank_order:
            print(f"rank 0: rank order advised {','.join(plan.rank_order)} (launched "
                  f"{','.join(plan.given_nodes)}): predicted AllToAll "
                  f"{plan.predicted_advised_dispatch_seconds:.3f} s against "
                  f"{plan.predicted_given_dispatch_seconds:.3f} s", flush=True)
    else:
        plan = monta.Plan.from_env()  # refuses malformed variables, naming them
    # The job's own expert layout, when its spec says (experts_tensor_parallel): a plan
    # priced for the other layout is refused. Not said: the plan's (MONTA_EXPERT_LAYOUT).
    said = job.get("experts_tensor_parallel")
    layout = None if said is None else (monta.TENSOR_PARALLEL if said else
                                        monta.NOT_TENSOR_PARALLEL)
    groups = monta.MoeGroups.build(job["tensor_parallel_size"], job["expert_parallel_size"],
                                   gpus_per_node,
                                   timeout=datetime.timedelta(seconds=args.timeout_s),
                                   expert_layout=layout, node_order=node_order)
    t = groups.tp_size
    layer = moe_layer.MoELayer(hidden=job["hidden_size"], ffn=2 * job["hidden_size"],
                               num_experts=job["num_experts"], top_k=job["top_k"],
                               capacity_factor=job["capacity_factor"], plan=plan,
                               groups=groups).to(device)
    print(f"rank {rank}: monta plan {plan} (K={plan.num_chunks}, predicted "
          f"{plan.predicted_alltoall_seconds_per_layer} s/layer, evidence "
          f"{plan.evidence_source or '-'}); running experts {layer.expert_layout}", flush=True)
    optimizer = torch.optim.SGD(layer.experts.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank // t)  # replicated over the TP group
    shape = (job["micro_batch_size"], job["sequence_length"], job["hidden_size"])
    for step in range(1, args.steps + 1):
        x = torch.randn(shape, generator=g).to(device)
        loss = layer(x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"rank {rank}: step {step} loss {loss.item():.6f} strategy {plan.strategy} "
              f"decision {plan.decision_id or '-'}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
