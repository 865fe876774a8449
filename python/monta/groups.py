"""The process groups the MoE AllToAll runs on, laid out as DeepSpeed and Megatron do.

Rank order: tensor-parallel (TP) ranks innermost, so TP group i is ranks [i*t, (i+1)*t);
data-parallel ranks of TP index j are j, j+t, j+2t, ...; expert-parallel (EP) groups are
consecutive runs of e of them. Node n holds ranks [n*G, (n+1)*G) (G = gpus_per_node).
For the hierarchical strategy each EP group is split twice: its members on one node
(intra) and its members with the same local index on every node (inter).

Point-to-point messages on a group name their peer by its global rank. monta keeps the
global ranks of every group it builds (the rank lists it gave torch.distributed.new_group);
a group built elsewhere (DeepSpeed's, Megatron's) is declared with `register_group(group,
ranks)`, or its ranks are asked of torch.distributed.get_process_group_ranks.
"""

import datetime
import logging
import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import torch.distributed as dist

from monta.errors import PlanError
from monta.plan import HIERARCHICAL, Plan, normalize_expert_layout

LOG = logging.getLogger("monta")

ProcessGroup = dist.ProcessGroup

# Global ranks of each group, in group-rank order.
_GLOBAL_RANKS: Dict[ProcessGroup, Tuple[int, ...]] = {}


def register_group(group: ProcessGroup, ranks: Sequence[int]) -> None:
    """Declares the global ranks of `group` (in group-rank order), for a group that
    monta.MoeGroups.build did not create."""
    if not isinstance(group, ProcessGroup):
        raise PlanError(f"register_group: group: expected a torch.distributed ProcessGroup, got "
                        f"{type(group).__name__}")
    ranks = tuple(int(r) for r in ranks)
    if len(ranks) != dist.get_world_size(group) or len(set(ranks)) != len(ranks):
        raise PlanError(f"register_group: ranks {list(ranks)[:16]}: expected the "
                        f"{dist.get_world_size(group)} distinct global ranks of the group")
    _GLOBAL_RANKS[group] = ranks


def global_ranks(group: Optional[ProcessGroup]) -> Tuple[int, ...]:
    """The global ranks of `group` (None: the default group), in group-rank order."""
    if group is None or group is dist.group.WORLD:
        return tuple(range(dist.get_world_size()))
    ranks = _GLOBAL_RANKS.get(group)
    if ranks is None:
        lookup = getattr(dist, "get_process_group_ranks", None)  # public from torch 1.13
        if lookup is None:
            raise PlanError("monta: a process group it did not build: declare its ranks with "
                            "monta.register_group(group, ranks)")
        ranks = _GLOBAL_RANKS[group] = tuple(lookup(group))
    return ranks


def world_timeout() -> datetime.timedelta:
    """The default process group's timeout (what init_process_group was given), which
    torch.distributed.new_group does not inherit: it defaults to 30 minutes. torch keeps it
    only in the group's options (1.13 and later: `options._timeout`, no public getter)."""
    options = getattr(dist.group.WORLD, "options", None)
    timeout = getattr(options, "_timeout", None)
    if isinstance(timeout, datetime.timedelta):
        return timeout
    LOG.warning("monta: cannot read the default process group's timeout; MoeGroups.build "
                "uses torch's default (%s): pass timeout= to choose", dist.default_pg_timeout)
    return dist.default_pg_timeout


