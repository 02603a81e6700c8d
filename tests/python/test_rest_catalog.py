"""The read-only Iceberg REST catalog of `znippy serve` (/iceberg/v1): DuckDB
(ATTACH ... TYPE iceberg, over httpfs) and pyiceberg's RestCatalog query the
live `files` and `meta` tables of archives that keep growing over the HTTP API,
see every committed append on their next query (DuckDB without re-attaching),
never see an append that is still being uploaded, and agree with the service's
own listing. Unknown namespaces and tables are 404s in the REST spec's error
model, and the catalog refuses writes.

No znippy code is used on the reading side; HTTP is the standard library only.

Run: ZNIPPY_BIN=target/debug/znippy python -m pytest -q tests/python/test_rest_catalog.py
"""

import importlib.util
import json
import random
import selectors
import signal
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import duckdb
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, RESTError

from binary import znippy_bin

# Safety nets only: nothing below waits for time to pass, these bound a hang.
START_TIMEOUT = 120
STOP_TIMEOUT = 120
HTTP_TIMEOUT = 300

# docs/store.md's queries for the live files and the live metadata, with
# iceberg_scan('<table dir>') replaced by the table of the attached catalog.
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


@pytest.fixture
def server(tmp_path):
    """`znippy serve` on a fresh data directory and a free port."""
    log = tmp_path / "serve.log"
    with open(log, "wb") as stderr:
        proc = subprocess.Popen(
            [znippy_bin(), "serve", "--data", str(tmp_path / "data"),
             "--listen", "127.0.0.1:0", "--threads", "2", "--log", "info"],
            stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL)
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
    # A clean stop: exit 0, and nothing on stdout after the ready line.
    assert code == 0, (code, log.read_text(errors="replace")[-4000:])
    assert rest == "", rest


@pytest.fixture
def duck(server):
    """A DuckDB connection with the extensions of the duckdb-ext-* wheels,
    closed before the server stops."""
    spec = importlib.util.find_spec("duckdb_ext")  # namespace package of the wheels
    ext_dir = Path(list(spec.submodule_search_locations)[0]) / "extensions"
    con = duckdb.connect(config={
        "extension_directory": str(ext_dir),
        "autoinstall_known_extensions": False,
        "autoload_known_extensions": False,
    })
    for ext in ("httpfs", "avro", "parquet", "iceberg"):
        con.execute(f"LOAD {ext}")
    yield con
    con.close()


def attach(con, server, name="z"):
    con.execute(f"ATTACH 'wh' AS {name} (TYPE iceberg, ENDPOINT '{server.base}/iceberg', "
                "AUTHORIZATION_TYPE 'none')")


def rest_catalog(server):
    return RestCatalog("znippy", uri=f"{server.base}/iceberg")


# --------------------------------------------------------------------------
# Reading the tables: DuckDB with docs/store.md's SQL, pyiceberg in Python
# --------------------------------------------------------------------------


def ident(archive_id, table, catalog="z"):
    return f'{catalog}."{archive_id}".{table}'


def duck_live(con, archive_id):
    sql = LIVE_FILES_SQL.format(files=ident(archive_id, "files"))
    return dict(con.execute(sql).fetchall())


def meta_fact(path, key, value_type, values):
    value = values[value_type]
    if value_type == 4:
        value = bytes(value).hex()  # as the service shows bytes
    return (path, key, TYPE_NAMES[value_type], value)


def duck_meta(con, archive_id):
    sql = LIVE_META_SQL.format(meta=ident(archive_id, "meta"))
    return {meta_fact(p, k, vt, vals) for p, k, vt, *vals in con.execute(sql).fetchall()}


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


def summary_of(table):
    s = table.current_snapshot().summary
    return int(s["znippy.append-seq"]), int(s["znippy.blob-end"])


# --------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------

BIG = "data/big.bin"
UNICODE = "données/ünïcödé €.txt"
UNICODE_DATA = "héllo wörld\n".encode()


