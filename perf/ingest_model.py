#!/usr/bin/env python3
"""Per-rank cost formulas for loading and partitioning, fitted to perf/ingest_scale.sh runs on
two graphs of different shape, checked against every measured point, and projected to
ogbn-papers100M at 64-256 ranks.

    perf/ingest_model.py PRODUCTS_DIR WIDE_DIR [--nodes N --edges E --features F]

PRODUCTS_DIR, WIDE_DIR: output directories of perf/ingest_scale.sh (ingest_scale.tsv and the
logs).  Each graph's size is read from its single-process load log.

Model, per step (peak resident memory per rank, and CPU seconds per rank):
    cost(P) = a + b*N + (c*E + d*N*F) / P
N nodes, E CSR in-edges (each undirected edge twice), F features, P ranks.  b*N holds what every
rank keeps for the whole graph (random's permutation: 8 bytes a node); c*E and d*N*F what is
split among the ranks.  With two graphs, a + b*N is each graph's intercept and c, d come from
the two slopes; every other point checks the formula.
"""
import argparse
import csv
import re
import sys


def graph_size(directory):
    """N, E, F from the banner of the single-process load's log."""
    text = open(f"{directory}/single-load-random-p1.log").read()
    m = re.search(r": (\d+) nodes, (\d+) in-edges, (\d+) features", text)
    if not m:
        sys.exit(f"{directory}: no graph banner in single-load-random-p1.log")
    return tuple(int(x) for x in m.groups())


def rows(directory):
    with open(f"{directory}/ingest_scale.tsv") as f:
        return [r for r in csv.DictReader(f, delimiter="\t") if r["max_rank_rss_MB"] not in ("-", "")
                and not r["max_rank_rss_MB"].startswith("over")]


def points(directory, steps, method, column):
    out = {}
    for r in rows(directory):
        if r["step"] in steps and r["method"] == method and r[column] not in ("-", ""):
            out[int(r["ranks"])] = float(r[column])
    return out


def fit_line(pts):
    """Least squares cost = i + s / P."""
    xs = [1.0 / p for p in pts]
    ys = list(pts.values())
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    s = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else 0.0
    return my - s * mx, s


def solve2(a11, a12, a21, a22, b1, b2):
    det = a11 * a22 - a12 * a21
    return (b1 * a22 - a12 * b2) / det, (a11 * b2 - a21 * b1) / det


def model(label, graphs, steps, method, column, unit):
    """Fit on two graphs; print the check against every point; return the formula."""
    fits = []
    for name, directory, (n, e, f) in graphs:
        pts = points(directory, steps, method, column)
        if len(pts) < 2:
            return None
        i, s = fit_line(pts)
        fits.append((name, directory, n, e, f, pts, i, s))
    if len(fits) == 2:
        (_, _, n1, e1, f1, _, i1, s1), (_, _, n2, e2, f2, _, i2, s2) = fits
        b, a = solve2(n1, 1, n2, 1, i1, i2)  # intercepts: a + b*N
        c, d = solve2(e1, n1 * f1, e2, n2 * f2, s1, s2)  # slopes: c*E + d*N*F
    else:
        return None
    worst = 0.0
    print(f"\n{label} ({unit} per rank): a = {a:.4g}, b = {b:.4g} per node, c = {c:.4g} per edge, "
          f"d = {d:.4g} per feature value")
    print(f"  {'graph':10} {'P':>4} {'measured':>10} {'formula':>10} {'error':>7}")
    for name, _, n, e, f, pts, _, _ in fits:
        for p, y in sorted(pts.items()):
            yhat = a + b * n + (c * e + d * n * f) / p
            err = (yhat - y) / y
            worst = max(worst, abs(err))
            print(f"  {name:10} {p:>4} {y:>10.1f} {yhat:>10.1f} {100 * err:>6.1f}%")
    print(f"  largest error {100 * worst:.1f}%")
    return a, b, c, d, worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("products")
    ap.add_argument("wide")
    ap.add_argument("--nodes", type=int, default=111059956)  # ogbn-papers100M
    ap.add_argument("--edges", type=int, default=2 * 1615685872)  # symmetrised
    ap.add_argument("--features", type=int, default=128)
    ap.add_argument("--ranks", default="64,128,256")
    args = ap.parse_args()
    graphs = [("products", args.products, graph_size(args.products)),
              ("wide", args.wide, graph_size(args.wide))]
    for name, _, (n, e, f) in graphs:
        print(f"{name}: {n} nodes, {e} CSR in-edges, {f} features")
    target = (args.nodes, args.edges, args.features)
    ranks = [int(p) for p in args.ranks.split(",")]
    print(f"projection: {args.nodes} nodes, {args.edges} CSR in-edges, {args.features} features")
    table = []
    for label, steps, method, column, unit in [
            ("load a graph file, random (memory)", {"single-load", "slice-load"}, "random", "max_rank_rss_MB", "MB"),
            ("load a graph file, random (CPU)", {"single-load", "slice-load"}, "random", "max_rank_cpu_s", "s"),
            ("load owner shards (memory)", {"owner-load"}, "random", "max_rank_rss_MB", "MB"),
            ("load owner shards (CPU)", {"owner-load"}, "random", "max_rank_cpu_s", "s"),
            ("partition, random (memory)", {"partition"}, "random", "max_rank_rss_MB", "MB"),
            ("partition, random (CPU)", {"partition"}, "random", "max_rank_cpu_s", "s")]:
        m = model(label, graphs, steps, method, column, unit)
        if m is None:
            print(f"\n{label}: not enough points")
            continue
        a, b, c, d, worst = m
        n, e, f = target
        table.append((label, unit, [a + b * n + (c * e + d * n * f) / p for p in ranks], worst))
    print(f"\nper rank at ogbn-papers100M scale ({', '.join(str(p) for p in ranks)} ranks):")
    for label, unit, vals, worst in table:
        print(f"  {label:38} " + "  ".join(f"{v:10.0f} {unit}" for v in vals) + f"   (fit within {100 * worst:.1f}%)")


if __name__ == "__main__":
    main()
