#!/usr/bin/env python3
"""One file out of a remote 1 GiB archive: read in place against downloading it.

    cargo build --release -p znippy && python3 benches/remote.py > /tmp/remote.md

Builds a tree of about 1 GiB (4,096 files of 256 KiB of random bytes, so the
archive is as large as the input, and 20,000 small text files), compresses
it, serves the archive from the range-capable static file server of the
tests (tests/python/static_server.py) on loopback, and times, for files spread
over the archive's listing, each as a whole process:

- `znippy get URL PATH` with the index cache off: the cold read;
- the same with the cache filled by an earlier run: the warm read;
- `curl -o a.znippy URL && znippy get a.znippy PATH`: downloading it whole.

It reports requests and bytes received (the cold and warm reads say them with
ZNIPPY_REMOTE_STATS; the download is the file's size) and the wall time's
median and maximum over the files, of the median of BENCH_RUNS runs each.

Knobs: ZNIPPY (default target/release/znippy), BENCH_DIR (default
/tmp/znippy-remote), BENCH_MIB (default 1024), BENCH_GETS (files, default
8), BENCH_RUNS (default 5). The data is removed at the end.
"""

import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))
from static_server import static_server  # noqa: E402

ZNIPPY = Path(os.environ.get("ZNIPPY", ROOT / "target/release/znippy"))
BENCH_DIR = Path(os.environ.get("BENCH_DIR", "/tmp/znippy-remote"))
MIB = int(os.environ.get("BENCH_MIB", "1024"))
GETS = int(os.environ.get("BENCH_GETS", "8"))
RUNS = int(os.environ.get("BENCH_RUNS", "5"))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def build_tree(root):
    rng = random.Random(7)
    for i in range(MIB * 4):
        p = root / "blobs" / f"d{i // 256:02}" / f"r{i:05}.bin"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(rng.randbytes(256 << 10))
    for i in range(20_000):
        p = root / "src" / f"m{i // 500:02}" / f"f{i:05}.txt"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes((f"line {i} of a small text file\n" * rng.randrange(10, 200)).encode())


def timed(cmd, env):
    start = time.perf_counter()
    r = subprocess.run(cmd, shell=True, env=env, capture_output=True)
    took = time.perf_counter() - start
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    return took, r.stderr.decode()


def stats(stderr):
    line = next(s for s in stderr.splitlines() if " requests, " in s)
    n, _, rest = line.rsplit(": ", 1)[1].partition(" requests, ")
    return int(n), int(rest.split()[0])


def main():
    shutil.rmtree(BENCH_DIR, ignore_errors=True)
    tree, served, scratch = BENCH_DIR / "tree", BENCH_DIR / "served", BENCH_DIR / "scratch"
    for d in (tree, served, scratch):
        d.mkdir(parents=True)
    try:
        log(f"building a {MIB} MiB tree")
        build_tree(tree)
        archive = served / "a.znippy"
        subprocess.run([ZNIPPY, "compress", tree, "-o", archive], check=True,
                       capture_output=True)
        size = archive.stat().st_size
        paths = subprocess.run([ZNIPPY, "list", archive], check=True, capture_output=True,
                               text=True).stdout.split()
        sample = [paths[(2 * k + 1) * len(paths) // (2 * GETS)] for k in range(GETS)]
        with static_server(served) as (base, _):
            url = f"{base}/a.znippy"
            cold = os.environ | {"ZNIPPY_CACHE_MAX": "0", "ZNIPPY_REMOTE_STATS": "1"}
            warm = os.environ | {"ZNIPPY_CACHE_DIR": str(scratch / "cache"),
                                 "ZNIPPY_REMOTE_STATS": "1"}
            rows = {"cold": [], "warm": [], "download": []}
            for path in sample:
                log(f"get {path}")
                get = f"{ZNIPPY} get {url} {path} > /dev/null"
                runs = [timed(get, cold) for _ in range(RUNS)]
                rows["cold"].append((statistics.median(t for t, _ in runs),
                                     *stats(runs[0][1])))
                timed(get, warm)
                runs = [timed(get, warm) for _ in range(RUNS)]
                rows["warm"].append((statistics.median(t for t, _ in runs),
                                     *stats(runs[0][1])))
                local = scratch / "a.znippy"
                whole = (f"curl -sf -o {local} {url} && "
                         f"{ZNIPPY} get {local} {path} > /dev/null && rm {local}")
                runs = [timed(whole, os.environ) for _ in range(RUNS)]
                rows["download"].append((statistics.median(t for t, _ in runs), 1, size))
    finally:
        shutil.rmtree(BENCH_DIR, ignore_errors=True)

    print(f"Archive of {size / 1e9:.2f} GB ({len(paths)} files), served on loopback by "
          f"tests/python/static_server.py; {GETS} files spread over the listing, each the "
          f"median of {RUNS} runs as a whole process.\n")
    print("| read | requests per get (max) | bytes received per get (max) | "
          "wall ms, median over files | wall ms, slowest file | vs download |")
    print("|---|---:|---:|---:|---:|---:|")
    base_ms = statistics.median(r[0] for r in rows["download"]) * 1000
    names = {"cold": "`znippy get URL PATH`, cold", "warm": "`znippy get URL PATH`, index cached",
             "download": "`curl -o a.znippy URL` then `znippy get a.znippy PATH`"}
    for key, name in names.items():
        rs = rows[key]
        ms = statistics.median(r[0] for r in rs) * 1000
        print(f"| {name} | {max(r[1] for r in rs)} | {max(r[2] for r in rs):,} | {ms:.1f} | "
              f"{max(r[0] for r in rs) * 1000:.1f} | {base_ms / ms:.0f}x |")


if __name__ == "__main__":
    main()
