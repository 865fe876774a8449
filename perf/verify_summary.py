#!/usr/bin/env python3
"""Scores perf/verify_bench.sh's VerifyReply JSON files against issue 18's bars.

  perf/verify_summary.py DIR

Per configuration, expert layout and size: the scope run, best measured per strategy, the
plan's regret as verify reports it (from paired iterations: the agents time the candidates
round robin, docs/MODEL.md §11; and whether it is inside the pairs' noise), the unpaired one
beside it (measured(chosen) / measured(fastest) - 1, from the medians), and the |error| of every
candidate's prediction: calibrated on other sizes (the scored runs ran with
--skip_calibration after the calibrating ones) and uncalibrated (the same runs'
uncalibrated_seconds; the uncalibrated plan's regret is the reply's
uncalibrated_regret_ratio, the candidate with the smallest uncalibrated prediction against the
fastest from paired iterations as verify estimates the plan's, or, for a reply from before the
field (no candidate is uncalibrated_chosen), the ratio of the two medians). A pick that runs the
same schedule as the fastest has no regret (verify scores it so since issue 18's one schedule,
one candidate: tp_dedup_pipelined at K = 1 is tp_dedup, and in a layer whose experts are not
tensor-parallel tp_dedup is flat; server/verify/score.h SameSchedule); older replies that ran
both are scored the same way, and a kind run as another shows as "=flat". Then per
configuration and layout, over its scored sizes: median and max |error| and the largest
regret, both ways; the bars score verify's (paired) regret.

Bars (issue 18): calibrated median |error| <= 10%, max <= 25%, regret <= 5%; uncalibrated the
same with median <= 20%. Exit status 1 when a bar is missed.
"""
import collections
import glob
import json
import os
import re
import statistics
import sys

KINDS = ("FLAT", "TP_DEDUP", "TP_DEDUP_PIPELINED", "HIERARCHICAL")
NAME = re.compile(r"(\w+)-(tp|not_tp)-(calibrate|score)-(\d+)mib\.json")


def load(path):
    with open(path) as f:
        try:
            reply = json.load(f)
        except json.JSONDecodeError:
            return None
    for c in reply.get("candidates", []):
        for k in ("measured_seconds", "predicted_seconds", "uncalibrated_seconds",
                  "error_ratio", "spread_ratio"):
            c[k] = float(c.get(k, 0))
        c["kind"] = c.get("kind", "").replace("STRATEGY_KIND_", "")
    return reply


def schedule_of(reply, c):
    """(kind, K_eff) of the schedule a candidate runs: common/strategy SameScheduleAs."""
    kind, k = c["kind"], int(c.get("chunks_effective", 1))
    drops = (reply.get("scope") != "VERIFY_SCOPE_OP" and reply.get("plan", {})
             .get("expert_layout") == "EXPERT_LAYOUT_NOT_TENSOR_PARALLEL")
    if kind == "TP_DEDUP_PIPELINED" and k <= 1:
        kind = "TP_DEDUP"
    if kind == "TP_DEDUP" and drops:
        kind = "FLAT"
    return kind, (k if kind == "TP_DEDUP_PIPELINED" else 1)


def fastest(reply):
    cands = [c for c in reply.get("candidates", []) if c["measured_seconds"] > 0]
    return min(cands, key=lambda c: c["measured_seconds"]) if cands else None


def unpaired_regret(reply):
    """measured(chosen) / measured(fastest) - 1, from the candidates' medians."""
    cands = [c for c in reply.get("candidates", []) if c["measured_seconds"] > 0]
    chosen = next((c for c in cands if c.get("chosen")), None)
    if not cands or chosen is None or schedule_of(reply, chosen) == schedule_of(
            reply, fastest(reply)):
        return 0.0
    return chosen["measured_seconds"] / min(c["measured_seconds"] for c in cands) - 1


def scores(reply):
    """(calibrated errors, uncalibrated errors, regret, uncalibrated regret)."""
    cands = [c for c in reply.get("candidates", []) if c["measured_seconds"] > 0]
    errs = [abs(c["error_ratio"]) for c in cands]
    unc = [abs(c["uncalibrated_seconds"] / c["measured_seconds"] - 1)
           for c in cands if c["uncalibrated_seconds"] > 0]
    chosen = next((c for c in cands if c.get("chosen")), None)
    best = fastest(reply)
    regret = float(reply.get("regret_ratio", 0))
    if chosen and best and schedule_of(reply, chosen) == schedule_of(reply, best):
        regret = 0.0
    return errs, unc, regret, uncalibrated_regret(reply)[0]


def uncalibrated_regret(reply):
    """(regret, inside the noise) of the uncalibrated model's pick: the reply's paired one
    when it names the pick, else (an older reply) from the medians."""
    cands = [c for c in reply.get("candidates", []) if c["measured_seconds"] > 0]
    best = fastest(reply)
    pick = next((c for c in cands if c.get("uncalibrated_chosen")), None)
    if pick is not None:
        if schedule_of(reply, pick) == schedule_of(reply, best):
            return 0.0, False
        return (float(reply.get("uncalibrated_regret_ratio", 0)),
                bool(reply.get("uncalibrated_regret_within_noise")))
    pick = min((c for c in cands if c["uncalibrated_seconds"] > 0),
               key=lambda c: c["uncalibrated_seconds"], default=None)
    if pick is None or schedule_of(reply, pick) == schedule_of(reply, best):
        return 0.0, False
    return pick["measured_seconds"] / best["measured_seconds"] - 1, False