@dataclass
class MoeGroups:
    tp_group: Optional[ProcessGroup]
    ep_group: Optional[ProcessGroup]
    tp_size: int
    tp_rank: int
    ep_size: int
    ep_rank: int
    gpus_per_node: Optional[int] = None
    # Hierarchical sub-groups of the EP group; None when the layout cannot run it.
    intra_group: Optional[ProcessGroup] = None
    intra_size: int = 1
    inter_group: Optional[ProcessGroup] = None
    inter_size: int = 1
    hierarchical_unfit: str = ""
    world_size: Optional[int] = None
    # The expert layout the job runs (monta.TENSOR_PARALLEL or monta.NOT_TENSOR_PARALLEL, any
    # spelling Plan takes); None = not said (the plan's, else the planner's default, runs).
    expert_layout: Optional[str] = None

    def __post_init__(self):
        self.expert_layout = normalize_expert_layout(self.expert_layout,
                                                     "MoeGroups.expert_layout")
        for name in ("tp_group", "ep_group", "intra_group", "inter_group"):
            group = getattr(self, name)
            if group is not None and not isinstance(group, ProcessGroup):
                raise PlanError(f"MoeGroups.{name}: expected a torch.distributed ProcessGroup "
                                f"(or None), got {type(group).__name__}")
        for name in ("tp_size", "ep_size", "intra_size", "inter_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise PlanError(f"MoeGroups.{name}={value!r}: expected an integer >= 1")

    @staticmethod
    def build(tensor_parallel_size: int, expert_parallel_size: int,
              gpus_per_node: Optional[int] = None,
              timeout: Optional[datetime.timedelta] = None,
              expert_layout: Optional[str] = None,
              node_order: Optional[Sequence[int]] = None) -> "MoeGroups":
        """Creates every group; all ranks must call it (torch.distributed.new_group).

        node_order: the rank order to lay the groups out in, as the planner advised it
        (Plan.node_order(): node_order[i] is the launcher's node rank of the node that takes
        the i-th node slot of the layout). The groups are built on those slots: TP, EP and
        data-parallel ranks as without it, on the nodes in that order (e.g. EP groups inside
        a rack, data parallel across racks; docs/MODEL.md section 12). None: the launcher's
        order.

        timeout: how long a collective on these groups waits for a silent peer; default the
        default process group's (init_process_group's timeout), not torch's 30 minutes.
        expert_layout: how the job's experts sit on the TP ranks (tensor_parallel or
        not_tensor_parallel); a plan priced for the other is refused. Checked before any
        group is created."""
        expert_layout = normalize_expert_layout(expert_layout, "MoeGroups.build(expert_layout)")
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
        timeout = world_timeout() if timeout is None else timeout
        slot_to_rank = _slot_to_rank(node_order, world, g)
        mine = {}

        def new(kind: str, ranks: List[int]):
            group = dist.new_group(ranks, timeout=timeout)  # collective: every rank, same order
            if rank in ranks:
                ranks = sorted(ranks)  # new_group's group-rank order
                _GLOBAL_RANKS[group] = tuple(ranks)
                mine[kind] = (group, len(ranks), ranks.index(rank))

        def ranks_of(slots: List[int]) -> List[int]:
            # Whole nodes move to whole nodes: sorted, the ranks keep the layout's shape.
            return sorted(slot_to_rank[s] for s in slots)

        for i in range(world // t):
            new("tp", ranks_of(list(range(i * t, (i + 1) * t))))
        ep_groups = []
        for j in range(t):
            dp = list(range(j, world, t))
            ep_groups += [ranks_of(dp[k:k + e]) for k in range(0, data, e)]
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
                           gpus_per_node=g, hierarchical_unfit=unfit, world_size=world,
                           expert_layout=expert_layout)
        if not unfit:
            groups.intra_group, groups.intra_size = mine["intra"][0], mine["intra"][1]
            groups.inter_group, groups.inter_size = mine["inter"][0], mine["inter"][1]
        return groups

    def check(self, plan: Plan) -> None:
        """Refuses a plan that does not fit these groups (PlanError names the variable)."""
        if not isinstance(plan, Plan):
            raise PlanError(f"plan: expected a monta.Plan, got {type(plan).__name__}")
        plan.check_layout(self.world_size, self.tp_size, self.ep_size, self.gpus_per_node)
        plan.check_expert_layout(self.expert_layout, "MoeGroups.expert_layout")
        if plan.strategy == HIERARCHICAL and self.inter_group is None:
            raise PlanError(f"{plan.strategy_source()}=hierarchical: does not fit the process "
                            "groups: "
                            f"{self.hierarchical_unfit or 'no intra/inter-node groups given'}")


def _slot_to_rank(node_order: Optional[Sequence[int]], world: int,
                  gpus_per_node: int) -> List[int]:
    """The global rank that takes each slot of the layout: slot s is on node slot s // G."""
    nodes = world // gpus_per_node
    if node_order is None:
        return list(range(world))
    order = list(node_order)
    if sorted(order) != list(range(nodes)) or \
            any(isinstance(n, bool) or not isinstance(n, int) for n in order):
        raise PlanError(f"MoeGroups.build(node_order={order[:16]}): expected each node rank "
                        f"0..{nodes - 1} once (world {world} / gpus_per_node {gpus_per_node})")
    return [order[s // gpus_per_node] * gpus_per_node + s % gpus_per_node
            for s in range(world)]


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


def node_names(gpus_per_node: int, name: Optional[str] = None) -> List[str]:
    """Every node's name in the launcher's node order (node n holds ranks [n*G, (n+1)*G));
    all ranks must call it (an all_gather_object on the default group). name: this rank's
    node, by default MONTA_NODE_NAME, else the host name; the ranks of one node must agree."""
    import socket  # noqa: local: only this helper needs it
    mine = name or os.environ.get("MONTA_NODE_NAME") or socket.gethostname()
    world = dist.get_world_size()
    names: List[Optional[str]] = [None] * world
    dist.all_gather_object(names, mine)
    out = []
    for n in range(world // gpus_per_node):
        node = set(names[n * gpus_per_node:(n + 1) * gpus_per_node])
        if len(node) != 1:
            raise PlanError(f"node_names: the ranks of node {n} name different nodes "
                            f"{sorted(node)[:4]} (gpus_per_node {gpus_per_node})")
        out.append(node.pop())
    return out


def plan_on_nodes(planner_address: str, job, gpus_per_node: int,
                  timeout_s: float = 10.0) -> Plan:
    """The planner's plan for `job` on the nodes this job runs on, named in the launcher's
    order (node_names): with a fabric the plan carries the advised rank order
    (Plan.node_order() for MoeGroups.build). All ranks must call it; rank 0 asks the
    planner (GetStrategy) and every rank gets its answer. PlanError on every rank when the
    planner refuses or cannot be reached."""
    nodes = node_names(gpus_per_node)
    answer = [None]
    if dist.get_rank() == 0:
        try:
            answer[0] = Plan.request(planner_address, job, {"node_names": nodes},
                                     timeout_s=timeout_s)
        except PlanError as e:
            answer[0] = e
    dist.broadcast_object_list(answer, src=0)
    if isinstance(answer[0], PlanError):
        raise PlanError(str(answer[0]))
    return answer[0]
