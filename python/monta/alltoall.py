"""MoE dispatch / combine AllToAll over torch.distributed, one function per strategy.

Tensors are [E, C, ...]: dim 0 the experts in expert-parallel (EP) rank order (E divisible by
the EP size e), dim 1 the capacity axis. Every strategy computes what DeepSpeed's
`_AllToAll` computes on the EP group (block i of dim 0 goes to EP rank i; the output's block
i came from EP rank i), so dispatch and combine are the same operation:

- flat: one AllToAll of the whole tensor (every TP rank sends the same bytes). On Gloo
  every AllToAll and AllGather here is point-to-point with the receives posted first
  (`_gloo_pairwise_start`, `_gloo_gather_start`), not torch's all_to_all_single
  (gloo::alltoall) or all_gather (gloo's ring).
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
  chunk with the neighbouring chunks' AllToAlls in flight.

Tensors in the TP "replicated region" are the same on every TP rank (as in DeepSpeed and
Megatron-LM), so, as there, the backward of a drop is a gather and the backward of a gather
is a drop: the backward of each strategy is the strategy itself applied to the gradient.
Buffers keep the input's dtype and device. Collectives are async handles waited for in
order, which is what makes the overlap real on NCCL (one stream per communicator) and on
Gloo (one worker per process group).
"""


import torch
import torch.distributed as dist

from monta.groups import MoeGroups
from monta.plan import (EXPERT_OVERLAP, FLAT, HIERARCHICAL, TP_DEDUP, TP_DEDUP_PIPELINED, Plan,
                        PlanError, effective_chunks)


class CommError(RuntimeError):
    """A collective failed (a peer died, a timeout): says which op, group and chunk."""


# Gloo (torch 1.13) has no bfloat16 (nor int16) kernels; AllToAll and AllGather only move
# bytes, so a byte view (last dim x2) is bit-exact. NCCL takes bf16 as is.
_GLOO_BYTES = (torch.bfloat16,)


def _wire(t: torch.Tensor, group) -> torch.Tensor:
    if t.dtype in _GLOO_BYTES and dist.get_backend(group) == dist.Backend.GLOO:
        return t.view(torch.uint8)
    return t


def _wait(work, what: str) -> None:
    try:
        work.wait()
    except RuntimeError as e:
        raise CommError(f"monta: {what} failed ({e}); a peer rank may have died or timed "
                        "out: stopping this rank rather than hanging") from e


# Tag of monta's point-to-point AllToAll messages on Gloo. Every rank of a group posts its
# AllToAlls in the same order, and Gloo matches the messages of one pair and tag in the
# order they were posted, so concurrent AllToAlls on one group (expert_overlap's dispatch
# and combine) pair up correctly with one tag.
_GLOO_TAG = 0x4D4F45


