#!/usr/bin/env python3
"""MoE training steps with the planner's strategy against flat, on the emulated cluster.

perf/moe_step_bench.sh runs this (as root) on scripts/emulated-cluster.sh's two-tier
cluster; it is not meant to be started by hand. Two roles:

  --role=prepare  in the hub namespace: RunBenchmark on every node alone and on all nodes
                  together up to --bench_max_bytes, so that the planner holds measured
                  curves (intra-node AllToAll, AllGather, copy; inter-node AllToAll) that
                  cover the sizes asked for.
  --role=rank     one process per rank inside its node's namespace (RANK, WORLD_SIZE,
                  LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GLOO_SOCKET_IFNAME from the
                  env). Rank 0 asks the planner (GetStrategy, as monta.Plan.request does)
                  for a MoE layer whose dispatch is each --mib per rank; then every rank runs
                  examples/moe_layer.py's MoELayer, in the expert layout the planner priced
                  (--expert_layout, the job's experts_tensor_parallel; the reply names it and
                  the groups refuse another): full training steps (forward + backward + SGD)
                  and, separately, the dispatch AllToAll alone, with the planned strategy
                  and with flat interleaved (planned, flat, planned, flat, ...).

What rank 0 prints per size: the plan, the median step time of each (a step takes as long
as its slowest rank) and their ratio, the measured dispatch op against the planner's
prediction for it, the error as `montactl verify` reports it (predicted / measured - 1:
negative = the op ran slower than predicted), one MoE layer's communication in isolation
(dispatch and combine forward, then autograd's backward of both, through python/monta with
identity experts; the slowest rank's median over --layer_rounds) against the planner's
total_seconds_per_layer (forward + backward) for the plan, flat and the other candidates,
and one JSON line. The forward of a layer is
dispatch + combine (docs/MODEL.md section 4): with tensor-parallel experts the two are the
same op, so the dispatch op alone is compared with a candidate's
forward_seconds_per_layer / 2; with experts not tensor-parallel they differ (drop ->
AllToAll, AllToAll -> gather), so the "dispatch op" timed is dispatch then combine, against
the whole forward_seconds_per_layer.

Sizing: a layer of E experts, hidden M, top-k, capacity factor cf and S tokens per rank
has C = ceil(k S cf / E) rows per expert and dispatches D = E C M b bytes per rank
(b = 4, fp32); the defaults (E 4, M 8192, k 2, cf 1) give S = 256 and 1024 tokens for 16
and 64 MiB. The layer dispatches by index (--dispatcher=index, DeepSpeed's use_tutel
path) and its experts are narrow (--ffn 4): Debian's torch runs on the reference BLAS at
about 1 GFLOP/s per core, and 4 ranks share the host's cores, so the dense einsum
(2 S D / b flops) or a wide FFN (6 D ffn / b per step) would bury the AllToAll under CPU
time a GPU would not spend. The AllToAll moves the same [E, C, M] buffer either way.
"""

import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))  # moe_layer; monta itself is installed

ELEMENT_BYTES = 4  # fp32: Gloo on CPU, and the job's bytes_per_element


def log(*args):
    print(*args, flush=True)


# ----- the job -----

def job_for(mib, args):
    """The planner's MoeJob for a dispatch of about `mib` MiB per rank (see Sizing)."""
    row = args.hidden * ELEMENT_BYTES
    want_rows = max(1, round(mib * 2**20 / (args.experts * row)))
    tokens = max(1, math.ceil(want_rows * args.experts / (args.top_k * args.capacity_factor)))
    cap = math.ceil(args.top_k * tokens * args.capacity_factor / args.experts)
    return {
        "name": f"moe-step-bench-{mib:g}mib", "hidden_size": args.hidden,
        "num_experts": args.experts, "top_k": args.top_k,
        "capacity_factor": args.capacity_factor, "micro_batch_size": 1,
        "sequence_length": tokens, "bytes_per_element": ELEMENT_BYTES, "moe_layers": 1,
        "microbatches_per_step": 1, "world_size": args.world, "tensor_parallel_size": args.tp,
        "expert_parallel_size": args.ep, "pipeline_parallel_size": 1,
        "data_parallel_size": args.world // args.tp,
        "experts_tensor_parallel": args.expert_layout == "tensor_parallel",
    }, cap


