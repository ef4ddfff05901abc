#!/usr/bin/python3
"""Checks perf/peer/peer.py's hand-written kernels against plain dense autograd on a small
random graph: forward values and every gradient (oneDNN linear, sparse linear, aggregation,
the GCN / mean adjacencies, GAT's gather, repeat, edge softmax and block aggregation), and
its settings: the defaults table and config files read with retexo_mpi's rules.
    /usr/bin/python3 perf/peer/check_peer.py        (prints the largest errors, exits 1 on a mismatch)"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

torch.manual_seed(0)
peer.VERBOSE = False
bad = []


def dense_gat(zz, al, ar, mask):
    """The reference GAT: scores, a softmax masked to the in-edges and self loops, and the
    weighted sums, as dense [H, v, u] tensors (zz: [N, H, D])."""
    N, H, D = zz.shape
    el, er = (zz * al).sum(-1), (zz * ar).sum(-1)  # [N, H]
    s = F.leaky_relu(er.t()[:, :, None] + el.t()[:, None, :], 0.2)  # [H, v, u]
    alpha = torch.softmax(s.masked_fill(~mask, float("-inf")), -1)
    return torch.einsum("hvu,uhd->vhd", alpha, zz).reshape(N, H * D)


def close(name, a, b, tol=2e-4):
    err = float((a - b).abs().max() / b.abs().max().clamp(min=1e-6))
    print(f"{name:40s} rel. error {err:.2e}")
    if not err < tol:
        bad.append(name)


# a random directed-symmetric graph with an isolated node
N, Fdim, H = 40, 30, 4
adj = torch.rand(N, N) < 0.12
adj = (adj | adj.t()) & ~torch.eye(N, dtype=torch.bool)
adj[0, :] = False
adj[:, 0] = False
off = torch.zeros(N + 1, dtype=torch.int64)
off[1:] = torch.cumsum(adj.sum(1), 0)  # row v: in-edges u -> v
src = torch.cat([torch.nonzero(adj[v]).flatten() for v in range(N)])
deg = adj.sum(1).double()

for fmt in ("coo", "csr"):
    peer.Sparse.fmt = fmt
    # adjacencies
    A = peer.gcn_adjacency(off, src, N)
    Ad = ((adj.double() + torch.eye(N)) / torch.sqrt(torch.outer(deg + 1, deg + 1))).float()
    close(f"[{fmt}] gcn adjacency", A.to_dense(), Ad)
    M = peer.mean_adjacency(off, src, N)
    Md = (adj.double() / deg.clamp(min=1)[:, None]).float()
    close(f"[{fmt}] mean adjacency", M.to_dense(), Md)
    # aggregation
    x = torch.randn(N, 8, requires_grad=True)
    g = torch.randn(N, 8)
    y = peer.SpAgg.apply(x, A)
    (dx,) = torch.autograd.grad(y, x, g)
    x2 = x.detach().clone().requires_grad_()
    y2 = Ad @ x2
    (dx2,) = torch.autograd.grad(y2, x2, g)
    close(f"[{fmt}] SpAgg forward", y, y2)
    close(f"[{fmt}] SpAgg backward", dx, dx2)
    # sparse linear with dropped-out values, and rows()
    X = torch.rand(N, Fdim) * (torch.rand(N, Fdim) < 0.2)
    S = peer.Sparse.from_dense(X)
    close(f"[{fmt}] Sparse.from_dense", S.to_dense(), X)
    rows = torch.tensor([5, 3, 17, 0, 39])
    close(f"[{fmt}] Sparse.rows", S.rows(rows).to_dense(), X[rows])
    val = S.val * peer.keep_mask(S.val.shape, 0.5)
    Xd = peer.Sparse(S.crow, S.col, val, S.shape).to_dense()
    w = torch.randn(Fdim, 6, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    g = torch.randn(N, 6)
    y = peer.SparseLinear.apply(w, b, S, val)
    dw, db = torch.autograd.grad(y, (w, b), g)
    w2, b2 = w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    y2 = Xd @ w2 + b2
    dw2, db2 = torch.autograd.grad(y2, (w2, b2), g)
    close(f"[{fmt}] SparseLinear forward", y, y2)
    close(f"[{fmt}] SparseLinear d weight", dw, dw2)
    close(f"[{fmt}] SparseLinear d bias", db, db2)
    # dense rows dropped into sparse rows (Dropped), through a dense layer's [out, in] weight
    D = peer.Dropped(S, 0.5)
    Dd = D.m.to_dense()
    kept = Dd != 0
    close(f"[{fmt}] Dropped: kept values scaled", Dd[kept], 2 * X[kept])
    close(f"[{fmt}] Dropped: its transpose", D.mat_t().to_dense(), Dd.t())
    if not 0.3 < float(kept.sum()) / float((X != 0).sum()) < 0.7:
        bad.append(f"[{fmt}] Dropped: about half the entries kept")
    wt = torch.randn(6, Fdim, requires_grad=True)
    y = peer.SparseLinear.apply(wt.t(), None, D, D.val)
    (dwt,) = torch.autograd.grad(y, (wt,), g)
    wt2 = wt.detach().clone().requires_grad_()
    y2 = Dd @ wt2.t()
    (dwt2,) = torch.autograd.grad(y2, (wt2,), g)
    close(f"[{fmt}] Dropped SparseLinear forward", y, y2)
    close(f"[{fmt}] Dropped SparseLinear d weight", dwt, dwt2)

    # GAT layer: the peer's pieces against dense masked attention
    for D in (3, 5):
        G = peer.GatGraph(off, src, N, H)
        z = torch.randn(N, H * D, requires_grad=True)
        al = torch.randn(H, D, requires_grad=True)
        ar = torch.randn(H, D, requires_grad=True)
        gout = torch.randn(N, H * D)
        zz = z.view(N, H, D)
        el, er = (zz * al).sum(-1), (zz * ar).sum(-1)
        e = F.leaky_relu(peer.Gather.apply(el, G.src, G.Pt) + peer.Repeat.apply(er, G.lens), 0.2)
        out = peer.GatAggregate.apply(peer.EdgeSoftmax.apply(e, G.lens), z, G)
        grads = torch.autograd.grad(out, (z, al, ar), gout)
        z2, al2, ar2 = (t.detach().clone().requires_grad_() for t in (z, al, ar))
        zz2 = z2.view(N, H, D)
        mask = adj | torch.eye(N, dtype=torch.bool)
        out2 = dense_gat(zz2, al2, ar2, mask)
        grads2 = torch.autograd.grad(out2, (z2, al2, ar2), gout)
        close(f"[{fmt}] GAT (D={D}) forward", out, out2)
        for nm, a, b in zip(("d z", "d attn_l", "d attn_r"), grads, grads2):
            close(f"[{fmt}] GAT (D={D}) {nm}", a, b)
        # the same attention over some destination rows only (RETEXO's GAT stages), from the
        # messages of their support (the rows and their in-neighbours) only
        rows = torch.tensor([7, 0, 31, 12, 39])
        Gr = peer.GatGraph(off, src, N, H, rows=rows)
        assert Gr.support.numel() < N, "the support should leave some nodes out"
        zs = z.index_select(0, Gr.support)
        zz = zs.view(-1, H, D)
        el, er_r = (zz * al).sum(-1), (zz * ar).sum(-1).index_select(0, Gr.dest_pos)
        e_r = F.leaky_relu(peer.Gather.apply(el, Gr.src, Gr.Pt) + peer.Repeat.apply(er_r, Gr.lens), 0.2)
        out_r = peer.GatAggregate.apply(peer.EdgeSoftmax.apply(e_r, Gr.lens), zs, Gr)
        grads_r = torch.autograd.grad(out_r, (z, al, ar), gout[rows])
        zz2 = z2.view(N, H, D)
        out2 = dense_gat(zz2, al2, ar2, mask)
        grads2_r = torch.autograd.grad(out2[rows], (z2, al2, ar2), gout[rows])
        close(f"[{fmt}] GAT (D={D}) on rows forward", out_r, out2[rows].detach())
        for nm, a, b in zip(("d z", "d attn_l", "d attn_r"), grads_r, grads2_r):
            close(f"[{fmt}] GAT (D={D}) on rows {nm}", a, b)
        # the same rows aggregating their support's inputs first (RetexoStage.transform_inputs),
        # with z = x W: against the messages of x W
        x = torch.randn(N, 4)
        W = torch.randn(4, H * D, requires_grad=True)
        xs, Wv = x.index_select(0, Gr.support), W.view(4, H, D)
        sc = xs @ torch.cat([(Wv * al).sum(-1), (Wv * ar).sum(-1)], 1)
        e_i = F.leaky_relu(peer.Gather.apply(sc[:, :H], Gr.src, Gr.Pt) +
                           peer.Repeat.apply(sc.index_select(0, Gr.dest_pos)[:, H:], Gr.lens), 0.2)
        y = peer.GatAggregateInputs.apply(peer.EdgeSoftmax.apply(e_i, Gr.lens), xs, Gr)
        out_i = torch.einsum("nhf,fhd->nhd", y, Wv).reshape(rows.numel(), H * D)
        grads_i = torch.autograd.grad(out_i, (W, al, ar), gout[rows])
        W2 = W.detach().clone().requires_grad_()
        zz2 = (x @ W2).view(N, H, D)
        out2 = dense_gat(zz2, al2, ar2, mask)
        grads2_i = torch.autograd.grad(out2[rows], (W2, al2, ar2), gout[rows])
        close(f"[{fmt}] GAT (D={D}) inputs first forward", out_i, out2[rows].detach())
        for nm, a, b in zip(("d W", "d attn_l", "d attn_r"), grads_i, grads2_i):
            close(f"[{fmt}] GAT (D={D}) inputs first {nm}", a, b)

# oneDNN linear (and the torch alternative picked per shape)
for n, k, m in ((50, 30, 7), (300, 64, 40)):
    x = torch.randn(n, k, requires_grad=True)
    w = torch.randn(m, k, requires_grad=True)
    b = torch.randn(m, requires_grad=True)
    g = torch.randn(n, m)
    y = peer.DenseLinear.apply(x, w, b)
    grads = torch.autograd.grad(y, (x, w, b), g)
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, b))
    y2 = x2 @ w2.t() + b2
    grads2 = torch.autograd.grad(y2, (x2, w2, b2), g)
    close(f"DenseLinear {n}x{k}x{m} forward", y, y2)
    for nm, a, c in zip(("d x", "d w", "d b"), grads, grads2):
        close(f"DenseLinear {n}x{k}x{m} {nm}", a, c)

# dropout: the kept fraction and the scale
m = peer.keep_mask((1000, 100), 0.3)
kept = float((m > 0).float().mean())
print(f"{'dropout 0.3: kept fraction':40s} {kept:.4f}, scale {float(m.max()):.4f}")
if abs(kept - 0.7) > 0.01 or abs(float(m.max()) - 1 / 0.7) > 1e-5:
    bad.append("dropout")

# settings: the defaults table and config files under retexo_mpi's rules
def settings(text):
    import tempfile
    with tempfile.NamedTemporaryFile("w", suffix=".cfg", delete=False) as f:
        f.write(text)
    try:
        return peer.Settings(f.name)
    finally:
        os.unlink(f.name)


def refused(name, text, use=lambda st: None):
    try:
        use(settings(text))
    except SystemExit as e:
        print(f"{name:40s} refused: {e}")
        return
    bad.append(name)


root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
table = peer.read_config(os.path.join(root, "data", "defaults.cfg"))
st = settings("")
if (st.stages, st.per_stage("dropout"), st.per_stage("patience", int)) != (
        int(table["stages"]), [float(table["dropout"])] * (int(table["stages"]) - 1) + [float(table["last-stage-dropout"])],
        [int(table["patience"])] * (int(table["stages"]) - 1) + [int(table["last-stage-patience"])]):
    bad.append("settings: the table's per-stage defaults")
if settings("stages = 2\nlr = 0.1,0.02\n").per_stage("lr") != [0.1, 0.02]:
    bad.append("settings: a list of one value per stage")
if settings("stages = 4\nhidden = 64\n").per_stage("hidden", int) != [64] * 4:
    bad.append("settings: one value for every stage")
# Each model's candidates: the table's lists, its section's where it has one (retexo's
# retexo_options::searches; test_retexo's default-stages case counts the same).
axes = {}
for m in ("gcn", "sage", "gat"):
    c = peer.search_candidates(st, m)
    axes[m] = (sorted({wd for _, wd, _ in c}), sorted({str(n) for _, _, n in c}))
if axes != {"gcn": ([5e-4, 5e-3], ["layer", "none"]), "sage": ([0.0, 5e-4, 5e-3], ["None"]),
            "gat": ([5e-4, 5e-3], ["layer", "none"])}:
    bad.append(f"settings: each model's search axes, got {axes}")
if len(peer.search_candidates(settings("weight-decay = 1e-3\n"), "sage")) != 2:
    bad.append("settings: --weight-decay alone is the weight decay used")
if len(peer.search_candidates(settings("search-norm = layer,none\n"), "sage")) != 12:
    bad.append("settings: --search-norm given applies to every model")
refused("settings: a model's section", "[sage]\nsearch-weight-decay = 0\n")
refused("settings: a short list", "stages = 3\ndropout = 0.5,0.8\n", lambda st: st.per_stage("dropout"))
refused("settings: an unknown option", "no-such-option = 1\n")
refused("settings: an option given twice", "lr = 0.1\nlr = 0.2\n")
refused("settings: a line without '='", "lr 0.1\n")
refused("settings: a bad number", "epochs = 1.5\n", lambda st: st.value("epochs", int))
refused("settings: a bad boolean", "skip = maybe\n", lambda st: st.value("skip", bool))
for cfg in sorted(os.listdir(os.path.join(root, "perf", "configs"))):
    peer.Settings(os.path.join(root, "perf", "configs", cfg))  # every perf workload reads

print("FAILED: " + ", ".join(bad) if bad else "all checks passed")
sys.exit(1 if bad else 0)