class _Works:
    """Several async works that finish together (one per peer of a pairwise AllToAll)."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for work in self.works:
            work.wait()
        return True


def _gloo_pairwise_start(out: torch.Tensor, inp: torch.Tensor, group) -> _Works:
    """An equal-split AllToAll over dim 0 as point-to-point messages, every receive posted
    before any send. torch's Gloo all_to_all_single runs gloo::alltoall, which posts each
    send before the matching receive on one connection per pair: across a rate-limited link
    the two directions then take turns, and its time is bimodal (issue 10 measured 60-80%
    of a shaped link's rate, this 90%+)."""
    size, me = dist.get_world_size(group), dist.get_rank(group)
    if inp.shape[0] % size:
        raise PlanError(f"monta: AllToAll of {inp.shape[0]} rows over a group of {size}: dim "
                        "0 must split evenly")
    n = inp.shape[0] // size
    ins = [inp.narrow(0, j * n, n) for j in range(size)]
    outs = [out.narrow(0, j * n, n) for j in range(size)]
    peers = [(me + k) % size for k in range(1, size)]
    ranks = {p: dist.distributed_c10d.get_global_rank(group, p) for p in peers}
    works = [dist.irecv(outs[p], src=ranks[p], group=group, tag=_GLOO_TAG) for p in peers]
    works += [dist.isend(ins[p], dst=ranks[p], group=group, tag=_GLOO_TAG) for p in peers]
    outs[me].copy_(ins[me])
    return _Works(works)


def _gloo_gather_start(pieces, inp: torch.Tensor, group) -> _Works:
    """AllGather as point-to-point messages, every receive posted first. torch's Gloo
    all_gather (gloo's ring allgather) moved 32 MiB between two ranks on one host's
    loopback in ~0.6 s, these messages in ~0.15 s: it was what tp_dedup's time was made
    of."""
    size, me = dist.get_world_size(group), dist.get_rank(group)
    peers = [(me + k) % size for k in range(1, size)]
    ranks = {p: dist.distributed_c10d.get_global_rank(group, p) for p in peers}
    wire = _wire(inp, group)
    works = [dist.irecv(_wire(pieces[p], group), src=ranks[p], group=group, tag=_GLOO_TAG + 1)
             for p in peers]
    works += [dist.isend(wire, dst=ranks[p], group=group, tag=_GLOO_TAG + 1) for p in peers]
    return _Works(works)


def _all_to_all_start(inp: torch.Tensor, group):
    """Starts an equal-split AllToAll over dim 0; returns (output, work)."""
    out = torch.empty_like(inp)
    try:
        if dist.get_backend(group) == dist.Backend.GLOO and dist.get_world_size(group) > 1:
            work = _gloo_pairwise_start(_wire(out, group), _wire(inp, group), group)
        else:
            work = dist.all_to_all_single(_wire(out, group), _wire(inp, group), group=group,
                                          async_op=True)
    except RuntimeError as e:
        raise CommError(f"monta: starting an AllToAll failed ({e})") from e
    return out, work


def _has_gather_into_tensor(group) -> bool:
    """NCCL (and MPI/UCC) have all_gather_into_tensor; Gloo in torch 1.13 does not."""
    return dist.get_backend(group) != dist.Backend.GLOO


class _Gather:
    """An async AllGather of `inp` over `group`; `into(dst)` copies piece j to dst[:, j]."""

    def __init__(self, inp: torch.Tensor, group, size: int):
        self.size = size
        try:
            if _has_gather_into_tensor(group):
                self.buffer = inp.new_empty((size,) + tuple(inp.shape))
                self.work = dist.all_gather_into_tensor(_wire(self.buffer, group),
                                                        _wire(inp, group), group=group,
                                                        async_op=True)
            else:
                # Gloo: t separate buffers, filled by point-to-point messages (receives
                # posted first); this rank's piece is its input itself.
                self.pieces = [inp if j == dist.get_rank(group) else torch.empty_like(inp)
                               for j in range(size)]
                self.buffer = None
                self.work = _gloo_gather_start(self.pieces, inp, group)
        except RuntimeError as e:
            raise CommError(f"monta: starting an AllGather failed ({e})") from e

    def into(self, dst: torch.Tensor, what: str) -> None:
        """dst: [E, t, rows, ...]; the reorder copy of the gathered chunk."""
        _wait(self.work, what)
        if self.buffer is not None:
            dst.copy_(self.buffer.transpose(0, 1))
        else:
            for j, piece in enumerate(self.pieces):
                dst[:, j].copy_(piece)


def flat_all_to_all(x: torch.Tensor, groups: MoeGroups) -> torch.Tensor:
    out, work = _all_to_all_start(x.contiguous(), groups.ep_group)
    _wait(work, "AllToAll (flat) on the expert-parallel group")
    return out


def dedup_all_to_all(x: torch.Tensor, groups: MoeGroups, chunks: int = 1) -> torch.Tensor:
    """tp_dedup (chunks=1) and tp_dedup_pipelined(chunks)."""
    t = groups.tp_size
    cap = x.shape[1]
    n = -(-cap // t)  # rows per TP rank of the padded capacity C' = n*t >= C
    k = effective_chunks(n, chunks)
    size = -(-n // k) if n else 0
    name = "tp_dedup" if chunks <= 1 else f"tp_dedup_pipelined(K={k})"
    mine = _my_rows(x, groups.tp_rank, n)
    padded = n * t != cap
    if padded:
        out = x.new_empty((x.shape[0], n * t) + tuple(x.shape[2:]))
    else:
        out = torch.empty_like(x, memory_format=torch.contiguous_format)
    # out as [E, t, n, ...]: TP rank j's rows are out[:, j]; chunk i is rows [i*size, ...).
    out_v = out.view((x.shape[0], t, n) + tuple(x.shape[2:]))
    bounds = [(s, min(size, n - s)) for s in range(0, n, size)] if n else []

    def start(i):
        s, rows = bounds[i]
        return _all_to_all_start(mine.narrow(1, s, rows).contiguous(), groups.ep_group)

    # Every chunk's AllToAll is posted at once: the EP group runs them back to back (one
    # NCCL stream; on Gloo each pair matches its messages in posting order), so chunk i+1
    # is on the wire while chunk i is gathered and no chunk waits for the previous one's
    # round trip before it starts (that wait cost ~1.4 ms per chunk on a 2-core host).
    pending = [start(i) for i in range(len(bounds))]
    gathering = None  # (gather, chunk index)
    for i in range(len(bounds)):
        received, work = pending[i]
        pending[i] = None
        _wait(work, f"AllToAll ({name}, chunk {i + 1}/{k}) on the expert-parallel group")
        gather = _Gather(received, groups.tp_group, t)
        if gathering is not None:
            _place(gathering, out_v, bounds, name, k)
        gathering = (gather, i)
    if gathering is not None:
        _place(gathering, out_v, bounds, name, k)
    # Strip the padding rows (zeros on every rank); one copy, only when C mod t != 0.
    return out.narrow(1, 0, cap).contiguous() if padded else out


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


def hierarchical_all_to_all(x: torch.Tensor, groups: MoeGroups) -> torch.Tensor:
    nodes, local = groups.inter_size, groups.intra_size
    rest = tuple(x.shape[1:])
    per = x.shape[0] // (nodes * local)
    y = x.reshape((nodes, local, per) + rest)  # [dest node, dest local, ...]
    if local > 1:
        # Step 1, inside the node: block l goes to local peer l, who shares dest local index.
        y, work = _all_to_all_start(y.transpose(0, 1).contiguous(), groups.intra_group)
        _wait(work, "AllToAll (hierarchical, intra-node step) on the node's EP members")
        y = y.transpose(0, 1)  # [dest node, src local, ...]
    if nodes > 1:
        # Step 2, across nodes: one n_s-times larger message per destination node.
        y, work = _all_to_all_start(y.contiguous(), groups.inter_group)
        _wait(work, "AllToAll (hierarchical, inter-node step) on the same-local-rank peers")
    return y.reshape(x.shape)  # [src node, src local, ...] = EP rank order, as flat


def _run(x: torch.Tensor, strategy: str, chunks: int, groups: MoeGroups) -> torch.Tensor:
    if strategy in (TP_DEDUP, TP_DEDUP_PIPELINED):
        return dedup_all_to_all(x, groups, chunks if strategy == TP_DEDUP_PIPELINED else 1)
    if strategy == HIERARCHICAL:
        return hierarchical_all_to_all(x, groups)
    return flat_all_to_all(x, groups)


class _MoeAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, strategy, chunks, groups):
        ctx.args = (strategy, chunks, groups)
        return _run(x, strategy, chunks, groups)

    @staticmethod
    def backward(ctx, grad):
        # Each strategy is its own adjoint (see the module docstring).
        return _run(grad.contiguous(), *ctx.args), None, None, None


def moe_all_to_all(x: torch.Tensor, plan: Plan, groups: MoeGroups) -> torch.Tensor:
    """The plan's AllToAll of x [E, C, ...] on groups; differentiable; dtype and device kept.

    expert_overlap runs as flat here: its chunks overlap the experts, so the layer calls
    experts_overlapped (below) instead of dispatch -> experts -> combine."""
    if x.dim() < 2:
        raise PlanError(f"monta: expected [experts, capacity, ...], got shape {tuple(x.shape)}")
    if x.shape[0] % groups.ep_size:
        raise PlanError(f"monta: {x.shape[0]} experts are not divisible by the expert-parallel "
                        f"size {groups.ep_size}")
    strategy = plan.strategy
    if strategy == EXPERT_OVERLAP:
        strategy = FLAT
    if strategy == HIERARCHICAL:
        groups.check(plan)
    return _MoeAllToAll.apply(x, strategy, plan.num_chunks, groups)


dispatch = moe_all_to_all
combine = moe_all_to_all


# expert_overlap: an AllToAll split into a start and a wait, so that the experts of one
# capacity chunk run while the next chunk's dispatch and the previous chunk's combine are in
# flight. `state` carries the work handles between the two halves, forward and backward.
class _StartAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group, state):
        ctx.group, ctx.state = group, state
        out, state["work"] = _all_to_all_start(x.contiguous(), group)
        return out

    @staticmethod
    def backward(ctx, grad):
        _wait(ctx.state.pop("grad_work"), "AllToAll (expert_overlap, backward)")
        return grad, None, None


class _WaitAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, out, state, what):
        ctx.group, ctx.state = state["group"], state
        _wait(state.pop("work"), what)
        return out.view_as(out)

    @staticmethod
    def backward(ctx, grad):
        # Started here, waited for in _StartAllToAll.backward: the experts' backward of
        # other chunks runs in between.
        out, ctx.state["grad_work"] = _all_to_all_start(grad.contiguous(), ctx.group)
        return out, None, None


