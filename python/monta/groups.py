"""The process groups the MoE AllToAll runs on, laid out as DeepSpeed and Megatron do.

Rank order: tensor-parallel (TP) ranks innermost, so TP group i is ranks [i*t, (i+1)*t);
data-parallel ranks of TP index j are j, j+t, j+2t, ...; expert-parallel (EP) groups are
consecutive runs of e of them. Node n holds ranks [n*G, (n+1)*G) (G = gpus_per_node).
For the hierarchical strategy each EP group is split twice: its members on one node
(intra) and its members with the same local index on every node (inter).
"""

import datetime
import os
from dataclasses import dataclass
from typing import Any, List, Optional

import torch.distributed as dist

from monta.plan import HIERARCHICAL, Plan, PlanError


@dataclass
class MoeGroups:
    tp_group: Any
    ep_group: Any
    tp_size: int
    tp_rank: int
    ep_size: int
    ep_rank: int
    gpus_per_node: Optional[int] = None
    # Hierarchical sub-groups of the EP group; None when the layout cannot run it.
    intra_group: Any = None
    intra_size: int = 1
    inter_group: Any = None
    inter_size: int = 1
    hierarchical_unfit: str = ""
    world_size: Optional[int] = None

    @staticmethod
    def build(tensor_parallel_size: int, expert_parallel_size: int,
              gpus_per_node: Optional[int] = None,
              timeout: Optional[datetime.timedelta] = None) -> "MoeGroups":
        """Creates every group; all ranks must call it (torch.distributed.new_group)."""
        world, rank = dist.get_world_size(), dist.get_rank()
        t, e = tensor_parallel_size, expert_parallel_size
        if gpus_per_node is None:
            gpus_per_node = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        g = gpus_per_node
        if t < 1 or world % t:
            raise PlanError(f"tensor_parallel_size {t} does not divide the world size {world}")
        data = world // t
        if e < 1 or data % e:
            raise PlanError(f"expert_parallel_size {e} does not divide the data-parallel size "
                            f"{data} (world {world} / tensor {t})")
        if g < 1 or world % g:
            raise PlanError(f"gpus_per_node {g} does not divide the world size {world}")
        kwargs = {} if timeout is None else {"timeout": timeout}
        mine = {}

        def new(kind: str, ranks: List[int]):
            group = dist.new_group(ranks, **kwargs)  # collective: every rank, same order
            if rank in ranks:
                mine[kind] = (group, len(ranks), ranks.index(rank))

        for i in range(world // t):
            new("tp", list(range(i * t, (i + 1) * t)))
        ep_groups = []
        for j in range(t):
            dp = list(range(j, world, t))
            ep_groups += [dp[k:k + e] for k in range(0, data, e)]
        for members in ep_groups:
            new("ep", members)
        unfit = _hierarchical_unfit(ep_groups, g)
        if not unfit:
            for members in ep_groups:
                by_node = _by_node(members, g)
                for node_members in by_node:
                    new("intra", node_members)
                for local in range(len(by_node[0])):
                    new("inter", [node_members[local] for node_members in by_node])
        groups = MoeGroups(tp_group=mine["tp"][0], tp_size=t, tp_rank=mine["tp"][2],
                           ep_group=mine["ep"][0], ep_size=e, ep_rank=mine["ep"][2],
                           gpus_per_node=g, hierarchical_unfit=unfit, world_size=world)
        if not unfit:
            groups.intra_group, groups.intra_size = mine["intra"][0], mine["intra"][1]
            groups.inter_group, groups.inter_size = mine["inter"][0], mine["inter"][1]
        return groups

    def check(self, plan: Plan) -> None:
        """Refuses a plan that does not fit these groups (PlanError names the variable)."""
        plan.check_layout(self.world_size, self.tp_size, self.ep_size, self.gpus_per_node)
        if plan.strategy == HIERARCHICAL and self.inter_group is None:
            source = "MONTA_STRATEGY" if plan.origin == "env" else "Plan.strategy"
            raise PlanError(f"{source}=hierarchical: does not fit the process groups: "
                            f"{self.hierarchical_unfit or 'no intra/inter-node groups given'}")


def _by_node(members: List[int], gpus_per_node: int) -> List[List[int]]:
    nodes = {}
    for r in members:
        nodes.setdefault(r // gpus_per_node, []).append(r)
    return [nodes[n] for n in sorted(nodes)]


def _hierarchical_unfit(ep_groups: List[List[int]], gpus_per_node: int) -> str:
    for members in ep_groups:
        counts = [len(m) for m in _by_node(members, gpus_per_node)]
        if len(set(counts)) > 1:
            return (f"expert-parallel group {members} has {counts} members on its nodes "
                    f"(gpus_per_node {gpus_per_node}); hierarchical needs the same count on "
                    "every node")
    return ""
