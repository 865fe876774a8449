"""MoE dispatch / combine over torch.distributed, per expert layout, one function per strategy.

Tensors are [E, C, ...]: dim 0 the experts in expert-parallel (EP) rank order (E divisible by
the EP size e), dim 1 the capacity axis. With tensor parallelism (TP size t > 1) the MoE
input is the same on every TP rank (activations replicated over TP, as in DeepSpeed and
Megatron-LM), so each TP rank holds duplicates of the others' tokens. What dispatch and
combine compute depends on the expert layout (monta.v1.ExpertLayout, docs/MODEL.md section
4), read from DeepSpeed's MOELayer.forward (deepspeed/moe/sharded_moe.py) and
deepspeed/moe/mappings.py:

- tensor_parallel (experts split over the TP group; every TP rank's experts see every
  token): dispatch and combine are each DeepSpeed's drop -> AllToAll -> gather, [E, C] ->
  [E, C], and each is its own adjoint (the backward of a drop is a gather and of a gather a
  drop). Each strategy below computes exactly that.
- not_tensor_parallel (experts whole on every TP rank, DeepSpeed's default): dispatch =
  drop -> AllToAll, [E, C] -> [E, n] with n = ceil(C/t) (the experts see this TP rank's
  slice only); combine = AllToAll -> gather, [E, n] -> [E, C]. Autograd mirrors them:
  dispatch's backward is AllToAll -> gather, combine's is drop -> AllToAll, so dispatch and
  combine are each other's adjoints. Every strategy computes exactly that.
- With t = 1 nothing is duplicated: both layouts are the plain AllToAll, [E, C] -> [E, C].

Per strategy, the part each layout runs (the model's prices, server/model/cost_model.cc):

- flat: tensor-parallel: one AllToAll of the whole tensor (every TP rank sends the same
  bytes; the paper's baseline, DeepSpeed before v0.14.5). Not tensor-parallel: DeepSpeed's
  path itself (drop -> AllToAll / AllToAll -> AllGather -> reorder copy).
- tp_dedup: TP rank j keeps rows [j*n, (j+1)*n) of the capacity axis (DeepSpeed's
  `drop_tokens`), AllToAll of that 1/t, AllGather over the TP group (`gather_tokens`).
  Tensor-parallel: in both ops; not tensor-parallel: the drop in dispatch, the gather in
  combine (the same schedule as flat there, as the model says).
- tp_dedup_pipelined(K): the ops that gather are cut into K_eff chunks of the local n rows:
  the AllToAll of chunk i+1 is in flight while chunk i is gathered and chunk i-1 copied into
  place. Tensor-parallel: both ops and both gradients; not tensor-parallel: combine and
  dispatch's gradient (dispatch and combine's gradient drop and send n rows in one
  AllToAll, unchunked).
- hierarchical: an AllToAll among the EP members on the node that groups the data by
  destination node, then an AllToAll among the same-local-rank members of every node; of
  the whole tensor (tensor-parallel) or of this TP rank's n rows, the combine gathering
  them after (not tensor-parallel).
- expert_overlap(K): experts_overlapped() runs dispatch -> experts -> combine per capacity
  chunk with the neighbouring chunks' AllToAlls in flight (all C rows, or this TP rank's n,
  gathered once after the last combine, when experts are not tensor-parallel). It is not a
  bare AllToAll: dispatch / combine / moe_all_to_all refuse it, naming experts_overlapped.

When C mod t != 0 every dropping schedule pads the capacity axis with zero rows up to
C' = n*t before the drop and strips the padding after the gather (the planner's padded
plan, docs/MODEL.md section 5; DeepSpeed's drop_tokens asserts C mod t = 0); the padding is
part of the function, so its backward is consistent and the real rows equal DeepSpeed's on
C' exactly. Experts not tensor-parallel then see n rows per TP rank, zeros past C.

On Gloo every AllToAll and AllGather here is point-to-point with the receives posted first
(monta._comm), not torch's all_to_all_single (gloo::alltoall) or all_gather (gloo's ring).
Each step is a `_start` that posts its first collectives and returns what finishes it: the
synchronous call finishes at once; with `async_op=True` (torch.distributed's convention)
the caller gets an AllToAllWork whose wait() finishes it and returns the output, so work
between the call and wait() overlaps the first collectives. Buffers keep the input's dtype
and device. Collectives are async handles waited for in order, which is what makes the
overlap real on NCCL (one stream per communicator) and on Gloo (one worker per process
group). Every entry point checks the plan against the groups and the expert layout
(MoeGroups.check, Plan.expert_layout_for) before any collective starts.
"""

