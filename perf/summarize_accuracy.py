#!/usr/bin/env python3
"""Summarise perf/accuracy.sh results: per dataset and model, RETEXO's and the standard
trainer's validation and test accuracy (mean, and the test's std over seeds), the gap in test
points over the seeds both ran, bytes and time; the paper's numbers where it has them."""
import glob, json, os, statistics, sys

out = sys.argv[1]
runs = {}  # (ds, model) -> mode -> seed -> run
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    name = os.path.basename(path)[:-len(".json")]
    stem, mode = name.rsplit(".", 1)
    ds, model, seed = stem.rsplit("-", 2)
    j = json.load(open(path))
    for r in j.get("runs", [j]):  # --mode both writes one object per mode under runs
        runs.setdefault((ds, model), {}).setdefault(r["mode"], {})[seed] = r

paper = {("cora", "gcn"): (.828, .820), ("cora", "sage"): (.825, .826), ("cora", "gat"): (.818, .807),
         ("citeseer", "gcn"): (.739, .725), ("citeseer", "sage"): (.766, .743), ("citeseer", "gat"): (.738, .714)}


def cell(rs):
    if not rs:
        return "", None
    test = [r["accuracy"]["test"] for r in rs]
    valid = statistics.mean(r["accuracy"]["valid"] for r in rs)
    return f"{valid:.3f} / {statistics.mean(test):.3f} ± {statistics.pstdev(test):.3f}", statistics.mean(test)


print("| dataset | model | seeds | RETEXO valid / test | standard valid / test | gap (points) | paper RETEXO / standard "
      "| RETEXO bytes, time s | standard bytes, time s |")
print("|---|---|---|---|---|---|---|---|---|")
for (ds, model), by_mode in sorted(runs.items()):
    rx, st = by_mode.get("retexo", {}), by_mode.get("standard", {})
    both = sorted(set(rx) & set(st))
    seeds = both or sorted(set(rx) | set(st))
    rtext, rmean = cell([rx[s] for s in seeds if s in rx])
    stext, smean = cell([st[s] for s in seeds if s in st])
    gap = f"{100 * (rmean - smean):+.1f}" if both else ""
    p = paper.get((ds, model))
    cost = lambda rs: (f"{statistics.mean(r['bytes']['total'] for r in rs):.3g}, "
                       f"{statistics.mean(r['time_s']['total'] for r in rs):.1f}") if rs else ""
    print(f"| {ds} | {model} | {len(seeds)} | {rtext} | {stext} | {gap} | {'' if p is None else f'{p[0]:.3f} / {p[1]:.3f}'} "
          f"| {cost([rx[s] for s in seeds if s in rx])} | {cost([st[s] for s in seeds if s in st])} |")
