#!/usr/bin/env python3
"""Scores perf/fabric_bench.sh's files against issue 19's first Done-when bar.

  perf/fabric_summary.py DIR NODES

Per spine and size: every verified candidate's predicted and measured time, its error,
and the pairs-only plan's prediction and error beside it (matched by strategy and K; "-"
where that plan had no such candidate); the median and largest |error| and the regret
of both. The bar: median |error| <= 15%, none over 30%, regret <= 10% (the levels'
prediction). Warns when a plan cites a measurement of the job's own nodes. Exit status
1 when the bar is missed or a file is missing.
"""
import glob
import json
import os
import re
import statistics
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, json.JSONDecodeError):
        return None


def short(kind):
    return kind.replace("STRATEGY_KIND_", "").lower()


def plan_predictions(plan, scope):
    """(kind, K) -> the plan's prediction of what verify's scope measured: one MoE layer
    (total_seconds_per_layer, the default scope, as verify predicts it: docs/MODEL.md
    §11) or one dispatch op (approximated as half the forward time per layer: the op's
    own time is not on the wire)."""
    out = {}
    for c in (plan or {}).get("candidates", []):
        if c.get("feasible"):
            if scope == "VERIFY_SCOPE_OP":
                seconds = float(c.get("forward_seconds_per_layer", 0)) / 2
            else:
                seconds = c.get("total_seconds_per_layer", 0)
            out[(c.get("kind"), c.get("chunks_requested", 1))] = float(seconds)
    return out


def same_set_citations(plan, nodes):
    cited = []
    for c in (plan or {}).get("evidence", {}).get("curves", []):
        if sorted(c.get("nodes", [])) == nodes:
            cited.append(c.get("task_id", "?"))
    return cited


def score(rows, chosen_measured, best_measured):
    errors = [abs(e) for e in rows if e is not None]
    if not errors:
        return None, None, None
    regret = chosen_measured / best_measured - 1 if chosen_measured and best_measured else None
    return statistics.median(errors), max(errors), regret


def main(out_dir, nodes_csv):
    nodes = sorted(nodes_csv.split(","))
    failures = []
    paths = sorted(glob.glob(os.path.join(out_dir, "*-*mib-verify.json")),
                   key=lambda p: (os.path.basename(p).split("-")[0],
                                  int(re.search(r"(\d+)mib", os.path.basename(p)).group(1))))
    if not paths:
        print(f"no verify results in {out_dir}")
        return 1
    for path in paths:
        base = os.path.basename(path)
        m = re.match(r"(.+)-(\d+)mib-verify\.json", base)
        spine, mib = m.group(1), int(m.group(2))
        verify = load(path)
        pairs = load(os.path.join(out_dir, f"{spine}-{mib}mib-pairs-plan.json"))
        plan = load(os.path.join(out_dir, f"{spine}-{mib}mib-plan.json"))
        print(f"\n== spine {spine}, {mib} MiB per rank, EP group across {nodes_csv}")
        if not verify or not verify.get("candidates"):
            print("   no verify reply: the run failed")
            failures.append(f"{spine} {mib} MiB: no verify reply")
            continue
        pairs_pred = plan_predictions(pairs, verify.get("scope", "VERIFY_SCOPE_LAYER"))
        print(f"   {'candidate':28s} {'measured ms':>12s} {'levels pred':>12s} {'err':>7s}"
              f" {'pairs pred':>11s} {'err':>7s}")
        level_err, pair_err = [], []
        chosen = best = None
        pairs_choice = None
        pairs_rank = {(c.get("kind"), c.get("chunks_requested", 1)): c.get("rank", 0)
                      for c in (pairs or {}).get("candidates", []) if c.get("feasible")}
        for c in verify["candidates"]:
            kind, k = c.get("kind"), c.get("chunks_requested", 1)
            measured = float(c.get("measured_seconds", 0))
            predicted = float(c.get("predicted_seconds", 0))
            err = float(c.get("error_ratio", 0))
            level_err.append(err)
            pp = pairs_pred.get((kind, k))
            perr = pp / measured - 1 if pp and measured > 0 else None
            pair_err.append(perr)
            if c.get("chosen"):
                chosen = measured
            best = measured if best is None else min(best, measured)
            if pairs_rank.get((kind, k)) == 1:
                pairs_choice = measured
            name = f"{short(kind)} K={k}"
            print(f"   {name:28s} {measured * 1e3:12.2f} {predicted * 1e3:12.2f}"
                  f" {err * 100:+6.1f}%"
                  + (f" {pp * 1e3:11.2f} {perr * 100:+6.1f}%" if perr is not None
                     else f" {'-':>11s} {'-':>7s}"))
        med, worst, _ = score(level_err, chosen, best)
        regret = float(verify.get("regret_ratio", 0))
        print(f"   levels: median |error| {med * 100:.1f}%, largest {worst * 100:.1f}%, "
              f"regret {regret * 100:.1f}%")
        pmed, pworst, pregret = score(pair_err, pairs_choice, best)
        if pmed is not None:
            print(f"   pairs only: median |error| {pmed * 100:.1f}%, largest "
                  f"{pworst * 100:.1f}% ({sum(e is not None for e in pair_err)} of "
                  f"{len(pair_err)} candidates matched)"
                  + (f", regret {pregret * 100:.1f}%" if pregret is not None else ""))
        for what, p in (("levels plan", plan), ("pairs-only plan", pairs)):
            cited = same_set_citations(p, nodes)
            if cited:
                print(f"   warning: the {what} cites a measurement of the job's own four "
                      f"nodes (task {', '.join(cited)}): not the bar's prediction")
        if not (med <= 0.15 and worst <= 0.30 and regret <= 0.10):
            failures.append(f"{spine} {mib} MiB: median {med:.3f}, largest {worst:.3f}, "
                            f"regret {regret:.3f}")
    print("\nbar (median |error| <= 15%, none over 30%, regret <= 10%): "
          + ("met" if not failures else "missed: " + "; ".join(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
