"""What the Python tests share: `znippy serve` started and stopped cleanly, a
small urllib client of its HTTP API, DuckDB with the extensions of the
duckdb-ext-* wheels, and docs/store.md's latest-wins queries (in SQL, and in
plain Python over pyiceberg scans).

No znippy code is used on the reading side; HTTP is the standard library only.
"""

import contextlib
import importlib.util
import json
import selectors
import signal
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import duckdb

from binary import znippy_bin

# Safety nets only: nothing below waits for time to pass, these bound a hang.
START_TIMEOUT = 120
STOP_TIMEOUT = 120
HTTP_TIMEOUT = 300

# docs/store.md's queries for the live files and the live metadata, with
# the table to read as `{files}` / `{meta}`: iceberg_scan('<table dir>'), or a
# table of an attached catalog.
LIVE_FILES_SQL = """
SELECT relative_path, sum(uncompressed_size)::BIGINT AS size
FROM (
    SELECT * FROM {files}
    QUALIFY append_seq = max(append_seq) OVER (PARTITION BY relative_path)
)
GROUP BY relative_path
HAVING NOT bool_or(tombstone)
ORDER BY relative_path
"""

LIVE_META_SQL = """
SELECT relative_path, key, value_type, v_str, v_i64, v_f64, v_bool, v_bytes
FROM {meta}
QUALIFY append_seq = max(append_seq) OVER (PARTITION BY key, relative_path)
    AND NOT tombstone
ORDER BY key, relative_path NULLS FIRST
"""

TYPE_NAMES = ["str", "i64", "f64", "bool", "bytes"]  # value_type 0..4
VALUE_COLS = ["v_str", "v_i64", "v_f64", "v_bool", "v_bytes"]


# --------------------------------------------------------------------------
# The service and plain HTTP
# --------------------------------------------------------------------------


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<{self.status} {self.body[:500]!r}>"


class Server:
    """A running `znippy serve` and a small urllib client for it."""

    def __init__(self, proc, base, log):
        self.proc, self.base, self.log = proc, base, log

    def logs(self):
        return self.log.read_text(errors="replace")[-4000:]

    def request(self, method, path, body=None, headers=None):
        req = urllib.request.Request(self.base + path, data=body, method=method,
                                     headers=headers or {})
        try:
            with urllib.request.urlopen(req, timeout=HTTP_TIMEOUT) as r:
                return Response(r.status, r.headers, r.read())
        except urllib.error.HTTPError as e:
            with e:
                return Response(e.code, e.headers, e.read())

    def ok(self, method, path, body=None, headers=None, status=200):
        r = self.request(method, path, body, headers)
        assert r.status == status, (method, path, r, self.logs())
        return r.json() if r.body else None

    # The HTTP API of live archives.

    def create(self, archive_id, metadata=True):
        body = json.dumps({"id": archive_id, "metadata": metadata}).encode()
        return self.ok("POST", "/archives", body,
                       {"Content-Type": "application/json"}, status=201)

    def put(self, archive_id, path, data):
        quoted = urllib.parse.quote(path, safe="/")
        return self.ok("PUT", f"/archives/{archive_id}/files/{quoted}", data,
                       {"Content-Type": "application/octet-stream"})

    def post_multipart(self, archive_id, files, meta=(), meta_archive=()):
        body, ctype = multipart(files, meta, meta_archive)
        return self.ok("POST", f"/archives/{archive_id}/files", body, {"Content-Type": ctype})

    def delete(self, archive_id, path):
        quoted = urllib.parse.quote(path, safe="/")
        return self.ok("DELETE", f"/archives/{archive_id}/files/{quoted}")

    def set_meta(self, archive_id, facts):
        body = json.dumps({"set": facts}).encode()
        return self.ok("PUT", f"/archives/{archive_id}/meta", body,
                       {"Content-Type": "application/json"})

    def listing(self, archive_id):
        """{path: size} of the live files, following the pages."""
        out, after = {}, None
        while True:
            q = {"limit": "3"} | ({"after": after} if after is not None else {})
            page = self.ok("GET", f"/archives/{archive_id}/files?{urllib.parse.urlencode(q)}")
            for f in page["files"]:
                assert f["path"] not in out
                out[f["path"]] = f["size"]
            after = page["next"]
            if after is None:
                return out

    def meta(self, archive_id):
        """{(path, key, type, value)} of the live metadata (bytes as hex)."""
        r = self.ok("GET", f"/archives/{archive_id}/meta?prefix=")
        assert r["result"] in ("hits", "no_match"), r
        return {(m["path"], m["key"], m["type"], m["value"]) for m in r["rows"]}