def _start(x: torch.Tensor, group) -> tuple:
    state = {"group": group}
    return _StartAllToAll.apply(x, group, state), state


def _finish(pending: tuple, what: str) -> torch.Tensor:
    out, state = pending
    return _WaitAllToAll.apply(out, state, what)


def experts_overlapped(x: torch.Tensor, experts, plan: Plan, groups: MoeGroups) -> torch.Tensor:
    """expert_overlap(K): dispatch -> experts -> combine of x [E, C, ...] in K_eff capacity
    chunks, the AllToAll of chunk i+1 (and the combine of chunk i-1) in flight while the
    experts work on chunk i. `experts` maps the dispatched [E, c, ...] (EP-rank-major) to
    the same shape. Same result as flat dispatch -> experts -> combine."""
    cap = x.shape[1]
    size = -(-cap // plan.chunks_for(cap)) if cap else 1
    chunks = list(x.split(size, dim=1))
    k = len(chunks)
    ep = groups.ep_group
    pending = _start(chunks[0], ep)
    combined = []
    for i in range(k):
        received = _finish(pending, f"AllToAll (expert_overlap dispatch, chunk {i + 1}/{k})")
        if i + 1 < k:
            pending = _start(chunks[i + 1], ep)
        combined.append(_start(experts(received), ep))
    outs = [_finish(c, f"AllToAll (expert_overlap combine, chunk {i + 1}/{k})")
            for i, c in enumerate(combined)]
    return torch.cat(outs, dim=1)


# DeepSpeed-shaped primitives (deepspeed.moe.mappings / sharded_moe), for code that wires
# the pieces itself.
class _AllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, group, x):
        ctx.group = group
        out, work = _all_to_all_start(x.contiguous(), group)
        _wait(work, "AllToAll")
        return out

    @staticmethod
    def backward(ctx, grad):
        return None, _AllToAll.apply(ctx.group, grad)


