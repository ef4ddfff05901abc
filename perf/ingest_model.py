#!/usr/bin/env python3
"""Per-rank cost formulas for loading and partitioning, fitted to perf/ingest_scale.sh runs on
two graphs of different shape, checked against every measured point, and projected to
ogbn-papers100M at 64-256 ranks.

    perf/ingest_model.py PRODUCTS_DIR WIDE_DIR [--nodes N --edges E --features F]

PRODUCTS_DIR, WIDE_DIR: output directories of perf/ingest_scale.sh (ingest_scale.tsv and the
logs).  Each graph's size is read from its single-process load log.

Model, per step (peak resident memory per rank, and CPU seconds per rank):
    cost(P) = a + h*H + (c*E + d*N*F) / P
N nodes, E CSR in-edges (each undirected edge twice), F features, P ranks, H the largest halo
of a rank (distinct remote in-neighbours, read from the run's partition table): planning the
halo costs per halo node, and under a random partition H does not shrink like 1/P (at P=4
each rank of the products graph has 1.8M of its 2.4M nodes in its halo).  The four
coefficients are fitted by least squares over every point of both graphs; the table shows
each point against the formula.  For the projection, H under a random partition is
N (1 - 1/P) (1 - (1 - 1/P)^(E/N)) (each remote node is in the halo unless none of its E/N
neighbours is the rank's).

RETEXO training (WIDE_DIR run with TRAIN_RANKS): peak memory per rank a + h*H +
beta*N*(F + hidden)/P, fitted on the wide graph with all stage-input columns at once and with
--exchange-columns 64, the latter checked on the products graph's training from 8 owner
shards (PRODUCTS_DIR run with training).
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


def largest_halo(directory, step, method, p):
    """The largest halo of a rank in the run's partition table (0 on one rank)."""
    try:
        text = open(f"{directory}/{step}-{method}-p{p}.log").read()
    except OSError:
        return None
    halos = [int(m.group(1)) for m in re.finditer(r"^\s*\d+\s+\d+\s+(\d+)\s+\d+\s+\d+", text, re.M)]
    return max(halos) if halos else 0


def points(directory, steps, method, column):
    out = {}
    for r in rows(directory):
        if r["step"] in steps and r["method"] == method and r[column] not in ("-", ""):
            p = int(r["ranks"])
            h = largest_halo(directory, r["step"], method, p)
            if h is not None:
                out[p] = (float(r[column]), h)
    return out


def least_squares(xs, ys):
    """Coefficients minimising |X b - y|^2 (normal equations, Gaussian elimination)."""
    k = len(xs[0])
    m = [[sum(x[i] * x[j] for x in xs) for j in range(k)] + [sum(x[i] * y for x, y in zip(xs, ys))]
         for i in range(k)]
    for c in range(k):
        piv = max(range(c, k), key=lambda r: abs(m[r][c]))
        m[c], m[piv] = m[piv], m[c]
        for r in range(k):
            if r != c and m[c][c] != 0:
                f = m[r][c] / m[c][c]
                m[r] = [a - f * b for a, b in zip(m[r], m[c])]
    return [m[i][k] / m[i][i] for i in range(k)]


def random_halo(n, e, p):
    return n * (1 - 1 / p) * (1 - (1 - 1 / p) ** (e / n)) if p > 1 else 0.0


def model(label, graphs, steps, method, column, unit):
    """Fit on both graphs' points; print each point against the formula; return the formula."""
    data = []
    for name, directory, (n, e, f) in graphs:
        for p, (y, h) in sorted(points(directory, steps, method, column).items()):
            data.append((name, n, e, f, p, h, y))
    if len(data) < 6:
        return None
    xs = [[1.0, h, e / p, n * f / p] for _, n, e, f, p, h, _ in data]
    a, hh, c, d = least_squares(xs, [y for *_, y in data])
    worst = 0.0
    print(f"\n{label} ({unit} per rank): a = {a:.4g}, h = {hh:.4g} per halo node, c = {c:.4g} per edge, "
          f"d = {d:.4g} per feature value")
    print(f"  {'graph':10} {'P':>4} {'halo':>9} {'measured':>10} {'formula':>10} {'error':>7}")
    for (name, n, e, f, p, h, y), x in zip(data, xs):
        yhat = a * x[0] + hh * x[1] + c * x[2] + d * x[3]
        err = (yhat - y) / y
        worst = max(worst, abs(err))
        print(f"  {name:10} {p:>4} {h:>9} {y:>10.1f} {yhat:>10.1f} {100 * err:>6.1f}%")
    print(f"  largest error {100 * worst:.1f}%")
    return a, hh, c, d, worst


