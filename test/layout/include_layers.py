#!/usr/bin/env python3
"""No include runs back up the library's layers (docs/design.md, "Architecture").

Every header under include/retexo/<folder> and source under lib/<folder> may include
<retexo/X/...> only for X in its own folder or in a lower layer.  Prints each offending
include with its file and line and exits 1; usage: include_layers.py SOURCE_DIR
"""
import pathlib
import re
import sys

# Lower number = lower layer.  Folders on one level may not include each other.
LEVELS = {
    "core": 0,
    "graph": 1,
    "comm": 2, "kernels": 2,
    "partition": 3, "nn": 3,
    "io": 4,
    "ingest": 5,
    "train": 6,
}
INCLUDE = re.compile(r'^\s*#\s*include\s*<retexo/(\w+)/')


def main(root: pathlib.Path) -> int:
    bad = 0
    files = 0
    for base in (root / "include" / "retexo", root / "lib"):
        for path in sorted(base.rglob("*")):
            if path.suffix not in (".hpp", ".cpp") or path.parent == base:
                continue
            folder = path.relative_to(base).parts[0]
            if folder not in LEVELS:
                print(f"{path}: folder '{folder}' has no layer in {__file__}")
                bad += 1
                continue
            files += 1
            for number, line in enumerate(path.read_text().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m or m.group(1) == folder:
                    continue
                target = m.group(1)
                if target not in LEVELS or LEVELS[target] >= LEVELS[folder]:
                    print(f"{path.relative_to(root)}:{number}: {folder} (layer {LEVELS[folder]}) includes "
                          f"{target} (layer {LEVELS.get(target, '?')}): {line.strip()}")
                    bad += 1
    print(f"{files} files checked, {bad} include(s) running up or across the layers")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")))
