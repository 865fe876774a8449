#!/usr/bin/env python3
"""Replays a pipeline steady-state rule on node links on a finished perf/verify_bench.sh run,
without rerunning it (issue 18; the node-link twin of docs/MODEL.md §12's rule for a shared
uplink, perf/fabric_pipe_replay.py).

  perf/layer_pipe_replay.py DIR [--line_rate=B/s | --rule=curve [--capped=0] [--drop_kib=N]
      [--alpha=small|rising|envelope|least] [--alpha_scale=S] [--bound=F]
      | --rule=file --curve_file=BENCH.txt | --rule=file --scale=KIB:F,KIB:F,...
      | --rule=chunk [--rate_from=DIR2] [--latency_from=DIR2] [--chunk_floor_from=DIR2]
        [--bound_floor_from=DIR2]]

DIR holds verify_bench.sh's files (<config>-<layout>-<calibrate|score>-<N>mib.json,
<config>-bench.txt, job-2n-<N>mib-<layout>.yaml). Per scored run: every candidate's
measured, calibrated and uncalibrated seconds before and after the rule, then per
configuration and layout (over its scored sizes, as perf/verify_summary.py scores them)
median and max |error| and the largest regret, before and after, against issue 18's bars.

The rule replayed: a tp_dedup_pipelined op's chunks after the first move their inter-node
bytes at the slowest node's NIC line rate per rank (NIC / ranks per node) instead of the
inter-node curve's rate at the chunk's size, and each pays the curve's launch floor instead
of its launch latency; never slower than the chunk priced alone, and only where the curve
sits below the line rate. While the network bounds the steady-state interval before and
after (docs/MODEL.md §4), the layer's prediction becomes exactly

  min(before, before - ops * (K - 1) * (s * (net(x) - net_line(x)) - (max(l, f) - l)))

with ops the pipelined ops per layer (4 for tensor-parallel experts, 2 for whole ones),
x = D / (t K) the chunk per rank, net(x) its inter-node bytes over the curve's link rate
(BandwidthCurve::LinkRateAt, replicated below from the bench's curve), net_line(x) the same
bytes at the line rate, s the calibration's network scale (1 uncalibrated), l the launch
latency and f the launch floor. The line rate: --line_rate (bytes per second per node),
else the configuration's shaped rate (2x400mbit: 50 MB/s). The emulated cluster's agents
register no NIC (the agent reads InfiniBand ports; a network namespace has none), so on
that cluster the model's rule never applies: the replay asks what it would do if the
shaped rate were registered.

--rule=curve replays issue 18's chunk-pricing candidates instead (parse_rule): each chunk's
inter-node AllToAll (tp_dedup's one, tp_dedup_pipelined's K; flat is left as priced) from a
variant of the curve, the difference to the model's price times ops and chunks (exact while
the network bounds the op; the calibration's network and latency scales applied to both
prices, not refitted), and a chunk bound from the curve's efficiency at the chunk's size (a
K it bounds is left out of the scored run, as verify's default sweep would). Every row prints that
efficiency (the uncapped link rate at the chunk's size over the rate at the largest sample).
The null rule (--rule=curve alone) reproduces every prediction; its "after" regret is the
medians' pick, the fair baseline for the calibrated regret (the "before" one is verify's,
from paired iterations).

--rule=file replays another measurement of the same inter-node curve (issue 18: the sweep's
statistic): every AllToAll of every candidate's layer (MODEL.md §4's table: flat's four, the
pipelined ops' K chunks each, a whole-experts layer's two unchunked ones) priced from the
curve in --curve_file (montactl bench's table, e.g. a steady-state sweep's) or from the run's
own curve with each swept sample of KIB KiB divided by F (--scale=1024:1.06,4096:1.03),
the difference to the model's price added (exact while the network bounds each op; the
calibration's scales applied to both prices, not refitted). The launch latency moves with
the curve's.

--rule=chunk replays issue 18's prices of a layer's short chunk from the sweep's two statistics
(each iteration timed alone, the slowest rank's median; or a warm back-to-back chain): every
AllToAll repriced as --rule=file does from a curve whose link rate comes from --rate_from's curve
(DIR2/<config>-bench.txt, another run of the same configuration) and whose launch latency and
launch floor come from --latency_from's (each the run's own curve when not given);
--chunk_floor_from: every chunk of a pipelined K >= 2 pays at least that curve's launch floor
as its launch (docs/MODEL.md §2); --bound_floor_from: a pipelined K whose chunk's
AllToAll (as priced after the rule) takes under 2.75x that curve's launch floor (plus the
calibrated per-chunk overhead in the calibrated column, MODEL.md §5) is not run. The other
statistic of a run comes from that other run (the agents recorded one before rule (e) was
built; since, they record both and the model prices by rule (e), docs/MODEL.md §4: this replay
still reads montactl bench's TIME column, the median, as the model's curve). --both_from=DIR2
--chain=own|other: the sweep recording both statistics, the run's own curve and DIR2's (which
of them is the chain): link rates from the chain, the launch latency the smaller of the two
curves', the chunk bound's floor the larger of their launch floors (--bound_from=median: the
median's; --multiple=M: the bound's multiple, 2.75 as the model's). A K the recorded run's
own bound left out cannot be added back.

Regret: the measured candidate each prediction would pick (calibrated: the fastest
predicted, the smallest pipelined K within 0.5% of the fastest K, docs/MODEL.md §5;
uncalibrated: the fastest predicted, verify's uncalibrated_chosen) over the fastest
measured, from the medians (the replies carry no iterations). The before column prints the
regret as perf/verify_summary.py scores it (verify's, paired where the reply has it) and, in
[..], the medians' pick of the before predictions: a rule's after regret is compared with
the latter, like for like. A pick that runs the same schedule as the fastest has none
(perf/verify_summary.py). The planner searches every K up to its
bound; the replay can only pick among the K the run measured. A replay, not the model.
"""
import collections
import glob
import math
import os
import re
import statistics
import sys