def op_share(layout):
    """The part of a candidate's forward_seconds_per_layer the timed "dispatch op" is: half
    (dispatch alone) for tensor-parallel experts, all (dispatch then combine) otherwise."""
    return 0.5 if layout == "tensor_parallel" else 1.0


# ----- role prepare: measured curves for the planner -----

def prepare(args):
    import grpc
    from monta import rpc
    pb = rpc.stubs()
    planner_pb2, planner_grpc = pb.planner_pb2, pb.planner_pb2_grpc
    nodes = args.nodes.split(",")
    with grpc.insecure_channel(args.planner) as channel:
        stub = planner_grpc.PlannerStub(channel)
        # Each node alone first (its intra-node curves up to the size asked), then the
        # AllToAll across the nodes: one task at a time, so no task shares the CPUs.
        for task in [[n] for n in nodes] + [nodes]:
            request = planner_pb2.RunBenchmarkRequest(
                nodes=task, ranks_per_node=args.ranks_per_node, min_bytes=64 << 10,
                max_bytes=args.bench_max_bytes, wait=True,
                timeout_seconds=args.bench_timeout_s)
            start = time.monotonic()
            try:
                reply = stub.RunBenchmark(request, timeout=args.bench_timeout_s + 30)
            except grpc.RpcError as e:
                sys.exit(f"moe_step_bench: RunBenchmark {task}: {e.code().name}: {e.details()}")
            state = rpc.enum_name(reply.status, "state")
            log(f"# RunBenchmark {','.join(task)} up to {args.bench_max_bytes >> 20} MiB: "
                f"{state} in {time.monotonic() - start:.1f} s (task {reply.status.task_id})")
            if "SUCCEEDED" not in state:
                sys.exit(f"moe_step_bench: RunBenchmark {task} did not succeed: {reply}")
        calibrate = [float(m) for m in args.calibrate_mib.split(",") if m]
        if calibrate and args.prepare_out:
            record_uncalibrated(args)
        for mib in calibrate:
            verify(stub, planner_pb2, mib, args)


def candidates_json(plan):
    return [{"strategy": c.strategy, "K": c.num_chunks,
             "forward_s_per_layer": c.predicted_forward_seconds_per_layer,
             "backward_s_per_layer": c.predicted_backward_seconds_per_layer}
            for c in plan.candidates]


def record_uncalibrated(args):
    """The planner's answers for the scored sizes before any Verify on these nodes, so that
    rank 0 can show the error before and after the calibration."""
    from monta import plan as plan_mod, rpc
    placement = {"node_names": args.nodes.split(","), "gpus_per_node": args.ranks_per_node}
    out = {}
    for mib in [float(m) for m in args.mib.split(",")]:
        job, _ = job_for(mib, args)
        request, reply = rpc.get_strategy_reply(args.planner, job, placement, None, 30)
        plan = plan_mod.plan_from_reply(args.planner, request, reply)
        out[str(mib)] = candidates_json(plan)
        log(f"# before calibration, {mib:g} MiB: {plan.strategy} K={plan.num_chunks}")
    with open(args.prepare_out, "w") as f:
        json.dump(out, f)