def train_model(wide_dir, products_dir, target, ranks, cols, hidden=256):
    """RETEXO training memory per rank, a + h*H + beta*N*(F + hidden)/P, fitted on the wide graph
    (perf/ingest_scale.sh with TRAIN_RANKS: retexo_mpi --mode retexo --rounds 2 at 1..16 ranks,
    with --exchange-columns `cols`, 0 for all columns at once) and, for 64 columns, checked on
    the products graph's training from 8 owner shards (with --exchange-columns 64).  One graph
    cannot tell the feature and hidden widths apart: the formula assumes both cost alike per
    node."""
    label = f"RETEXO training, --exchange-columns {cols} (memory)"
    pts = points(wide_dir, {"train-graph"}, f"cols{cols}", "max_rank_rss_MB")
    if len(pts) < 3:
        print(f"\n{label}: not enough points (perf/ingest_scale.sh with TRAIN_RANKS)")
        return None
    n, e, f = graph_size(wide_dir)
    data = [(p, h, y) for p, (y, h) in sorted(pts.items())]
    xs = [[1.0, h, n * (f + hidden) / p] for p, h, _ in data]
    a, hh, beta = least_squares(xs, [y for *_, y in data])
    print(f"\n{label} (MB per rank): a = {a:.4g}, h = {hh:.4g} per halo node, "
          f"beta = {beta:.4g} per node and column (features + hidden {hidden})")
    print(f"  {'graph':10} {'P':>4} {'halo':>9} {'measured':>10} {'formula':>10} {'error':>7}")
    worst = 0.0
    checks = [("wide", p, h, y, a + hh * h + beta * n * (f + hidden) / p) for p, h, y in data]
    if cols == 64:
        pn, pe, pf = graph_size(products_dir)
        for r in rows(products_dir):
            if r["step"] == "train-owners":
                p = int(r["ranks"])
                h = largest_halo(products_dir, "train-owners", "random", p) or 0
                checks.append(("products*", p, h, float(r["max_rank_rss_MB"]),
                               a + hh * h + beta * pn * (pf + hidden) / p))
    for name, p, h, y, yhat in checks:
        err = (yhat - y) / y
        if name == "wide":
            worst = max(worst, abs(err))
        print(f"  {name:10} {p:>4} {h:>9} {y:>10.1f} {yhat:>10.1f} {100 * err:>6.1f}%")
    print(f"  largest error {100 * worst:.1f}% (* not fitted on: a check on another graph)")
    tn, te, tf = target
    return (label, "MB", [a + hh * random_halo(tn, te, p) + beta * tn * (tf + hidden) / p for p in ranks], worst)


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
        a, hh, c, d, worst = m
        n, e, f = target
        table.append((label, unit, [a + hh * random_halo(n, e, p) + (c * e + d * n * f) / p for p in ranks], worst))
    for cols in (0, 64):
        t = train_model(args.wide, args.products, target, ranks, cols)
        if t is not None:
            table.append(t)
    print(f"\nper rank at ogbn-papers100M scale ({', '.join(str(p) for p in ranks)} ranks), random partition "
          f"(halo per rank {', '.join(f'{random_halo(*target[:2], p) / 1e6:.1f}M' for p in ranks)}):")
    for label, unit, vals, worst in table:
        print(f"  {label:56} " + "  ".join(f"{v:10.0f} {unit}" for v in vals) + f"   (fit within {100 * worst:.1f}%)")


if __name__ == "__main__":
    main()