from typing import Callable, List, Optional, Tuple

import torch

from monta import _comm
from monta.errors import PlanError
from monta.groups import MoeGroups
from monta.plan import (EXPERT_OVERLAP, FLAT, HIERARCHICAL, NOT_TENSOR_PARALLEL, TP_DEDUP,
                        TP_DEDUP_PIPELINED, Plan, chunk_rows, normalize_expert_layout,
                        rows_per_tp_rank)

# What a started step returns: finishes it (waits, gathers, copies) and returns the output.
Finish = Callable[[], torch.Tensor]

# The three steps an autograd direction runs (see the module docstring):
EXCHANGE = "exchange"  # [E, C] -> [E, C]: tensor-parallel experts (or t = 1); own adjoint
DROP = "drop"          # [E, C] -> [E, n]: this TP rank's rows, then the AllToAll
GATHER = "gather"      # [E, n] -> [E, C]: the AllToAll, then the TP AllGather
# A step and its arguments: (step, strategy, chunks, groups, capacity C, what).
Step = Tuple[str, str, int, MoeGroups, int, Optional[str]]


def _start_flat(x: torch.Tensor, groups: MoeGroups, what: Optional[str] = None) -> Finish:
    out, work = _comm.all_to_all_start(x.contiguous(), groups.ep_group)

    def finish():
        _comm.wait(work, what or "AllToAll (flat) on the expert-parallel group")
        return out
    return finish


def _start_dedup(x: torch.Tensor, groups: MoeGroups, chunks: int = 1) -> Finish:
    """tp_dedup (chunks=1) and tp_dedup_pipelined(chunks) of tensor-parallel experts: this
    TP rank's n = ceil(C/t) rows of x [E, C, ...], then _start_gathered."""
    cap = x.shape[1]
    n = rows_per_tp_rank(cap, groups.tp_size)  # of the padded capacity C' = n*t >= C
    return _start_gathered(_my_rows(x, groups.tp_rank, n), groups, chunks, cap)


def _start_gathered(mine: torch.Tensor, groups: MoeGroups, chunks: int, cap: int) -> Finish:
    """AllToAll -> AllGather of this TP rank's rows mine [E, n, ...] into [E, C, ...] (C =
    cap <= n*t), cut into the K_eff chunks of chunk_rows(n, chunks) and pipelined: the
    gathering half of tp_dedup(_pipelined)."""
    t = groups.tp_size
    n = mine.shape[1]
    bounds = chunk_rows(n, chunks)
    k = len(bounds)
    name = "tp_dedup" if chunks <= 1 else f"tp_dedup_pipelined(K={k})"
    rest = tuple(mine.shape[2:])
    out = mine.new_empty((mine.shape[0], n * t) + rest)
    # out as [E, t, n, ...]: TP rank j's rows are out[:, j]; chunk i is rows bounds[i].
    out_v = out.view((mine.shape[0], t, n) + rest)

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
        return _strip(out, cap)
    return finish


def _strip(out: torch.Tensor, cap: int) -> torch.Tensor:
    """The real rows of a gathered [E, n*t, ...]: the padding rows (zeros on every rank) are
    cut, one copy, only when C mod t != 0."""
    return out.narrow(1, 0, cap).contiguous() if out.shape[1] != cap else out


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


def _drop_rows(x: torch.Tensor, groups: MoeGroups) -> torch.Tensor:
    """DeepSpeed's drop_tokens(x, dim=1) with monta's padding: [E, C, ...] -> [E, n, ...]."""
    return _my_rows(x, groups.tp_rank, rows_per_tp_rank(x.shape[1], groups.tp_size))


