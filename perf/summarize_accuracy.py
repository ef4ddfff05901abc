#!/usr/bin/env python3
"""Summarise perf/accuracy.sh results: per dataset and model, RETEXO's and the standard
trainer's validation and test accuracy (mean, and the test's std over seeds), the gap in test
points over the seeds both ran, bytes and time; the paper's numbers where it has them; what
predicted in RETEXO's runs (s1 x3: stage 1 in three runs; head: the label head).

The gap's 95% interval comes from the paired per-node differences (RETEXO right, standard
wrong: +1; the reverse: -1), resampled 4,000 times: the seeds, and the test nodes (the same
nodes for seeds that share a test set). It shows how far the seeds and the test set alone can
move the gap: on 1,000 test nodes a point is 10 nodes.

  summarize_accuracy.py OUT                                   the table (markdown) of OUT/*.json
  summarize_accuracy.py --test-outcomes GRAPH PREDICTIONS METRICS OUT.test.json
                     a run's test nodes and which it got right (checked against its metrics)
"""
import collections, glob, json, os, statistics, sys


def write_test_outcomes(graph, predictions, metrics, out):
    import h5py, numpy as np
    with h5py.File(graph, "r") as g, h5py.File(predictions, "r") as p:
        test = g["split/test"][:].ravel()  # node ids
        right = p["prediction"][:].ravel()[test] == g["labels"][:].ravel()[test]
    reported = json.load(open(metrics))["accuracy"]["test"]
    if abs(right.mean() - reported) > 1e-6:
        sys.exit(f"{predictions}: test accuracy {right.mean():.6f}, but {metrics} reports {reported:.6f}")
    json.dump({"test": test.tolist(), "right": right.astype(int).tolist()}, open(out, "w"))


def paired_interval(pairs, reps=4000):
    """pairs: (test node ids, RETEXO right, standard right) per seed -> 95% interval of the mean
    gap in points, resampling the seeds and, within each test set, its nodes."""
    import numpy as np
    groups = {}
    for ids, r, s in pairs:
        groups.setdefault(tuple(ids), []).append(np.array(r, np.float32) - np.array(s, np.float32))
    rng, means = np.random.default_rng(0), []  # means: seeds x reps, each over resampled nodes
    for diffs in map(np.array, groups.values()):
        picks = rng.integers(0, diffs.shape[1], (reps, diffs.shape[1]))
        means += list(np.concatenate([diffs[:, p].mean(axis=-1) for p in np.array_split(picks, 40)], axis=1))
    means = np.array(means)
    seeds = rng.integers(0, len(means), (reps, len(means)))
    gap = 100 * means[seeds, np.arange(reps)[:, None]].mean(axis=1)
    return np.percentile(gap, 2.5), np.percentile(gap, 97.5)


def interval(out, ds, model, seeds):
    try:
        outcomes = [[json.load(open(os.path.join(out, f"{ds}-{model}-{s}.{mode}.test.json")))
                     for mode in ("retexo", "standard")] for s in seeds]
        pairs = [(r["test"], r["right"], st["right"]) for r, st in outcomes if r["test"] == st["test"]]
        if len(pairs) != len(seeds):
            return ""
        low, high = paired_interval(pairs)
    except (OSError, ImportError):
        return ""
    return f" [{low:+.1f}, {high:+.1f}]"


if len(sys.argv) not in (2, 6) or (len(sys.argv) == 6) != (sys.argv[1] == "--test-outcomes"):
    sys.exit(__doc__)
if sys.argv[1] == "--test-outcomes":
    write_test_outcomes(*sys.argv[2:6])
    sys.exit(0)

out = sys.argv[1]
runs = {}  # (ds, model) -> mode -> seed -> run
for path in sorted(glob.glob(os.path.join(out, "*.json"))):
    if path.endswith(".test.json"):
        continue
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


def outputs(rs):
    """What predicted in RETEXO's runs (metrics "output"): runs per stage (s0, s1, ...) or label head."""
    named = [("head" if r["output"]["label_head"] else f"s{r['output']['stage']}") for r in rs if "output" in r]
    return " ".join(f"{k} x{n}" for k, n in sorted(collections.Counter(named).items()))


print("| dataset | model | seeds | RETEXO valid / test | standard valid / test | gap (points) [95% interval] | paper RETEXO / standard "
      "| RETEXO bytes, time s | standard bytes, time s | RETEXO output |")
print("|---|---|---|---|---|---|---|---|---|---|")
for (ds, model), by_mode in sorted(runs.items()):
    rx, st = by_mode.get("retexo", {}), by_mode.get("standard", {})
    both = sorted(set(rx) & set(st))
    seeds = both or sorted(set(rx) | set(st))
    rtext, rmean = cell([rx[s] for s in seeds if s in rx])
    stext, smean = cell([st[s] for s in seeds if s in st])
    gap = f"{100 * (rmean - smean):+.1f}{interval(out, ds, model, both)}" if both else ""
    p = paper.get((ds, model))
    cost = lambda rs: (f"{statistics.mean(r['bytes']['total'] for r in rs):.3g}, "
                       f"{statistics.mean(r['time_s']['total'] for r in rs):.1f}") if rs else ""
    print(f"| {ds} | {model} | {len(seeds)} | {rtext} | {stext} | {gap} | {'' if p is None else f'{p[0]:.3f} / {p[1]:.3f}'} "
          f"| {cost([rx[s] for s in seeds if s in rx])} | {cost([st[s] for s in seeds if s in st])} "
          f"| {outputs([rx[s] for s in seeds if s in rx])} |")
