#!/usr/bin/env python3
"""Scores perf/verify_bench.sh's VerifyReply JSON files against the issue's bars.

  perf/verify_summary.py DIR

Per configuration and size: best measured pipelined vs flat and vs tp_dedup, the
plan's regret, and the prediction errors of the scored (skip_calibration) runs.
Exit status 1 when a bar is missed.
"""
import glob
import json
import os
import re
import statistics
import sys

PIPE, DEDUP, FLAT = ("STRATEGY_KIND_TP_DEDUP_PIPELINED", "STRATEGY_KIND_TP_DEDUP",
                     "STRATEGY_KIND_FLAT")


def load(path):
    with open(path) as f:
        try:
            reply = json.load(f)
        except json.JSONDecodeError:
            return None, []
    cands = reply.get("candidates", [])
    for c in cands:
        c.setdefault("error_ratio", 0.0)
        c["measured_seconds"] = float(c.get("measured_seconds", 0))
    return reply, cands


def best(cands, kind):
    times = [c["measured_seconds"] for c in cands if c.get("kind") == kind]
    return min(times) if times else None


def main(out_dir):
    failures = []
    errors = []
    uncalibrated = []
    print("config        run        size    flat ms  dedup ms  best-pipe ms (K)  "
          "pipe/flat  pipe/dedup  chosen (K)             regret  med|err|  max|err|")
    for path in sorted(glob.glob(os.path.join(out_dir, "*mib.json")),
                       key=lambda p: (p.split("-")[0], int(re.search(r"(\d+)mib", p).group(1)))):
        m = re.match(r"(\w+)-(calibrate|score)-(\d+)mib\.json", os.path.basename(path))
        if not m:
            continue
        config, role, mib = m.group(1), m.group(2), int(m.group(3))
        reply, cands = load(path)
        if reply is None:
            print(f"{config:13s} {role:10s} {mib:3d} MiB  (no reply: the verify run failed)")
            failures.append(f"{config} {role} {mib} MiB: no reply")
            continue
        flat, dedup, pipe = best(cands, FLAT), best(cands, DEDUP), best(cands, PIPE)
        pipe_k = next((c.get("chunks_requested") for c in cands
                       if c.get("kind") == PIPE and c["measured_seconds"] == pipe), None)
        chosen = next((c for c in cands if c.get("chosen")), {})
        regret = float(reply.get("regret_ratio", 0))
        errs = [abs(float(c["error_ratio"])) for c in cands]
        vs_flat = flat / pipe if flat and pipe else 0
        vs_dedup = dedup / pipe if dedup and pipe else 0
        print(f"{config:13s} {role:10s} {mib:3d} MiB {1e3 * (flat or 0):9.1f} "
              f"{1e3 * (dedup or 0):9.1f} {1e3 * (pipe or 0):10.1f} ({pipe_k})"
              f"{vs_flat:10.2f}x {vs_dedup:10.2f}x  "
              f"{chosen.get('kind', '?').replace('STRATEGY_KIND_', '').lower():18s}"
              f"({chosen.get('chunks_requested', 1)}) {100 * regret:7.1f}% "
              f"{100 * statistics.median(errs):8.1f}% {100 * max(errs):8.1f}%")
        if role != "score":
            continue
        errors += errs if mib >= 4 else []
        uncalibrated += [abs(float(c.get("uncalibrated_seconds", 0)) / c["measured_seconds"] - 1)
                         for c in cands if float(c.get("uncalibrated_seconds", 0)) > 0]
        if regret > 0.10:
            failures.append(f"{config} {mib} MiB: regret {100 * regret:.1f}% > 10%")
        if config.startswith("2x") and mib in (16, 64) and vs_flat < 1.8:
            failures.append(f"{config} {mib} MiB: pipelined/flat {vs_flat:.2f}x < 1.8x")
        if config.startswith("2x") and mib == 64 and vs_dedup < 1.1:
            failures.append(f"{config} {mib} MiB: pipelined/tp_dedup {vs_dedup:.2f}x < 1.1x")
    if errors:
        med, worst = statistics.median(errors), max(errors)
        print(f"\nscored predictions (calibrated on other sizes): {len(errors)} candidates, "
              f"median |error| {100 * med:.1f}% (bar 15%), max {100 * worst:.1f}% (bar 35%)")
        if uncalibrated:
            print(f"the same candidates predicted without calibration: median |error| "
                  f"{100 * statistics.median(uncalibrated):.1f}%, max {100 * max(uncalibrated):.1f}%")
        if med > 0.15:
            failures.append(f"median |error| {100 * med:.1f}% > 15%")
        if worst > 0.35:
            failures.append(f"max |error| {100 * worst:.1f}% > 35%")
    for f in failures:
        print("MISSED:", f)
    print("all bars met" if not failures else f"{len(failures)} bar(s) missed")
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1]))
