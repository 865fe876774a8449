"""MoE dispatch / combine AllToAll over torch.distributed, one function per strategy.

Tensors are [E, C, ...]: dim 0 the experts in expert-parallel (EP) rank order (E divisible by
the EP size e), dim 1 the capacity axis. Every strategy computes what DeepSpeed's
`_AllToAll` computes on the EP group (block i of dim 0 goes to EP rank i; the output's block
i came from EP rank i), so dispatch and combine are the same operation:

- flat: one AllToAll of the whole tensor (every TP rank sends the same bytes). On Gloo
  every AllToAll and AllGather here is point-to-point with the receives posted first
  (monta._comm), not torch's all_to_all_single (gloo::alltoall) or all_gather (gloo's ring).
- tp_dedup: TP rank j keeps rows [j*C/t, (j+1)*C/t) of the capacity axis (DeepSpeed's
  `drop_tokens`), AllToAll of that 1/t, AllGather over the TP group (`gather_tokens`).
  When C mod t != 0 the capacity axis is padded with zero rows up to C' = ceil(C/t)*t
  before the drop and the padding is stripped after the gather (the planner's padded plan,
  docs/MODEL.md section 5); the padding is part of the function, so its backward (the same
  padded dedup of the gradient) is consistent, and the real rows equal flat's exactly.
- tp_dedup_pipelined(K): the same cut into K_eff chunks of the local 1/t; the AllToAll of
  chunk i+1 is in flight while chunk i is gathered and chunk i-1 is copied into place.
- hierarchical: an AllToAll among the EP members on the node that groups the data by
  destination node, then an AllToAll among the same-local-rank members of every node.
- expert_overlap(K): experts_overlapped() runs dispatch -> experts -> combine per capacity
  chunk with the neighbouring chunks' AllToAlls in flight. It is not a bare AllToAll:
  dispatch / combine / moe_all_to_all refuse it, naming experts_overlapped.

Each strategy is a `_start_*` function that posts its first collectives and returns what
finishes it: the synchronous call finishes at once; with `async_op=True` (torch.distributed's
convention) the caller gets an AllToAllWork whose wait() finishes it and returns the output,
so work between the call and wait() overlaps the first collectives.

Tensors in the TP "replicated region" are the same on every TP rank (as in DeepSpeed and
Megatron-LM), so, as there, the backward of a drop is a gather and the backward of a gather
is a drop: the backward of each strategy is the strategy itself applied to the gradient.
Buffers keep the input's dtype and device. Collectives are async handles waited for in
order, which is what makes the overlap real on NCCL (one stream per communicator) and on
Gloo (one worker per process group). Every entry point checks the plan against the groups
(MoeGroups.check) before any collective starts.
"""

from typing import Callable, Optional

import torch

from monta import _comm
from monta.errors import PlanError
from monta.groups import MoeGroups
from monta.plan import (EXPERT_OVERLAP, FLAT, HIERARCHICAL, TP_DEDUP, TP_DEDUP_PIPELINED, Plan,
                        chunk_rows, rows_per_tp_rank)

# What a started strategy returns: finishes it (waits, gathers, copies) and returns the output.
Finish = Callable[[], torch.Tensor]


def _start_flat(x: torch.Tensor, groups: MoeGroups, what: Optional[str] = None) -> Finish:
    out, work = _comm.all_to_all_start(x.contiguous(), groups.ep_group)

    def finish():
        _comm.wait(work, what or "AllToAll (flat) on the expert-parallel group")
        return out
    return finish


def _start_dedup(x: torch.Tensor, groups: MoeGroups, chunks: int = 1) -> Finish:
    """tp_dedup (chunks=1) and tp_dedup_pipelined(chunks)."""
    t = groups.tp_size
    cap = x.shape[1]
    n = rows_per_tp_rank(cap, t)  # of the padded capacity C' = n*t >= C
    bounds = chunk_rows(n, chunks)
    k = len(bounds)
    name = "tp_dedup" if chunks <= 1 else f"tp_dedup_pipelined(K={k})"
    mine = _my_rows(x, groups.tp_rank, n)
    padded = n * t != cap
    if padded:
        out = x.new_empty((x.shape[0], n * t) + tuple(x.shape[2:]))
    else:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    # out as [E, t, n, ...]: TP rank j's rows are out[:, j]; chunk i is rows bounds[i].
    out_v = out.view((x.shape[0], t, n) + tuple(x.shape[2:]))

    # Every chunk's AllToAll is posted at once: the EP group runs them back to back (one
    # NCCL stream; on Gloo each pair matches its messages in posting order), so chunk i+1
    # is on the wire while chunk i is gathered and no chunk waits for the previous one's
    # round trip before it starts (that wait cost ~1.4 ms per chunk on a 2-core host).
    pending = [_comm.all_to_all_start(mine.narrow(1, s, rows).contiguous(), groups.ep_group)
               for s, rows in bounds]

    def finish():
        gathering = None  # (gather, chunk index)
        for i in range(len(bounds)):
            received, work = pending[i]
            pending[i] = None
            _comm.wait(work, f"AllToAll ({name}, chunk {i + 1}/{k}) on the expert-parallel "
                             "group")
            gather = _comm.Gather(received, groups.tp_group, t)
            if gathering is not None:
                _place(gathering, out_v, bounds, name, k)
            gathering = (gather, i)
        if gathering is not None:
            _place(gathering, out_v, bounds, name, k)
        # Strip the padding rows (zeros on every rank); one copy, only when C mod t != 0.
        return out.narrow(1, 0, cap).contiguous() if padded else out
    return finish


