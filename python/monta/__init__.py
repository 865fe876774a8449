"""Monta inside the training job: the planned MoE AllToAll over torch.distributed.

    plan = monta.Plan.from_env()               # what the admission webhook injected
    groups = monta.MoeGroups.build(tensor_parallel_size=t, expert_parallel_size=e,
                                   expert_layout=monta.TENSOR_PARALLEL)  # the job's experts
    y = monta.dispatch(x, plan, groups)        # x: [experts, capacity, hidden]; checks the
                                               # plan against the groups first
    z = monta.combine(experts(y), plan, groups, capacity=x.shape[1])
    work = monta.dispatch(x, plan, groups, async_op=True)
    y = work.wait()                            # as torch.distributed's async ops

Installed with `pip install --no-build-isolation ./python` (the gRPC stubs for
Plan.request are generated when the package is built).
"""

from monta.alltoall import (AllToAllWork, combine, dispatch, experts_overlapped,
                            moe_all_to_all)
from monta.errors import CommError, PlanError
from monta.groups import MoeGroups, ProcessGroup, node_names, plan_on_nodes, register_group
from monta.mappings import all_to_all, drop_tokens, gather_tokens
from monta.plan import (CHUNKED, DEFAULT_EXPERT_LAYOUT, EXPERT_LAYOUTS, EXPERT_OVERLAP, FLAT,
                        HIERARCHICAL, NOT_TENSOR_PARALLEL, STRATEGIES, TENSOR_PARALLEL, TP_DEDUP,
                        TP_DEDUP_PIPELINED, Plan, advised_node_order, effective_chunks, normalize_expert_layout,
                        normalize_strategy)

__all__ = [
    "AllToAllWork", "CHUNKED", "CommError", "DEFAULT_EXPERT_LAYOUT", "EXPERT_LAYOUTS",
    "EXPERT_OVERLAP", "FLAT", "HIERARCHICAL", "MoeGroups", "NOT_TENSOR_PARALLEL", "Plan",
    "PlanError", "ProcessGroup", "STRATEGIES", "TENSOR_PARALLEL", "TP_DEDUP",
    "TP_DEDUP_PIPELINED", "advised_node_order", "all_to_all", "combine", "dispatch", "drop_tokens",
    "effective_chunks", "experts_overlapped", "gather_tokens", "moe_all_to_all",
    "node_names", "normalize_expert_layout", "normalize_strategy", "plan_on_nodes",
    "register_group",
]