def test_duckdb_attached_once_follows_appends(server, duck):
    aid = "duck-1"
    server.create(aid)
    rng = random.Random(11)
    big = rng.randbytes(5 * 1024 * 1024 + 321)  # > 2 MiB: several slices

    # Batch 1: a multipart form with facts, then a big file and a non-ASCII
    # path as raw bodies.
    batch1 = {"a.txt": b"hello\n", "gone.txt": b"to be removed\n", "empty": b"",
              "docs/read me.txt": b"spaces in the name\n"}
    r = server.post_multipart(aid, batch1,
                              meta=["a.txt=lic=MIT", "gone.txt=ratio=1.5", "empty=ok=true"],
                              meta_archive=["owner=team"])
    assert r["files"] == len(batch1)
    server.put(aid, BIG, big)
    server.put(aid, UNICODE, UNICODE_DATA)

    attach(duck, server)  # once, for the whole test
    tables = {(db, schema, name) for db, schema, name, *_ in
              duck.execute("SHOW ALL TABLES").fetchall()}
    assert {("z", aid, "files"), ("z", aid, "meta")} <= tables

    expected = {p: len(d) for p, d in batch1.items()}
    expected |= {BIG: len(big), UNICODE: len(UNICODE_DATA)}
    assert server.listing(aid) == expected
    assert duck_live(duck, aid) == expected
    slices = duck.execute(f"SELECT count(*) FROM {ident(aid, 'files')} WHERE relative_path = ?",
                          [BIG]).fetchone()[0]
    assert slices == 3  # the size above is a sum over slices
    meta = duck_meta(duck, aid)
    assert meta == server.meta(aid)
    assert meta == {(None, "owner", "str", "team"), ("a.txt", "lic", "str", "MIT"),
                    ("gone.txt", "ratio", "f64", 1.5), ("empty", "ok", "bool", True)}

    def check(note):
        """The same connection, not re-attached, sees the server's state."""
        live = server.listing(aid)
        assert duck_live(duck, aid) == live, note
        facts = server.meta(aid)
        assert duck_meta(duck, aid) == facts, note
        return live, facts

    # More files, one of them replacing a.txt (longer), and the big file
    # replaced by a small one (its old slices must no longer count).
    server.post_multipart(aid, {"a.txt": b"replaced, and longer\n", "new/c.txt": b"c" * 1000},
                          meta=["a.txt=lic=GPL", "new/c.txt=stars=42"])
    server.put(aid, BIG, b"small now")
    live, facts = check("after the replacements")
    assert live["a.txt"] == 21 and live[BIG] == 9 and live["new/c.txt"] == 1000
    assert ("a.txt", "lic", "str", "GPL") in facts and ("new/c.txt", "stars", "i64", 42) in facts

    # A delete is a tombstone, in files and for each of the file's facts in
    # meta: gone from the live set and from the facts, by the same SQL rule.
    server.delete(aid, "gone.txt")
    live, facts = check("after the delete")
    assert "gone.txt" not in live and len(live) == len(expected)
    assert not any(f[0] == "gone.txt" for f in facts)
    for table in ("files", "meta"):
        assert duck.execute(f"SELECT count(*) FROM {ident(aid, table)} "
                            "WHERE relative_path = 'gone.txt' AND tombstone").fetchone()[0] == 1

    # Facts alone (PUT meta): every value type, a new archive fact and an
    # overwritten one.
    server.set_meta(aid, [
        {"key": "owner", "value": "other team"},
        {"key": "release", "value": 2.5},
        {"path": "a.txt", "key": "lic", "value": "Apache-2.0"},
        {"path": "a.txt", "key": "lines", "value": 1},
        {"path": "new/c.txt", "key": "ok", "value": False},
        {"path": UNICODE, "key": "blob", "bytes_hex": "00ff10"},
    ])
    live2, facts = check("after PUT meta")
    assert live2 == live
    assert {(None, "owner", "str", "other team"), (None, "release", "f64", 2.5),
            ("a.txt", "lic", "str", "Apache-2.0"), ("a.txt", "lines", "i64", 1),
            ("new/c.txt", "ok", "bool", False), (UNICODE, "blob", "bytes", "00ff10")} <= facts
    assert ("a.txt", "lic", "str", "GPL") not in facts

    # A deleted path that comes back: the newer rows win over the tombstone.
    server.put(aid, "gone.txt", b"back again")
    live, _ = check("after re-adding a deleted path")
    assert live["gone.txt"] == 10

    # A second archive appears in the attached catalog too, without re-attaching.
    server.create("duck-2", metadata=False)
    server.put("duck-2", "x", b"xyz")
    assert duck_live(duck, "duck-2") == server.listing("duck-2") == {"x": 3}
    assert duck_meta(duck, "duck-2") == set()

    with pytest.raises(duckdb.Error):
        duck.execute(f"SELECT * FROM {ident('nope', 'files')}").fetchall()
    with pytest.raises(duckdb.Error):
        duck.execute(f"SELECT * FROM {ident(aid, 'nope')}").fetchall()


