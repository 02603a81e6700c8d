#!/usr/bin/env python3
"""znippy on its embedded default against znippy on SeaweedFS (one node, then
two nodes on one archive), in one run:

    python3 benches/scale_out.py > /tmp/scale_out.md

The same phases as benches/ingest.py (1-4 KB files, keep-alive clients), plus
multipart batches of 1,000 files: the embedded default (redb catalog, local
sidecar), `znippy serve --catalog rest` on SeaweedFS's Iceberg REST catalog
and S3 API, and two such nodes serving one archive, each client talking to
one node (client i to node i % 2) and every GET going to the node that did
not take the PUT. Then GET latency of live files, the seal (in place on
the embedded default; on SeaweedFS a re-pack into one new object), and GET
latency of the same files sealed. Prints a Markdown table with the ratios to
the embedded default.

Knobs as in benches/ingest.py (ZNIPPY, BENCH_DIR, BENCH_FILES, BENCH_BIG_MB).
Every server and file it starts or writes is removed at the end.
"""

import itertools
import os
import random
import shutil
import sys
import threading
import time

import ingest
from ingest import (FILES, ROWS, ZNIPPY, Seaweed, Znippy, advantage, get_latency, log,
                    measure, print_table, tools_venv)

BATCH = 1000


class Nodes:
    """Several nodes on one archive, as a client pool behind a load balancer
    sees them: each thread keeps to one node for writes and reads from the
    other."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.next = itertools.count()
        self.local = threading.local()

    def mine(self):
        i = getattr(self.local, "i", None)
        if i is None:
            i = self.local.i = next(self.next) % len(self.nodes)
        return i

    def put(self, name, body, archive="bench"):
        self.nodes[self.mine()].put(name, body, archive)

    def get(self, name):
        return self.nodes[(self.mine() + 1) % len(self.nodes)].get(name)

    def batch(self, files):
        self.nodes[self.mine()].batch(files)

    def seal(self):
        self.nodes[self.mine()].seal()

    def make_archives(self, ids):
        self.nodes[0].make_archives(ids)

    def peak_rss(self):
        return sum(n.peak_rss() for n in self.nodes)


def thousand_file_batches(server, seed):
    """Files per second in multipart batches of BATCH files, one client."""
    files = ingest.payloads(2 * BATCH, seed)
    t = time.perf_counter()
    for k in range(0, len(files), BATCH):
        server.batch(files[k:k + BATCH])
    return len(files) / (time.perf_counter() - t)


def run(server, seed):
    r = measure(server, seed)
    r["batch_1000"] = thousand_file_batches(server, seed + 10)
    # The files of the first phase, live, then sealed: the archive holds
    # everything measure() and the batches wrote, the large PUT included.
    names = [n for n, _ in ingest.payloads(FILES, seed)]
    names = random.Random(5).sample(names, len(names))
    r["live_p50"], r["live_p99"] = get_latency(server, names)
    t = time.perf_counter()
    server.seal()
    r["seal"] = time.perf_counter() - t
    r["sealed_p50"], r["sealed_p99"] = get_latency(server, names)
    return r


def main():
    if "ZNIPPY_INGEST_IN_VENV" not in os.environ:
        py = tools_venv()
        os.environ["ZNIPPY_INGEST_IN_VENV"] = "1"
        os.execv(py, [str(py), __file__])
    if not ZNIPPY.exists():
        sys.exit(f"no {ZNIPPY}: cargo build --release -p znippy")
    weed = shutil.which("weed", path=str(ingest.BENCH_DIR / "venv" / "bin"))
    work = ingest.BENCH_DIR / "scale-out"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    results = {}
    try:
        log("znippy serve, embedded default")
        z = Znippy(work / "embedded")
        try:
            results["e"] = run(z, 1)
        finally:
            z.stop()
        for key, count in (("1", 1), ("2", 2)):
            log(f"znippy serve on SeaweedFS, {count} node(s)")
            (work / key).mkdir()
            sw = Seaweed(weed, work / key, fsync=False)
            nodes = []
            try:
                for n in range(count):
                    nodes.append(Znippy(work / key / f"node{n}", sw.znippy_args(), sw.env,
                                        create=n == 0))
                results[key] = run(Nodes(nodes), 1)
            finally:
                for n in nodes:
                    n.stop()
                sw.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    e, one, two = results["e"], results["1"], results["2"]
    after = next(i for i, r in enumerate(ROWS) if r[1] == "batch") + 1
    rows = ROWS[:after] + [(f"multipart batches of {BATCH}, files/s", "batch_1000", True)] + ROWS[after:] + [
        ("1 client, GET p50 of a live file (ms)", "live_p50", False),
        ("1 client, GET p99 of a live file (ms)", "live_p99", False),
        ("seal (s)", "seal", False),
        ("1 client, GET p50 of a sealed file (ms)", "sealed_p50", False),
        ("1 client, GET p99 of a sealed file (ms)", "sealed_p99", False),
    ]
    print(f"{FILES} files of 1-4 KB per phase, one archive, loopback, SeaweedFS `weed mini`.")
    print("Ratio: each column against the embedded default (above 1: better).\n")
    print_table(["embedded", "1 node on SeaweedFS", "ratio", "2 nodes on SeaweedFS", "ratio"],
                rows, [e], ([one], [two]), advantage)


if __name__ == "__main__":
    main()