from fabric_pipe_replay import plan_shape, score
from verify_summary import NAME, load, schedule_of, scores, uncalibrated_regret

PER_PEER_LATENCY_SECONDS = 10e-6  # the cpu-gloo profile's (server/model/hardware_profile.cc)
STALL_FACTOR = 1.5  # server/model/bandwidth_curve.cc kStallFactor
RATES = {"mbit": 1e6 / 8, "gbit": 1e9 / 8}
TIME_UNITS = {"us": 1e6, "ms": 1e3, "s": 1.0}  # montactl bench's TIME column


class Curve:
    """The inter-node AllToAll curve as server/model/bandwidth_curve.cc forms it (stall=None:
    every swept sample kept; capped=False: LinkRateAt without its top-rate cap)."""

    def __init__(self, samples, nranks, ranks_per_node, stall=STALL_FACTOR, capped=True,
                 small_alpha=False):
        self.nranks = nranks
        self.share = (nranks - ranks_per_node) / nranks
        (x1, t1), (x2, t2) = samples[-2], samples[-1]
        beta = (t2 - t1) / (x2 - x1)
        alpha = max(0.0, statistics.median(t - beta * x for x, t in samples))
        kept = [s for k, s in enumerate(samples) if stall is None
                or s[1] <= stall * (alpha + beta * s[0]) or k + 1 == len(samples)]
        self.swept, self.ranks_per_node, self.capped = samples, ranks_per_node, capped
        self.small_alpha = small_alpha
        self.samples = kept
        self.alpha = min(alpha, kept[0][1])
        if small_alpha == "envelope":  # the line's lower envelope: a stall only adds time
            self.alpha = max(0.0, min(t - beta * x for x, t in samples))
        elif small_alpha:  # the latency of the line through the two smallest kept samples
            pair = kept
            if small_alpha in ("rising", "least"):  # ... that are not slower than the next one
                pair = kept[next((i for i in range(len(kept) - 1)
                                  if kept[i][1] < kept[i + 1][1]), 0):]
            (xa, ta), (xb, tb) = pair[0], pair[1]
            robust = self.alpha
            self.alpha = min(max(0.0, ta - xa * (tb - ta) / (xb - xa)), ta)
            if small_alpha == "least":  # never above the robust line's
                self.alpha = min(self.alpha, robust)
        x0, t0 = samples[0]
        self.floor = max(self.alpha, t0 - beta * x0)

    def time(self, x):
        s = self.samples
        if x <= s[0][0] or x >= s[-1][0]:
            (xa, ta), (xb, tb) = (s[0], s[1]) if x <= s[0][0] else (s[-2], s[-1])
            slope = (tb - ta) / (xb - xa)
            return max(ta + slope * (x - xa), (ta if x <= s[0][0] else tb) * x /
                       (xa if x <= s[0][0] else xb))
        for (xa, ta), (xb, tb) in zip(s, s[1:]):
            if xa <= x <= xb:
                w = math.log(x / xa) / math.log(xb / xa)
                return math.exp(math.log(ta) + w * (math.log(tb) - math.log(ta)))
        raise ValueError(x)

    def link_rate(self, x):
        t = self.time(x)
        busy = max(t - self.alpha, 0.01 * t)
        xl, tl = self.samples[-1]
        cap = self.share * xl / max(tl - self.alpha, 0.01 * tl)
        return min(self.share * x / busy, cap) if self.capped else self.share * x / busy

    def top_rate(self):
        """The link rate at the largest swept size (LinkRateAt's cap)."""
        return self.link_rate(self.samples[-1][0])

    def variant(self, **kw):
        return Curve(self.swept, self.nranks, self.ranks_per_node, **kw)