def test_pyiceberg_rest_catalog(server):
    aid = "py"
    server.create("other", metadata=False)
    server.create(aid)
    r1 = server.post_multipart(aid, {"one.txt": b"one\n", "two.txt": b"two\n"},
                               meta=["one.txt=lic=MIT"])

    assert server.ok("GET", "/iceberg/v1/config?warehouse=wh") == \
        {"defaults": {}, "overrides": {}}

    cat = rest_catalog(server)
    assert sorted(cat.list_namespaces()) == [("other",), (aid,)]
    assert sorted(cat.list_tables(aid)) == [(aid, "files"), (aid, "meta")]
    assert cat.namespace_exists(aid) and cat.table_exists((aid, "files"))
    props = cat.load_namespace_properties(aid)
    assert props["znippy.state"] == "live" and props["znippy.has_meta"] == "true"
    assert cat.load_namespace_properties("other")["znippy.has_meta"] == "false"

    t1 = cat.load_table((aid, "files"))
    snap1 = t1.current_snapshot()
    assert snap1.snapshot_id == r1["snapshot_id"]
    assert summary_of(t1) == (r1["append_seq"], r1["blob_end"]) == (1, r1["blob_end"])
    assert py_live(t1) == server.listing(aid) == {"one.txt": 4, "two.txt": 4}
    meta_t = cat.load_table((aid, "meta"))
    assert py_meta(meta_t) == server.meta(aid) == {("one.txt", "lic", "str", "MIT")}

    # Another append: a fresh load_table sees its snapshot and rows.
    big = random.Random(5).randbytes(3 * 1024 * 1024)
    r2 = server.post_multipart(aid, {"one.txt": b"one, replaced\n", "big.bin": big},
                               meta=["big.bin=stars=7"], meta_archive=["owner=team"])
    assert r2["append_seq"] == 2 and r2["blob_end"] > r1["blob_end"]
    t2 = cat.load_table((aid, "files"))
    snap2 = t2.current_snapshot()
    assert snap2.snapshot_id == r2["snapshot_id"] != snap1.snapshot_id
    assert snap2.parent_snapshot_id == snap1.snapshot_id
    assert summary_of(t2) == (2, r2["blob_end"])
    assert py_live(t2) == server.listing(aid) == {"one.txt": 14, "two.txt": 4,
                                                  "big.bin": len(big)}
    assert py_meta(cat.load_table((aid, "meta"))) == server.meta(aid) == {
        ("one.txt", "lic", "str", "MIT"), ("big.bin", "stars", "i64", 7),
        (None, "owner", "str", "team")}
    # The table loaded before still reads its own snapshot; refresh() moves on.
    assert py_live(t1) == {"one.txt": 4, "two.txt": 4}
    assert t1.refresh().current_snapshot().snapshot_id == snap2.snapshot_id

    # A delete commits a snapshot of its own: a new append number, the same
    # blob end.
    d = server.delete(aid, "two.txt")
    t3 = cat.load_table((aid, "files"))
    assert t3.current_snapshot().snapshot_id == d["snapshot_id"]
    assert summary_of(t3) == (3, r2["blob_end"])
    assert py_live(t3) == server.listing(aid) == {"one.txt": 14, "big.bin": len(big)}

    # Facts alone: a files snapshot without rows (the append number moves on),
    # and the meta table's own snapshot with the facts.
    m = server.set_meta(aid, [{"path": "one.txt", "key": "lic", "value": "BSD"}])
    t4 = cat.load_table((aid, "files"))
    assert t4.current_snapshot().snapshot_id == m["snapshot_id"]
    assert summary_of(t4) == (4, r2["blob_end"])
    assert py_live(t4) == server.listing(aid)
    meta_t = cat.load_table((aid, "meta"))
    assert int(meta_t.current_snapshot().summary["znippy.append-seq"]) == 4
    assert py_meta(meta_t) == server.meta(aid)
    assert ("one.txt", "lic", "str", "BSD") in py_meta(meta_t)


