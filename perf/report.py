#!/usr/bin/env python3
"""Build perf/run_all.sh's report (markdown, JSON, PNG plots) from its result files."""
import glob
import json
import os
import re
import sys

import real_network_report  # perf/real_network_report.py, next to this script
import std_bytes  # perf/std_bytes.py, next to this script

out = sys.argv[1]
md = []
summary = {}


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def runs_of(j):
    if j is None:
        return []
    return j["runs"] if "runs" in j else [j]


def by_mode(j):
    return {r["mode"]: r for r in runs_of(j)}


def gb(b):
    if b >= 1e12:
        return f"{b / 1e12:.3g} TB"
    return f"{b / 1e9:.3g} GB" if b >= 1e8 else f"{b / 1e6:.3g} MB"


def time_v(path):
    """Wall time (s) and max RSS (bytes) from a /usr/bin/time -v log."""
    try:
        text = open(path).read()
    except OSError:
        return None, None
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)", text)
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", text)
    secs = None
    if wall:
        parts = [float(p) for p in wall.group(1).split(":")]
        secs = sum(p * 60 ** i for i, p in enumerate(reversed(parts)))
    return secs, int(rss.group(1)) * 1024 if rss else None


def emulated(rec_seconds, rec_bytes, rec_calls, ranks, net):
    return rec_seconds + 8.0 * rec_bytes / ranks / net[0] + rec_calls * net[1]


NETS = {"datacenter_10Gbps": (10e9, 50e-6), "wan_1Gbps": (1e9, 20e-3), "proximity_100Mbps": (100e6, 5e-3),
        "edge_10Mbps": (10e6, 30e-3)}

# 1. Kernels.
k = load(os.path.join(out, "kernels.json"))
if k:
    md.append("## Kernels against this machine's limits\n")
    md.append(f"Triad {k['triad_gbs']:.1f} GB/s, random row gather {k['gather_gbs']['128']:.1f} / "
              f"{k['gather_gbs']['256']:.1f} GB/s (width 128 / 256), oneDNN sgemm {k['sgemm_gflops']:.0f} GFLOP/s, "
              f"{k['threads']} threads.\n")
    md.append("| kernel | width | ms | GB/s | x triad | x gather |")
    md.append("|---|---|---|---|---|---|")
    for name, widths in k["aggregate"].items():
        for w, v in widths.items():
            md.append(f"| aggregate {name} | {w} | {v['ms']:.1f} | {v['gbs']:.2f} | {v['ratio_triad']:.2f} | "
                      f"{v.get('ratio_gather', float('nan')):.2f} |")
    md.append("\n| linear fwd+bwd | N | ms | GFLOP/s | x sgemm |")
    md.append("|---|---|---|---|---|")
    for f, ns in k["linear"].items():
        for n, v in ns.items():
            md.append(f"| {f} | {n} | {v['ms']:.1f} | {v['gflops']:.0f} | {v['ratio_sgemm']:.2f} |")
    md.append("\n| GAT fwd+bwd | ns/edge | x GCN aggregation fwd+bwd |")
    md.append("|---|---|---|")
    for w, v in k["gat"].items():
        md.append(f"| width {w} | {v['ns_per_edge']:.1f} | {v['ratio_gcn']:.2f} |")
    if "sparse_linear" in k:
        md.append("\n| sparse linear fwd + weight gradient (4096 -> 256) | density | ms | GFLOP/s on non-zeros | "
                  "x sgemm | x the dense kernel's speed |")
        md.append("|---|---|---|---|---|---|")
        for v in k["sparse_linear"].values():
            md.append(f"| | {100 * v['density']:.2f}% | {v['ms']:.1f} | {v['gflops']:.1f} | {v['ratio_sgemm']:.2f} | "
                      f"{v['speedup_vs_dense']:.1f} |")
    if "adam" in k:
        md.append("\n| Adam step (F x 256, 28 B a parameter) | parameters | ms | GB/s | x triad |")
        md.append("|---|---|---|---|---|")
        for f, v in k["adam"].items():
            md.append(f"| F={f} | {v['params']} | {v['ms']:.2f} | {v['gbs']:.2f} | {v['ratio_triad']:.2f} |")
    if "stage_round" in k:
        v = k["stage_round"]
        md.append(f"\nA RETEXO stage's round (amazon-computers SAGE stage 0: 200 training rows forward and "
                  f"backward, an Adam step, 500 validation rows forward; 1,534 -> 256 -> 10): {v['ms']:.2f} ms, "
                  f"{v['ratio_sgemm']:.2f} x sgemm.")
    if "region_us" in k:
        r = k["region_us"]
        md.append(f"\nAn empty OpenMP parallel region: {r['after_pause']:.1f} us after a 1 ms pause, "
                  f"{r['back_to_back']:.1f} us back to back (OMP_WAIT_POLICY {r.get('wait_policy', 'not recorded')}).")
    md.append("")
    summary["kernels"] = k


