#!/usr/bin/env python3
"""A PyTorch model of RETEXO's first GCN stage with the neighbours' training labels as extra
inputs: a probe of an idea for docs/results.md ("The neighbours' labels as stage inputs"), not
part of retexo.

    perf/label_input_probe.py DATASET fixed|"K V T" [--norm]

DATASET is a directory name under ../shared/datasets; "fixed" trains on its random-paper split,
"K V T" on a new split per seed (K training nodes per class, V valid, T test).  Seeds 1-5; each
model is trained for 200 full-batch epochs with Adam (lr 0.01), hidden 256, dropout 0.5 on the
hidden layer and the label inputs, at weight decay 5e-4 and 5e-3, keeping the epoch and the
weight decay that validate best.
Models (A_hat = D^-1/2 (A + I) D^-1/2; L = the mean over a node's neighbours, itself excluded,
of the training nodes' one-hot labels; Ln = L over its row sum, has = 1 where the row sum > 0):
  mlp(AX)          MLP(A_hat X), RETEXO's first stage
  mlp(AX)+L        MLP([A_hat X, L])
  mlp(AX)+Ln,has   MLP([A_hat X, Ln, has])
  gcn              A_hat MLP(A_hat X), the standard two-layer GCN
  gcn+L            A_hat MLP([A_hat X, L])
  gcn+Ln,has       A_hat MLP([A_hat X, Ln, has])
Prints (validation, test) accuracy per seed, then the means.  Needs python3-torch and numpy
(cmake/install-deps.sh --perf); reads ../shared/datasets relative to the project root.
"""
import os
import gzip, numpy as np, torch, sys, torch.nn.functional as F
torch.set_num_threads(1)
ds = sys.argv[1]; root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', 'shared', 'datasets', ds)
def rd(p, dt=float): return np.loadtxt(gzip.open(p), delimiter=',', dtype=dt, ndmin=1)
X = rd(f'{root}/raw/node-feat.csv.gz', np.float32); y = rd(f'{root}/raw/node-label.csv.gz', int)
if '--norm' in sys.argv: X = X / np.maximum(X.sum(1, keepdims=True), 1e-12)
E = rd(f'{root}/raw/edge.csv.gz', int).reshape(-1, 2)
n = X.shape[0]; C = y.max() + 1
src = np.concatenate([E[:, 0], E[:, 1]]); dst = np.concatenate([E[:, 1], E[:, 0]])
key = np.unique(src * n + dst); key = key[key // n != key % n]; src, dst = key // n, key % n
def spm(r, c, v, shape=(n, n)): return torch.sparse_coo_tensor(np.vstack([r, c]), torch.tensor(v, dtype=torch.float32), shape).coalesce().to_sparse_csr()
deg = np.bincount(dst, minlength=n) + 1.0
r = np.concatenate([dst, np.arange(n)]); c = np.concatenate([src, np.arange(n)])
Ahat = spm(r, c, 1 / np.sqrt(deg[r] * deg[c]))
dn = np.maximum(np.bincount(dst, minlength=n), 1)
Amean = spm(dst, src, 1.0 / dn[dst])
nzr, nzc = np.nonzero(X); Xs = spm(nzr, nzc, X[nzr, nzc], X.shape)
yt = torch.tensor(y)
def split(seed, rs):
    if rs is None:
        return [torch.tensor(rd(f'{root}/split/random-paper/{s}.csv.gz', int)) for s in ('train', 'valid', 'test')]
    k, v, t = rs; g = np.random.default_rng(seed); tr = []
    for cl in range(C):
        idx = np.where(y == cl)[0]; tr += list(g.permutation(idx)[:k])
    rest = g.permutation(np.setdiff1d(np.arange(n), tr))
    return torch.tensor(tr), torch.tensor(rest[:v]), torch.tensor(rest[v:v + t])
class M(torch.nn.Module):   # h = relu(Ahat X W1 + L WL + b); out = h W2 ; gcn: out = Ahat h W2
    def __init__(s, lw, gcn=False, h=256, d=0.5):
        super().__init__(); s.W1 = torch.nn.Linear(X.shape[1], h); s.l2 = torch.nn.Linear(h, C); s.d = d; s.gcn = gcn
        s.WL = torch.nn.Linear(lw, h, bias=False) if lw else None
    def forward(s, L):
        z = torch.sparse.mm(Ahat, torch.sparse.mm(Xs, s.W1.weight.t())) + s.W1.bias
        if s.WL is not None: z = z + s.WL(F.dropout(L, s.d, s.training))
        hdd = F.dropout(F.relu(z), s.d, s.training); o = s.l2(hdd)
        return torch.sparse.mm(Ahat, o) if s.gcn else o
def fit(model, L, tr, va, te, wd, epochs=200):
    opt = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=wd); best = (-1, 0)
    for e in range(epochs):
        model.train(); opt.zero_grad(); F.cross_entropy(model(L)[tr], yt[tr]).backward(); opt.step()
        model.eval()
        with torch.no_grad(): p = model(L).argmax(1)
        va_acc = (p[va] == yt[va]).float().mean().item(); te_acc = (p[te] == yt[te]).float().mean().item()
        if va_acc > best[0]: best = (va_acc, te_acc)
    return best
rs = None if sys.argv[2] == 'fixed' else tuple(int(v) for v in sys.argv[2].split())
res = {}
for seed in range(1, 6):
    tr, va, te = split(seed, rs)
    Y = torch.zeros(n, C); Y[tr, yt[tr]] = 1
    L = torch.sparse.mm(Amean, Y); cnt = L.sum(1, keepdim=True); Ln = L / cnt.clamp(min=1e-9)
    cfgs = {'mlp(AX)': (None, False), 'mlp(AX)+L': (L, False), 'mlp(AX)+Ln,has': (torch.cat([Ln, (cnt > 0).float()], 1), False), 'gcn': (None, True), 'gcn+L': (L, True),
            'gcn+Ln,has': (torch.cat([Ln, (cnt > 0).float()], 1), True)}
    for name, (Lin, g) in cfgs.items():
        for wd in (5e-4, 5e-3):
            torch.manual_seed(seed); b = fit(M(0 if Lin is None else Lin.shape[1], g), Lin, tr, va, te, wd)
            prev = res.get((name, seed)); res[(name, seed)] = b if prev is None or b[0] > prev[0] else prev
    print(seed, {k[0]: res[k] for k in res if k[1] == seed}, flush=True)
for name in cfgs:
    v = np.array([res[(name, s)] for s in range(1, 6)]); print(f'{ds} {sys.argv[2]} {name:16s} test {v[:,1].mean():.3f} (valid {v[:,0].mean():.3f})', flush=True)
