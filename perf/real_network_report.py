#!/usr/bin/env python3
"""The real-network section of the perf report (perf/real_network.sh's results in OUT/net).

    perf/real_network_report.py OUT     writes OUT/net/report.md and OUT/net_time_to_accuracy.png
perf/report.py includes the same section in OUT/report.md.

Per graph, mode and link rate: the wall time of mpirun, training time, time to the standard
trainer's final test accuracy (of its shared-memory run), the bytes the hosts' links carried
against the ledger, and the emulated prediction: the shared-memory run's time to that point
plus its bytes / ranks / rate (the model of perf/report.py's emulated tables, without latency,
as the links add none), and with the latency perf/report.py assumes for that rate.  A run
capped to fewer epochs (perf/real_network.sh's CAP_S) is extrapolated from its measured epochs
at the mean time per epoch; those figures carry a '~'.
"""
import json
import os
import sys

MODES = ("retexo", "retexo_int8", "retexo_rep", "standard", "bns")  # retexo_rep: --replicate-train
# Latency perf/report.py's emulated tables assume at each bandwidth (s per communication call).
LATENCY = {10e9: 50e-6, 1e9: 20e-3, 100e6: 5e-3, 10e6: 30e-3}


def _load(path):
    try:
        with open(path) as f:
            j = json.load(f)
    except (OSError, ValueError):
        return None
    return j["runs"][0] if "runs" in j else j


def _first_hit(history, target):
    return next((i for i, h in enumerate(history) if h["test"] >= target), None)


def _emulated(point, shm, bits, latency):
    """The shared-memory run's time at POINT plus its bytes (summed over ranks) over the rate,
    scaled to the busiest rank (max_rank_bytes against the mean), and LATENCY per call of rank 0
    (a history record's calls are rank 0's)."""
    ranks = shm["ranks"]
    busiest = shm["max_rank_bytes"] * ranks / max(1, shm["bytes"]["total"])
    return point["time_s"] + 8.0 * point["bytes"] / ranks * busiest / bits + point.get("calls", 0) * latency


def _extrapolate(run, wire, shm_hit_index, shm_epochs):
    """(time to target, training time, wall time, extrapolated?) of a possibly capped run."""
    h = run["history"]
    capped = wire.get("capped_epochs") is not None and len(h) < shm_epochs
    per_epoch = (h[-1]["time_s"] - h[0]["time_s"]) / max(1, len(h) - 1)
    if shm_hit_index is None:
        to_target = None
    elif shm_hit_index < len(h):
        to_target = h[shm_hit_index]["time_s"]
    else:
        to_target = h[-1]["time_s"] + (shm_hit_index + 1 - len(h)) * per_epoch
    if not capped:
        return to_target, run["time_s"]["total"], wire["wall_s"], False
    more = (shm_epochs - len(h)) * per_epoch
    return to_target, run["time_s"]["total"] + more, wire["wall_s"] + more, True


