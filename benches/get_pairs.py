#!/usr/bin/env python3
"""One-file gets of znippy and `unsquashfs -cat`, run in pairs.

    python3 benches/get_pairs.py ZNIPPY ARCHIVE.znippy ARCHIVE.sqfs PATHS RUNS

PATHS is what benches/get_paths.py prints: a depth, a tab and a path per
line. For each path this runs `ZNIPPY get ARCHIVE.znippy PATH` and
`unsquashfs -cat ARCHIVE.sqfs PATH`, one after the other (which goes first
alternates), RUNS times after 3 warm-up pairs, each as a whole process with
its output sent to /dev/null,
and prints a tab-separated line: the depth, the path, the median wall time
of each in ms, and the median of the per-pair ratios znippy / unsquashfs.

A get takes 2 to 6 ms here, and timing each tool's runs in a block of its
own lets the machine's drift between the blocks decide which is faster on
files where the two are close. Taking the ratio pair by pair, a run of each
moments apart, cancels that drift: the ratio is what says which tool is
faster on a file. Both are started the same way (posix_spawn from this
process), so the spawn costs the same on both sides.
"""

import os
import statistics
import sys
import time


def run(argv, devnull):
    """Wall seconds of one run of argv, which must succeed."""
    start = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ,
                          file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
    _, status = os.waitpid(pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(argv)} failed")
    return elapsed


def main(znippy, archive, sqfs, paths, runs):
    devnull = os.open(os.devnull, os.O_WRONLY)
    with open(paths) as f:
        files = [line.rstrip("\n").split("\t", 1) for line in f if line.strip()]
    for depth, path in files:
        ours = [znippy, "get", archive, path]
        theirs = ["unsquashfs", "-cat", sqfs, path]
        for _ in range(3):
            run(ours, devnull)
            run(theirs, devnull)
        a, b = [], []
        for i in range(runs):
            if i % 2:
                b.append(run(theirs, devnull))
                a.append(run(ours, devnull))
            else:
                a.append(run(ours, devnull))
                b.append(run(theirs, devnull))
        ratio = statistics.median(x / y for x, y in zip(a, b))
        print(f"{depth}\t{path}\t{statistics.median(a) * 1e3:.3f}"
              f"\t{statistics.median(b) * 1e3:.3f}\t{ratio:.3f}", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 6:
        sys.exit("usage: python3 benches/get_pairs.py ZNIPPY ARCHIVE.znippy ARCHIVE.sqfs PATHS RUNS")
    main(*sys.argv[1:5], int(sys.argv[5]))