def _gather_rows(y: torch.Tensor, groups: MoeGroups, cap: int, what: str) -> torch.Tensor:
    """DeepSpeed's gather_tokens(y, dim=1) with monta's padding: every TP rank's [E, n, ...]
    -> [E, C, ...] (one AllGather and the reorder copy)."""
    t, n = groups.tp_size, y.shape[1]
    rest = tuple(y.shape[2:])
    out = y.new_empty((y.shape[0], n * t) + rest)
    gather = _comm.Gather(y.contiguous(), groups.tp_group, t)
    gather.into(out.view((y.shape[0], t, n) + rest),
                f"AllGather ({what}) on the tensor-parallel group")
    return _strip(out, cap)


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


def _start(x: torch.Tensor, step: str, strategy: str, chunks: int, groups: MoeGroups,
           cap: int, what: Optional[str] = None) -> Finish:
    """Starts one step (EXCHANGE, DROP or GATHER) of `strategy` on x."""
    chunks = chunks if strategy == TP_DEDUP_PIPELINED else 1
    if step == EXCHANGE:
        if strategy in (TP_DEDUP, TP_DEDUP_PIPELINED):
            return _start_dedup(x, groups, chunks)
        if strategy == HIERARCHICAL:
            return _start_hierarchical(x, groups)
        return _start_flat(x, groups, what)
    if step == DROP:
        mine = _drop_rows(x, groups)
        if strategy == HIERARCHICAL:
            return _start_hierarchical(mine, groups)
        return _start_flat(mine, groups, what or f"AllToAll ({strategy}, this TP rank's rows) "
                                                 "on the expert-parallel group")
    if strategy == HIERARCHICAL:
        exchanged = _start_hierarchical(x, groups)
        return lambda: _gather_rows(exchanged(), groups, cap, "hierarchical")
    return _start_gathered(x, groups, chunks, cap)


def _run(x: torch.Tensor, *step) -> torch.Tensor:
    """One step start to finish (both autograd directions of the synchronous call come
    through here)."""
    return _start(x, *step)()


class _MoeAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, forward_step, backward_step):
        ctx.backward_step = backward_step
        return _run(x, *forward_step)

    @staticmethod
    def backward(ctx, grad):
        # The adjoint: the op itself (EXCHANGE), or GATHER for DROP and DROP for GATHER.
        return _run(grad.contiguous(), *ctx.backward_step), None, None


# An async op is two autograd nodes that share `state`: _Started posts the first
# collectives (forward) and waits for the adjoint's (backward); _Finished completes the
# forward and starts the adjoint on the gradient. Between them, forward and backward, runs
# whatever the caller (or the autograd engine) does in between: that is the overlap.
class _Started(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, forward_step, backward_step, state):
        ctx.state = state
        state["backward_step"] = backward_step
        state["finish"] = _start(x, *forward_step)
        return x.view_as(x)  # a token: ties _Finished to x in the graph

    @staticmethod
    def backward(ctx, token_grad):
        return ctx.state.pop("grad_finish")(), None, None, None


class _Finished(torch.autograd.Function):
    @staticmethod
    def forward(ctx, token, state):
        ctx.state, ctx.token_shape = state, token.shape
        return state.pop("finish")()

    @staticmethod
    def backward(ctx, grad):
        ctx.state["grad_finish"] = _start(grad.contiguous(), *ctx.state["backward_step"])
        # The token's gradient is a placeholder (no memory); _Started.backward returns x's.
        return grad.new_zeros(()).expand(ctx.token_shape), None


class _TpRows(torch.autograd.Function):
    """DeepSpeed's drop_tokens (gather=False) and gather_tokens (gather=True) along the
    capacity axis, with monta's padding; each one's backward is the other."""

    @staticmethod
    def forward(ctx, x, gather, groups, cap):
        ctx.gather, ctx.groups, ctx.cap = gather, groups, cap
        if gather:
            return _gather_rows(x, groups, cap, "expert_overlap gather")
        return _drop_rows(x, groups).contiguous()

    @staticmethod
    def backward(ctx, grad):
        if ctx.gather:
            return _drop_rows(grad, ctx.groups).contiguous(), None, None, None
        return _gather_rows(grad.contiguous(), ctx.groups, ctx.cap,
                            "expert_overlap drop's gradient"), None, None, None