def parts_of(path):
    return re.search(r"p(\d+)\.json$", path).group(1)


def mode_table(title, files):
    rows = []
    md.append(f"## {title}\n")
    md.append("| run | mode | test acc | total bytes | halo fwd | halo bwd | halo eval | gradients | time s | "
              "RETEXO/mode bytes |")
    md.append("|---|---|---|---|---|---|---|---|---|---|")
    for label, path in files:
        modes = by_mode(load(path))
        if not modes:
            continue
        ret = modes.get("retexo")
        for m, r in modes.items():
            b = r["bytes"]
            ratio = "" if ret is None or m == "retexo" else f"1/{b['total'] / max(1, ret['bytes']['total']):.0f}"
            md.append(f"| {label} | {m} | {r['accuracy']['test']:.4f} | {gb(b['total'])} | {gb(b['halo_forward'])} | "
                      f"{gb(b['halo_backward'])} | {gb(b['halo_eval'])} | {gb(b['gradients'])} | "
                      f"{r['time_s']['total']:.1f} | {ratio} |")
            rows.append((label, m, r))
    md.append("")
    return rows


syn_files = sorted(glob.glob(os.path.join(out, "syn-p*.json")), key=lambda p: int(re.search(r"p(\d+)", p).group(1)))
syn_rows = mode_table("Synthetic graph: bytes and accuracy by partition count (rounds = epochs)",
                      [("P=" + parts_of(p), p) for p in syn_files])
ds_files = [p for p in sorted(glob.glob(os.path.join(out, "*-p4.json"))) if not os.path.basename(p).startswith(("syn", "products"))]
ds_rows = mode_table("Shared datasets, 4 random partitions", [(os.path.basename(p)[:-8], p) for p in ds_files])

# Emulated networks and time to accuracy.
md.append("## Emulated networks: total time (s) and time to the standard trainer's final test accuracy\n")
md.append("Time = measured time + the busiest rank's bytes / bandwidth + one latency per communication call. "
          "Settings: " + ", ".join(f"{n} ({bw / 1e6:g} Mb/s, {lat * 1e3:g} ms)" for n, (bw, lat) in NETS.items()) + ".\n")
md.append("| run | mode | " + " | ".join(f"total {n}" for n in NETS) + " | " +
          " | ".join(f"to-accuracy {n}" for n in NETS) + " | to-accuracy real |")
md.append("|---|---|" + "---|" * (2 * len(NETS) + 1))
tta = {}
for label, path in [("syn P=" + parts_of(p), p) for p in syn_files] + \
                   [(os.path.basename(p)[:-8], p) for p in ds_files]:
    modes = by_mode(load(path))
    if "standard" not in modes:
        continue
    target = modes["standard"]["accuracy"]["test"]
    for m, r in modes.items():
        totals = [r.get("emulated_time_s", {}).get(n, float("nan")) for n in NETS]
        hit = next((h for h in r["history"] if h["test"] >= target), None)
        if hit is None:
            reach = ["never"] * (len(NETS) + 1)
        else:
            reach = [f"{emulated(hit['time_s'], hit['bytes'], hit.get('calls', 0), r['ranks'], net):.1f}"
                     for net in NETS.values()] + [f"{hit['time_s']:.1f}"]
        tta[f"{label}/{m}"] = reach
        md.append(f"| {label} | {m} | " + " | ".join(f"{t:.1f}" for t in totals) + " | " + " | ".join(reach) + " |")
md.append("")
summary["time_to_accuracy"] = tta

