#!/usr/bin/env python3
"""The "correct" step of Correct and Smooth (Huang et al., 2020) on retexo's predictions: a
probe of an idea for docs/results.md, not part of retexo.

    perf/correct_probe.py GRAPH.h5 PREDICTIONS [SEEDS]

PREDICTIONS-S.h5 (S in SEEDS, default "1 2 3 4 5") are `retexo_mpi --predict-out` files of runs
without label spreading (`--smooth-alpha 0`) on GRAPH.h5 (a `retexo_convert` file; "{seed}" in
its name is replaced by S, for a split per seed).  For each run it compares, on the same
predictions, chosen on validation:
  smooth            label spreading as retexo does it (train/smooth.cpp): G0 = the softmax with
                    training rows set to their labels, 10 steps of G = (1 - a) G0 + a S G,
                    a in {0, 0.5, 0.8, 0.9} (0: the predictions themselves)
  correct + smooth  first the training rows' residuals E0 = Y - softmax spread over the graph
                    (50 steps, a1 in {0.5, 0.8, 0.9, 0.99}; scaled to the training residuals'
                    mean L1 norm, or added as they are with the training rows held), then smooth
S = D^-1/2 (A + I) D^-1/2.  Prints each run's training residual (the mean L1 norm of E0 on the
training rows), both choices, and the test (validation) means.  Needs
python3-torch, python3-h5py and numpy (cmake/install-deps.sh --perf).
"""
import itertools
import sys

import h5py
import numpy as np
import torch

torch.set_num_threads(1)


def operator(g):
    off = g["csr/offsets"][:].astype(np.int64)
    src = g["csr/sources"][:].astype(np.int64)
    n = len(off) - 1
    dst = np.repeat(np.arange(n), np.diff(off))
    rows, cols = np.concatenate([dst, np.arange(n)]), np.concatenate([src, np.arange(n)])
    deg = np.bincount(rows, minlength=n).astype(np.float64)
    vals = 1 / np.sqrt(deg[rows] * deg[cols])
    return torch.sparse_coo_tensor(np.vstack([rows, cols]), torch.tensor(vals), (n, n)).coalesce()


def spread(S, G0, a, steps, hold=None):
    G = G0.clone()
    for _ in range(steps):
        G = (1 - a) * G0 + a * (S @ G)
        if hold is not None:
            G[hold] = G0[hold]
    return G


def run(graph, predictions):
    g = h5py.File(graph, "r")
    S, y = operator(g), torch.tensor(g["labels"][:].astype(np.int64))
    tr, va, te = (torch.tensor(g["split/" + k][:].astype(np.int64)) for k in ("train", "valid", "test"))
    Z = torch.softmax(torch.tensor(h5py.File(predictions, "r")["logits"][:], dtype=torch.float64), 1)
    Y = torch.zeros_like(Z)
    Y[tr, y[tr]] = 1

    def acc(M, rows):
        return float((M[rows].argmax(1) == y[rows]).double().mean())

    best = {"residual": float((Y[tr] - Z[tr]).abs().sum(1).mean())}
    for a1, scale, a2 in itertools.product([0, 0.5, 0.8, 0.9, 0.99], ["auto", "held"], [0, 0.5, 0.8, 0.9]):
        if a1 == 0 and scale == "held":
            continue
        Zc = Z
        if a1 > 0:
            E0 = torch.zeros_like(Z)
            E0[tr] = Y[tr] - Z[tr]
            if scale == "auto":
                E = spread(S, E0, a1, 50)
                norm = E.abs().sum(1, keepdim=True).clamp_min(1e-300)
                Zc = Z + E0[tr].abs().sum(1).mean() * E / norm
            else:
                Zc = Z + spread(S, E0, a1, 50, hold=tr)
        G0 = Zc.clone()
        G0[tr] = Y[tr]
        G = spread(S, G0, a2, 10) if a2 > 0 else Zc
        v = acc(G, va)
        for arm in ("smooth", "correct") if a1 == 0 else ("correct",):
            if arm not in best or v > best[arm][0]:
                best[arm] = (v, acc(G, te), (a1, scale, a2))
    return best


def main():
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    graph, prefix = sys.argv[1], sys.argv[2]
    seeds = [int(s) for s in (sys.argv[3] if len(sys.argv) > 3 else "1 2 3 4 5").split()]
    means = {"smooth": [], "correct": []}
    for s in seeds:
        best = run(graph.replace("{seed}", str(s)), f"{prefix}-{s}.h5")
        residual = best.pop("residual")
        print(f"seed {s}: training rows' residual (mean L1) {residual:.3f}; "
              + "; ".join(f"{arm} {b[1]:.4f} ({b[0]:.4f}) a1/scale/a2 {b[2]}" for arm, b in best.items()))
        for arm in means:
            means[arm].append(best[arm][:2])
    for arm, vals in means.items():
        v, t = np.mean(vals, 0)
        print(f"{arm:8s} test {t:.4f} (validation {v:.4f})")


if __name__ == "__main__":
    main()