def verify(stub, planner_pb2, mib, args):
    """The Verify RPC (montactl verify) for the same layer at `mib`: the agents run one MoE
    layer's communication (the default scope) under every strategy and a K sweep on the
    nodes, and the planner fits its
    calibration for these nodes, which the GetStrategy answers below then use. The sizes
    scored here are other sizes (--calibrate_mib), so a prediction is never its own
    measurement."""
    import grpc
    from monta import rpc
    strategy_pb2 = rpc.stubs().strategy_pb2
    job, _ = job_for(mib, args)
    placement = {"node_names": args.nodes.split(","), "gpus_per_node": args.ranks_per_node}
    request = planner_pb2.VerifyRequest(
        request=strategy_pb2.StrategyRequest(
            job=rpc.message(strategy_pb2.MoeJob, job, "job"),
            placement=rpc.message(strategy_pb2.Placement, placement, "placement")),
        timeout_seconds=args.bench_timeout_s)
    start = time.monotonic()
    try:
        reply = stub.Verify(request, timeout=args.bench_timeout_s + 30)
    except grpc.RpcError as e:
        sys.exit(f"moe_step_bench: Verify at {mib:g} MiB: {e.code().name}: {e.details()}")
    cal = reply.calibration
    log(f"# Verify {mib:g} MiB in {time.monotonic() - start:.1f} s: regret "
        f"{reply.regret_ratio:+.0%}, median |error| {reply.median_error_ratio:.0%}, max "
        f"{reply.max_error_ratio:.0%}; calibration: per-chunk overhead "
        f"{cal.per_chunk_overhead_seconds * 1e3:.2f} ms, contention {cal.contention_factor:.2f}, "
        f"network scale {cal.network_scale_ratio:.2f}, local scale {cal.local_scale_ratio:.2f}, "
        f"latency scale {cal.latency_scale_ratio:.2f}, "
        f"error {cal.error_before_ratio:.0%} -> "
        f"{cal.error_after_ratio:.0%} ({rpc.enum_name(reply, 'scope')}, "
        f"{rpc.enum_name(reply, 'calibration_outcome')}"
        f"{': ' + reply.calibration_note if reply.calibration_note else ''})")
    for c in reply.candidates:
        log(f"#   {rpc.enum_name(c, 'kind')[len('STRATEGY_KIND_'):].lower():>18} "
            f"K={c.chunks_effective:<3} predicted {c.predicted_seconds * 1e3:7.1f} ms, measured "
            f"{c.measured_seconds * 1e3:7.1f} ms, error {c.error_ratio:+.0%}"
            f"{' chosen' if c.chosen else ''}{' best' if c.best else ''}"
            f"{' WRONG BYTES' if c.wrong_bytes else ''}")


# ----- role rank -----

def ask_planner(args, sizes):
    """Rank 0: GetStrategy per size (what monta.Plan.request does, keeping the reply's
    evidence for the record)."""
    from monta import plan as plan_mod, rpc
    placement = {"node_names": args.nodes.split(","), "gpus_per_node": args.ranks_per_node}
    answers = []
    for mib in sizes:
        job, cap = job_for(mib, args)
        request, reply = rpc.get_strategy_reply(args.planner, job, placement, None, 30)
        plan = plan_mod.plan_from_reply(args.planner, request, reply)
        curves = [{"used_as": rpc.enum_name(c, "used_as"), "nodes": list(c.nodes),
                   "extrapolated": c.extrapolated, "max_bytes": c.max_bytes}
                  for c in reply.evidence.curves]
        if reply.traffic.capacity_tokens != cap:  # the layer must run what was planned
            sys.exit(f"moe_step_bench: the planner's capacity {reply.traffic.capacity_tokens} "
                     f"is not the layer's {cap} for {job}")
        ev = reply.evidence
        calibration = None
        if ev.HasField("calibration"):
            c = ev.calibration
            calibration = {"per_chunk_overhead_s": c.per_chunk_overhead_seconds,
                           "contention_factor": c.contention_factor,
                           "network_scale_ratio": c.network_scale_ratio,
                           "local_scale_ratio": c.local_scale_ratio,
                           "latency_scale_ratio": c.latency_scale_ratio,
                           "task_id": c.task_id}
        before = None
        if args.prepare_out and os.path.isfile(args.prepare_out):
            with open(args.prepare_out) as f:
                before = json.load(f).get(str(mib))
        answers.append({
            "uncalibrated": before,
            "calibration": calibration,
            "verified_task": ev.verified.task_id if ev.HasField("verified") else None,
            "mib": mib, "job": job, "capacity": cap, "plan": plan,
            "evidence": plan.evidence_source, "curves": curves,
            "notes": list(reply.evidence.notes),
            "planned_dispatch_bytes": reply.traffic.dispatch_bytes,
            "k_sweep": k_sweep_predictions(args, job, placement),
        })
    return answers