# Products scale.
md.append("## Products-scale synthetic graph (2.4M nodes, 62M undirected edges, 100 features, 47 classes)\n")
gen_t, gen_rss = time_v(os.path.join(out, "products-generate.log"))
if gen_t:
    md.append(f"- generate: {gen_t:.0f} s, peak RSS {gb(gen_rss)}")
t, rss = time_v(os.path.join(out, "products-partition-p4.log"))
if t:
    md.append(f"- partition 4 ways (random): {t:.0f} s, peak RSS {gb(rss)}")
prod = {}
for path in glob.glob(os.path.join(out, "products-*-p4.json")):
    j = load(path)
    if j:
        prod[re.match(r"products-(.+)-p4\.json", os.path.basename(path)).group(1)] = j
for mode, j in sorted(prod.items()):
    rss = j.get("peak_rss_bytes", [])
    line = (f"- {mode}, 4 ranks: test accuracy {j['accuracy']['test']:.4f}, total {j['time_s']['total']:.0f} s, "
            f"bytes {gb(j['bytes']['total'])}, peak RSS all ranks {gb(sum(rss))} (max rank {gb(max(rss) if rss else 0)})")
    wall, _ = time_v(os.path.join(out, f"products-{mode}-p4.log"))
    if wall:
        line += f", mpirun wall time {wall:.0f} s (load and output included)"
    if mode.startswith("standard"):
        epochs = len(j["history"])
        times = [e["time_s"] for e in j["history"]]
        later = [b - a for a, b in zip(times, times[1:])]
        line += f"; {epochs} epochs, the first {times[0]:.1f} s (setup included)"
        if later:
            line += f", then {sum(later) / len(later):.1f} s per epoch"
    if mode.startswith("retexo"):
        line += "; stages: " + ", ".join(f"{s['rounds']} rounds (best {s['best_round']})" for s in j["stages"])
    md.append(line)
stats = os.path.join(out, "products-p4-stats.txt")
std_runs = {m: j for m, j in prod.items() if m in ("standard", "standard_resend")}
if std_runs and os.path.exists(stats):
    h = std_bytes.halo_rows(stats)
    md.append(f"\nStandard trainer's halo bytes against perf/std_bytes.py ({h} halo rows over the 4 partitions):\n")
    md.append("| run | purpose | formula | measured |")
    md.append("|---|---|---|---|")
    totals = {}
    for mode, j in sorted(std_runs.items()):
        epochs, resend = len(j["history"]), mode == "standard_resend"
        for k, v in std_bytes.standard_halo(h, epochs, 100, 47, resend).items():
            md.append(f"| {mode} | {k} | {v} | {j['bytes'][k]} |")
            summary[f"products_formula_ok_{mode}"] = summary.get(f"products_formula_ok_{mode}", True) and v == j["bytes"][k]
        totals[mode] = std_bytes.standard_total(h, 200, 100, 47, resend, j["bytes"], epochs)
    md.append("")
    for mode, j in sorted(prod.items()):
        if not mode.startswith("retexo"):
            continue
        b = j["bytes"]["total"]
        parts = [f"{gb(t)} for {m} (1/{t / max(1, b):.0f})" for m, t in sorted(totals.items())]
        md.append(f"- {mode} sends {gb(b)}; the standard trainer for 200 epochs (halo rows by the formula, "
                  f"the rest at the measured rate): " + ", ".join(parts))
        for m, t in totals.items():
            summary[f"products_ratio_{mode}_vs_{m}"] = t / max(1, b)
md.append("")

# Exchange precision.
wire = [("fp32", by_mode(load(os.path.join(out, "syn-p8.json"))).get("retexo"))]
for w in ("bf16", "int8"):
    wire.append((w, by_mode(load(os.path.join(out, f"wire-syn-p8-{w}.json"))).get("retexo")))
wire = [(w, r) for w, r in wire if r]
if wire:
    md.append("## Exchange precision (RETEXO, synthetic graph, 8 partitions)\n")
    md.append("| exchange | halo bytes | total bytes | test accuracy |")
    md.append("|---|---|---|---|")
    for w, r in wire:
        md.append(f"| {w} | {gb(r['bytes']['halo_forward'])} | {gb(r['bytes']['total'])} | {r['accuracy']['test']:.4f} |")
        summary[f"wire_{w}"] = {"bytes": r["bytes"]["total"], "test": r["accuracy"]["test"]}
    md.append("")

