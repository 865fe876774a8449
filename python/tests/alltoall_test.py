"""The MoE AllToAll strategies on 4 Gloo ranks: 2 emulated nodes x 2 ranks on loopback.

Both expert layouts (tensor-parallel experts, and experts not tensor-parallel: DeepSpeed's
default path), every strategy and K in {1, 2, 3, 8}, against a DeepSpeed-semantics
reference written here (plain all_to_all_single, slice and all_gather, as
deepspeed/moe/sharded_moe.py MOELayer.forward and deepspeed/moe/mappings.py compose them):
dispatch and combine outputs and input gradients, and a MoE layer's output and the
gradients of its input and expert weights, exact in fp32 and within tolerance in bf16;
dtype kept; capacity not divisible by K, and not by t (every dropping schedule pads it);
the collectives each op runs per layout (the model's 4 AllToAlls + 4 or 2 AllGathers per
layer); async_op=True handles give the synchronous results; plans that do not fit the
groups, the expert layout or the call refused by the call itself; a killed rank makes the
others fail with a clear error, no hang, and a silent one times them out after the world's
timeout; flat on Gloo runs as point-to-point messages with known data landing where
DeepSpeed's AllToAll puts it.

Runs against the installed package (python/tests/run_installed.sh)."""

import dataclasses
import datetime
import glob
import logging
import os
import tempfile
import time
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "examples")]  # mp_harness, moe_layer

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import monta  # noqa: E402
import mp_harness  # noqa: E402
from monta import _comm  # noqa: E402
from monta import groups as groups_mod  # noqa: E402

WORLD, GPUS_PER_NODE = 4, 2
# A stalled rank's longest silence, and the harness deadline it outlasts.
STALL_CAP_S, STALL_DEADLINE_S = 120, 90
KS = (1, 2, 3, 8)
TP, NOT_TP = monta.TENSOR_PARALLEL, monta.NOT_TENSOR_PARALLEL
# (tensor, expert) parallel sizes and the expert layouts run there: TP inside a node with
# EP across nodes (the MoNTA case), both layouts; and TP 1 with EP over both nodes (where
# hierarchical has both steps), where nothing is duplicated and both layouts are one op
# (the not-tensor-parallel run there checks that they are, in fp32 only).
LAYOUTS = ((2, 2), (1, 4))
CASES = ((2, 2, TP, (torch.float32, torch.bfloat16)),
         (2, 2, NOT_TP, (torch.float32, torch.bfloat16)),
         (1, 4, TP, (torch.float32, torch.bfloat16)),
         (1, 4, NOT_TP, (torch.float32,)))


def plans():
    out = [monta.Plan(strategy=monta.TP_DEDUP), monta.Plan(strategy=monta.HIERARCHICAL)]
    for k in KS:
        out.append(monta.Plan(strategy=monta.TP_DEDUP_PIPELINED, num_chunks=k))
        out.append(monta.Plan(strategy=monta.EXPERT_OVERLAP, num_chunks=k))
    return out


def op_plans():
    """The plans a bare AllToAll runs (dispatch refuses expert_overlap), flat included."""
    return [monta.Plan()] + [p for p in plans() if p.strategy != monta.EXPERT_OVERLAP]


def compare(label, got, want, dtype, failures, exact=True):
    """fp32: bit-exact (the strategies only move bytes). bf16, or a sum in another order:
    within a tolerance relative to the tensor's largest value (a sum of K_eff rounded bf16
    partial gradients, with cancellation, is off by a few percent of the largest value)."""
    if got.dtype != want.dtype:
        failures.append(f"{label}: dtype {got.dtype} != {want.dtype}")
        return
    if got.shape != want.shape:
        failures.append(f"{label}: shape {tuple(got.shape)} != {tuple(want.shape)}")
        return
    if dtype == torch.float32 and exact:
        if not torch.equal(got, want):
            failures.append(f"{label}: max |diff| {(got - want).abs().max().item()} (fp32 must "
                            "be exact)")
        return
    rtol = 1e-5 if dtype == torch.float32 else (2e-2 if exact else 1.5e-1)
    diff = (got.float() - want.float()).abs().max().item()
    scale = want.float().abs().max().item()
    if diff > rtol * scale + rtol:
        failures.append(f"{label}: max |diff| {diff} over max |value| {scale}")


# ----- DeepSpeed's MOELayer communication, written out (the reference) -----
# deepspeed/moe/mappings.py: _DropTokens narrows this TP rank's 1/t of a dimension, its
# backward all-gathers and concatenates; _GatherTokens the reverse. sharded_moe.py:
# _AllToAll is all_to_all_single, its backward the same on the gradient. Gloo has no bf16
# kernels: bf16 crosses as bytes (last dim x2), which moves the same bits.

def _wire(x):
    return x.view(torch.uint8) if x.dtype == torch.bfloat16 else x


def _all_gather_cat(x, group):
    x = x.contiguous()
    pieces = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
    dist.all_gather([_wire(p) for p in pieces], _wire(x), group=group)
    return torch.cat(pieces, dim=1)


def _narrow_mine(x, group):
    n = x.shape[1] // dist.get_world_size(group)
    return x.narrow(1, dist.get_rank(group) * n, n).contiguous()