class Hybrid:
    """A curve whose link rate is `rate`'s and whose launch latency and floor are `latency`'s
    (--rule=chunk)."""

    def __init__(self, rate, latency):
        self.nranks, self.rate = rate.nranks, rate
        self.alpha, self.floor = latency.alpha, latency.floor

    def link_rate(self, x):
        return self.rate.link_rate(x)


def read_curve(path):
    """The bench's '4 ranks on 2 node(s)' AllToAll (montactl bench's table)."""
    units = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
    samples, shape = [], None
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*alltoall, (\d+) ranks on (\d+) node", line)
            if m:
                shape = (int(m.group(1)), int(m.group(1)) // int(m.group(2)))
            m = re.match(r"(\d+) (KiB|MiB|GiB)\s+([0-9.]+) (us|ms|s)\b", line)
            if m and shape:
                samples.append((int(m.group(1)) * units[m.group(2)],
                                float(m.group(3)) / TIME_UNITS[m.group(4)]))
    return Curve(samples, *shape)


def credit_seconds(curve, x, e, ns, line_per_rank, scale):
    """What one later chunk of x bytes per rank saves under the rule (>= 0)."""
    inter = x * (e - ns) / e
    if inter <= 0:
        return 0.0
    rate = curve.link_rate(x * curve.nranks / e)
    if rate >= line_per_rank:
        return 0.0
    launch = launch_seconds(curve, e)
    saved = scale * (inter / rate - inter / line_per_rank)
    return max(0.0, saved - (max(launch, curve.floor) - launch))


def chunk_shape(kind, k, d, t):
    """(chunks, bytes per rank per chunk) of a candidate's AllToAll; None for flat (its
    message is not a chunk: the curve rules leave it as priced)."""
    if kind == "tp_dedup_pipelined" or kind == "tp_dedup":
        return k, d / (t * k)
    return None


def layer_alltoalls(kind, k, d, t, layout):
    """(count, bytes per rank) of the AllToAlls one layer of a candidate runs (docs/MODEL.md
    §4's table; K chunks of a pipelined op count K); None for a kind not modelled here."""
    if kind == "flat":
        return [(4, d)] if layout == "tp" else [(4, d / t)]
    if kind in ("tp_dedup", "tp_dedup_pipelined"):
        k = k if kind == "tp_dedup_pipelined" else 1
        gathering = [(4 if layout == "tp" else 2) * k, d / (t * k)]
        return [tuple(gathering)] + ([] if layout == "tp" else [(2, d / t)])
    return None


def curve_delta_seconds(curve, new, x, e, ns, scale, alpha_scale, latency_scale=1.0):
    """One chunk's price under the curve `new` (and its launch latency times alpha_scale)
    minus under the model's curve, while the network bounds it; `scale` and `latency_scale`
    the calibration's network and latency scales (1 uncalibrated), which the model applies
    to both curves' prices."""
    inter = x * (e - ns) / e
    if inter <= 0:
        return 0.0
    y = x * curve.nranks / e
    return (scale * inter * (1 / new.link_rate(y) - 1 / curve.link_rate(y))
            + latency_scale * (alpha_scale * launch_seconds(new, e) - launch_seconds(curve, e)))


def launch_seconds(curve, e):
    """AllToAllLatencySeconds for a group of e (the cpu-gloo profile's per-peer latency)."""
    return max(curve.alpha + PER_PEER_LATENCY_SECONDS * (e - curve.nranks), 0.25 * curve.alpha)


def chunk_efficiency(curve, x, e):
    """The uncapped curve's link rate at the chunk's size over its rate at the largest size."""
    free = curve.variant(capped=False)
    return free.link_rate(x * curve.nranks / e) / free.top_rate()


def replay_run(reply, curve, t, line_rate, rule, layout=None):
    """Rows (kind, K, calibrated before, after, measured, uncalibrated before, after); with
    rule["bound"] the pipelined K whose chunk's efficiency is below it are not run (None
    after)."""
    plan = reply["plan"]
    d, g, e, ns, ops = plan_shape(plan)
    calibration = plan.get("evidence", {}).get("calibration", {})
    scale = float(calibration.get("network_scale_ratio", 1) or 1)
    latency_scale = float(calibration.get("latency_scale_ratio", 1) or 1)
    rows = []
    for c in reply["candidates"]:
        if c["measured_seconds"] <= 0:
            continue
        kind, k = c["kind"].lower(), int(c["chunks_effective"])
        cal, unc = c["predicted_seconds"], c["uncalibrated_seconds"]
        cal_after, unc_after = cal, unc
        shape = chunk_shape(kind, k, d, t)
        if rule["name"] == "pipe" and kind == "tp_dedup_pipelined" and k > 1:
            x = d / (t * k)
            cal_after -= ops * (k - 1) * credit_seconds(curve, x, e, ns, line_rate / g, scale)
            unc_after -= ops * (k - 1) * credit_seconds(curve, x, e, ns, line_rate / g, 1)
        elif rule["name"] == "curve" and shape:
            n, x = shape
            new = rule["curve"](curve)
            cal_after += ops * n * curve_delta_seconds(curve, new, x, e, ns, scale,
                                                       rule["alpha_scale"], latency_scale)
            unc_after += ops * n * curve_delta_seconds(curve, new, x, e, ns, 1,
                                                       rule["alpha_scale"])
        elif rule["name"] == "file" and layer_alltoalls(kind, k, d, t, layout):
            new = rule["curve"](curve)
            for n, x in layer_alltoalls(kind, k, d, t, layout):
                cal_after += n * curve_delta_seconds(curve, new, x, e, ns, scale, 1,
                                                     latency_scale)
                unc_after += n * curve_delta_seconds(curve, new, x, e, ns, 1, 1)
        elif rule["name"] == "chunk" and layer_alltoalls(kind, k, d, t, layout):
            cal_after, unc_after = chunk_rule(rule, curve, (kind, k, d, t, layout),
                                              (e, ns), calibration, cal, unc)
        if (rule.get("bound") and kind == "tp_dedup_pipelined" and k > 1
                and chunk_efficiency(curve, d / (t * k), e) < rule["bound"]):
            cal_after = unc_after = None
        rows.append((kind, k, cal, cal_after, c["measured_seconds"], unc, unc_after))
    return rows


def chunk_rule(rule, curve, candidate, group, calibration, cal, unc):
    """(calibrated, uncalibrated) prediction of one candidate under --rule=chunk; None for a
    K the bound leaves out."""
    kind, k, d, t, layout = candidate
    e, ns = group
    scale = float(calibration.get("network_scale_ratio", 1) or 1)
    latency_scale = float(calibration.get("latency_scale_ratio", 1) or 1)
    overhead = float(calibration.get("per_chunk_overhead_seconds", 0) or 0)
    new = Hybrid(rule["rate"](curve), rule["latency"](curve))
    out = []
    for s, ls, fixed, before in ((scale, latency_scale, overhead, cal), (1, 1, 0, unc)):
        after = before
        for n, x in layer_alltoalls(kind, k, d, t, layout):
            after += n * curve_delta_seconds(curve, new, x, e, ns, s, 1, ls)
        if kind == "tp_dedup_pipelined" and k > 1:
            n, x = layer_alltoalls(kind, k, d, t, layout)[0]
            launch = ls * launch_seconds(new, e)
            floor = rule["chunk_floor"](curve)
            if floor is not None:
                after += n * max(0.0, ls * floor - launch)
            bound = rule["bound_floor"](curve)
            chunk = launch + s * (x * (e - ns) / e) / new.link_rate(x * curve.nranks / e)
            if bound is not None and chunk < rule["multiple"] * (bound + fixed):
                after = None
        out.append(after)
    return out


def parse_rule(flags):
    """--rule=pipe (the node-link steady state, above) or --rule=curve: every chunk's
    inter-node AllToAll from the curve variant --capped=0|1 (0: the log-log interpolation at
    the chunk's own size without LinkRateAt's top-rate cap), --drop_kib=N (without the swept
    sample of N KiB), --alpha=small (the curve's latency from the line through its two smallest
    kept samples, not the robust line's; rising: skip a smallest sample slower than its next;
    envelope: max(0, the smallest t - beta x over the swept samples), beta the robust line's;
    least: the smaller of rising's and the robust line's),
    --alpha_scale=S (launch latency times S); --bound=F with either: no
    pipelined K whose chunk moves below F of the curve's top link rate."""
    name = flags.get("rule", "pipe")
    capped = flags.get("capped", "1") != "0"
    drop = float(flags.get("drop_kib", 0)) * 1024

    def curve_of(c):
        swept = [p for p in c.swept if p[0] != drop]
        return Curve(swept, c.nranks, c.ranks_per_node, capped=capped,
                     small_alpha={"small": True, "rising": "rising", "envelope": "envelope",
                                  "least": "least"}
                     .get(flags.get("alpha"), False))

    if name == "chunk":
        def other(flag):
            """The configuration's curve in the run directory `flags[flag]`."""
            if flag not in flags:
                return None
            return lambda own: read_curve(os.path.join(flags[flag], f"{own.config}-bench.txt"))

        def floor(flag):
            curve = other(flag)
            return (lambda own: curve(own).floor) if curve else (lambda own: None)

        if "both_from" in flags:  # both statistics: see the module's doc
            two = other("both_from")
            chain = (lambda own: own) if flags.get("chain") == "own" else two
            median = two if flags.get("chain") == "own" else (lambda own: own)

            def least_latency(own):
                c = Hybrid(chain(own), chain(own))
                c.alpha = min(chain(own).alpha, median(own).alpha)
                return c

            return {"name": name, "alpha_scale": 1.0, "bound": 0.0, "rate": chain,
                    "multiple": float(flags.get("multiple", 2.75)),
                    "latency": least_latency, "chunk_floor": lambda own: None,
                    "bound_floor": (lambda own: median(own).floor)
                    if flags.get("bound_from") == "median"
                    else (lambda own: max(chain(own).floor, median(own).floor))}
        return {"name": name, "alpha_scale": 1.0, "bound": 0.0,
                "multiple": float(flags.get("multiple", 2.75)),
                "rate": other("rate_from") or (lambda own: own),
                "latency": other("latency_from") or (lambda own: own),
                "chunk_floor": floor("chunk_floor_from"),
                "bound_floor": floor("bound_floor_from")}
    if name == "file":
        if "curve_file" in flags:
            other = read_curve(flags["curve_file"])
            return {"name": name, "curve": lambda c: other, "alpha_scale": 1.0, "bound": 0.0}
        factor = {float(kib) * 1024: float(f) for kib, f in
                  (item.split(":") for item in flags.get("scale", "").split(",") if item)}

        def scaled(c):
            return Curve([(x, tx / factor.get(x, 1.0)) for x, tx in c.swept], c.nranks,
                         c.ranks_per_node)

        return {"name": name, "curve": scaled, "alpha_scale": 1.0, "bound": 0.0}
    return {"name": name, "curve": curve_of, "alpha_scale": float(flags.get("alpha_scale", 1)),
            "bound": float(flags.get("bound", 0))}


def pick_regret(kind, rows, col, reply):
    """The measured candidate a prediction column picks and its regret from the medians:
    calibrated, the planner's rule (score: the §5 chunk tolerance); uncalibrated, the
    smallest prediction, the earlier row on a tie (verify's uncalibrated_chosen). None when
    the pick runs the fastest's schedule."""
    if kind == "cal":
        _, _, pick, regret = score(rows, col)
    else:
        pick = min(rows, key=lambda r: r[col])
        regret = pick[4] / min(r[4] for r in rows) - 1
    fastest = min(rows, key=lambda r: r[4])
    if schedule_of(reply, {"kind": pick[0].upper(), "chunks_effective": pick[1]}) == \
            schedule_of(reply, {"kind": fastest[0].upper(), "chunks_effective": fastest[1]}):
        regret = 0.0
    return pick, regret


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    flags = dict(a[2:].split("=", 1) for a in argv[1:] if a.startswith("--"))
    if len(args) != 1:
        print(__doc__.strip().splitlines()[4].strip(), file=sys.stderr)
        return 2
    out = args[0]
    rule = parse_rule(flags)
    groups = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in sorted(glob.glob(os.path.join(out, "*-score-*mib.json"))):
        m = NAME.match(os.path.basename(path))
        config, layout, mib = m.group(1), m.group(2), int(m.group(4))
        rate = re.search(r"([0-9.]+)([mg]bit)$", config)
        line_rate = float(flags.get("line_rate", 0)) or float(rate.group(1)) * RATES[rate.group(2)]
        curve = read_curve(os.path.join(out, f"{config}-bench.txt"))
        curve.config = config
        with open(os.path.join(out, f"job-{config.split('x')[0]}n-{mib}mib-{layout}.yaml")) as f:
            t = int(re.search(r"tensor_parallel_size:\s*(\d+)", f.read()).group(1))
        reply = load(path)
        rows = replay_run(reply, curve, t, line_rate, rule, layout)
        d, _, e, _, _ = plan_shape(reply["plan"])
        print(f"== {config} {layout} {mib} MiB: curve alpha {curve.alpha * 1e3:.3f} ms, launch "
              f"floor {curve.floor * 1e3:.3f} ms, line {line_rate / 1e6:.1f} MB/s per node, "
              f"reply's regret {100 * float(reply.get('regret_ratio', 0)):.1f}%")
        print(f"   {'candidate':<24}{'measured':>9}{'cal':>8}{'err':>7}{'after':>8}{'err':>7}"
              f"{'unc':>8}{'err':>7}{'after':>8}{'err':>7}{'chunk eff':>10}")
        for kind, k, cal, cal_a, meas, unc, unc_a in rows:
            eff = chunk_efficiency(curve, d / (t * k), e) if kind != "flat" else None
            print(f"   {kind + ' K=' + str(k):<24}{meas:>9.3f}"
                  + "".join(f"{v:>8.3f}{100 * (v / meas - 1):>+6.1f}%" if v is not None
                            else f"{'not run':>15}" for v in (cal, cal_a, unc, unc_a))
                  + (f"{eff:>10.2f}" if eff is not None else ""))
        g = groups[(config, layout)]
        for kind, col in (("cal", 2), ("unc", 5)):
            run = [r for r in rows if r[col + 1] is not None]
            for label, c, rs in ((f"{kind} before", col, rows), (f"{kind} after", col + 1, run)):
                pick, regret = pick_regret(kind, rs, c, reply)
                # The before regret as perf/verify_summary.py scores it (verify's, paired
                # where the reply has it), and the medians' pick beside it: the after
                # regret is the medians' pick, so the two are compared like for like.
                shown = regret
                if label == "cal before":
                    shown = scores(reply)[2]
                elif label == "unc before":
                    shown = uncalibrated_regret(reply)[0]
                g[label].append((shown, regret, [abs(r[c] / r[4] - 1) for r in rs]))
                print(f"   {label}: takes {pick[0]} K={pick[1]}, regret {100 * shown:.1f}%"
                      + (f" (medians' pick {100 * regret:.1f}%)" if shown != regret else ""))
    print("\nscored runs per configuration and layout: median |error|, max |error|, regret as "
          "the summary scores it [the medians' pick], before and after (bars: calibrated "
          "10% / 25% / 5%, uncalibrated 20% / 25% / 5%); regret compared medians to medians")
    worse = []
    for (config, layout), g in sorted(groups.items()):
        cells = {}
        for label, runs in g.items():
            errs = [e for _, _, es in runs for e in es]
            cells[label] = (statistics.median(errs), max(errs), max(r for r, _, _ in runs),
                            max(r for _, r, _ in runs))
        for kind in ("cal", "unc"):
            b, a = cells[f"{kind} before"], cells[f"{kind} after"]
            print(f"  {config:10s} {layout:7s} {kind}  before "
                  + " ".join(f"{100 * v:5.1f}%" for v in b[:3]) + f" [{100 * b[3]:5.1f}%]"
                  + "   after " + " ".join(f"{100 * v:5.1f}%" for v in a[:3]))
            bars = (0.10 if kind == "cal" else 0.20, 0.25, 0.05)
            for name, vb, va, bar in zip(("median", "max", "regret"), (b[0], b[1], b[3]),
                                         a, bars):
                if va > vb + 5e-4 and va > bar:
                    worse.append(f"{config} {layout} {kind} {name}: "
                                 f"{100 * vb:.1f}% -> {100 * va:.1f}% (bar {100 * bar:.0f}%)")
                elif va > vb + 5e-4:
                    worse.append(f"{config} {layout} {kind} {name}: "
                                 f"{100 * vb:.1f}% -> {100 * va:.1f}% (within the bar)")
    for w in worse:
        print("WORSE:", w)
    print("every row as good or better" if not worse else f"{len(worse)} cell(s) worse")
    return 1 if worse else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