def row(config, layout, role, mib, reply):
    cands = reply.get("candidates", [])
    best = {k: min((c["measured_seconds"] for c in cands if c["kind"] == k), default=0)
            for k in KINDS}
    # A feasible kind verify ran as another (one schedule, one candidate).
    runs_as = {}
    for p in reply.get("plan", {}).get("candidates", []):
        kind = p.get("kind", "").replace("STRATEGY_KIND_", "")
        same = schedule_of(reply, {"kind": kind, "chunks_effective": 1})[0]
        if p.get("feasible") and kind in KINDS and not best[kind] and same != kind:
            runs_as[kind] = "=" + same.lower()
    chosen = next((c for c in cands if c.get("chosen")), {})
    errs, unc, regret, unc_regret = scores(reply)
    spread = max((c["spread_ratio"] for c in cands), default=0)
    noise = " (noise)" if regret > 0 and reply.get("regret_within_noise") else ""
    unc_noise = " (noise)" if unc_regret > 0 and uncalibrated_regret(reply)[1] else ""
    unpaired = unpaired_regret(reply)
    print(f"{config:10s} {layout:7s} {role:9s} {mib:3d} "
          + " ".join(f"{runs_as[k]:>9s}" if k in runs_as else f"{1e3 * best[k]:9.1f}"
                     for k in KINDS)
          + f"  {chosen.get('kind', '?').lower():18s}({chosen.get('chunks_requested', 1):>2})"
          f" {100 * regret:6.1f}%{noise:8s} {100 * unpaired:6.1f}%"
          f" {100 * statistics.median(errs):6.1f}%"
          f" {100 * max(errs):6.1f}%  {100 * statistics.median(unc) if unc else 0:6.1f}%"
          f" {100 * max(unc) if unc else 0:6.1f}% {100 * unc_regret:6.1f}%{unc_noise:8s}"
          f" {100 * spread:6.0f}%  {reply.get('calibration_outcome', '-').replace('CALIBRATION_OUTCOME_', '').lower()}")
    return errs, unc, regret, unc_regret


def main(out_dir):
    failures = []
    groups = collections.defaultdict(lambda: ([], [], [], []))
    print("config     layout  run       MiB   flat ms  dedup ms   pipe ms   hier ms  "
          "chosen (K)              regret         unpaired cal med  cal max  unc med  unc max "
          "unc regret        spread calibration")
    def order(path):
        m = NAME.match(os.path.basename(path))
        return (m.group(1), m.group(2), m.group(3), int(m.group(4))) if m else ("",) * 3 + (0,)

    paths = sorted(glob.glob(os.path.join(out_dir, "*mib.json")), key=order)
    scope = None
    for path in paths:
        m = NAME.match(os.path.basename(path))
        if not m:
            continue
        config, layout, role, mib = m.group(1), m.group(2), m.group(3), int(m.group(4))
        reply = load(path)
        if reply is None or not any(c["measured_seconds"] > 0
                                    for c in reply.get("candidates", [])):
            print(f"{config:10s} {layout:7s} {role:9s} {mib:3d}  (no reply: the verify run failed)")
            failures.append(f"{config} {layout} {role} {mib} MiB: no reply")
            continue
        scope = reply.get("scope", scope)
        errs, unc, regret, unc_regret = row(config, layout, role, mib, reply)
        if role == "score":
            g = groups[(config, layout)]
            g[0].extend(errs)
            g[1].extend(unc)
            g[2].append(regret)
            g[3].append(unc_regret)
    print(f"\nscored runs ({scope or 'no scope'}), per configuration and layout "
          "(calibrated on other sizes | uncalibrated):")
    for (config, layout), (errs, unc, regrets, unc_regrets) in sorted(groups.items()):
        cal = (statistics.median(errs), max(errs), max(regrets))
        raw = (statistics.median(unc) if unc else 0, max(unc) if unc else 0, max(unc_regrets))
        print(f"  {config:10s} {layout:7s} median |error| {100 * cal[0]:5.1f}%  max "
              f"{100 * cal[1]:5.1f}%  regret <= {100 * cal[2]:4.1f}%   |   median "
              f"{100 * raw[0]:5.1f}%  max {100 * raw[1]:5.1f}%  regret <= {100 * raw[2]:4.1f}%")
        for label, (med, worst, regret), med_bar in (("calibrated", cal, 0.10),
                                                     ("uncalibrated", raw, 0.20)):
            if med > med_bar:
                failures.append(f"{config} {layout} {label}: median |error| "
                                f"{100 * med:.1f}% > {100 * med_bar:.0f}%")
            if worst > 0.25:
                failures.append(f"{config} {layout} {label}: max |error| {100 * worst:.1f}% > 25%")
            if regret > 0.05:
                failures.append(f"{config} {layout} {label}: regret {100 * regret:.1f}% > 5%")
    if not groups:
        failures.append("no scored run")
    for f in failures:
        print("MISSED:", f)
    print("all bars met" if not failures else f"{len(failures)} bar(s) missed")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
