#!/usr/bin/python3
"""Compare a candidate golden set with the recorded one, bit for bit (test/golden/golden.sh).

Metrics JSON: every value equal (floats compared exactly), wall times and memory aside.
HDF5 files (models, predictions, graph and partition files): the same groups, datasets and
attributes, with the same shapes, types and bytes.  Other files: the same bytes.
Usage: compare.py GOLDEN_DIR CANDIDATE_DIR
"""
import json
import sys
from pathlib import Path

import h5py
import numpy as np

# Keys that hold measured time or memory, not results.
TIMING_KEYS = {"time_s", "emulated_time_s", "peak_rss_bytes"}


def strip_timing(value):
    if isinstance(value, dict):
        return {k: strip_timing(v) for k, v in value.items() if k not in TIMING_KEYS}
    if isinstance(value, list):
        return [strip_timing(v) for v in value]
    return value


def json_diffs(a, b, path=""):
    if type(a) is not type(b):
        return [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, dict):
        out = [f"{path}/{k}: only in the golden set" for k in a.keys() - b.keys()]
        out += [f"{path}/{k}: only in the candidate" for k in b.keys() - a.keys()]
        for k in sorted(a.keys() & b.keys()):
            out += json_diffs(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} entries != {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += json_diffs(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def attr_bytes(v):
    if isinstance(v, np.ndarray):
        return (v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, (bytes, str)):
        return v
    return (np.asarray(v).dtype.str, np.asarray(v).tobytes())


def h5_items(path):
    items = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            for k, v in obj.attrs.items():
                items[f"{name}@{k}"] = attr_bytes(v)
            if isinstance(obj, h5py.Dataset):
                data = obj[()]
                arr = np.asarray(data)
                items[name] = (obj.dtype.str, obj.shape, arr.tobytes())
            else:
                items[name] = "group"

        for k, v in f.attrs.items():
            items[f"/@{k}"] = attr_bytes(v)
        f.visititems(visit)
    return items


def h5_diffs(a, b):
    ia, ib = h5_items(a), h5_items(b)
    out = [f"{k}: only in the golden set" for k in sorted(ia.keys() - ib.keys())]
    out += [f"{k}: only in the candidate" for k in sorted(ib.keys() - ia.keys())]
    out += [f"{k}: differs" for k in sorted(ia.keys() & ib.keys()) if ia[k] != ib[k]]
    return out


def compare_file(a, b):
    if not b.exists():
        return ["missing in the candidate"]
    if a.suffix == ".h5":
        return h5_diffs(a, b)
    if a.suffix == ".json" and a.name == "metrics.json":
        return json_diffs(strip_timing(json.loads(a.read_text())), strip_timing(json.loads(b.read_text())))
    if a.name.startswith("log"):
        return []  # progress lines hold wall times
    return [] if a.read_bytes() == b.read_bytes() else ["bytes differ"]


def main():
    golden, cand = Path(sys.argv[1]), Path(sys.argv[2])
    failed = 0
    checked = 0
    names = (golden / "runs.txt").read_text().split()
    if names != (cand / "runs.txt").read_text().split():
        print("FAIL: the candidate ran another matrix")
        failed += 1
    roots = [golden / "data"] + [golden / "runs" / n for n in names]
    def files(r):
        return sorted(p.relative_to(r) for p in r.rglob("*") if p.is_file() and "ckpt" not in p.parts)

    for r in roots:
        extra = set(files(cand / r.relative_to(golden))) - set(files(r))
        for e in sorted(extra):
            print(f"FAIL {r.relative_to(golden) / e}: only in the candidate")
            failed += 1
        for a in (r / p for p in files(r)):
            rel = a.relative_to(golden)
            diffs = compare_file(a, cand / rel)
            checked += 1
            if diffs:
                failed += 1
                print(f"FAIL {rel}:")
                for d in diffs[:10]:
                    print(f"    {d}")
    print(f"{checked} files compared, {failed} differ")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