def test_append_in_flight_is_invisible(server, duck):
    """While a batch is still being uploaded (its first file sent whole, the
    body not ended), readers see the previous snapshot and nothing of the
    batch; once it is acknowledged, their next query sees all of it."""
    aid = "flight"
    server.create(aid)
    server.put(aid, "first.txt", b"first\n")
    attach(duck, server)
    cat = rest_catalog(server)
    before = server.listing(aid)
    snap_before = cat.load_table((aid, "files")).current_snapshot().snapshot_id
    assert duck_live(duck, aid) == before

    # A multipart body sent in pieces: the first file whole (bigger than a
    # chunk), then the body stalls until the readers have looked.
    boundary = uuid.uuid4().hex
    part1 = random.Random(3).randbytes(3 * 1024 * 1024)
    sent, go = threading.Event(), threading.Event()

    def body():
        yield multipart_head(boundary, "file", "part1.bin") + part1 + b"\r\n"
        sent.set()
        assert go.wait(HTTP_TIMEOUT)
        yield multipart_head(boundary, "file", "part2.txt") + b"second part\r\n"
        yield multipart_head(boundary, "meta") + b"part2.txt=k=v\r\n"
        yield f"--{boundary}--\r\n".encode()

    result = {}

    def upload():
        # A generator body goes out with Transfer-Encoding: chunked.
        try:
            result["r"] = server.request(
                "POST", f"/archives/{aid}/files", body(),
                {"Content-Type": f"multipart/form-data; boundary={boundary}"})
        except BaseException as e:  # reported by the main thread
            result["error"] = e
        finally:
            sent.set()  # never leave the main thread waiting

    uploader = threading.Thread(target=upload)
    uploader.start()
    try:
        assert sent.wait(HTTP_TIMEOUT)
        assert "error" not in result and "r" not in result, (result, server.logs())
        # The batch cannot have committed: its body has not ended.
        assert duck_live(duck, aid) == before
        assert duck_meta(duck, aid) == set()
        t = cat.load_table((aid, "files"))
        assert t.current_snapshot().snapshot_id == snap_before
        assert py_live(t) == before
    finally:
        go.set()
        uploader.join(HTTP_TIMEOUT)
    assert not uploader.is_alive()
    assert "error" not in result, (result, server.logs())
    r = result["r"]
    assert r.status == 200, (r, server.logs())
    assert r.json()["files"] == 2

    after = server.listing(aid)
    assert after == before | {"part1.bin": len(part1), "part2.txt": 11}
    assert duck_live(duck, aid) == after
    assert duck_meta(duck, aid) == server.meta(aid) == {("part2.txt", "k", "str", "v")}
    t = cat.load_table((aid, "files"))
    assert t.current_snapshot().snapshot_id == r.json()["snapshot_id"]
    assert py_live(t) == after


def rest_error(r, status, kind):
    assert r.status == status, r
    assert r.headers.get_content_type() == "application/json", r.headers
    err = r.json()["error"]
    assert err["type"] == kind and err["code"] == status, err
    assert isinstance(err["message"], str) and err["message"], err