def _gather_along(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    size = dist.get_world_size(group)
    if size == 1:
        return x
    gather = _Gather(x.contiguous(), group, size)
    _wait(gather.work, "AllGather of tokens on the tensor-parallel group")
    pieces = gather.pieces if gather.buffer is None else list(gather.buffer.unbind(0))
    return torch.cat(pieces, dim)


def _drop_along(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    size = dist.get_world_size(group)
    if size == 1:
        return x
    if x.shape[dim] % size:
        raise PlanError(f"monta: dimension {dim} of size {x.shape[dim]} is not divisible by the "
                        f"group size {size}")
    n = x.shape[dim] // size
    return x.narrow(dim, dist.get_rank(group) * n, n).contiguous()


class _DropTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return _drop_along(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        return _gather_along(grad, ctx.dim, ctx.group), None, None


class _GatherTokens(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, dim, group):
        ctx.dim, ctx.group = dim, group
        return _gather_along(x, dim, group)

    @staticmethod
    def backward(ctx, grad):
        return _drop_along(grad, ctx.dim, ctx.group), None, None


def all_to_all(x: torch.Tensor, group) -> torch.Tensor:
    """DeepSpeed's `_AllToAll.apply(group, x)`."""
    return _AllToAll.apply(group, x)


def drop_tokens(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    """DeepSpeed's `drop_tokens(x, dim)` on an explicit TP group."""
    return _DropTokens.apply(x, dim, group)


def gather_tokens(x: torch.Tensor, dim: int, group) -> torch.Tensor:
    """DeepSpeed's `gather_tokens(x, dim)` on an explicit TP group."""
    return _GatherTokens.apply(x, dim, group)
