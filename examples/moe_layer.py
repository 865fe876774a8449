"""A minimal top-k gated MoE layer with DeepSpeed's MOELayer dataflow, on a monta.Plan.

    gate -> einsum dispatch -> monta.dispatch -> local experts -> monta.combine -> einsum

Where DeepSpeed's MOELayer.forward calls `drop_tokens`, `_AllToAll.apply` and
`gather_tokens`, this layer calls monta.dispatch / monta.combine, which run whatever the
plan says (flat, tp_dedup, tp_dedup_pipelined(K), hierarchical) in the job's expert layout;
for expert_overlap(K) it hands its experts to monta.experts_overlapped, which runs the
capacity in K chunks with the next chunk's AllToAll in flight while the experts work on the
current one.

The expert layout is the groups' (MoeGroups.build(expert_layout=...)), else the plan's
(MONTA_EXPERT_LAYOUT, the planner's reply), else the planner's default: tensor-parallel
experts see every capacity row, experts not tensor-parallel this TP rank's ceil(C/t) of
them (DeepSpeed's default path), and the combine gathers the rest back. The experts here
are whole on every rank either way (the layout decides which rows they see, not how their
weights are split), so the same module serves both.

`dispatcher="index"` builds the [E, C, M] buffer by index (scatter the routed tokens into
their slots, gather them back weighted) instead of the dense einsums, as DeepSpeed does
with `use_tutel=True` (Tutel's fast dispatcher): the same tensors, O(k S M) work instead of
O(S E C M). The AllToAll sees exactly the same buffer either way.
"""

import math

import torch
import torch.nn.functional as F

import monta  # installed: pip install --no-build-isolation ./python (python/README.md)


def capacity(tokens: int, num_experts: int, top_k: int, capacity_factor: float) -> int:
    """C = ceil(k * S * cf / E), as the planner's model (docs/MODEL.md section 2)."""
    return max(1, math.ceil(top_k * tokens * capacity_factor / num_experts))


class TopKGate(torch.nn.Module):
    """Softmax top-k gate with capacity (DeepSpeed's top1/top2gating, generalised to k).

    Runs in fp32 whatever the activations' dtype, as DeepSpeed's gate does."""

    def __init__(self, hidden: int, num_experts: int, top_k: int, capacity_factor: float):
        super().__init__()
        self.wg = torch.nn.Linear(hidden, num_experts, bias=False).float()
        self.num_experts, self.top_k, self.capacity_factor = num_experts, top_k, capacity_factor

    def route(self, x: torch.Tensor):
        """Per token and choice [S, k]: the expert, the slot in its capacity buffer, the
        combine weight (0 when the token is dropped for capacity) and whether it is kept.
        Returns (capacity, expert, slot, weight, kept)."""
        tokens, experts = x.shape[0], self.num_experts
        cap = capacity(tokens, experts, self.top_k, self.capacity_factor)
        gates = F.softmax(self.wg(x.float()), dim=1)  # [S, E]
        top_vals, top_idx = gates.topk(self.top_k, dim=1)
        top_vals = top_vals / top_vals.sum(dim=1, keepdim=True)
        filled = torch.zeros(experts, dtype=torch.long, device=x.device)
        slots = []
        for choice in range(self.top_k):  # first choices claim capacity first
            mask = F.one_hot(top_idx[:, choice], experts)  # [S, E]
            slot = torch.cumsum(mask, dim=0) - 1 + filled  # position in the expert's buffer
            filled = filled + mask.sum(dim=0)
            slots.append((slot * mask).sum(dim=1))  # the chosen expert's slot
        slot = torch.stack(slots, dim=1)
        kept = slot < cap
        return cap, top_idx, slot, top_vals * kept, kept

    def forward(self, x: torch.Tensor):
        """DeepSpeed's form: combine weights [S, E, C] and the dispatch mask."""
        cap, expert, slot, weight, kept = self.route(x)
        combine = weight.new_zeros((x.shape[0], self.num_experts, cap))
        for choice in range(self.top_k):
            slot_1h = F.one_hot(slot[:, choice] * kept[:, choice], cap)  # [S, C]
            expert_w = F.one_hot(expert[:, choice], self.num_experts) * weight[:, choice:choice + 1]
            combine = combine + expert_w.unsqueeze(2) * slot_1h.unsqueeze(1)
        return combine, combine > 0


def dispatch_by_index(tokens, cap, expert, slot, kept, num_experts):
    """[S, M] -> [E, C, M]: each kept (token, choice) copied into its expert's slot."""
    where = (expert * cap + slot)[kept]  # row of the flattened [E*C, M] buffer
    routed = tokens.unsqueeze(1).expand(-1, expert.shape[1], -1)[kept]
    buffer = tokens.new_zeros((num_experts * cap, tokens.shape[1]))
    return buffer.index_copy(0, where, routed).view(num_experts, cap, tokens.shape[1])


