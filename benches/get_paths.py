#!/usr/bin/env python3
"""The files `benches/compare.sh` times a one-file get on.

    python3 benches/get_paths.py ARCHIVE N

A reader decodes a compressed blob from its start to the end of the file it
wants, so what a get costs depends on how deep into its blob a file ends
more than on where in the archive it is. This prints N regular files at
evenly spaced quantiles of that depth, shallowest first, one per line: the
depth in bytes (summed over the file's slices: the offset of its end inside
each decoded blob, or the slice's own size where the blob is stored raw),
a tab, the path. Reads the archive's data sub-index with examples/read_index.py
(needs pyarrow).
"""

import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
import read_index  # noqa: E402

FILE_TYPE = 0o170000
REGULAR = 0o100000


def main(archive, n):
    rows = read_index.read_section(archive, read_index.DATA).to_pylist()
    depth = defaultdict(int)
    for r in rows:
        mode = r["mode"]
        if mode is not None and mode & FILE_TYPE not in (0, REGULAR):
            continue
        size = r["uncompressed_size"]
        depth[r["relative_path"]] += r["blob_inner_offset"] + size if r["compressed"] else size
    files = sorted((d, p) for p, d in depth.items())
    if len(files) < n:
        sys.exit(f"{archive} has {len(files)} regular files, fewer than {n}")
    for k in range(n):
        d, p = files[k * (len(files) - 1) // max(n - 1, 1)]
        print(f"{d}\t{p}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python3 benches/get_paths.py ARCHIVE N")
    main(sys.argv[1], int(sys.argv[2]))
