#!/usr/bin/python3
"""perf/peer/summarize.py OUT: OUT/runs/*.json (written by perf/peer/compare.sh) -> OUT/peer.json, OUT/peer.md.

Each side's time is the minimum over its repetitions: retexo's `time_s.total` from its metrics
JSON, the peer's `time_s.total` (both: training with the per-epoch / per-round evaluation, the
setup the run needs, no data loading).  Ratio = peer / retexo (> 1: retexo is faster)."""
import glob
import json
import os
import statistics
import sys

out = sys.argv[1]
meta_path = os.path.join(out, "meta.json")
meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
cells = {}
for path in sorted(glob.glob(os.path.join(out, "runs", "*.json"))):
    # <dataset>.<mode>-<model>.<side>.<rep>.json
    base = os.path.basename(path)[:-5]
    ds, mm, side, rep = base.rsplit(".", 3)
    mode, model = mm.split("-", 1)
    try:
        j = json.load(open(path))
    except (OSError, ValueError):
        continue
    c = cells.setdefault((ds, mode, model), {"retexo": [], "peer": []})
    c[side].append(j)

order_ds = meta.get("datasets", sorted({k[0] for k in cells}))
order_m = [tuple(x.split(":")) for x in meta.get("models", [f"{m}:{k}" for m in ("standard", "retexo")
                                                               for k in ("gcn", "sage", "gat")])]
rows = []
for ds in order_ds:
    for mode, model in order_m:
        c = cells.get((ds, mode, model))
        if not c or not c["retexo"] or not c["peer"]:
            continue
        rt = min(c["retexo"], key=lambda j: j["time_s"]["total"])
        pt = min(c["peer"], key=lambda j: j["time_s"]["total"])
        t_r, t_p = rt["time_s"]["total"], pt["time_s"]["total"]
        # RETEXO: the rounds retexo's stages ran (the peer's, with patience 0, are the same)
        steps = meta.get("epochs", 100) if mode == "standard" else sum(s["rounds"] for s in rt["stages"])
        row = {"dataset": ds, "mode": mode, "model": model,
               "retexo_s": t_r, "peer_s": t_p, "ratio": t_p / t_r,
               "retexo_runs_s": sorted(j["time_s"]["total"] for j in c["retexo"]),
               "peer_runs_s": sorted(j["time_s"]["total"] for j in c["peer"]),
               "retexo_ms_per_epoch": t_r / steps * 1e3, "peer_ms_per_epoch": t_p / steps * 1e3,
               "retexo_test": rt["accuracy"]["test"], "peer_test": pt["accuracy"]["test"],
               "retexo_phases_s": rt["time_s"], "peer_phases_s": pt["time_s"],
               "peer_input": pt.get("first_layer_input") or " ".join("+".join(s["inputs"]) for s in pt.get("stages", [])),
               "feature_density": pt.get("feature_density")}
        rows.append(row)

gemm = {}
for c in cells.values():
    for j in c["peer"]:
        for shape, r in j.get("gemm_gflops", {}).items():
            g = gemm.setdefault(shape, {})
            for k, v in r.items():
                g[k] = max(g.get(k, 0), v)
median = statistics.median(r["ratio"] for r in rows) if rows else None
summary = {"rows": rows, "median_ratio": median, "gemm_gflops": gemm, **meta}
with open(os.path.join(out, "peer.json"), "w") as f:
    json.dump(summary, f, indent=2)


def phases(p):
    keys = [k for k in p if k != "total"]
    return ", ".join(f"{k} {p[k]:.2f}" for k in keys)


lines = ["## retexo against a tuned PyTorch peer (perf/peer)", ""]
lines.append(f"One process, {meta.get('threads', 2)} OpenMP threads on both sides (retexo: `mpi_scripts/retexo_run.sh -np 1`, "
             f"whose rank may use every core; both: OMP_WAIT_POLICY=PASSIVE), {meta.get('epochs', 100)} epochs (standard) / "
             f"{meta.get('rounds', 100)} rounds per stage (RETEXO), "
             f"{'the workloads of perf/configs' if meta.get('presets') == 'perf' else 'the defaults'} "
             "with every stage running all its rounds (patience 0), "
             f"split random-paper, seed 1; each time is the best of {meta.get('reps', 3)} runs and covers the "
             "whole training including the evaluation after every epoch / round (data loading excluded). "
             "Ratio = peer / retexo: above 1 retexo is faster.")
lines.append("")
lines.append("| dataset | model | retexo s | peer s | retexo ms/epoch | peer ms/epoch | ratio peer/retexo | "
             "test acc retexo | test acc peer | runs | peer input |")
lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    name = ("RETEXO " if r["mode"] == "retexo" else "standard ") + r["model"].upper()
    lines.append(f"| {r['dataset']} | {name} | {r['retexo_s']:.2f} | {r['peer_s']:.2f} | "
                 f"{r['retexo_ms_per_epoch']:.1f} | {r['peer_ms_per_epoch']:.1f} | {r['ratio']:.2f} | "
                 f"{r['retexo_test']:.3f} | {r['peer_test']:.3f} | {len(r['retexo_runs_s'])} | {r['peer_input']} |")
lines.append("")
if median is not None:
    lines.append(f"Median ratio peer/retexo over {len(rows)} cells: **{median:.2f}** "
                 f"(retexo faster in {sum(r['ratio'] > 1 for r in rows)} of {len(rows)}).")
lines.append("")
lines.append("ms/epoch: total / epochs (standard), total / rounds over all stages (RETEXO).  RETEXO rows: both "
             "sides' time includes every stage's aggregation, training, per-round validation and embedding, and "
             "the label spreading after the last.  runs: runs "
             "per side (the minimum is shown).  peer input: the layout the peer chose (timed) for the first "
             "layer's / each stage's input (sparse: CSR/COO rows multiplied sparse x dense).")
if meta.get("load"):
    lines.append("")
    lines.append(f"Load average during the runs (1 min, other jobs on this VM included): {meta['load']}.")
if gemm:
    lines.append("")
    lines.append("The peer's dense products go through torch's bundled oneDNN (Debian's torch links the reference "
                 "BLAS); its sgemm throughput, GFLOP/s:")
    lines.append("")
    keys = sorted({k for g in gemm.values() for k in g})
    lines.append("| m x k x n | " + " | ".join(keys) + " |")
    lines.append("|---|" + "---|" * len(keys))
    for shape, g in gemm.items():
        lines.append(f"| {shape} | " + " | ".join(str(g.get(k, "")) for k in keys) + " |")
lines.append("")
lines.append("Phases of the fastest runs, seconds (retexo: its metrics JSON `time_s`; peer: its own split):")
lines.append("")
lines.append("| dataset | model | retexo | peer |")
lines.append("|---|---|---|---|")
for r in rows:
    name = ("RETEXO " if r["mode"] == "retexo" else "standard ") + r["model"].upper()
    lines.append(f"| {r['dataset']} | {name} | {phases(r['retexo_phases_s'])} | {phases(r['peer_phases_s'])} |")
if meta.get("duration_s"):
    lines.append("")
    lines.append(f"compare.sh took {meta['duration_s'] / 60:.1f} min.")
with open(os.path.join(out, "peer.md"), "w") as f:
    f.write("\n".join(lines) + "\n")
print("\n".join(lines))