def _my_rows(x: torch.Tensor, tp_rank: int, n: int) -> torch.Tensor:
    """TP rank j's rows [j*n, (j+1)*n) of x's capacity axis padded with zero rows up to n*t
    (DeepSpeed's `drop_tokens` on the padded tensor). Only the ranks whose rows reach past C
    build a padded copy; the others keep a view of x, as without padding."""
    cap = x.shape[1]
    lo = min(tp_rank * n, cap)
    real = min(cap - lo, n)
    mine = x.narrow(1, lo, real)
    if real == n:
        return mine
    zeros = x.new_zeros((x.shape[0], n - real) + tuple(x.shape[2:]))
    return torch.cat([mine, zeros], dim=1)


def _place(gathering, out_v, bounds, name, k):
    gather, i = gathering
    s, rows = bounds[i]
    gather.into(out_v.narrow(2, s, rows),
                f"AllGather ({name}, chunk {i + 1}/{k}) on the tensor-parallel group")


def _start_hierarchical(x: torch.Tensor, groups: MoeGroups) -> Finish:
    nodes, local = groups.inter_size, groups.intra_size
    rest = tuple(x.shape[1:])
    per = x.shape[0] // (nodes * local)
    y = x.reshape((nodes, local, per) + rest)  # [dest node, dest local, ...]
    if local > 1:
        # Step 1, inside the node: block l goes to local peer l, who shares dest local index.
        inside, work = _comm.all_to_all_start(y.transpose(0, 1).contiguous(),
                                              groups.intra_group)

        def finish():
            _comm.wait(work, "AllToAll (hierarchical, intra-node step) on the node's EP "
                             "members")
            mixed = inside.transpose(0, 1)  # [dest node, src local, ...]
            if nodes == 1:
                return mixed.reshape(x.shape)
            return _start_across_nodes(mixed, x.shape, groups)()
        return finish
    if nodes > 1:
        return _start_across_nodes(y, x.shape, groups)
    return lambda: y.reshape(x.shape)


def _start_across_nodes(y: torch.Tensor, shape, groups: MoeGroups) -> Finish:
    """Hierarchical step 2, across nodes: one n_s-times larger message per destination
    node. The output is [src node, src local, ...] = EP rank order, as flat's."""
    out, work = _comm.all_to_all_start(y.contiguous(), groups.inter_group)

    def finish():
        _comm.wait(work, "AllToAll (hierarchical, inter-node step) on the same-local-rank "
                         "peers")
        return out.reshape(shape)
    return finish


def _start(x: torch.Tensor, strategy: str, chunks: int, groups: MoeGroups,
           what: Optional[str] = None) -> Finish:
    if strategy in (TP_DEDUP, TP_DEDUP_PIPELINED):
        return _start_dedup(x, groups, chunks if strategy == TP_DEDUP_PIPELINED else 1)
    if strategy == HIERARCHICAL:
        return _start_hierarchical(x, groups)
    return _start_flat(x, groups, what)


def _run(x: torch.Tensor, strategy: str, chunks: int, groups: MoeGroups) -> torch.Tensor:
    """The strategy's AllToAll of x, start to finish (both autograd directions of the
    synchronous call come through here)."""
    return _start(x, strategy, chunks, groups)()


class _MoeAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, strategy, chunks, groups):
        ctx.args = (strategy, chunks, groups)
        return _run(x, strategy, chunks, groups)

    @staticmethod
    def backward(ctx, grad):
        # Each strategy is its own adjoint (see the module docstring).
        return _run(grad.contiguous(), *ctx.args), None, None, None


# An async AllToAll is two autograd nodes that share `state`: _Started posts the first
# collectives (forward) and waits for the adjoint's (backward); _Finished completes the
# forward and starts the adjoint on the gradient. Between them, forward and backward, runs
# whatever the caller (or the autograd engine) does in between: that is the overlap.
class _Started(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, args, state):
        ctx.state = state
        state["args"] = args
        state["finish"] = _start(x, *args)
        return x.view_as(x)  # a token: ties _Finished to x in the graph

    @staticmethod
    def backward(ctx, token_grad):
        return ctx.state.pop("grad_finish")(), None, None


class _Finished(torch.autograd.Function):
    @staticmethod
    def forward(ctx, token, state):
        ctx.state, ctx.token_shape = state, token.shape
        return state.pop("finish")()

    @staticmethod
    def backward(ctx, grad):
        ctx.state["grad_finish"] = _start(grad.contiguous(), *ctx.state["args"])
        # The token's gradient is a placeholder (no memory); _Started.backward returns x's.
        return grad.new_zeros(()).expand(ctx.token_shape), None


