#!/usr/bin/env python3
"""Write a small OGB binary-layout dataset (raw/data.npz, raw/node-label.npz, split/s/*.csv.gz)
with Python's own zipfile, the way numpy's savez_compressed does (deflated entries opened with
force_zip64=True), so retexo's reader is checked against an independent ZIP writer.  No numpy.
Usage: make_npz_dataset.py DIR [--nan-train]  (--nan-train: a train node without a label)"""
import gzip
import os
import struct
import sys
import zipfile


def npy(descr, shape, payload, version=(1, 0)):
    sh = "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, sh)
    pre = 10 if version[0] == 1 else 12
    d += " " * ((64 - (pre + len(d) + 1) % 64) % 64) + "\n"
    size = struct.pack("<H", len(d)) if version[0] == 1 else struct.pack("<I", len(d))
    return b"\x93NUMPY" + bytes(version) + size + d.encode() + payload


def savez(path, arrays, compress):
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", compression=method, allowZip64=True) as z:
        for name, blob in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                f.write(blob)


out = sys.argv[1]
nan_train = "--nan-train" in sys.argv
os.makedirs(out + "/raw")
os.makedirs(out + "/split/s")
n, F = 6, 2
src, dst = [0, 1, 2, 3, 4], [1, 2, 3, 4, 5]
edge_index = struct.pack("<5q", *src) + struct.pack("<5q", *dst)
feat = struct.pack("<%de" % (n * F), *[0.5 * i for i in range(n * F)])  # float16
savez(out + "/raw/data.npz", {
    "edge_index": npy("<i8", (2, 5), edge_index),
    "node_feat": npy("<f2", (n, F), feat),
    "num_nodes_list": npy("<i8", (1,), struct.pack("<q", n)),
    "num_edges_list": npy("<i8", (1,), struct.pack("<q", 5)),
}, True)
nan = float("nan")
labels = [0, nan if nan_train else 1, nan, 1, 0, nan]
savez(out + "/raw/node-label.npz", {"node_label": npy("<f4", (n, 1), struct.pack("<6f", *labels), (2, 0))}, False)
for name, ids in (("train", [0, 1]), ("valid", [3]), ("test", [4])):
    with gzip.open("%s/split/s/%s.csv.gz" % (out, name), "wt") as f:
        f.write("".join("%d\n" % i for i in ids))
