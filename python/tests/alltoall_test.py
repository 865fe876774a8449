"""The MoE AllToAll strategies on 4 Gloo ranks: 2 emulated nodes x 2 ranks on loopback.

Every strategy and K in {1, 2, 3, 8} against flat: forward outputs and the gradients of
the inputs and of the expert weights equal flat's exactly in fp32 and within tolerance in
bf16; dtype kept; capacity not divisible by K; capacity not divisible by t (the dedup
strategies pad it); async_op=True handles give the synchronous results; plans that do
not fit the groups (or the call) refused by the call itself; a killed rank makes the
others fail with a clear error, no hang, and a silent one times them out after the
world's timeout; flat on Gloo runs as point-to-point messages with known data landing
where DeepSpeed's AllToAll puts it.

Runs against the installed package (python/tests/run_installed.sh)."""

import dataclasses
import datetime
import glob
import os
import tempfile
import time
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path[:0] = [HERE, os.path.join(ROOT, "examples")]  # mp_harness, moe_layer

import torch  # noqa: E402

import monta  # noqa: E402
import mp_harness  # noqa: E402
from monta import _comm  # noqa: E402
from monta import groups as groups_mod  # noqa: E402

WORLD, GPUS_PER_NODE = 4, 2
# A stalled rank's longest silence, and the harness deadline it outlasts.
STALL_CAP_S, STALL_DEADLINE_S = 120, 90
KS = (1, 2, 3, 8)
# (tensor, expert) parallel sizes: TP inside a node with EP across nodes (the MoNTA case),
# and TP 1 with EP over both nodes (where hierarchical has both steps).
LAYOUTS = ((2, 2), (1, 4))


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


def op_case(x_seed, shape, dtype, plan, groups, async_op=False):
    """The bare AllToAll: output and input gradient for a given upstream gradient."""
    g = torch.Generator().manual_seed(x_seed)
    x = torch.randn(shape, generator=g).to(dtype).requires_grad_()
    upstream = torch.randn(shape, generator=g).to(dtype)
    if async_op:
        work = monta.dispatch(x, plan, groups, async_op=True)
        y = work.wait()
        if not work.is_completed() or work.wait() is not y:
            raise AssertionError("wait() must return the same output every time")
    else:
        y = monta.dispatch(x, plan, groups)
    y.backward(upstream)
    return y.detach(), x.grad


