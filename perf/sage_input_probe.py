#!/usr/bin/env python3
"""A PyTorch model of RETEXO's first GraphSAGE stage with other inputs and parameterisations:
a probe for docs/results.md ("The neighbours' weights as an offset"), not part of retexo.

    perf/sage_input_probe.py DATASET [VARIANT ...]

DATASET is a directory name under ../shared/datasets, trained on its random-paper split.
Seeds 1-3; each model is an MLP (hidden 256, ReLU, dropout on its input and hidden layer)
trained full-batch with Adam (lr 0.01) for up to 200 epochs, stopped 50 epochs after its best
validation epoch; every stage candidate of retexo's SAGE defaults (dropout 0.5 and 0.8 x weight
decay 0, 5e-4 and 5e-3) is trained and the one that validates best kept.  Variants (x: the raw
features; mean: over a node's neighbours, itself excluded; A_hat = D^-1/2 (A + I) D^-1/2):
  sage            [x | mean x], retexo's stage 0
  offset          [x | mean x] with the neighbours' weights W_s + D (retexo's --neighbour-offset)
  offset-inputs   [x + mean x | mean x] (the same functions; dropout on the sum)
  own-dropout     [x | mean x], dropout 0.8 on the x block
  mean            mean x alone
  mean-self       the mean over the node and its neighbours
  gcn             A_hat x, RETEXO GCN's stage 0
  x-gcn           [x | A_hat x]
  zscore          [x | mean x], each column standardised
  rownorm         [x | mean x] of row-normalised features
Prints the mean validation and test accuracy of each variant.  Needs python3-torch and numpy
(cmake/install-deps.sh --perf).  Debian's torch multiplies with the reference BLAS (about
1 GFLOP/s): `LD_LIBRARY_PATH` to an OpenBLAS directory (libopenblas0-pthread's
openblas-pthread/) makes a variant take a minute on amazon-computers instead of half an hour.
"""
import gzip
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(1)
ds = sys.argv[1]
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "datasets", ds)


def rd(p, dt=float):
    return np.loadtxt(gzip.open(p), delimiter=",", dtype=dt, ndmin=1)


X = torch.tensor(rd(f"{root}/raw/node-feat.csv.gz", np.float32))
y = torch.tensor(rd(f"{root}/raw/node-label.csv.gz", int))
E = rd(f"{root}/raw/edge.csv.gz", int).reshape(-1, 2)
n, nf = X.shape
C = int(y.max()) + 1
src = np.concatenate([E[:, 0], E[:, 1]])
dst = np.concatenate([E[:, 1], E[:, 0]])


def spm(r, c, v):
    return torch.sparse_coo_tensor(np.vstack([r, c]), torch.tensor(v, dtype=torch.float32), (n, n)).coalesce()


deg = np.bincount(dst, minlength=n) + 1.0
r = np.concatenate([dst, np.arange(n)])
c = np.concatenate([src, np.arange(n)])
mean = spm(dst, src, 1.0 / np.maximum(deg[dst] - 1, 1))
tr, va, te = (torch.tensor(rd(f"{root}/split/random-paper/{s}.csv.gz", int)) for s in ("train", "valid", "test"))


def zscore(m):
    return (m - m.mean(0, keepdim=True)) / m.std(0, keepdim=True).clamp(min=1e-6)


def pair(x):
    return torch.cat([x, torch.sparse.mm(mean, x)], 1)


def a_hat(x):
    return torch.sparse.mm(spm(r, c, 1 / np.sqrt(deg[r] * deg[c])), x)


INPUTS = {
    "sage": lambda: pair(X),
    "offset": lambda: pair(X),
    "offset-inputs": lambda: torch.cat([X + torch.sparse.mm(mean, X), torch.sparse.mm(mean, X)], 1),
    "own-dropout": lambda: pair(X),
    "mean": lambda: torch.sparse.mm(mean, X),
    "mean-self": lambda: torch.sparse.mm(spm(r, c, 1.0 / deg[r]), X),
    "gcn": lambda: a_hat(X),
    "x-gcn": lambda: torch.cat([X, a_hat(X)], 1),
    "zscore": lambda: torch.cat([zscore(X), zscore(torch.sparse.mm(mean, X))], 1),
    "rownorm": lambda: pair(X / X.sum(1, keepdim=True).clamp(min=1e-12)),
}


class Stage(torch.nn.Module):
    def __init__(self, width, dropout, variant):
        super().__init__()
        self.l1 = torch.nn.Linear(width, 256)
        self.l2 = torch.nn.Linear(256, C)
        self.dropout = dropout
        self.variant = variant

    def forward(self, x):
        if self.variant == "own-dropout":
            x = torch.cat([F.dropout(x[:, :nf], 0.8, self.training), F.dropout(x[:, nf:], self.dropout, self.training)], 1)
        else:
            x = F.dropout(x, self.dropout, self.training)
        if self.variant == "offset":  # W_s x + (W_s + D) mean x
            x = torch.cat([x[:, :nf] + x[:, nf:], x[:, nf:]], 1)
        return self.l2(F.dropout(F.relu(self.l1(x)), self.dropout, self.training))


def fit(inputs, variant, dropout, wd, seed):
    """(best validation accuracy, its test accuracy)."""
    torch.manual_seed(seed)
    m = Stage(inputs.shape[1], dropout, variant)
    opt = torch.optim.Adam(m.parameters(), lr=0.01, weight_decay=wd)
    best, since = (-1.0, 0.0), 0
    for _ in range(200):
        m.train()
        opt.zero_grad()
        F.cross_entropy(m(inputs[tr]), y[tr]).backward()
        opt.step()
        m.eval()
        with torch.no_grad():
            v = (m(inputs[va]).argmax(1) == y[va]).float().mean().item()
            t = (m(inputs[te]).argmax(1) == y[te]).float().mean().item()
        if v > best[0]:
            best, since = (v, t), 0
        else:
            since += 1
            if since >= 50:
                break
    return best


for variant in sys.argv[2:] or INPUTS:
    inputs = INPUTS[variant]()
    runs = [max((fit(inputs, variant, d, wd, seed) for d in (0.5, 0.8) for wd in (0, 5e-4, 5e-3)), key=lambda b: b[0])
            for seed in (1, 2, 3)]
    v, t = np.mean(runs, 0)
    print(f"{ds} {variant}: validation {v:.3f}, test {t:.3f}", flush=True)
