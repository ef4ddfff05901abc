#!/usr/bin/env python3
"""Summarise perf/accuracy.sh results: test accuracy mean +- std per dataset, model, mode."""
import glob, json, os, statistics, sys

out = sys.argv[1]
rows = {}
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    j = json.load(open(path))
    ds = os.path.basename(path).rsplit("-", 2)[0]
    for r in j.get("runs", [j]):  # --mode both: one object per mode under runs
        key = (ds, r["model"], r["mode"])
        rows.setdefault(key, []).append((r["accuracy"]["test"], r["bytes"]["total"], r["time_s"]["total"],
                                         r["accuracy"]["valid"]))

paper = {("cora", "gcn", "standard"): .820, ("cora", "gcn", "retexo"): .828, ("cora", "sage", "standard"): .826,
         ("cora", "sage", "retexo"): .825, ("cora", "gat", "standard"): .807, ("cora", "gat", "retexo"): .818,
         ("citeseer", "gcn", "standard"): .725, ("citeseer", "gcn", "retexo"): .739, ("citeseer", "sage", "standard"): .743,
         ("citeseer", "sage", "retexo"): .766, ("citeseer", "gat", "standard"): .714, ("citeseer", "gat", "retexo"): .738}
print("| dataset | model | mode | test accuracy (mean ± std) | validation (mean) | seeds | paper | bytes (mean) | time s (mean) |")
print("|---|---|---|---|---|---|---|---|---|")
for (ds, model, mode), v in sorted(rows.items()):
    acc = [a for a, _, _, _ in v]
    std = statistics.pstdev(acc) if len(acc) > 1 else 0.0
    p = paper.get((ds, model, mode))
    print(f"| {ds} | {model} | {mode} | {statistics.mean(acc):.3f} ± {std:.3f} | {statistics.mean(x[3] for x in v):.3f} | "
          f"{len(acc)} | {'' if p is None else f'{p:.3f}'} | {statistics.mean(x[1] for x in v):.3e} | "
          f"{statistics.mean(x[2] for x in v):.1f} |")