def layer_case(seed, dtype, plan, groups, seq=15, dispatcher="einsum"):
    import moe_layer
    layer = moe_layer.MoELayer(hidden=16, ffn=24, num_experts=4, top_k=2, capacity_factor=0.9,
                               plan=plan, groups=groups, dtype=dtype, dispatcher=dispatcher)
    g = torch.Generator().manual_seed(seed)
    # seq 15: S=30, C=ceil(2*30*0.9/4)=14; seq 12: S=24, C=11.
    x = torch.randn(2, seq, 16, generator=g).to(dtype).requires_grad_()
    y = layer(x)
    (y.float() * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
    return y.detach(), x.grad, layer.experts.w1.grad, layer.experts.w2.grad


def strategies_worker(rank, world):
    failures = []
    for t, e in LAYOUTS:
        groups = monta.MoeGroups.build(t, e, GPUS_PER_NODE)
        seed = rank // t  # inputs are replicated over the TP group, as in the model
        for dtype in (torch.float32, torch.bfloat16):
            # E=4 experts, capacity 14 (7 rows per TP rank: 7 mod 2, 3 and 8 != 0).
            op_ref = op_case(seed, (4, 14, 5), dtype, monta.Plan(), groups)
            layer_ref = layer_case(seed, dtype, monta.Plan(), groups)
            if layer_ref[0].dtype != dtype:
                failures.append(f"flat layer output dtype {layer_ref[0].dtype} != {dtype}")
            for plan in plans():
                label = f"rank {rank} t={t} e={e} {dtype} {plan.strategy}(K={plan.num_chunks})"
                if plan.strategy != monta.EXPERT_OVERLAP:  # not a bare AllToAll
                    for name, got, want in zip(("output", "input grad"),
                                               op_case(seed, (4, 14, 5), dtype, plan, groups),
                                               op_ref):
                        compare(f"{label} op {name}", got, want, dtype, failures)
                for name, got, want in zip(("output", "input grad", "w1 grad", "w2 grad"),
                                           layer_case(seed, dtype, plan, groups), layer_ref):
                    # expert_overlap runs the experts per chunk: its gradients are the same
                    # sums in another order (other GEMM shapes).
                    exact = plan.strategy != monta.EXPERT_OVERLAP or name == "output"
                    compare(f"{label} layer {name}", got, want, dtype, failures, exact)
    return failures


def index_dispatcher_worker(rank, world):
    """examples/moe_layer.py's index dispatcher (Tutel-style scatter / weighted gather)
    computes what the einsum dataflow computes (within rounding: other sums), and on it
    every strategy still equals flat exactly in fp32."""
    failures = []
    groups = monta.MoeGroups.build(2, 2, GPUS_PER_NODE)
    seed = rank // 2
    names = ("output", "input grad", "w1 grad", "w2 grad")
    einsum_ref = layer_case(seed, torch.float32, monta.Plan(), groups)
    index_ref = layer_case(seed, torch.float32, monta.Plan(), groups, dispatcher="index")
    for name, got, want in zip(names, index_ref, einsum_ref):
        compare(f"rank {rank} index vs einsum {name}", got, want, torch.float32, failures,
                exact=False)
    # seq 15 drops tokens for capacity (C=14 of 15 routed to some expert): the index path
    # must drop the same ones, or the outputs above would differ by whole rows.
    for plan in (monta.Plan(strategy=monta.TP_DEDUP_PIPELINED, num_chunks=3),
                 monta.Plan(strategy=monta.EXPERT_OVERLAP, num_chunks=2)):
        got_all = layer_case(seed, torch.float32, plan, groups, dispatcher="index")
        for name, got, want in zip(names, got_all, index_ref):
            exact = plan.strategy != monta.EXPERT_OVERLAP or name == "output"
            compare(f"rank {rank} index {plan.strategy} {name}", got, want, torch.float32,
                    failures, exact)
    return failures


def dedup_plans():
    return [monta.Plan(strategy=monta.TP_DEDUP), monta.Plan(strategy=monta.HIERARCHICAL)] + [
        monta.Plan(strategy=monta.TP_DEDUP_PIPELINED, num_chunks=k) for k in KS]


def padded_worker(rank, world):
    """C odd with t=2: the dedup strategies pad the capacity to C+1 inside the function; the
    real rows' outputs and gradients equal flat's exactly (fp32 only, to keep it short)."""
    failures = []
    groups = monta.MoeGroups.build(2, 2, GPUS_PER_NODE)
    seed = rank // 2
    for cap in (7, 1):  # 1: TP rank 1's rows are all padding
        op_ref = op_case(seed, (4, cap, 5), torch.float32, monta.Plan(), groups)
        for plan in dedup_plans():
            got = op_case(seed, (4, cap, 5), torch.float32, plan, groups)
            for name, a, b in zip(("output", "input grad"), got, op_ref):
                compare(f"rank {rank} C={cap} {plan.strategy}(K={plan.num_chunks}) op {name}",
                        a, b, torch.float32, failures)
                if a.shape != b.shape or not a.is_contiguous():
                    failures.append(f"C={cap} {plan.strategy} {name}: shape {tuple(a.shape)}, "
                                    f"contiguous {a.is_contiguous()}")
    layer_ref = layer_case(seed, torch.float32, monta.Plan(), groups, seq=12)  # C=11
    for plan in dedup_plans():
        for name, got, want in zip(("output", "input grad", "w1 grad", "w2 grad"),
                                   layer_case(seed, torch.float32, plan, groups, seq=12),
                                   layer_ref):
            compare(f"rank {rank} C=11 {plan.strategy}(K={plan.num_chunks}) layer {name}",
                    got, want, torch.float32, failures)
    x = torch.randn(4, 7, 5, dtype=torch.float16)  # dtype kept through the padding
    y = monta.dispatch(x, monta.Plan(strategy=monta.TP_DEDUP_PIPELINED, num_chunks=3), groups)
    if y.dtype != x.dtype or y.device != x.device:
        failures.append(f"padded output {y.dtype} on {y.device}, input {x.dtype} on {x.device}")
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
    groups = monta.MoeGroups.build(2, 2, GPUS_PER_NODE, timeout=timeout)
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
    """dispatch(async_op=True).wait(): the synchronous output and input gradient exactly
    (fp32), every bare-AllToAll plan on both layouts; and two handles in flight at once on
    the same groups (dispatch and combine), waited in the reverse order."""
    failures = []
    for t, e in LAYOUTS:
        groups = monta.MoeGroups.build(t, e, GPUS_PER_NODE)
        seed = rank // t
        for plan in op_plans():
            label = f"rank {rank} t={t} e={e} {plan.strategy}(K={plan.num_chunks}) async"
            for shape in ((4, 14, 5), (4, 7, 5)):
                want = op_case(seed, shape, torch.float32, plan, groups)
                got = op_case(seed, shape, torch.float32, plan, groups, async_op=True)
                for name, a, b in zip(("output", "input grad"), got, want):
                    compare(f"{label} {shape} {name}", a, b, torch.float32, failures)
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(4, 14, 5, generator=g).requires_grad_()
            z = torch.randn(4, 14, 5, generator=g).requires_grad_()
            first = monta.dispatch(x, plan, groups, async_op=True)
            second = monta.combine(z, plan, groups, async_op=True)
            y2, y1 = second.wait(), first.wait()
            (y1 * 2 + y2 * 3).sum().backward()
            for name, got, want in (("first", y1, monta.dispatch(x.detach(), plan, groups)),
                                    ("second", y2, monta.combine(z.detach(), plan, groups))):
                compare(f"{label} two in flight {name}", got.detach(), want, torch.float32,
                        failures)
            for name, grad, scale in (("first", x.grad, 2), ("second", z.grad, 3)):
                want = monta.dispatch(torch.full((4, 14, 5), float(scale)), plan, groups)
                compare(f"{label} two in flight {name} grad", grad, want, torch.float32,
                        failures)
    return failures


def gather_into_tensor_worker(rank, world):
    """The NCCL-shaped path (one all_gather_into_tensor buffer, one reorder copy), with the
    collective emulated over Gloo: same results as flat."""

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
        for shape in ((4, 14, 5), (4, 7, 5)):  # C=7: padded to 8
            ref = op_case(rank // 2, shape, dtype, monta.Plan(), groups)
            for plan in op_plans():
                got = op_case(rank // 2, shape, dtype, plan, groups)
                for name, a, b in zip(("output", "input grad"), got, ref):
                    compare(f"{plan.strategy}(K={plan.num_chunks}) {dtype} {shape} {name}", a,
                            b, torch.float32, failures)
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
    """What each strategy puts on the wire: AllToAll sizes and counts per op (the strategy
    named in any spelling; dispatch refuses expert_overlap before sending anything)."""
    sent = []
    start = _comm.all_to_all_start

    def recording(inp, group):
        sent.append((inp.numel(), torch.distributed.get_world_size(group)))
        return start(inp, group)

    _comm.all_to_all_start = recording
    out = {}
    for t, e in LAYOUTS:
        groups = monta.MoeGroups.build(t, e, GPUS_PER_NODE)
        for plan in plans():
            del sent[:]
            try:
                monta.dispatch(torch.zeros(4, 14, 5), plan, groups)
            except monta.PlanError as error:
                sent.append(("refused", str(error).split(":")[0]))
            out[(t, e, plan.strategy, plan.num_chunks)] = list(sent)
        for spelling in ("TP_DEDUP", "STRATEGY_KIND_TP_DEDUP", " tp_dedup "):
            del sent[:]
            monta.dispatch(torch.zeros(4, 14, 5), monta.Plan(strategy=spelling), groups)
            out[(t, e, spelling)] = list(sent)
    groups = monta.MoeGroups.build(2, 2, GPUS_PER_NODE)
    for plan in dedup_plans():
        del sent[:]
        monta.dispatch(torch.zeros(4, 7, 5), plan, groups)  # C=7 padded to 8
        out[("padded", plan.strategy, plan.num_chunks)] = list(sent)
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

    def test_every_strategy_matches_flat(self):
        self.assertEveryRankClean(strategies_worker, deadline_s=600)

    def test_index_dispatcher_matches_einsum(self):
        self.assertEveryRankClean(index_dispatcher_worker, deadline_s=120)

    def test_flat_on_gloo_is_pairwise_and_exact(self):
        self.assertEveryRankClean(pairwise_worker, deadline_s=120)

    def test_what_each_strategy_sends(self):
        results = mp_harness.run(traffic_worker, WORLD, deadline_s=120)
        status, sent = results[0]
        self.assertEqual(status, "ok", sent)
        full = 4 * 14 * 5
        # TP 2: dedup sends half the capacity, in K_eff = 1, 2, 3, 7 chunks of 7 rows.
        self.assertEqual(sent[(2, 2, "tp_dedup", 1)], [(full // 2, 2)])
        for k, rows in ((1, [7]), (2, [4, 3]), (3, [3, 3, 1]), (8, [1] * 7)):
            self.assertEqual(sent[(2, 2, "tp_dedup_pipelined", k)],
                             [(4 * r * 5, 2) for r in rows], k)
        # expert_overlap is not a bare AllToAll: dispatch refuses it, sending nothing.
        for k in KS:
            self.assertEqual(sent[(2, 2, "expert_overlap", k)], [("refused", "monta.dispatch")])
        # "TP_DEDUP", "STRATEGY_KIND_TP_DEDUP", " tp_dedup " run tp_dedup, not flat.
        for t, e in LAYOUTS:
            for spelling in ("TP_DEDUP", "STRATEGY_KIND_TP_DEDUP", " tp_dedup "):
                self.assertEqual(sent[(t, e, spelling)], sent[(t, e, "tp_dedup", 1)], spelling)
        self.assertNotEqual(sent[(2, 2, "tp_dedup", 1)], [(full, 2)])
        # EP 4 over 2 nodes x 2: hierarchical = intra-node step (2) then inter-node step (2).
        self.assertEqual(sent[(1, 4, "hierarchical", 1)], [(full, 2), (full, 2)])
        # EP 2 across the nodes, one member per node: only the inter-node step.
        self.assertEqual(sent[(2, 2, "hierarchical", 1)], [(full, 2)])
        # C=7, t=2: 4 rows per TP rank (C'=8), in K_eff = 1, 2, 2, 4 chunks; hierarchical
        # does not split the capacity, so it sends C=7 unpadded.
        self.assertEqual(sent[("padded", "tp_dedup", 1)], [(4 * 4 * 5, 2)])
        for k, rows in ((1, [4]), (2, [2, 2]), (3, [2, 2]), (8, [1] * 4)):
            self.assertEqual(sent[("padded", "tp_dedup_pipelined", k)],
                             [(4 * r * 5, 2) for r in rows], k)
        self.assertEqual(sent[("padded", "hierarchical", 1)], [(4 * 7 * 5, 2)])

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
            self.assertIn("CommError: monta:", value)
            self.assertIn("a peer rank may have died", value)


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