class RefAllToAll(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        x = x.contiguous()
        out = torch.empty_like(x)
        dist.all_to_all_single(_wire(out), _wire(x), group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return RefAllToAll.apply(grad, ctx.group), None


class RefDropOrGather(torch.autograd.Function):
    """_DropTokens (gather=False) and _GatherTokens (gather=True) along the capacity axis;
    each one's backward is the other."""

    @staticmethod
    def forward(ctx, x, group, gather):
        ctx.group, ctx.gather = group, gather
        return _all_gather_cat(x, group) if gather else _narrow_mine(x, group)

    @staticmethod
    def backward(ctx, grad):
        back = _narrow_mine(grad, ctx.group) if ctx.gather else _all_gather_cat(grad, ctx.group)
        return back, None, None


def ref_drop(x, group):
    return RefDropOrGather.apply(x, group, False)


def ref_gather(x, group):
    return RefDropOrGather.apply(x, group, True)


def _pad(x, t):
    """The planner's padded plan: zero rows up to C' = ceil(C/t) * t (DeepSpeed's drop
    asserts C mod t = 0)."""
    extra = -x.shape[1] % t
    if not extra:
        return x
    return torch.cat([x, x.new_zeros((x.shape[0], extra) + tuple(x.shape[2:]))], dim=1)


def ref_dispatch(x, layout, groups):
    """MOELayer.forward up to the experts: drop -> AllToAll (-> gather when the experts are
    tensor-parallel); without TP only the AllToAll."""
    if groups.tp_size == 1:
        return RefAllToAll.apply(x, groups.ep_group)
    y = RefAllToAll.apply(ref_drop(_pad(x, groups.tp_size), groups.tp_group),
                          groups.ep_group)
    if layout == TP:
        y = ref_gather(y, groups.tp_group).narrow(1, 0, x.shape[1])
    return y


def ref_combine(y, layout, groups, cap):
    """MOELayer.forward after the experts: (drop ->, when the experts are tensor-parallel)
    AllToAll -> gather, back to the capacity cap."""
    if groups.tp_size == 1:
        return RefAllToAll.apply(y, groups.ep_group)
    if layout == TP:
        y = ref_drop(_pad(y, groups.tp_size), groups.tp_group)
    out = RefAllToAll.apply(y, groups.ep_group)
    return ref_gather(out, groups.tp_group).narrow(1, 0, cap)


# ----- the cases -----

def with_layout(groups, layout):
    """The same process groups, running `layout` (no collective: a copy of the record)."""
    return dataclasses.replace(groups, expert_layout=layout)


def op_inputs(rank, groups, layout, op, cap, dtype, salt=0):
    """x and the output's upstream gradient for one op. The MoE input (dispatch's x) is the
    same on every TP rank; so is everything of tensor-parallel experts (both ops and their
    gradients; flat and hierarchical send the whole copy, and equal DeepSpeed's drop ->
    gather only on replicated data). With experts not tensor-parallel, each TP rank's
    expert output and every gradient differ (DeepSpeed's path must still be computed)."""
    t = groups.tp_size
    n = -(-cap // t) if layout == NOT_TP and t > 1 else cap
    rows_in, rows_out = (cap, n) if op == "dispatch" else (n, cap)
    replicated = layout == TP or t == 1
    per_rank = rank // t if replicated else rank
    x_seed = rank // t if op == "dispatch" else per_rank
    x = torch.randn((4, rows_in, 5), generator=torch.Generator().manual_seed(
        1000 * salt + x_seed)).to(dtype)
    upstream = torch.randn((4, rows_out, 5), generator=torch.Generator().manual_seed(
        1000 * salt + 500 + per_rank)).to(dtype)
    return x, upstream


def op_case(x, upstream, plan, groups, layout, op, cap, impl="monta", async_op=False):
    """One op (dispatch or combine) of monta (impl "monta") or of the reference ("ref"):
    output and input gradient."""
    x = x.clone().requires_grad_()
    if impl == "ref":
        y = ref_dispatch(x, layout, groups) if op == "dispatch" else \
            ref_combine(x, layout, groups, cap)
    else:
        kwargs = {"capacity": cap} if op == "combine" else {}
        call = monta.dispatch if op == "dispatch" else monta.combine
        y = call(x, plan, groups, async_op=async_op, expert_layout=layout, **kwargs)
        if async_op:
            work = y
            y = work.wait()
            if not work.is_completed() or work.wait() is not y:
                raise AssertionError("wait() must return the same output every time")
    y.backward(upstream)
    return y.detach(), x.grad


def layer_case(seed, dtype, plan, groups, seq=15, dispatcher="einsum", reference=False):
    """examples/moe_layer.py's layer on `groups` (their expert layout), with monta or with
    the reference's dispatch -> experts -> combine: output and the gradients of the input
    and the expert weights."""
    import moe_layer
    layer = moe_layer.MoELayer(hidden=16, ffn=24, num_experts=4, top_k=2, capacity_factor=0.9,
                               plan=plan, groups=groups, dtype=dtype, dispatcher=dispatcher)
    if reference:
        layout = groups.expert_layout

        def through(dispatched):
            received = ref_dispatch(dispatched, layout, groups)
            out = layer.experts(received.reshape(groups.ep_size, layer.local, -1,
                                                 dispatched.shape[-1]))
            return ref_combine(out.reshape(received.shape), layout, groups, dispatched.shape[1])
        layer._experts_and_alltoall = through
    g = torch.Generator().manual_seed(seed)
    # seq 15: S=30, C=ceil(2*30*0.9/4)=14; seq 12: S=24, C=11.
    x = torch.randn(2, seq, 16, generator=g).to(dtype).requires_grad_()
    y = layer(x)
    (y.float() * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
    return y.detach(), x.grad, layer.experts.w1.grad, layer.experts.w2.grad


OPS = ("dispatch", "combine")
LAYER_PARTS = ("output", "input grad", "w1 grad", "w2 grad")


def compare_ops(label, plan, groups, layout, cap, dtype, failures, rank, salt=0):
    """dispatch and combine of `plan` against the reference, output and input gradient."""
    for op in OPS:
        x, upstream = op_inputs(rank, groups, layout, op, cap, dtype, salt)
        want = op_case(x, upstream, plan, groups, layout, op, cap, impl="ref")
        got = op_case(x, upstream, plan, groups, layout, op, cap)
        for name, a, b in zip(("output", "input grad"), got, want):
            compare(f"{label} C={cap} {op} {name}", a, b, dtype, failures)
            if not a.is_contiguous():
                failures.append(f"{label} C={cap} {op} {name}: not contiguous")


def strategies_worker(rank, world):
    failures = []
    for t, e in LAYOUTS:
        built = monta.MoeGroups.build(t, e, GPUS_PER_NODE)
        seed = rank // t  # the layer's input is replicated over the TP group
        for tt, ee, layout, dtypes in CASES:
            if (tt, ee) != (t, e):
                continue
            groups = with_layout(built, layout)
            for dtype in dtypes:
                # E=4 experts, capacity 14 (7 rows per TP rank: 7 mod 2, 3 and 8 != 0).
                layer_ref = layer_case(seed, dtype, monta.Plan(), groups, reference=True)
                if layer_ref[0].dtype != dtype:
                    failures.append(f"reference layer output dtype {layer_ref[0].dtype}")
                for plan in [monta.Plan()] + plans():
                    label = (f"rank {rank} t={t} e={e} {layout} {dtype} "
                             f"{plan.strategy}(K={plan.num_chunks})")
                    if plan.strategy != monta.EXPERT_OVERLAP:  # not a bare AllToAll
                        compare_ops(label, plan, groups, layout, 14, dtype, failures, rank)
                    for name, got, want in zip(LAYER_PARTS, layer_case(seed, dtype, plan, groups),
                                               layer_ref):
                        # expert_overlap runs the experts per chunk: its gradients are the
                        # same sums in another order (other GEMM shapes).
                        exact = plan.strategy != monta.EXPERT_OVERLAP or name == "output"
                        compare(f"{label} layer {name}", got, want, dtype, failures, exact)
    return failures


def node_order_worker(rank, world):
    """MoeGroups.build(node_order=...) lays the groups out on the nodes in the planner's
    advised order (docs/MODEL.md section 12): as 4 nodes of 1 rank taken in the order 0, 2,
    1, 3, EP groups of 2 are {0, 2} and {1, 3} (not {0, 1} and {2, 3}), and every strategy
    on them still computes the reference."""
    failures = []
    built = monta.MoeGroups.build(1, 2, 1, node_order=[0, 2, 1, 3])
    want = [0, 2] if rank in (0, 2) else [1, 3]
    got = list(monta.groups.global_ranks(built.ep_group))
    if got != want:
        failures.append(f"rank {rank}: EP group {got}, expected {want}")
    if built.ep_rank != want.index(rank):
        failures.append(f"rank {rank}: ep_rank {built.ep_rank}, expected {want.index(rank)}")
    groups = with_layout(built, TP)
    for plan in [monta.Plan()] + plans():
        if plan.strategy == monta.EXPERT_OVERLAP:
            continue
        compare_ops(f"rank {rank} node_order {plan.strategy}(K={plan.num_chunks})", plan,
                    groups, TP, 14, torch.float32, failures, rank)
    for bad in ([0, 1, 2], [0, 0, 1, 2], [3, 2, 1, 4]):
        try:
            monta.MoeGroups.build(1, 2, 1, node_order=bad)
            failures.append(f"node_order={bad}: accepted")
        except monta.PlanError as e:
            if "node_order" not in str(e):
                failures.append(f"node_order={bad}: {e}")
    return failures


def index_dispatcher_worker(rank, world):
    """examples/moe_layer.py's index dispatcher (Tutel-style scatter / weighted gather)
    computes what the einsum dataflow computes (within rounding: other sums), and on it
    every strategy still equals the reference exactly in fp32."""
    failures = []
    groups = monta.MoeGroups.build(2, 2, GPUS_PER_NODE, expert_layout=TP)
    seed = rank // 2
    einsum_ref = layer_case(seed, torch.float32, monta.Plan(), groups, reference=True)
    index_ref = layer_case(seed, torch.float32, monta.Plan(), groups, dispatcher="index",
                           reference=True)
    for name, got, want in zip(LAYER_PARTS, index_ref, einsum_ref):
        compare(f"rank {rank} index vs einsum {name}", got, want, torch.float32, failures,
                exact=False)
    # seq 15 drops tokens for capacity (C=14 of 15 routed to some expert): the index path
    # must drop the same ones, or the outputs above would differ by whole rows.
    for plan in (monta.Plan(strategy=monta.TP_DEDUP_PIPELINED, num_chunks=3),
                 monta.Plan(strategy=monta.EXPERT_OVERLAP, num_chunks=2)):
        got_all = layer_case(seed, torch.float32, plan, groups, dispatcher="index")
        for name, got, want in zip(LAYER_PARTS, got_all, index_ref):
            exact = plan.strategy != monta.EXPERT_OVERLAP or name == "output"
            compare(f"rank {rank} index {plan.strategy} {name}", got, want, torch.float32,
                    failures, exact)
    return failures


def dedup_plans():
    return [monta.Plan(), monta.Plan(strategy=monta.TP_DEDUP),
            monta.Plan(strategy=monta.HIERARCHICAL)] + [
        monta.Plan(strategy=monta.TP_DEDUP_PIPELINED, num_chunks=k) for k in KS]


def padded_worker(rank, world):
    """C not divisible by t = 2, both layouts: every dropping schedule pads the capacity to
    C+1 inside the function; outputs and gradients equal DeepSpeed's on the padded capacity
    exactly (fp32 only, to keep it short), the layer's too (expert_overlap included)."""
    failures = []
    built = monta.MoeGroups.build(2, 2, GPUS_PER_NODE)
    seed = rank // 2
    for layout in (TP, NOT_TP):
        groups = with_layout(built, layout)
        for cap in (7, 1):  # 1: TP rank 1's rows are all padding
            for plan in dedup_plans():
                compare_ops(f"rank {rank} {layout} {plan.strategy}(K={plan.num_chunks})", plan,
                            groups, layout, cap, torch.float32, failures, rank, salt=cap)
        layer_ref = layer_case(seed, torch.float32, monta.Plan(), groups, seq=12,
                               reference=True)  # C=11
        for plan in dedup_plans() + [monta.Plan(strategy=monta.EXPERT_OVERLAP, num_chunks=4)]:
            for name, got, want in zip(LAYER_PARTS,
                                       layer_case(seed, torch.float32, plan, groups, seq=12),
                                       layer_ref):
                exact = plan.strategy != monta.EXPERT_OVERLAP or name == "output"
                compare(f"rank {rank} {layout} C=11 {plan.strategy}(K={plan.num_chunks}) "
                        f"layer {name}", got, want, torch.float32, failures, exact)
    x = torch.randn(4, 7, 5, dtype=torch.float16)  # dtype kept through the padding
    for layout in (TP, NOT_TP):
        plan = monta.Plan(strategy=monta.TP_DEDUP_PIPELINED, num_chunks=3)
        y = monta.dispatch(x, plan, built, expert_layout=layout)
        if y.dtype != x.dtype or y.device != x.device:
            failures.append(f"{layout} padded output {y.dtype} on {y.device}, input "
                            f"{x.dtype} on {x.device}")
        z = monta.combine(y, plan, built, expert_layout=layout, capacity=7)
        if z.shape != x.shape or z.dtype != x.dtype:
            failures.append(f"{layout} padded combine {tuple(z.shape)} {z.dtype}")
    return failures


def refusal_worker(rank, world):
    """Plans that do not fit the groups are refused, naming the variable; nothing hangs."""
    groups = monta.MoeGroups.build(2, 2, GPUS_PER_NODE)
    seen = []
    env = {"MONTA_STRATEGY": "tp_dedup", "MONTA_NUM_CHUNKS": "1"}
    for var, value in (("MONTA_WORLD_SIZE", "8"), ("MONTA_TENSOR_PARALLEL_SIZE", "4"),
                       ("MONTA_EXPERT_PARALLEL_SIZE", "1"), ("MONTA_GPUS_PER_NODE", "8")):
        try:
            groups.check(monta.Plan.from_env(dict(env, **{var: value})))
            seen.append(f"{var}={value}: accepted")
        except monta.PlanError as e:
            if var not in str(e):
                seen.append(f"{var}={value}: error does not name it: {e}")
    spec = '{"job": {"world_size": 4, "tensor_parallel_size": 4}, "placement": {}}'
    try:
        groups.check(monta.Plan.from_env(dict(env, MONTA_MOE_SPEC=spec)))
        seen.append("MONTA_MOE_SPEC with tensor_parallel_size 4: accepted")
    except monta.PlanError as e:
        if "MONTA_MOE_SPEC" not in str(e) or "tensor_parallel_size" not in str(e):
            seen.append(f"MONTA_MOE_SPEC: unclear error {e}")
    groups.check(monta.Plan.from_env(dict(env, MONTA_WORLD_SIZE="4")))  # fits
    # Experts not divisible by the EP size: refused before any collective starts.
    try:
        monta.dispatch(torch.zeros(3, 7, 3), monta.Plan(strategy=monta.TP_DEDUP), groups)
        seen.append("E=3, e=2 accepted")
    except monta.PlanError as e:
        if "3 experts" not in str(e):
            seen.append(f"E=3: unclear error {e}")
    seen += refused_by_the_call_itself(groups)
    seen += expert_layout_refusals(groups)
    # DeepSpeed's bare AllToAll with rows that do not split over the group: refused too.
    try:
        monta.all_to_all(torch.zeros(3, 2), groups.ep_group)
        seen.append("all_to_all of 3 rows over 2 ranks accepted")
    except monta.PlanError as e:
        if "3 rows over a group of 2" not in str(e):
            seen.append(f"all_to_all of 3 rows: unclear error {e}")
    # Hierarchical with an EP group spread unevenly over the nodes.
    reason = groups_mod._hierarchical_unfit([[0, 1, 2]], 2)
    if "same count" not in reason:
        seen.append(f"uneven EP group not refused: {reason!r}")
    unfit = monta.MoeGroups(tp_group=None, ep_group=None, tp_size=1, tp_rank=0, ep_size=3,
                            ep_rank=0, hierarchical_unfit=reason)
    try:
        unfit.check(monta.Plan.from_env({"MONTA_STRATEGY": "hierarchical"}))
        seen.append("hierarchical on an unfit layout accepted")
    except monta.PlanError as e:
        if "MONTA_STRATEGY=hierarchical" not in str(e):
            seen.append(f"hierarchical: unclear error {e}")
    return seen


def refused_by_the_call_itself(groups):
    """dispatch, combine, moe_all_to_all and experts_overlapped check the plan against the
    groups themselves (nobody called groups.check), and refuse a plan they cannot run,
    naming what to call instead; nothing is sent (every rank refuses before any message)."""
    seen = []
    x = torch.zeros(4, 6, 3)
    calls = {"dispatch": monta.dispatch, "combine": monta.combine,
             "moe_all_to_all": monta.moe_all_to_all,
             "experts_overlapped": lambda x, plan, groups: monta.experts_overlapped(
                 x, lambda y: y, plan, groups)}
    other_layout = monta.Plan.from_env({"MONTA_STRATEGY": "tp_dedup",
                                        "MONTA_TENSOR_PARALLEL_SIZE": "4"})
    overlap = monta.Plan.from_env({"MONTA_STRATEGY": "expert_overlap",
                                   "MONTA_NUM_CHUNKS": "2", "MONTA_WORLD_SIZE": "8"})
    cases = [(name, other_layout, "MONTA_TENSOR_PARALLEL_SIZE=4") for name in calls]
    cases += [(name, dataclasses.replace(overlap, layout=monta.Plan().layout),
               "MONTA_STRATEGY=expert_overlap") for name in calls
              if name != "experts_overlapped"]
    cases += [("experts_overlapped", monta.Plan(strategy="TP_DEDUP"), "Plan.strategy=tp_dedup"),
              ("dispatch", overlap, "MONTA_WORLD_SIZE=8"),  # the layout is checked first
              ("experts_overlapped", overlap, "MONTA_WORLD_SIZE=8")]
    for name, plan, variable in cases:
        for async_op in ((False, True) if name != "experts_overlapped" else (False,)):
            kwargs = {"async_op": True} if async_op else {}
            try:
                calls[name](x, plan, groups, **kwargs)
                seen.append(f"{name}({plan}, async_op={async_op}): accepted")
            except monta.PlanError as e:
                if variable not in str(e):
                    seen.append(f"{name}({plan}): error does not name {variable}: {e}")
                if "expert_overlap" in variable and "monta.experts_overlapped(" not in str(e):
                    seen.append(f"{name}: error does not say to call experts_overlapped: {e}")
                if name == "experts_overlapped" and "tp_dedup" in variable and \
                        "monta.dispatch" not in str(e):
                    seen.append(f"experts_overlapped: error does not name dispatch: {e}")
    return seen


def expect_refusal(seen, label, fn, *needles):
    """fn() must raise a PlanError whose text holds every needle."""
    try:
        fn()
        seen.append(f"{label}: accepted")
    except monta.PlanError as e:
        missing = [n for n in needles if n not in str(e)]
        if missing:
            seen.append(f"{label}: error does not name {missing}: {e}")


def expert_layout_refusals(groups):
    """A plan priced for one expert layout, run where the groups or the call say the job
    runs the other, is refused by every entry point (sync and async) before any message,
    naming where each side came from; so are a call contradicting its groups, a layout name
    that is none, and a combine capacity its input cannot come from. A plan that does not
    say runs the groups' layout, or the planner's default with a logged line."""
    seen = []
    x = torch.zeros(4, 6, 3)
    tp_plan = monta.Plan.from_env({"MONTA_STRATEGY": "tp_dedup_pipelined",
                                   "MONTA_NUM_CHUNKS": "2",
                                   "MONTA_EXPERT_LAYOUT": "TENSOR_PARALLEL"})
    not_tp_groups = with_layout(groups, "EXPERT_LAYOUT_NOT_TENSOR_PARALLEL")
    overlap = dataclasses.replace(tp_plan, strategy="expert_overlap")

    def overlapped(x, plan, groups, **kwargs):
        return monta.experts_overlapped(x, lambda y: y, plan, groups, **kwargs)

    for name, call, plan in (("dispatch", monta.dispatch, tp_plan),
                             ("combine", monta.combine, tp_plan),
                             ("moe_all_to_all", monta.moe_all_to_all, tp_plan),
                             ("experts_overlapped", overlapped, overlap)):
        for kwargs in ({}, {"async_op": True}) if name != "experts_overlapped" else ({},):
            expect_refusal(seen, f"{name}{kwargs} plan tensor_parallel on groups not",
                           lambda: call(x, plan, not_tp_groups, **kwargs),
                           "MONTA_EXPERT_LAYOUT=tensor_parallel", "MoeGroups.expert_layout",
                           "experts_tensor_parallel=false")
    expect_refusal(seen, "groups.check", lambda: not_tp_groups.check(tp_plan),
                   "MONTA_EXPERT_LAYOUT=tensor_parallel")
    from_planner = monta.Plan(strategy="tp_dedup", expert_layout=NOT_TP, origin="planner")
    expect_refusal(seen, "planner's layout vs the call",
                   lambda: monta.dispatch(x, from_planner, groups, expert_layout=TP),
                   "StrategyReply.expert_layout=not_tensor_parallel",
                   "monta.dispatch(expert_layout)", "experts_tensor_parallel=true")
    expect_refusal(seen, "call vs groups",
                   lambda: monta.combine(x, monta.Plan(), not_tp_groups, expert_layout=TP),
                   "monta.combine(expert_layout)=tensor_parallel", "MoeGroups.expert_layout")
    expect_refusal(seen, "garbage layout",
                   lambda: monta.dispatch(x, monta.Plan(), groups, expert_layout="sideways"),
                   "monta.dispatch(expert_layout)='sideways'", "tensor_parallel")
    expect_refusal(seen, "garbage plan layout", lambda: monta.Plan(expert_layout="true"),
                   "Plan.expert_layout='true'")
    expect_refusal(seen, "garbage groups layout", lambda: with_layout(groups, 1),
                   "MoeGroups.expert_layout=1")
    expect_refusal(seen, "garbage build layout",  # before any group: no rank waits
                   lambda: monta.MoeGroups.build(2, 2, GPUS_PER_NODE, expert_layout="tp"),
                   "MoeGroups.build(expert_layout)='tp'")
    # 6 rows per TP rank come from C in 11..12 (t = 2), not 10 or 13.
    for cap in (10, 13, 0):
        expect_refusal(seen, f"combine capacity {cap}",
                       lambda: monta.combine(x, monta.Plan(), not_tp_groups, capacity=cap),
                       f"capacity={cap}", "11..12")
    expect_refusal(seen, "capacity with tensor-parallel experts",
                   lambda: monta.combine(x, monta.Plan(), groups, expert_layout=TP, capacity=5),
                   "capacity=5")
    # A plan that does not say: the groups' layout runs; with none named, the default, and
    # one line says so (once per process).
    from monta import plan as plan_mod
    del plan_mod._DEFAULT_LOGGED[:]
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("monta").addHandler(handler)
    try:
        shapes = [tuple(monta.dispatch(torch.zeros(4, 7, 3), monta.Plan(), g).shape)
                  for g in (with_layout(groups, TP), groups, groups)]
    finally:
        logging.getLogger("monta").removeHandler(handler)
    if shapes != [(4, 7, 3), (4, 4, 3), (4, 4, 3)]:
        seen.append(f"unstated plan ran shapes {shapes}, expected the groups' layout, then "
                    "the default (not_tensor_parallel: 4 of 7 rows per TP rank)")
    said = [r.getMessage() for r in records if "planner's default" in r.getMessage()]
    if len(said) != 1 or NOT_TP not in said[0]:
        seen.append(f"default layout logged {len(said)} times: {said}")
    return seen


def _stall_until(paths_glob, count, cap_s):
    """A stuck rank: alive and silent until `count` files match paths_glob (the other ranks
    say they failed) or cap_s passes (longer than the harness deadline)."""
    end = time.monotonic() + cap_s
    while len(glob.glob(paths_glob)) < count and time.monotonic() < end:
        time.sleep(0.1)


def killed_worker(rank, world, victim, stall_dir=None, timeout_s=20):
    """The victim dies after a first dispatch; with stall_dir it stays alive and silent
    instead, until every other rank has failed (each says so in stall_dir), so that only
    the groups' timeout can end their wait. timeout_s None: MoeGroups.build's default."""
    timeout = None if timeout_s is None else datetime.timedelta(seconds=timeout_s)
    # Tensor-parallel experts: every dispatch gathers over TP too, so every rank talks to
    # the victim (each EP group holds one of its TP peers).
    groups = monta.MoeGroups.build(2, 2, GPUS_PER_NODE, timeout=timeout, expert_layout=TP)
    plan = monta.Plan(strategy=monta.TP_DEDUP_PIPELINED, num_chunks=4)
    x = torch.ones(4, 64, 32)
    monta.dispatch(x, plan, groups)  # everyone alive: fine
    torch.distributed.barrier()
    if rank == victim and stall_dir:
        _stall_until(os.path.join(stall_dir, "failed-*"), world - 1, cap_s=STALL_CAP_S)
        os._exit(18)
    if rank == victim:
        os._exit(17)  # dies without a word, as a killed process does
    try:
        for _ in range(1000):
            monta.dispatch(x, plan, groups)
    except monta.CommError:
        if stall_dir:
            open(os.path.join(stall_dir, f"failed-{rank}"), "w").close()
        raise
    return "no error"


def async_worker(rank, world):
    """dispatch / combine(async_op=True).wait(): the synchronous output and input gradient
    exactly (fp32), every bare-AllToAll plan in both expert layouts, capacity divisible by t
    and not; and two handles in flight at once on the same groups (a dispatch and a
    combine), waited in the reverse order."""
    failures = []
    for t, e in LAYOUTS:
        built = monta.MoeGroups.build(t, e, GPUS_PER_NODE)
        for layout in (TP, NOT_TP) if t > 1 else (TP,):
            groups = with_layout(built, layout)
            for plan in op_plans():
                label = f"rank {rank} t={t} e={e} {layout} {plan.strategy}(K={plan.num_chunks})"
                for cap, op in ((14, "dispatch"), (14, "combine"), (7, "dispatch"),
                                (7, "combine")):
                    x, upstream = op_inputs(rank, groups, layout, op, cap, torch.float32)
                    want = op_case(x, upstream, plan, groups, layout, op, cap)
                    got = op_case(x, upstream, plan, groups, layout, op, cap, async_op=True)
                    for name, a, b in zip(("output", "input grad"), got, want):
                        compare(f"{label} async C={cap} {op} {name}", a, b, torch.float32,
                                failures)
                x = op_inputs(rank, groups, layout, "dispatch", 14, torch.float32)[0]
                z = op_inputs(rank, groups, layout, "combine", 14, torch.float32, salt=1)[0]
                x.requires_grad_()
                z.requires_grad_()
                first = monta.dispatch(x, plan, groups, async_op=True)
                second = monta.combine(z, plan, groups, async_op=True, capacity=14)
                y2, y1 = second.wait(), first.wait()
                ((y1 * 2).sum() + (y2 * 3).sum()).backward()
                for name, op, inp, got, grad, scale in (("first", "dispatch", x, y1, x.grad, 2),
                                                        ("second", "combine", z, y2, z.grad, 3)):
                    want = op_case(inp.detach(), torch.full_like(got, float(scale)), plan,
                                   groups, layout, op, 14)
                    compare(f"{label} two in flight {name}", got.detach(), want[0],
                            torch.float32, failures)
                    compare(f"{label} two in flight {name} grad", grad, want[1],
                            torch.float32, failures)
    return failures


def gather_into_tensor_worker(rank, world):
    """The NCCL-shaped path (one all_gather_into_tensor buffer, one reorder copy), with the
    collective emulated over Gloo: the reference's results in both expert layouts."""

    class Done:
        def wait(self):
            return True

    def emulated(out, inp, group=None, async_op=False):
        pieces = list(out.view((-1,) + tuple(inp.shape)).unbind(0))
        torch.distributed.all_gather(pieces, inp, group=group)
        return Done()

    _comm.has_gather_into_tensor = lambda group: True
    torch.distributed.all_gather_into_tensor = emulated
    failures = []
    groups = monta.MoeGroups.build(2, 2, GPUS_PER_NODE)
    for dtype in (torch.float32, torch.float16):
        for layout in (TP, NOT_TP):
            for cap in (14, 7):  # C=7: padded to 8
                for plan in op_plans():
                    compare_ops(f"{layout} {plan.strategy}(K={plan.num_chunks}) {dtype}", plan,
                                with_layout(groups, layout), layout, cap, torch.float32,
                                failures, rank)
        x = torch.arange(12.0, dtype=dtype).reshape(3, 4) + 100 * rank
        gathered = monta.gather_tokens(x, 1, groups.tp_group)
        want = torch.cat([torch.arange(12.0, dtype=dtype).reshape(3, 4) + 100 * (rank // 2 * 2 + j)
                          for j in range(2)], 1)
        compare(f"gather_tokens {dtype}", gathered, want, torch.float32, failures)
        # DeepSpeed's pair on a replicated tensor: drop then gather is the identity, and the
        # backward of each is the other.
        rep = (torch.arange(24.0, dtype=dtype).reshape(2, 4, 3) + rank // 2).requires_grad_()
        dropped = monta.drop_tokens(rep, 1, groups.tp_group)
        if dropped.shape != (2, 2, 3):
            failures.append(f"drop_tokens shape {tuple(dropped.shape)}")
        back = monta.gather_tokens(dropped, 1, groups.tp_group)
        compare(f"drop+gather {dtype}", back, rep.detach(), torch.float32, failures)
        back.backward(torch.ones_like(back) * (rank // 2 + 1))
        compare(f"drop+gather grad {dtype}", rep.grad,
                torch.full_like(rep, rank // 2 + 1).detach(), torch.float32, failures)
    return failures


def pairwise_worker(rank, world):
    """AllToAll and AllGather on Gloo are point-to-point (receives posted before sends), not
    all_to_all_single / all_gather: the TP gather puts each rank's piece in TP order; block
    j of rank r's input lands as block r of EP member j's output, in fp32 and bf16 (byte
    view), on EP groups of 4 and of 2 (strided members), also with two AllToAlls in flight
    on one group at once (expert_overlap's dispatch and combine)."""
    failures = []

    def refuse(*args, **kwargs):
        raise AssertionError("all_to_all_single called on a Gloo group")

    torch.distributed.all_to_all_single = refuse
    torch.distributed.all_gather = refuse
    tp = monta.MoeGroups.build(2, 2, GPUS_PER_NODE).tp_group
    for dtype in (torch.float32, torch.bfloat16):
        # gather_tokens on the TP group (ranks 2n, 2n+1): both pieces, in TP order.
        x = (torch.arange(12.0).reshape(3, 4) + 100 * rank).to(dtype)
        want = torch.cat([(torch.arange(12.0).reshape(3, 4) + 100 * (rank // 2 * 2 + j))
                          .to(dtype) for j in range(2)], 1)
        compare(f"gather_tokens on Gloo {dtype}", monta.gather_tokens(x, 1, tp), want,
                torch.float32, failures)
    for t, e, members in ((1, 4, [0, 1, 2, 3]), (2, 2, [rank % 2, rank % 2 + 2])):
        group = monta.MoeGroups.build(t, e, GPUS_PER_NODE).ep_group

        def block(src, dst, salt, dtype):  # what member src sends member dst
            return (torch.arange(6.0).reshape(2, 3) + 1000 * src + 100 * dst + salt).to(dtype)

        for dtype in (torch.float32, torch.bfloat16):
            for salt in (0, 7):
                x = torch.stack([block(rank, j, salt, dtype) for j in members])
                want = torch.stack([block(j, rank, salt, dtype) for j in members])
                out, work = _comm.all_to_all_start(x, group)
                work.wait()
                compare(f"flat {e} ranks {dtype} salt {salt}", out, want, torch.float32,
                        failures)
            first = torch.stack([block(rank, j, 1, dtype) for j in members])
            second = torch.stack([block(rank, j, 2, dtype) for j in members])
            a, wa = _comm.all_to_all_start(first, group)
            b, wb = _comm.all_to_all_start(second, group)
            wb.wait()
            wa.wait()
            for name, got, salt in (("first", a, 1), ("second", b, 2)):
                want = torch.stack([block(j, rank, salt, dtype) for j in members])
                compare(f"two in flight, {name}, {e} ranks {dtype}", got, want, torch.float32,
                        failures)
    # Groups monta did not build (DeepSpeed's, Megatron's): their global ranks come from
    # register_group, else from torch.distributed.get_process_group_ranks.
    members = [rank % 2, rank % 2 + 2]  # group rank != global rank on ranks 1..3
    looked_up = [torch.distributed.new_group(m) for m in ([0, 2], [1, 3])][rank % 2]
    registered = [torch.distributed.new_group(m) for m in ([0, 2], [1, 3])][rank % 2]
    monta.register_group(registered, members)
    for label, group in (("looked up", looked_up), ("registered", registered)):
        x = torch.stack([block(rank, j, 3, torch.float32) for j in members])
        want = torch.stack([block(j, rank, 3, torch.float32) for j in members])
        compare(f"all_to_all on a group monta did not build ({label})",
                monta.all_to_all(x, group), want, torch.float32, failures)
    try:
        monta.register_group(looked_up, [rank])
        failures.append("register_group with 1 rank for a group of 2 accepted")
    except monta.PlanError as e:
        if "register_group: ranks" not in str(e):
            failures.append(f"register_group: unclear error {e}")
    return failures


def traffic_worker(rank, world):
    """What each strategy puts on the wire in each expert layout: per op of one layer
    (dispatch, combine, then the combine's gradient and the dispatch's, as autograd runs
    them; expert_overlap: its forward and its backward), the AllToAlls ("a2a", elements,
    EP group size) and the TP AllGathers ("ag", elements, TP size) in the order they start;
    the strategy named in any spelling; dispatch refuses expert_overlap before sending
    anything."""
    events = []
    start, gather_class = _comm.all_to_all_start, _comm.Gather

    def recording(inp, group):
        events.append(("a2a", inp.numel(), dist.get_world_size(group)))
        return start(inp, group)

    class RecordingGather(gather_class):
        def __init__(self, inp, group, size):
            events.append(("ag", inp.numel(), size))
            super().__init__(inp, group, size)

    _comm.all_to_all_start, _comm.Gather = recording, RecordingGather

    def mark(name):
        events.append(("op", name))

    def layer(plan, groups, cap):
        """One layer's communication, experts the identity; events split by op."""
        del events[:]
        x = torch.zeros(4, cap, 5, requires_grad=True)
        if plan.strategy == monta.EXPERT_OVERLAP:
            mark("forward")
            y = monta.experts_overlapped(x, lambda r: r * 1.0, plan, groups)
            mark("backward")
            y.sum().backward()
        else:
            mark("dispatch")
            dispatched = monta.dispatch(x, plan, groups) * 1.0  # the "experts"
            dispatched.register_hook(lambda grad: mark("dispatch grad"))
            mark("combine")
            y = monta.combine(dispatched, plan, groups, capacity=cap)
            mark("combine grad")
            y.sum().backward()
        ops, name = {}, None
        for event in events:
            if event[0] == "op":
                name = event[1]
                ops[name] = []
            else:
                ops[name].append(event)
        return ops

    out = {}
    for t, e in LAYOUTS:
        built = monta.MoeGroups.build(t, e, GPUS_PER_NODE)
        for layout in (TP, NOT_TP):
            groups = with_layout(built, layout)
            for plan in [monta.Plan()] + plans():
                out[(t, e, layout, plan.strategy, plan.num_chunks)] = layer(plan, groups, 14)
            for spelling in ("TP_DEDUP", "STRATEGY_KIND_TP_DEDUP", " tp_dedup "):
                out[(t, e, layout, spelling)] = layer(monta.Plan(strategy=spelling), groups, 14)
            if t == 2:
                for plan in dedup_plans():  # C=7 padded to 8
                    out[("padded", layout, plan.strategy, plan.num_chunks)] = layer(plan, groups,
                                                                                    7)
            del events[:]
            try:
                monta.dispatch(torch.zeros(4, 14, 5), monta.Plan(strategy="expert_overlap"),
                               groups)
            except monta.PlanError as error:
                events.append(("refused", str(error).split(":")[0]))
            out[(t, e, layout, "dispatch expert_overlap")] = list(events)
    return out


class StrategiesTest(unittest.TestCase):
    maxDiff = None
    def assertEveryRankClean(self, worker, deadline_s):
        """Runs `worker` on WORLD ranks; each must finish and report no mismatch."""
        results = mp_harness.run(worker, WORLD, deadline_s=deadline_s)
        for rank in range(WORLD):
            status, value = results[rank]
            self.assertEqual(status, "ok", f"rank {rank}: {value}")
            self.assertEqual(value, [], "\n".join(value))

    def test_every_strategy_computes_deepspeeds_layer(self):
        self.assertEveryRankClean(strategies_worker, deadline_s=600)

    def test_groups_follow_the_advised_node_order(self):
        self.assertEveryRankClean(node_order_worker, deadline_s=180)

    def test_index_dispatcher_matches_einsum(self):
        self.assertEveryRankClean(index_dispatcher_worker, deadline_s=120)

    def test_flat_on_gloo_is_pairwise_and_exact(self):
        self.assertEveryRankClean(pairwise_worker, deadline_s=120)

    def test_what_each_strategy_sends(self):
        """The model's collectives per layer (server/model/cost_model.cc, docs/MODEL.md
        section 4): tensor-parallel experts: every op is the strategy's whole exchange (4
        AllToAlls, and 4 AllGathers for the dedup strategies, each chunked by the pipeline);
        experts not tensor-parallel: dispatch and the combine's gradient drop and send
        D/t in one AllToAll, the combine and the dispatch's gradient send and gather (4
        AllToAlls, 2 AllGathers; chunked by the pipeline), flat and tp_dedup the same."""
        results = mp_harness.run(traffic_worker, WORLD, deadline_s=120)
        status, sent = results[0]
        self.assertEqual(status, "ok", sent)
        row = 4 * 5  # E * M elements per capacity row
        # Chunk rows of the pipeline (common/schedule's rule, written out): 14 rows (TP 1),
        # 7 rows per TP rank (C=14, t=2), 4 (C=7 padded to 8, t=2).
        chunks = {14: {1: [14], 2: [7, 7], 3: [5, 5, 4], 8: [2] * 7},
                  7: {1: [7], 2: [4, 3], 3: [3, 3, 1], 8: [1] * 7},
                  4: {1: [4], 2: [2, 2], 3: [2, 2], 8: [1] * 4}}

        def a2a(rows, group=2):
            return [("a2a", row * r, group) for r in rows]

        def gathered(rows):  # every chunk's AllToAll posted first, then the gathers
            return a2a(rows) + [("ag", row * r, 2) for r in rows]

        for cap, key in ((14, lambda *k: (2, 2) + k), (7, lambda *k: ("padded",) + k)):
            n = -(-cap // 2)
            for strategy, k in [("tp_dedup", 1)] + [("tp_dedup_pipelined", k) for k in KS]:
                piped = gathered(chunks[n][k])
                self.assertEqual(sent[key(TP, strategy, k)],
                                 {op: piped for op in ("dispatch", "combine", "combine grad",
                                                       "dispatch grad")}, (cap, strategy, k))
                self.assertEqual(sent[key(NOT_TP, strategy, k)],
                                 {"dispatch": a2a([n]), "combine": piped,
                                  "combine grad": a2a([n]), "dispatch grad": piped},
                                 (cap, strategy, k))
            # Flat: tensor-parallel experts send every TP rank's whole copy; experts not
            # tensor-parallel run DeepSpeed's path, which is tp_dedup's.
            self.assertEqual(sent[key(TP, "flat", 1)],
                             {op: a2a([cap]) for op in ("dispatch", "combine", "combine grad",
                                                        "dispatch grad")})
            self.assertEqual(sent[key(NOT_TP, "flat", 1)], sent[key(NOT_TP, "tp_dedup", 1)])
            # Hierarchical, EP 2 across the nodes (one member per node): only the inter-node
            # step, of the whole copy, or of this TP rank's rows and gathered after.
            self.assertEqual(sent[key(TP, "hierarchical", 1)],
                             {op: a2a([cap]) for op in ("dispatch", "combine", "combine grad",
                                                        "dispatch grad")})
            self.assertEqual(sent[key(NOT_TP, "hierarchical", 1)],
                             {"dispatch": a2a([n]), "combine": gathered([n]),
                              "combine grad": a2a([n]), "dispatch grad": gathered([n])})
        # Collectives per layer: 4 AllToAll ops; 4 AllGathers (tensor-parallel tp_dedup),
        # 2 (not tensor-parallel), none for flat with tensor-parallel experts.
        for layout, strategy, gathers in ((TP, "tp_dedup", 4), (NOT_TP, "tp_dedup", 2),
                                          (NOT_TP, "flat", 2), (TP, "flat", 0),
                                          (NOT_TP, "hierarchical", 2)):
            ops = sent[(2, 2, layout, strategy, 1)]
            self.assertEqual([sum(ev[0] == "a2a" for ev in ops[op]) for op in ops], [1] * 4)
            self.assertEqual(sum(ev[0] == "ag" for op in ops for ev in ops[op]), gathers)
        # expert_overlap: chunks of all C rows (tensor-parallel), of this TP rank's n rows
        # with one gather after the last combine and one in the backward (not).
        for k in KS:
            for layout, rows, gather in ((TP, chunks[14][k], []),
                                         (NOT_TP, chunks[7][k], [("ag", row * 7, 2)])):
                forward = sent[(2, 2, layout, "expert_overlap", k)]["forward"]
                backward = sent[(2, 2, layout, "expert_overlap", k)]["backward"]
                a2as = [ev for ev in forward if ev[0] == "a2a"]
                self.assertEqual(sorted(a2as), sorted(a2a(rows) * 2), (layout, k))
                self.assertEqual([ev for ev in forward if ev[0] == "ag"], gather, (layout, k))
                self.assertEqual(forward[-len(gather):] if gather else [], gather)
                self.assertEqual(sorted(ev for ev in backward if ev[0] == "a2a"), sorted(a2as))
                self.assertEqual([ev for ev in backward if ev[0] == "ag"], gather, (layout, k))
            # Not a bare AllToAll: dispatch refuses it, sending nothing.
            self.assertEqual(sent[(2, 2, TP, "dispatch expert_overlap")],
                             [("refused", "monta.dispatch")])
        # TP 1: nothing is duplicated, so both layouts send the same (EP 4 over 2 nodes x 2:
        # hierarchical = intra-node step (2) then inter-node step (2)).
        for plan in [monta.Plan()] + plans():
            self.assertEqual(sent[(1, 4, TP, plan.strategy, plan.num_chunks)],
                             sent[(1, 4, NOT_TP, plan.strategy, plan.num_chunks)], plan)
        self.assertEqual(sent[(1, 4, TP, "hierarchical", 1)]["dispatch"],
                         a2a([14], 2) + a2a([14], 2))
        self.assertEqual(sent[(1, 4, TP, "flat", 1)]["dispatch"], a2a([14], 4))
        # "TP_DEDUP", "STRATEGY_KIND_TP_DEDUP", " tp_dedup " run tp_dedup, not flat.
        for t, e in LAYOUTS:
            for layout in (TP, NOT_TP):
                for spelling in ("TP_DEDUP", "STRATEGY_KIND_TP_DEDUP", " tp_dedup "):
                    self.assertEqual(sent[(t, e, layout, spelling)],
                                     sent[(t, e, layout, "tp_dedup", 1)], spelling)
        self.assertNotEqual(sent[(2, 2, TP, "tp_dedup", 1)], sent[(2, 2, TP, "flat", 1)])

    def test_dedup_pads_an_uneven_capacity(self):
        self.assertEveryRankClean(padded_worker, deadline_s=300)

    def test_gather_into_tensor_path(self):
        self.assertEveryRankClean(gather_into_tensor_worker, deadline_s=120)

    def test_plans_that_do_not_fit_are_refused(self):
        self.assertEveryRankClean(refusal_worker, deadline_s=120)

    def test_async_handles_give_the_synchronous_results(self):
        self.assertEveryRankClean(async_worker, deadline_s=300)

    def test_killed_rank_fails_the_others_clearly(self):
        victim = 3
        results = mp_harness.run(killed_worker, WORLD, args=(victim,), pg_timeout_s=20,
                                 deadline_s=120)
        self.assertEqual(results[victim], ("died", 17))
        for rank in range(WORLD):
            if rank == victim:
                continue
            status, value = results[rank]
            self.assertEqual(status, "error", f"rank {rank}: {status} {value}")
            # Failing to post to the dead peer or to hear from it: the same clear error.
            self.assertIn("CommError: monta:", value, f"rank {rank}")
            self.assertIn("a peer rank may have died", value, f"rank {rank}")


    def assertStalledRankTimesTheOthersOut(self, group_timeout_s, pg_timeout_s):
        """The victim stays alive and silent until the others fail (or STALL_CAP_S, past
        the deadline): only the groups' timeout ends their wait, else all hang."""
        victim = 2
        with tempfile.TemporaryDirectory() as stall_dir:
            results = mp_harness.run(killed_worker, WORLD,
                                     args=(victim, stall_dir, group_timeout_s),
                                     pg_timeout_s=pg_timeout_s, deadline_s=STALL_DEADLINE_S)
        self.assertEqual(results[victim], ("died", 18))
        for rank in range(WORLD):
            if rank == victim:
                continue
            status, value = results[rank]
            self.assertEqual(status, "error", f"rank {rank}: {status} {value}")
            self.assertIn("CommError: monta:", value)

    def test_stalled_rank_times_the_others_out(self):
        self.assertStalledRankTimesTheOthersOut(group_timeout_s=5, pg_timeout_s=3600)

    def test_groups_default_to_the_world_timeout(self):
        # MoeGroups.build without a timeout: the world's 5 s, not torch's 30 minutes.
        self.assertStalledRankTimesTheOthersOut(group_timeout_s=None, pg_timeout_s=5)


class ChunksTest(unittest.TestCase):
    def test_effective_chunks(self):
        self.assertEqual(monta.effective_chunks(6, 4), 3)
        self.assertEqual(monta.effective_chunks(7, 8), 7)
        self.assertEqual(monta.effective_chunks(7, 3), 3)
        self.assertEqual(monta.effective_chunks(16, 8), 8)
        self.assertEqual(monta.effective_chunks(0, 8), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
