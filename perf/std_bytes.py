"""The standard trainer's halo bytes as a formula of the halo plan (perf/report.py, perf/products_p8.sh).

For the 2-layer GCN of the products-scale runs: the first layer aggregates its F-wide inputs
(F < hidden), the second transforms to C first (C < hidden), so every epoch each halo row
crosses once per layer forward (F, then C wide), once backward (the second layer's C-wide
message gradients; the first layer has no message parameters) and once per evaluation
forward (every epoch, plus the final one).  When the raw features cross once (retexo's
default) the F-wide rows travel in the first epoch only, for training and evaluation alike
(transductive); --resend-features sends them in every forward pass.  fp32 rows, bytes summed
over ranks; h is the number of halo rows over all partitions.
"""
import sys

HALO_PURPOSES = ("halo_forward", "halo_backward", "halo_eval")


def halo_rows(stats_path):
    """Halo rows over all partitions, from `retexo_mpi --mode stats` output (its "all" line)."""
    for line in open(stats_path):
        f = line.split()
        if f and f[0] == "all":
            return int(f[2])
    sys.exit(f"no 'all' line in {stats_path}")


def standard_halo(h, epochs, features, classes, resend):
    """Predicted bytes per purpose for `epochs` epochs (evaluated after each) and the final evaluation."""
    f, c, e = features, classes, epochs
    if resend:
        return {"halo_forward": e * h * (f + c) * 4, "halo_backward": e * h * c * 4,
                "halo_eval": (e + 1) * h * (f + c) * 4}
    return {"halo_forward": h * f * 4 + e * h * c * 4, "halo_backward": e * h * c * 4,
            "halo_eval": (e + 1) * h * c * 4}


def other_per_epoch(measured, epochs):
    """Measured bytes per epoch that are not halo rows or setup (gradient all-reduce, metrics, control)."""
    skip = set(HALO_PURPOSES) | {"total", "reference_sent_plus_received", "setup"}
    return sum(v for k, v in measured.items() if k not in skip) / max(1, epochs)


def standard_total(h, epochs, features, classes, resend, measured, measured_epochs):
    """The standard trainer's total bytes for `epochs` epochs: halo rows by the formula, setup as
    measured, the other purposes at the measured rate per epoch."""
    halo = sum(standard_halo(h, epochs, features, classes, resend).values())
    return halo + measured["setup"] + other_per_epoch(measured, measured_epochs) * epochs