def combine_by_index(out, cap, expert, slot, weight, kept):
    """[E, C, M] -> [S, M]: each token's kept rows, weighted, summed over its choices."""
    rows = out.reshape(-1, out.shape[-1]).index_select(0, (expert * cap + slot)[kept])
    owner = torch.arange(expert.shape[0], device=out.device).unsqueeze(1).expand_as(expert)
    weighted = rows * weight[kept].unsqueeze(1).type_as(out)
    return out.new_zeros((expert.shape[0], out.shape[-1])).index_add(0, owner[kept], weighted)


class Experts(torch.nn.Module):
    """This rank's E/e experts, two-layer FFNs; expert i's weights seeded by its global id."""

    def __init__(self, hidden: int, ffn: int, first_expert: int, count: int, dtype):
        super().__init__()
        w1, w2 = [], []
        for i in range(first_expert, first_expert + count):
            g = torch.Generator().manual_seed(1000 + i)
            w1.append(torch.randn(hidden, ffn, generator=g) / math.sqrt(hidden))
            w2.append(torch.randn(ffn, hidden, generator=g) / math.sqrt(ffn))
        self.w1 = torch.nn.Parameter(torch.stack(w1).to(dtype))
        self.w2 = torch.nn.Parameter(torch.stack(w2).to(dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [e (source rank), local experts, C, M] -> same shape
        e, local, cap, hidden = x.shape
        tokens = x.transpose(0, 1).reshape(local, e * cap, hidden)
        out = torch.bmm(F.relu(torch.bmm(tokens, self.w1)), self.w2)
        return out.reshape(local, e, cap, hidden).transpose(0, 1)


class MoELayer(torch.nn.Module):
    def __init__(self, hidden: int, ffn: int, num_experts: int, top_k: int,
                 capacity_factor: float, plan: "monta.Plan", groups: "monta.MoeGroups",
                 dtype=torch.float32, dispatcher: str = "einsum"):
        super().__init__()
        if dispatcher not in ("einsum", "index"):
            raise ValueError(f"dispatcher={dispatcher!r}: expected einsum or index")
        self.dispatcher = dispatcher
        if num_experts % groups.ep_size:
            raise ValueError(f"num_experts {num_experts} not divisible by EP size {groups.ep_size}")
        groups.check(plan)  # a plan for another layout is refused here, before any step
        # The expert layout every step runs: the groups', else the plan's, else the planner's
        # default (logged). A plan swapped in later (layer.plan = ...) must agree with it.
        self.expert_layout = plan.expert_layout_for(groups.expert_layout,
                                                    "MoeGroups.expert_layout")
        self.plan, self.groups = plan, groups
        self.local = num_experts // groups.ep_size
        g = torch.Generator().manual_seed(7)  # the gate is the same on every rank
        self.gate = TopKGate(hidden, num_experts, top_k, capacity_factor)
        with torch.no_grad():
            self.gate.wg.weight.copy_(torch.randn(self.gate.wg.weight.shape, generator=g) * 0.1)
        self.experts = Experts(hidden, ffn, groups.ep_rank * self.local, self.local, dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = x.shape[-1]
        tokens = x.reshape(-1, hidden)
        if self.dispatcher == "index":
            cap, expert, slot, weight, kept = self.gate.route(tokens)
            dispatched = dispatch_by_index(tokens, cap, expert, slot, kept,
                                           self.gate.num_experts)
            out = self._experts_and_alltoall(dispatched)
            return combine_by_index(out, cap, expert, slot, weight, kept).reshape(x.shape)
        combine_w, dispatch_mask = self.gate(tokens)
        dispatched = torch.einsum("sec,sm->ecm", dispatch_mask.type_as(x), tokens)
        out = self._experts_and_alltoall(dispatched)
        return torch.einsum("sec,ecm->sm", combine_w.type_as(x), out).reshape(x.shape)

    def _experts_and_alltoall(self, dispatched: torch.Tensor) -> torch.Tensor:
        if self.plan.strategy == monta.EXPERT_OVERLAP:
            return self._chunked(dispatched)
        return self._through_experts(dispatched)

    def _through_experts(self, dispatched: torch.Tensor) -> torch.Tensor:
        e, hidden = self.groups.ep_size, dispatched.shape[-1]
        # [E, C, M] -> [E, C, M], or [E, ceil(C/t), M] when experts are not tensor-parallel.
        received = monta.dispatch(dispatched, self.plan, self.groups,
                                  expert_layout=self.expert_layout)
        expert_out = self.experts(received.reshape(e, self.local, -1, hidden))
        return monta.combine(expert_out.reshape(received.shape), self.plan, self.groups,
                             expert_layout=self.expert_layout, capacity=dispatched.shape[1])

    def _chunked(self, dispatched: torch.Tensor) -> torch.Tensor:
        e, hidden = self.groups.ep_size, dispatched.shape[-1]

        def experts(received):
            out = self.experts(received.reshape(e, self.local, -1, hidden))
            return out.reshape(received.shape)
        return monta.experts_overlapped(dispatched, experts, self.plan, self.groups,
                                        expert_layout=self.expert_layout)