class AllToAllWork:
    """What dispatch / combine / moe_all_to_all return with async_op=True, as
    torch.distributed's async ops do: the AllToAll is on the wire; wait() finishes it and
    returns its output (differentiable, the same tensor as the synchronous call's). Every
    rank must wait its handles in the same order."""

    def __init__(self, x: torch.Tensor, args: tuple):
        self._state = {}
        self._token = _Started.apply(x, args, self._state)
        self._out: Optional[torch.Tensor] = None

    def wait(self) -> torch.Tensor:
        if self._out is None:
            self._out = _Finished.apply(self._token, self._state)
            self._token = None
        return self._out

    def is_completed(self) -> bool:
        """True once wait() has returned."""
        return self._out is not None


def _check_tensor(call: str, x: torch.Tensor, groups: MoeGroups) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise PlanError(f"monta.{call}: expected a tensor [experts, capacity, ...], got {shape}")
    if x.shape[0] % groups.ep_size:
        raise PlanError(f"monta.{call}: {x.shape[0]} experts are not divisible by the "
                        f"expert-parallel size {groups.ep_size}")


def _check_call(call: str, x: torch.Tensor, plan: Plan, groups: MoeGroups) -> None:
    """Every entry point's checks, before any collective starts."""
    if not isinstance(groups, MoeGroups):
        raise PlanError(f"monta.{call}: groups: expected monta.MoeGroups, got "
                        f"{type(groups).__name__}")
    groups.check(plan)  # a Plan, made for this layout
    _check_tensor(call, x, groups)


def _alltoall(call: str, x: torch.Tensor, plan: Plan, groups: MoeGroups, async_op: bool):
    _check_call(call, x, plan, groups)
    if plan.strategy == EXPERT_OVERLAP:
        raise PlanError(
            f"monta.{call}: {plan.strategy_source()}=expert_overlap overlaps the AllToAll with "
            "the experts, which a bare AllToAll cannot do: call monta.experts_overlapped(x, "
            "experts, plan, groups) in place of dispatch -> experts -> combine")
    if async_op:
        return AllToAllWork(x, (plan.strategy, plan.num_chunks, groups))
    return _MoeAllToAll.apply(x, plan.strategy, plan.num_chunks, groups)


def moe_all_to_all(x: torch.Tensor, plan: Plan, groups: MoeGroups, async_op: bool = False):
    """The plan's AllToAll of x [E, C, ...] on groups; differentiable; dtype and device kept.

    async_op=True: returns an AllToAllWork; its wait() returns the output. Refuses (PlanError)
    a plan that does not fit the groups, and expert_overlap (see experts_overlapped)."""
    return _alltoall("moe_all_to_all", x, plan, groups, async_op)


def dispatch(x: torch.Tensor, plan: Plan, groups: MoeGroups, async_op: bool = False):
    """The dispatch AllToAll (tokens to their experts' ranks): moe_all_to_all."""
    return _alltoall("dispatch", x, plan, groups, async_op)


def combine(x: torch.Tensor, plan: Plan, groups: MoeGroups, async_op: bool = False):
    """The combine AllToAll (expert outputs back to their tokens' ranks): moe_all_to_all."""
    return _alltoall("combine", x, plan, groups, async_op)


def experts_overlapped(x: torch.Tensor, experts: Callable[[torch.Tensor], torch.Tensor],
                       plan: Plan, groups: MoeGroups) -> torch.Tensor:
    """expert_overlap(K): dispatch -> experts -> combine of x [E, C, ...] in K_eff capacity
    chunks, the AllToAll of chunk i+1 (and the combine of chunk i-1) in flight while the
    experts work on chunk i. `experts` maps the dispatched [E, c, ...] (EP-rank-major) to
    the same shape. Same result as flat dispatch -> experts -> combine. Other strategies are
    refused: they run as dispatch -> experts -> combine."""
    _check_call("experts_overlapped", x, plan, groups)
    if plan.strategy != EXPERT_OVERLAP:
        raise PlanError(
            f"monta.experts_overlapped: {plan.strategy_source()}={plan.strategy}: runs "
            f"expert_overlap plans only; run {plan.strategy} as monta.dispatch -> experts -> "
            "monta.combine")
    cap = x.shape[1]
    size = -(-cap // plan.chunks_for(cap)) if cap else 1
    chunks = list(x.split(size, dim=1))
    k = len(chunks)

    def start(chunk, step, i):
        what = f"AllToAll (expert_overlap {step}, chunk {i + 1}/{k}) on the expert-parallel group"
        return AllToAllWork(chunk, (FLAT, 1, groups, what))

    pending = start(chunks[0], "dispatch", 0)
    combined = []
    for i in range(k):
        received = pending.wait()
        if i + 1 < k:
            pending = start(chunks[i + 1], "dispatch", i + 1)
        combined.append(start(experts(received), "combine", i))
    return torch.cat([c.wait() for c in combined], dim=1)