class AllToAllWork:
    """What dispatch / combine / moe_all_to_all return with async_op=True, as
    torch.distributed's async ops do: the op is on the wire; wait() finishes it and returns
    its output (differentiable, the same tensor as the synchronous call's). Every rank must
    wait its handles in the same order."""

    def __init__(self, x: torch.Tensor, forward_step: Step, backward_step: Step):
        self._state = {}
        self._token = _Started.apply(x, forward_step, backward_step, self._state)
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


def _check_call(call: str, x: torch.Tensor, plan: Plan, groups: MoeGroups,
                expert_layout: Optional[str] = None) -> str:
    """Every entry point's checks, before any collective starts; returns the expert layout
    to run (the call's or the groups', which must agree with each other and with the plan's;
    else the plan's; else the default)."""
    if not isinstance(groups, MoeGroups):
        raise PlanError(f"monta.{call}: groups: expected monta.MoeGroups, got "
                        f"{type(groups).__name__}")
    groups.check(plan)  # a Plan, made for these sizes and this expert layout
    named, source = groups.expert_layout, "MoeGroups.expert_layout"
    asked = normalize_expert_layout(expert_layout, f"monta.{call}(expert_layout)")
    if asked is not None:
        if named is not None and asked != named:
            raise PlanError(f"monta.{call}(expert_layout)={asked}: the groups run experts "
                            f"{named} (MoeGroups.expert_layout)")
        named, source = asked, f"monta.{call}(expert_layout)"
    layout = plan.expert_layout_for(named, source)
    _check_tensor(call, x, groups)
    return layout


def _steps(call: str, x: torch.Tensor, plan: Plan, groups: MoeGroups, layout: str,
           capacity: Optional[int]) -> Tuple[Step, Step]:
    """The forward and backward steps of dispatch (or moe_all_to_all) and combine."""
    t = groups.tp_size
    args = (plan.strategy, plan.num_chunks, groups)
    if layout != NOT_TENSOR_PARALLEL or t == 1:
        if capacity is not None and capacity != x.shape[1]:
            raise PlanError(f"monta.{call}: capacity={capacity}: the input has {x.shape[1]} "
                            f"capacity rows, and experts {layout} (or t = 1) get them all")
        step = (EXCHANGE,) + args + (x.shape[1], None)
        return step, step
    if call != "combine":
        if capacity is not None and capacity != x.shape[1]:
            raise PlanError(f"monta.{call}: capacity={capacity}: the input has {x.shape[1]} "
                            "capacity rows (dispatch takes them all)")
        return (DROP,) + args + (x.shape[1], None), (GATHER,) + args + (x.shape[1], None)
    n = x.shape[1]
    cap = n * t if capacity is None else capacity
    if not isinstance(cap, int) or isinstance(cap, bool) or cap < 1 or \
            rows_per_tp_rank(cap, t) != n:
        raise PlanError(f"monta.combine: capacity={capacity!r}: experts not tensor-parallel "
                        f"hold ceil(C/t) rows of the capacity C per TP rank, and x has {n} "
                        f"(t = {t}): expected C in {n * t - t + 1}..{n * t}, the dispatch "
                        "input's capacity")
    return (GATHER,) + args + (cap, None), (DROP,) + args + (cap, None)


def _alltoall(call: str, x: torch.Tensor, plan: Plan, groups: MoeGroups, async_op: bool,
              expert_layout: Optional[str] = None, capacity: Optional[int] = None):
    layout = _check_call(call, x, plan, groups, expert_layout)
    if plan.strategy == EXPERT_OVERLAP:
        raise PlanError(
            f"monta.{call}: {plan.strategy_source()}=expert_overlap overlaps the AllToAll with "
            "the experts, which a bare AllToAll cannot do: call monta.experts_overlapped(x, "
            "experts, plan, groups) in place of dispatch -> experts -> combine")
    forward_step, backward_step = _steps(call, x, plan, groups, layout, capacity)
    if async_op:
        return AllToAllWork(x, forward_step, backward_step)
    return _MoeAllToAll.apply(x, forward_step, backward_step)