def test_rest_errors_and_refused_writes(server):
    aid = "err"
    server.create(aid)
    r = server.put(aid, "f.txt", b"data")
    v1 = "/iceberg/v1"

    for path in ("/namespaces/nope", "/namespaces/nope/tables",
                 "/namespaces/nope/tables/files",
                 # The catalog's root namespace and nested names reach no archive.
                 "/namespaces/znippy", "/namespaces/znippy%1F" + aid,
                 f"/namespaces/{aid}%1Ffiles/tables/files"):
        rest_error(server.request("GET", v1 + path), 404, "NoSuchNamespaceException")
    for table in ("nope", "FILES", "files.metadata"):
        rest_error(server.request("GET", f"{v1}/namespaces/{aid}/tables/{table}"),
                   404, "NoSuchTableException")
    assert server.request("HEAD", f"{v1}/namespaces/nope").status == 404
    assert server.request("HEAD", f"{v1}/namespaces/{aid}").status == 200

    # The catalog is read-only: the REST spec's write routes are refused.
    refused = [
        ("POST", "/namespaces", {"namespace": ["new"], "properties": {}}),
        ("DELETE", f"/namespaces/{aid}", None),
        ("POST", f"/namespaces/{aid}", {"removals": [], "updates": {}}),
        ("POST", f"/namespaces/{aid}/tables", {"name": "t", "schema": {}}),
        ("POST", f"/namespaces/{aid}/tables/files", {"requirements": [], "updates": []}),
        ("PUT", f"/namespaces/{aid}/tables/files", {}),
        ("DELETE", f"/namespaces/{aid}/tables/files", None),
        ("DELETE", f"/namespaces/{aid}/tables/meta?purgeRequested=true", None),
    ]
    for method, path, body in refused:
        data = json.dumps(body).encode() if body is not None else None
        got = server.request(method, v1 + path, data, {"Content-Type": "application/json"})
        assert got.status == 405, (method, path, got)
    for method, path in (("POST", "/namespaces/err/properties"), ("POST", "/tables/rename"),
                         ("POST", "/transactions/commit")):
        got = server.request(method, v1 + path, b"{}", {"Content-Type": "application/json"})
        assert got.status in (404, 405), (method, path, got)

    # pyiceberg sees the same: typed errors, and writes fail.
    cat = rest_catalog(server)
    assert not cat.namespace_exists("nope")
    assert not cat.table_exists((aid, "nope"))
    with pytest.raises(NoSuchNamespaceError):
        cat.load_namespace_properties("nope")
    with pytest.raises(NoSuchNamespaceError):
        cat.list_tables("nope")
    with pytest.raises(NoSuchTableError):
        cat.load_table((aid, "nope"))
    with pytest.raises(NoSuchTableError):
        cat.load_table(("nope", "files"))
    with pytest.raises(RESTError):
        cat.create_namespace("new")
    with pytest.raises(RESTError):
        cat.drop_table((aid, "files"))
    with pytest.raises(RESTError):
        cat.drop_namespace(aid)

    # Nothing changed.
    assert cat.list_namespaces() == [(aid,)]
    t = cat.load_table((aid, "files"))
    assert t.current_snapshot().snapshot_id == r["snapshot_id"]
    assert py_live(t) == server.listing(aid) == {"f.txt": 4}


def test_compaction_and_expiry_keep_readers_exact(server, duck):
    """100 appends, replaces and deletes: the store compacts the tables every
    32 data files and expires (and deletes the files of) old snapshots. An
    attached DuckDB and pyiceberg keep giving exactly the live set, and the
    table's row history is whole."""
    server.create("many", metadata=True)
    attach(duck, server)
    cat = rest_catalog(server)
    puts = deletes = 0
    for i in range(100):
        path = f"f{i % 37}"
        if i % 11 == 10 and path in server.listing("many"):
            server.delete("many", path)
            deletes += 1  # one tombstone row
        else:
            server.put("many", path, f"version {i}\n".encode())
            server.set_meta("many", [{"path": path, "key": "i", "value": i}])
            puts += 1  # one slice row
        if i % 25 == 24:
            want = server.listing("many")
            assert duck_live(duck, "many") == want, f"DuckDB after {i + 1} changes"
            assert py_live(cat.load_table(("many", "files"))) == want, f"pyiceberg after {i + 1}"
    files = cat.load_table(("many", "files"))
    assert files.scan().to_arrow().num_rows == puts + deletes
    assert len(files.inspect.files()) <= 33
    assert duck_meta(duck, "many") == server.meta("many")