def k_sweep_predictions(args, job, placement):
    """--k_sweep: the planner's what-if prediction (options.fixed_chunks) of the pipelined
    dispatch at each K, {K: seconds per dispatch op}."""
    from monta import plan as plan_mod, rpc
    out = {}
    for k in [int(v) for v in args.k_sweep.split(",") if v]:
        options = {"allowed": ["STRATEGY_KIND_TP_DEDUP_PIPELINED"], "fixed_chunks": k}
        request, reply = rpc.get_strategy_reply(args.planner, job, placement, options, 30)
        plan = plan_mod.plan_from_reply(args.planner, request, reply)
        out[plan.num_chunks] = plan.predicted_forward_seconds_per_layer * op_share(
            args.expert_layout)
    return out


def loadavg():
    """The host's 1-minute load average: other work on the cores makes the numbers noisy."""
    with open("/proc/loadavg") as f:
        return float(f.read().split()[0])


def slowest(samples):
    """Per sample, the slowest rank's time (an op or a step ends when its last rank does)."""
    import torch
    import torch.distributed as dist
    worst = torch.tensor(samples, dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return worst.tolist()


def interleaved(runs, rounds, warmup):
    """runs: {name: fn}; calls them in turn (a, b, a, b, ...), `warmup` rounds unrecorded.
    Returns {name: [slowest-rank seconds per round]}."""
    import torch.distributed as dist
    times = {name: [] for name in runs}
    for r in range(warmup + rounds):
        for name, fn in runs.items():
            dist.barrier()
            start = time.perf_counter()
            fn()
            if r >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: slowest(t) for name, t in times.items()}


class AllToAllClock:
    """Seconds this rank spends inside monta's AllToAll (forward and backward, every
    strategy but expert_overlap), by wrapping monta.alltoall._run, which both autograd
    directions call."""

    def __init__(self):
        from monta import alltoall
        self.spent = 0.0
        inner = alltoall._run

        def timed_run(*args):
            start = time.perf_counter()
            try:
                return inner(*args)
            finally:
                self.spent += time.perf_counter() - start
        alltoall._run = timed_run


def op_plans(planned, uncalibrated=None, k_sweep=None):
    """The dispatch ops to time: the plan, flat, every other strategy the planner offered
    at its best K (keyed by strategy name), the --k_sweep Ks of the pipeline, and the
    choice before calibration when its K differs, so each has a measured-vs-predicted."""
    import monta

    def like(**kw):  # another plan in the layout the planner priced
        return monta.Plan(expert_layout=planned.expert_layout, **kw)

    if planned.strategy == monta.EXPERT_OVERLAP:
        # Not a bare AllToAll (monta.dispatch refuses it; the layer runs it through
        # monta.experts_overlapped): only flat's op is timed, the steps above show the plan.
        return {"flat": like()}
    plans = {"planned": planned, "flat": like()}
    for c in planned.candidates:
        if c.strategy not in (planned.strategy, monta.FLAT, monta.EXPERT_OVERLAP):
            plans[c.strategy] = like(strategy=c.strategy, num_chunks=c.num_chunks)
    for k in sorted(k_sweep or {}):
        if ("tp_dedup_pipelined", k) not in {(p.strategy, p.num_chunks) for p in plans.values()}:
            plans[f"tp_dedup_pipelined(K={k})"] = like(strategy="tp_dedup_pipelined",
                                                       num_chunks=k)
    if uncalibrated:
        first = uncalibrated[0]
        have = {(p.strategy, p.num_chunks) for p in plans.values()}
        if (first["strategy"], first["K"]) not in have and \
                first["strategy"] != monta.EXPERT_OVERLAP:
            plans["uncalibrated_choice"] = like(strategy=first["strategy"],
                                                num_chunks=first["K"])
    return plans