def moe_all_to_all(x: torch.Tensor, plan: Plan, groups: MoeGroups, async_op: bool = False,
                   expert_layout: Optional[str] = None):
    """The plan's dispatch of x [E, C, ...] on groups (for tensor-parallel experts, or t = 1,
    dispatch and combine are the same op); differentiable; dtype and device kept.

    async_op=True: returns an AllToAllWork; its wait() returns the output. Refuses (PlanError)
    a plan that does not fit the groups or the expert layout, and expert_overlap (see
    experts_overlapped)."""
    return _alltoall("moe_all_to_all", x, plan, groups, async_op, expert_layout)


def dispatch(x: torch.Tensor, plan: Plan, groups: MoeGroups, async_op: bool = False,
             expert_layout: Optional[str] = None):
    """The dispatch (tokens to their experts' ranks) of x [E, C, ...]: [E, C, ...] for
    tensor-parallel experts (or t = 1); [E, ceil(C/t), ...], this TP rank's share, for
    experts not tensor-parallel. expert_layout: the layout the job runs (else the groups',
    else the plan's, else the planner's default)."""
    return _alltoall("dispatch", x, plan, groups, async_op, expert_layout)


def combine(x: torch.Tensor, plan: Plan, groups: MoeGroups, async_op: bool = False,
            expert_layout: Optional[str] = None, capacity: Optional[int] = None):
    """The combine (expert outputs back to their tokens' ranks) of x [E, rows, ...]: the
    same op as dispatch for tensor-parallel experts (or t = 1); for experts not
    tensor-parallel x is dispatch's [E, ceil(C/t), ...] and the output [E, C, ...], with C
    = capacity, the dispatch input's (default ceil(C/t) * t: give it when C mod t != 0)."""
    return _alltoall("combine", x, plan, groups, async_op, expert_layout, capacity)


def experts_overlapped(x: torch.Tensor, experts: Callable[[torch.Tensor], torch.Tensor],
                       plan: Plan, groups: MoeGroups,
                       expert_layout: Optional[str] = None) -> torch.Tensor:
    """expert_overlap(K): dispatch -> experts -> combine of x [E, C, ...] in K_eff capacity
    chunks, the AllToAll of chunk i+1 (and the combine of chunk i-1) in flight while the
    experts work on chunk i. `experts` maps a dispatched chunk [E, c, ...] (EP-rank-major) to
    the same shape. Tensor-parallel experts (or t = 1): chunks of all C rows, the result
    flat's (the whole copy's) dispatch -> experts -> combine. Experts not tensor-parallel:
    this TP rank's ceil(C/t) rows are cut into chunks, and the combined rows are gathered
    over TP once after the last chunk: DeepSpeed's drop -> AllToAll -> experts -> AllToAll
    -> gather. Other strategies are refused: they run as dispatch -> experts -> combine."""
    layout = _check_call("experts_overlapped", x, plan, groups, expert_layout)
    if plan.strategy != EXPERT_OVERLAP:
        raise PlanError(
            f"monta.experts_overlapped: {plan.strategy_source()}={plan.strategy}: runs "
            f"expert_overlap plans only; run {plan.strategy} as monta.dispatch -> experts -> "
            "monta.combine")
    cap = x.shape[1]
    drops = layout == NOT_TENSOR_PARALLEL and groups.tp_size > 1
    # The model's rule (common/schedule): chunks of each TP rank's rows when the layout
    # drops duplicates, of all rows otherwise.
    rows = rows_per_tp_rank(cap, groups.tp_size if drops else 1)
    source = _TpRows.apply(x, False, groups, cap) if drops else x
    bounds = chunk_rows(rows, plan.num_chunks) or [(0, 0)]
    k = len(bounds)

    def start(chunk, step, i):
        what = f"AllToAll (expert_overlap {step}, chunk {i + 1}/{k}) on the expert-parallel group"
        exchange = (EXCHANGE, FLAT, 1, groups, chunk.shape[1], what)
        return AllToAllWork(chunk, exchange, exchange)

    pending = start(source.narrow(1, *bounds[0]), "dispatch", 0)
    combined: List[AllToAllWork] = []
    for i in range(k):
        received = pending.wait()
        if i + 1 < k:
            pending = start(source.narrow(1, *bounds[i + 1]), "dispatch", i + 1)
        combined.append(start(experts(received), "combine", i))
    out = torch.cat([c.wait() for c in combined], dim=1)
    return _TpRows.apply(out, True, groups, cap) if drops else out