# Overlap.
ov = {(bw, o): by_mode(load(os.path.join(out, f"overlap-{bw}-{o}.json"))) for bw in ("1e10", "1e9")
      for o in ("overlap", "no-overlap")}
if any(ov.values()):
    md.append("## Overlapping halo exchanges with aggregation (GCN, amazon-computers (cora with QUICK=1), 2 METIS partitions)\n")
    md.append("Rank 0's seconds waiting for halo rows on an emulated network (RETEXO: the stage exchanges; "
              "standard: 30 epochs), blocking against overlapped with the interior rows' aggregation.\n")
    md.append("| network | mode | exchange, blocking | exchange, overlapped | total, blocking | total, overlapped |")
    md.append("|---|---|---|---|---|---|")
    summary["overlap"] = {}
    for bw in ("1e10", "1e9"):
        for m in ("retexo", "standard"):
            b, o = ov[(bw, "no-overlap")].get(m), ov[(bw, "overlap")].get(m)
            if b and o:
                md.append(f"| {float(bw) / 1e9:g} Gb/s | {m} | {b['time_s']['exchange']:.3f} | "
                          f"{o['time_s']['exchange']:.3f} | {b['time_s']['total']:.2f} | {o['time_s']['total']:.2f} |")
                summary["overlap"][f"{m}_{bw}"] = {"blocking": b["time_s"], "overlapped": o["time_s"]}
    md.append("")

# Plots.
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    colours = {"retexo": "tab:green", "standard": "tab:blue", "bns": "tab:orange"}
    fig, ax = plt.subplots(figsize=(7, 5))
    for label, m, r in syn_rows + ds_rows:
        ax.scatter(r["bytes"]["total"], r["accuracy"]["test"], color=colours.get(m, "k"), label=m)
        ax.annotate(label, (r["bytes"]["total"], r["accuracy"]["test"]), fontsize=6)
    handles = {h.get_label(): h for h in ax.collections}
    ax.legend(handles.values(), handles.keys())
    ax.set_xscale("log")
    ax.set_xlabel("total bytes sent (log)")
    ax.set_ylabel("test accuracy")
    models = ", ".join(sorted({r["model"] for _, _, r in syn_rows + ds_rows}))
    ax.set_title(f"accuracy against network data ({models})")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "accuracy_vs_bytes.png"), dpi=120)
    fig, ax = plt.subplots(figsize=(7, 5))
    for m in ("retexo", "standard", "bns"):
        pts = sorted((int(l.split("=")[1]), r["bytes"]["total"]) for l, mm, r in syn_rows if mm == m)
        if pts:
            ax.plot([p for p, _ in pts], [b for _, b in pts], "o-", color=colours[m], label=m)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("partitions")
    ax.set_ylabel("total bytes sent (log)")
    ax.legend()
    ax.set_title("network data against partition count (synthetic graph)")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "bytes_vs_partitions.png"), dpi=120)
    md.append("Plots: `accuracy_vs_bytes.png`, `bytes_vs_partitions.png`.\n")
except ImportError:
    md.append("(matplotlib missing: no plots)\n")

# Real network (perf/real_network.sh, step 8 of run_all.sh).
net_md, net_summary, net_plot = real_network_report.section(out)
md.extend(net_md)
if net_summary:
    summary["real_network"] = net_summary
if net_plot:
    try:
        real_network_report.save_plot(out, net_plot)
        md.append("Plot: `net_time_to_accuracy.png`.\n")
    except ImportError:
        md.append("(matplotlib missing: no plot)\n")

peer_md = os.path.join(out, "peer", "peer.md")
if os.path.exists(peer_md):  # written by perf/peer/compare.sh (step 7 of run_all.sh)
    md.append(open(peer_md).read())
    summary["peer"] = load(os.path.join(out, "peer", "peer.json"))

with open(os.path.join(out, "report.md"), "w") as f:
    f.write("# retexo performance report\n\n" + "\n".join(md) + "\n")
with open(os.path.join(out, "report.json"), "w") as f:
    json.dump(summary, f, indent=2)
print("\n".join(md))