def section(out):
    """Markdown lines, a summary dict and the rows of the plot; empty when OUT/net is absent."""
    net = os.path.join(out, "net")
    if not os.path.isdir(net):
        return [], {}, []
    runs = {}
    for name in sorted(os.listdir(net)):
        if not name.endswith(".wire"):
            continue
        graph, mode, rate = name[:-5].split("-", 2)
        run, wire = _load(os.path.join(net, name[:-5] + ".json")), _load(os.path.join(net, name))
        if run and wire:
            runs[(graph, mode, rate)] = (run, wire)
    if not runs:
        return [], {}, []
    md = ["## Real network: 4 hosts in network namespaces, Open MPI over TCP, links shaped with tc tbf\n",
          "`perf/real_network.sh`: every host one rank, one link to a switch, shaped to the rate both ways; "
          "no latency is added (no netem here), so the prediction beside each figure is the shared-memory run's "
          "time plus its bytes / ranks / rate, and in brackets with the per-call latency of the emulated tables "
          "above.  Target: the standard trainer's final test accuracy.  Wire: bytes all hosts' links sent "
          "(interface counters: MPI payload plus TCP/IP/Ethernet headers and the launch) over the ledger's "
          "total.  `~`: extrapolated from a run capped to fewer epochs at its measured time per epoch.\n",
          "| graph | mode | rate | test acc | wall s | train s | prediction s | to target s | prediction s | "
          "ledger MB | wire / ledger |",
          "|---|---|---|---|---|---|---|---|---|---|---|"]
    summary, plot = {}, []
    bits_of = {rate: wire["rate_bits"] for (_, _, rate), (_, wire) in runs.items()}
    rates = sorted(bits_of, key=lambda r: -bits_of[r])  # fastest first
    for graph in sorted({k[0] for k in runs}):
        std = _load(os.path.join(net, f"{graph}-standard-shm.json"))
        if std is None:
            continue
        target = std["accuracy"]["test"]
        for mode in MODES:
            shm = _load(os.path.join(net, f"{graph}-{mode}-shm.json"))
            if shm is None:
                continue
            hit_i = _first_hit(shm["history"], target)
            for rate in rates:
                if (graph, mode, rate) not in runs:
                    continue
                run, wire = runs[(graph, mode, rate)]
                bits = wire["rate_bits"]
                lat = LATENCY.get(bits, 0.0)
                to_target, train_s, wall_s, approx = _extrapolate(run, wire, hit_i, len(shm["history"]))
                mark = "~" if approx else ""
                total = {"time_s": shm["time_s"]["total"], "bytes": shm["bytes"]["total"],
                         "calls": shm["history"][-1].get("calls", 0)}
                pred_total = (_emulated(total, shm, bits, 0.0), _emulated(total, shm, bits, lat))
                if hit_i is None:
                    tt, pred_tt = "never", "never"
                else:
                    hit = shm["history"][hit_i]
                    p0, p1 = _emulated(hit, shm, bits, 0.0), _emulated(hit, shm, bits, lat)
                    tt_mark = "~" if approx and hit_i >= len(run["history"]) else ""
                    tt, pred_tt = f"{tt_mark}{to_target:.1f}", f"{p0:.1f} ({p1:.1f})"
                    plot.append((graph, mode, bits, to_target, p0))
                ledger = run["bytes"]["total"]
                ratio = wire["wire_tx_bytes"] / ledger if ledger else float("nan")
                acc = f"{run['accuracy']['test']:.4f}" + (f" ({len(run['history'])} ep)" if approx else "")
                md.append(f"| {graph} | {mode} | {rate} | {acc} | {mark}{wall_s:.1f} | {mark}{train_s:.1f} | "
                          f"{pred_total[0]:.1f} ({pred_total[1]:.1f}) | {tt} | {pred_tt} | {ledger / 1e6:.1f} | "
                          f"{ratio:.3f} |")
                summary[f"{graph}/{mode}/{rate}"] = {"wall_s": wall_s, "train_s": train_s, "to_target_s": to_target,
                                                     "extrapolated": approx, "ledger_bytes": ledger,
                                                     "wire_tx_bytes": wire["wire_tx_bytes"]}
        for mode in (m for m in MODES if m.startswith("retexo")):
            speedups = []
            for rate in rates:
                r, s = summary.get(f"{graph}/{mode}/{rate}"), summary.get(f"{graph}/standard/{rate}")
                if r and s and r["to_target_s"] and s["to_target_s"]:
                    speedups.append(f"{rate} {s['to_target_s'] / r['to_target_s']:.1f}x")
            if speedups:
                md.append(f"| {graph} | {mode} sooner to target than standard | | | | | | {', '.join(speedups)} | | | |")
    md.append("")
    return md, summary, plot


def save_plot(out, plot):
    """OUT/net_time_to_accuracy.png: time to target against link rate, per graph and mode."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    graphs = sorted({p[0] for p in plot})
    fig, axes = plt.subplots(1, len(graphs), figsize=(6 * len(graphs), 4.5), squeeze=False)
    colours = {"retexo": "tab:blue", "retexo_int8": "tab:purple", "retexo_rep": "tab:cyan", "standard": "tab:orange",
               "bns": "tab:green"}
    for ax, graph in zip(axes[0], graphs):
        for mode in MODES:
            pts = sorted((b, t, p) for g, m, b, t, p in plot if g == graph and m == mode)
            if not pts:
                continue
            ax.plot([b / 1e6 for b, _, _ in pts], [t for _, t, _ in pts], "o-", color=colours[mode],
                    label=f"{mode} (real)")
            ax.plot([b / 1e6 for b, _, _ in pts], [p for _, _, p in pts], "x--", color=colours[mode],
                    label=f"{mode} (emulated)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("link rate (Mb/s)")
        ax.set_ylabel("time to the standard trainer's accuracy (s)")
        ax.set_title(f"{graph}: 4 hosts over TCP")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "net_time_to_accuracy.png"), dpi=120)


if __name__ == "__main__":
    out_dir = sys.argv[1]
    lines, _, points = section(out_dir)
    if points:
        try:
            save_plot(out_dir, points)
            lines.append("Plot: `net_time_to_accuracy.png`.\n")
        except ImportError:
            lines.append("(matplotlib missing: no plot)\n")
    with open(os.path.join(out_dir, "net", "report.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
