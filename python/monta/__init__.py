"""Monta inside the training job: the planned MoE AllToAll over torch.distributed.

    plan = monta.Plan.from_env()               # what the admission webhook injected
    groups = monta.MoeGroups.build(tensor_parallel_size=t, expert_parallel_size=e)
    groups.check(plan)                         # refuses a plan made for another layout
    y = monta.dispatch(x, plan, groups)        # x: [experts, capacity, hidden]
"""

from monta.alltoall import (CommError, all_to_all, combine, dispatch, drop_tokens,
                            experts_overlapped, gather_tokens, moe_all_to_all)
from monta.groups import MoeGroups
from monta.plan import (EXPERT_OVERLAP, FLAT, HIERARCHICAL, STRATEGIES, TP_DEDUP,
                        TP_DEDUP_PIPELINED, Plan, PlanError, effective_chunks)

__all__ = [
    "CommError", "EXPERT_OVERLAP", "FLAT", "HIERARCHICAL", "MoeGroups", "Plan", "PlanError",
    "STRATEGIES", "TP_DEDUP", "TP_DEDUP_PIPELINED", "all_to_all", "combine", "dispatch",
    "drop_tokens", "effective_chunks", "experts_overlapped", "gather_tokens", "moe_all_to_all",
]