def multipart_head(boundary, name, filename=None):
    disp = f'form-data; name="{name}"'
    if filename is not None:
        disp += f'; filename="{filename}"'
    head = f"--{boundary}\r\nContent-Disposition: {disp}\r\n"
    if filename is not None:
        head += "Content-Type: application/octet-stream\r\n"
    return (head + "\r\n").encode()


def multipart(files, meta=(), meta_archive=()):
    """A multipart/form-data body: each file a part whose filename is its
    archive path; facts as fields `meta` (path=key=value) and `meta-archive`
    (key=value)."""
    boundary = uuid.uuid4().hex
    out = []
    for path, data in files.items():
        out += [multipart_head(boundary, "file", path), data, b"\r\n"]
    for name, facts in (("meta", meta), ("meta-archive", meta_archive)):
        for fact in facts:
            out += [multipart_head(boundary, name), fact.encode(), b"\r\n"]
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


@contextlib.contextmanager
def serving(args, log, env=None, killed=False):
    """`znippy serve ARGS` on a free loopback port, as a `Server`; stopped with
    SIGTERM on exit, which must end it cleanly (unless the test `killed` it)."""
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(
            [znippy_bin(), "serve", "--listen", "127.0.0.1:0", "--threads", "2",
             "--log", "info", *args],
            stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, env=env)
    try:
        # The one line on stdout says the port; wait for it, not for time.
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            ready = sel.select(timeout=START_TIMEOUT)
        line = proc.stdout.readline().decode() if ready else ""
        prefix = "listening on http://127.0.0.1:"
        assert line.startswith(prefix) and line.endswith("\n"), \
            (line, proc.poll(), log.read_text(errors="replace"))
        port = int(line[len(prefix):])
        srv = Server(proc, f"http://127.0.0.1:{port}", log)
        assert srv.request("GET", "/healthz").status == 200
        yield srv
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            code = "hung after SIGTERM"
        rest = proc.stdout.read().decode(errors="replace")
        proc.stdout.close()
    if killed:
        return
    # A clean stop: exit 0, and nothing on stdout after the ready line.
    assert code == 0, (code, log.read_text(errors="replace")[-4000:])
    assert rest == "", rest


def duckdb_connection():
    """A DuckDB connection with the extensions of the duckdb-ext-* wheels,
    loaded from site-packages with nothing downloaded."""
    spec = importlib.util.find_spec("duckdb_ext")  # namespace package of the wheels
    ext_dir = Path(list(spec.submodule_search_locations)[0]) / "extensions"
    con = duckdb.connect(config={
        "extension_directory": str(ext_dir),
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    })
    for ext in ("httpfs", "avro", "parquet", "iceberg"):
        con.execute(f"LOAD {ext}")
    return con


# --------------------------------------------------------------------------
# docs/store.md's latest-wins rule
# --------------------------------------------------------------------------


def meta_fact(path, key, value_type, values):
    value = values[value_type]
    if value_type == 4:
        value = bytes(value).hex()  # as the service shows bytes
    return (path, key, TYPE_NAMES[value_type], value)


def latest_rows(rows, key):
    """The rows of the highest append_seq per key(row)."""
    top = {}
    for r in rows:
        top[key(r)] = max(top.get(key(r), -1), r["append_seq"])
    return [r for r in rows if r["append_seq"] == top[key(r)]]


def py_live(table):
    """Latest-wins over a pyiceberg `files` table, in plain Python."""
    size, dead = {}, set()
    for r in latest_rows(table.scan().to_arrow().to_pylist(), lambda r: r["relative_path"]):
        p = r["relative_path"]
        size[p] = size.get(p, 0) + r["uncompressed_size"]
        if r["tombstone"]:
            dead.add(p)
    return {p: s for p, s in size.items() if p not in dead}


def py_meta(table):
    rows = latest_rows(table.scan().to_arrow().to_pylist(),
                       lambda r: (r["key"], r["relative_path"]))
    return {meta_fact(r["relative_path"], r["key"], r["value_type"],
                      [r[c] for c in VALUE_COLS])
            for r in rows if not r["tombstone"]}
