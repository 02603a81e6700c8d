#!/usr/bin/env python3
"""Where `znippy serve` spends its CPU under small PUTs: 8 keep-alive clients
send 4,000 files of 1-4 KB to one archive (after 200 to warm it) while
`perf record -g` samples the server's processes; prints PUT/s and perf's
shares by object and by symbol.

    BENCH_DIR=/tmp/znippy-ingest python3 benches/ingest_profile.py

Needs perf and the release binaries (cargo build --release -p znippy). The
data directory goes under BENCH_DIR (default /tmp/znippy-ingest), so the
filesystem is the one measured: docs/benchmarks.md compares this machine's
ext4 without a journal with a journaled one. Everything it writes is removed
at the end but the profile, BENCH_DIR/perf.data.
"""

import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ingest  # noqa: E402
from ingest import Znippy, in_threads, payloads, process_tree  # noqa: E402


def main():
    work = ingest.BENCH_DIR / "profile"
    data = ingest.BENCH_DIR / "perf.data"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    z = Znippy(work / "z")
    try:
        for name, body in payloads(200, 1):
            z.put(name, body)
        pids = ",".join(map(str, process_tree(z.proc.pid)))
        perf = subprocess.Popen(["perf", "record", "-g", "-F", "999", "-o", str(data),
                                 "-p", pids], stderr=subprocess.DEVNULL)
        time.sleep(1)  # attached
        files = payloads(4000, 2)
        wall = in_threads(8, lambda i: [z.put(n, b) for n, b in files[i::8]])
        perf.send_signal(signal.SIGINT)
        perf.wait()
        print(f"8 clients: {len(files) / wall:.0f} PUT/s (under perf)")
    finally:
        z.stop()
        shutil.rmtree(work, ignore_errors=True)
    for sort in ("dso", "sym"):
        report = subprocess.run(["perf", "report", "-i", str(data), "--no-children",
                                 "--sort", sort], capture_output=True, text=True).stdout
        print("\n".join([line for line in report.splitlines()
                         if line.strip()[:1].isdigit()][:15]))


if __name__ == "__main__":
    main()