def bench_size(answer, groups, args):
    import torch
    import torch.distributed as dist
    import monta
    import moe_layer
    planned = answer["plan"]
    job = answer["job"]
    plans = {"planned": planned, "flat": monta.Plan(expert_layout=planned.expert_layout)}
    # The groups name the job's layout (--expert_layout): a reply priced for another one is
    # refused here, and the layer runs the layout the planner priced.
    layer = moe_layer.MoELayer(hidden=job["hidden_size"], ffn=args.ffn,
                               num_experts=job["num_experts"], top_k=job["top_k"],
                               capacity_factor=job["capacity_factor"], plan=planned,
                               groups=groups, dispatcher=args.dispatcher)
    optimizer = torch.optim.SGD(layer.experts.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(dist.get_rank() // groups.tp_size)  # same over TP
    x = torch.randn((1, job["sequence_length"], job["hidden_size"]), generator=g)

    clock = AllToAllClock()
    inside = {k: [] for k in plans}  # per step: this rank's seconds inside the AllToAll

    def step(name, plan):
        def run():
            layer.plan = plan
            before = clock.spent
            loss = layer(x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            inside[name].append(clock.spent - before)
        return run

    steps = interleaved({k: step(k, p) for k, p in plans.items()}, args.steps, args.warmup)
    # The rounds interleaved() recorded: the last args.steps of each.
    steps["alltoall_in_step"] = {k: slowest(v[-args.steps:]) for k, v in inside.items()}
    d = torch.randn((job["num_experts"], answer["capacity"], job["hidden_size"]), generator=g)

    def dispatch_op(plan):
        if layer.expert_layout == monta.TENSOR_PARALLEL:
            return lambda: monta.dispatch(d, plan, groups)
        # Dispatch and combine differ (drop -> AllToAll, AllToAll -> gather): both.
        return lambda: monta.combine(monta.dispatch(d, plan, groups), plan, groups,
                                     capacity=d.shape[1])

    ops = interleaved({k: dispatch_op(p)
                       for k, p in op_plans(planned, answer["uncalibrated"],
                                            answer["k_sweep"]).items()},
                      args.op_iters, args.warmup)
    grad = torch.randn(d.shape, generator=g)

    def layer_comm(plan):
        # One MoE layer's communication alone: dispatch and combine forward, then autograd
        # runs the combine's gradient and the dispatch's, as the layout dictates (identity
        # experts in between: no compute).
        def run():
            x = d.detach().requires_grad_(True)
            monta.combine(monta.dispatch(x, plan, groups), plan, groups,
                          capacity=d.shape[1]).backward(grad)
        return run

    layers = interleaved({k: layer_comm(p) for k, p in op_plans(planned).items()},
                         args.layer_rounds, args.warmup)
    return steps, ops, layers, d.numel() * d.element_size()


def layer_rows(planned, layers):
    """Per plan timed by layer_comm: the slowest rank's median over the rounds, the
    planner's total_seconds_per_layer for it (forward + backward) and predicted / measured
    - 1."""
    import monta
    out = {"layer_comm_s": {}, "layer_comm_samples_s": layers, "predicted_layer_s": {},
           "layer_error_ratio": {}}
    for name, samples in layers.items():
        measured = statistics.median(samples)
        out["layer_comm_s"][name] = measured
        cand = planned if name == "planned" else (
            planned.candidate(name) if name in monta.STRATEGIES else None)
        if cand is None or not cand.predicted_forward_seconds_per_layer:
            continue
        predicted = (cand.predicted_forward_seconds_per_layer +
                     cand.predicted_backward_seconds_per_layer)
        out["predicted_layer_s"][name] = predicted
        out["layer_error_ratio"][name] = predicted / measured - 1
    err = out["layer_error_ratio"].get("planned")
    out["bar_layer_within_15pct"] = err is not None and abs(err) <= 0.15
    return out


def summarize(answer, steps, ops, layers, dispatch_bytes, args):
    planned = answer["plan"]
    in_step = steps.pop("alltoall_in_step")
    med = {k: statistics.median(v) for k, v in steps.items()}
    op = {k: statistics.median(v) for k, v in ops.items()}
    per_round = [f / p for p, f in zip(steps["planned"], steps["flat"])]
    row = {
        "mib_per_rank": dispatch_bytes / 2**20, "capacity": answer["capacity"],
        "tokens_per_rank": answer["job"]["sequence_length"],
        "planner_dispatch_bytes": answer["planned_dispatch_bytes"],
        "strategy": planned.strategy, "K": planned.num_chunks,
        "expert_layout": planned.expert_layout,
        "evidence": answer["evidence"], "calibration": answer["calibration"],
        "verified_task": answer["verified_task"],
        "extrapolated_curves": [c["used_as"] for c in answer["curves"] if c["extrapolated"]],
        "step_s": {"planned": med["planned"], "flat": med["flat"]},
        "step_samples_s": steps,
        # The slowest rank's time inside the four AllToAlls of a step (dispatch, combine and
        # their gradients), median over the steps: the rest of a step is compute and waits.
        "alltoall_in_step_s": {k: statistics.median(v) for k, v in in_step.items()},
        "alltoall_in_step_samples_s": in_step,
        "step_speedup": med["flat"] / med["planned"],
        "step_speedup_per_round_median": statistics.median(per_round),
        "planner_candidates": candidates_json(planned),
        "dispatch_op_s": op, "dispatch_op_samples_s": ops,
        # predicted / measured - 1, as montactl verify's error_ratio.
        "predicted_dispatch_op_s": {}, "dispatch_op_error_ratio": {},
    }
    sweep = {f"tp_dedup_pipelined(K={k})": v for k, v in answer["k_sweep"].items()}
    for name in ops:
        if name in sweep:
            row["predicted_dispatch_op_s"][name] = sweep[name]
            row["dispatch_op_error_ratio"][name] = sweep[name] / op[name] - 1
            continue
        if name != "planned" and name not in monta_strategies():
            continue  # uncalibrated_choice: scored by uncalibrated_errors below
        cand = planned if name == "planned" else planned.candidate(name)
        if cand is None or not cand.predicted_forward_seconds_per_layer:
            continue
        predicted = cand.predicted_forward_seconds_per_layer * op_share(args.expert_layout)
        row["predicted_dispatch_op_s"][name] = predicted
        row["dispatch_op_error_ratio"][name] = predicted / op[name] - 1
    if answer["uncalibrated"]:
        row["uncalibrated"] = uncalibrated_errors(answer, op, args.expert_layout)
    row.update(layer_rows(planned, layers))
    row["bar_step_speedup_1_3x"] = row["step_speedup"] >= 1.3
    err = row["dispatch_op_error_ratio"].get("planned")
    row["bar_prediction_within_20pct"] = err is not None and abs(err) <= 0.20
    return row


def uncalibrated_errors(answer, op, layout):
    """The planner's answer before calibration against the same measurements: its choice,
    and predicted / measured - 1 for every candidate whose (strategy, K) was timed."""
    import monta
    planned = answer["plan"]
    ran = {}
    for name, plan in op_plans(planned, answer["uncalibrated"], answer["k_sweep"]).items():
        ran[(plan.strategy, plan.num_chunks)] = op[name]
    out = {"strategy": answer["uncalibrated"][0]["strategy"],
           "K": answer["uncalibrated"][0]["K"], "predicted_dispatch_op_s": {},
           "dispatch_op_error_ratio": {}}
    for c in answer["uncalibrated"]:
        key = (c["strategy"], c["K"] if c["strategy"] in monta.plan.CHUNKED else 1)
        if key not in ran or not c["forward_s_per_layer"]:
            continue
        label = f"{key[0]}(K={key[1]})"
        predicted = c["forward_s_per_layer"] * op_share(layout)
        out["predicted_dispatch_op_s"][label] = predicted
        out["dispatch_op_error_ratio"][label] = predicted / ran[key] - 1
    return out


def monta_strategies():
    import monta
    return monta.STRATEGIES


def print_row(row, answer):
    p = answer["plan"]
    log(f"\n== dispatch {row['mib_per_rank']:.1f} MiB per rank (C={row['capacity']}, "
        f"S={row['tokens_per_rank']} tokens/rank) ==")
    log(f"planned: {p.strategy} K={p.num_chunks}, experts {p.expert_layout} "
        f"(evidence {row['evidence'] or '-'}; "
        f"extrapolated curves: {', '.join(row['extrapolated_curves']) or 'none'})")
    cal = row["calibration"]
    log("calibration: " + (f"per-chunk overhead {cal['per_chunk_overhead_s'] * 1e3:.2f} ms, "
                           f"contention {cal['contention_factor']:.2f}, network scale "
                           f"{cal['network_scale_ratio']:.2f}, local scale "
                           f"{cal['local_scale_ratio']:.2f}, latency scale "
                           f"{cal['latency_scale_ratio']:.2f} (task {cal['task_id']})"
                           if cal else "none"))
    for note in answer["notes"]:
        log(f"  planner note: {note}")
    s = row["step_s"]
    log(f"step (fwd+bwd+SGD, median of {len(row['step_samples_s']['planned'])}): planned "
        f"{s['planned'] * 1e3:.0f} ms, flat {s['flat'] * 1e3:.0f} ms, flat/planned "
        f"{row['step_speedup']:.2f}x (per-round median {row['step_speedup_per_round_median']:.2f}x)"
        f"  [bar >= 1.3x: {'PASS' if row['bar_step_speedup_1_3x'] else 'FAIL'}]")
    a = row["alltoall_in_step_s"]
    log(f"  of which inside the 4 AllToAlls (slowest rank): planned {a['planned'] * 1e3:.0f} ms, "
        f"flat {a['flat'] * 1e3:.0f} ms")
    u = row.get("uncalibrated")
    if u:
        log(f"before calibration the planner chose {u['strategy']} K={u['K']}; its predictions "
            "then: " + ", ".join(f"{k} {v * 1e3:.0f} ms ({u['dispatch_op_error_ratio'][k]:+.0%})"
                                 for k, v in u["predicted_dispatch_op_s"].items()))
    what = "dispatch AllToAll" if row["expert_layout"] == "tensor_parallel" else \
        "dispatch+combine"
    compared(what, p, row["dispatch_op_s"], row["predicted_dispatch_op_s"],
             row["dispatch_op_error_ratio"], 20, row["bar_prediction_within_20pct"])
    rounds = len(row["layer_comm_samples_s"].get("planned", []))
    log(f"one layer's communication in isolation (dispatch + combine, forward + backward, "
        f"slowest rank, median of {rounds} rounds) against total_seconds_per_layer:")
    compared("  layer", p, row["layer_comm_s"], row["predicted_layer_s"],
             row["layer_error_ratio"], 15, row["bar_layer_within_15pct"])


def compared(what, p, measured, predicted, errors, bar_pct, bar_met):
    """One line per timed plan: measured, the planner's prediction and the error; the
    planned one with its bar."""
    for name, seconds in measured.items():
        pred = predicted.get(name)
        text = (f"predicted {pred * 1e3:.0f} ms, error {errors[name]:+.0%}"
                if pred else "no prediction")
        bar = ""
        if name == "planned":
            bar = f"  [bar within {bar_pct}%: {'PASS' if bar_met else 'FAIL'}]"
        k = f" K={p.candidate(name).num_chunks}" if name not in ("planned", "flat") and \
            name in monta_strategies() and p.candidate(name) else ""
        log(f"{what} {name + k:>12}: measured {seconds * 1e3:.0f} ms, {text}{bar}")


def report(rows, args, load_start):
    log(f"\nhost load average (1 min) at start {load_start}, at end {loadavg()}; "
        f"{os.cpu_count()} CPUs: the numbers above are as noisy as that")
    log("\nMOE_STEP_BENCH_JSON " + json.dumps({
        "bench": "moe_step", "rate": args.rate, "nodes": args.nodes.split(","),
        "ranks_per_node": args.ranks_per_node, "tp": args.tp, "ep": args.ep,
        "expert_layout": args.expert_layout,
        "hidden": args.hidden, "experts": args.experts, "top_k": args.top_k,
        "capacity_factor": args.capacity_factor, "ffn": args.ffn,
        "dispatcher": args.dispatcher, "steps": args.steps, "op_iters": args.op_iters,
        "layer_rounds": args.layer_rounds,
        "warmup": args.warmup, "load_average_start": load_start,
        "load_average_end": loadavg(), "cpus": os.cpu_count(), "sizes": rows}))


def rank_main(args):
    import torch
    import torch.distributed as dist
    import monta
    torch.set_num_threads(1)
    load_start = loadavg()
    timeout = datetime.timedelta(seconds=args.timeout_s)
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    groups = monta.MoeGroups.build(args.tp, args.ep, args.ranks_per_node, timeout=timeout,
                                   expert_layout=args.expert_layout)
    sizes = [float(m) for m in args.mib.split(",")]
    box = [None]
    if rank == 0:
        try:
            box[0] = ask_planner(args, sizes)
        except (monta.PlanError, SystemExit) as e:  # every rank stops, none waits
            box[0] = f"moe_step_bench: asking the planner at {args.planner}: {e}"
    dist.broadcast_object_list(box, src=0)
    if isinstance(box[0], str):
        sys.exit(box[0])
    rows = []
    for answer in box[0]:
        steps, ops, layers, dispatch_bytes = bench_size(answer, groups, args)
        if rank == 0:
            row = summarize(answer, steps, ops, layers, dispatch_bytes, args)
            print_row(row, answer)
            rows.append(row)
    if rank == 0:
        report(rows, args, load_start)
    dist.barrier()
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--role", choices=["prepare", "rank"], required=True)
    parser.add_argument("--planner", default="10.213.0.1:7400")
    parser.add_argument("--nodes", default="node-0,node-1", help="registered node names")
    parser.add_argument("--rate", default="", help="the links' rate, for the record")
    parser.add_argument("--ranks_per_node", type=int, default=2)
    parser.add_argument("--world", type=int, default=4)
    parser.add_argument("--tp", type=int, default=2)
    parser.add_argument("--ep", type=int, default=2)
    parser.add_argument("--mib", default="16,64", help="dispatch MiB per rank, comma list")
    parser.add_argument("--expert_layout", choices=["tensor_parallel", "not_tensor_parallel"],
                        default="tensor_parallel",
                        help="the job's experts_tensor_parallel, which the planner prices and "
                             "the layer runs (docs/MODEL.md section 4)")
    parser.add_argument("--hidden", type=int, default=8192)
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--top_k", type=int, default=2)
    parser.add_argument("--capacity_factor", type=float, default=1.0)
    parser.add_argument("--ffn", type=int, default=4, help="experts' FFN width")
    parser.add_argument("--dispatcher", choices=["index", "einsum"], default="index",
                        help="how the layer builds the [E, C, M] buffer (examples/moe_layer.py)")
    parser.add_argument("--steps", type=int, default=5, help="timed rounds per strategy")
    parser.add_argument("--op_iters", type=int, default=5, help="timed dispatch ops per strategy")
    parser.add_argument("--layer_rounds", type=int, default=7,
                        help="timed rounds of one layer's communication alone per strategy")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--timeout_s", type=float, default=600)
    parser.add_argument("--bench_max_bytes", type=int, default=64 << 20)
    parser.add_argument("--bench_timeout_s", type=float, default=300)
    parser.add_argument("--k_sweep", default="",
                        help="also time the pipelined dispatch at these K (comma list) "
                             "against the planner's fixed-K prediction, e.g. 1,4,16,64")
    parser.add_argument("--prepare_out", default="",
                        help="file where prepare leaves the planner's answers before "
                             "calibration, for rank 0 to compare")
    parser.add_argument("--calibrate_mib", default="4,32",
                        help="prepare: sizes (MiB per rank) to run the Verify RPC on first, "
                             "so the planner answers with its calibration for these nodes; "
                             "empty = none")
    args = parser.parse_args()
    if args.role == "prepare":
        prepare(args)
    else:
        rank_main(args)


if __name__ == "__main__":
    main()
