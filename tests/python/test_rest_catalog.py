"""The read-only Iceberg REST catalog of `znippy serve` (/iceberg/v1): DuckDB
(ATTACH ... TYPE iceberg, over httpfs) and pyiceberg's RestCatalog query the
live `files` and `meta` tables of archives that keep growing over the HTTP API,
see every committed append on their next query (DuckDB without re-attaching),
never see an append that is still being uploaded, and agree with the service's
own listing. Unknown namespaces and tables are 404s in the REST spec's error
model, and the catalog refuses writes.

No znippy code is used on the reading side (service.py has the client).

Run: ZNIPPY_BIN=target/debug/znippy python -m pytest -q tests/python/test_rest_catalog.py
"""

import json
import random
import threading
import time
import uuid

import duckdb
import pytest
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError, RESTError

from service import (HTTP_TIMEOUT, LIVE_FILES_SQL, LIVE_META_SQL, duckdb_connection, meta_fact,
                     multipart_head, py_live, py_meta, serving)

# --------------------------------------------------------------------------
# The service
# --------------------------------------------------------------------------


@pytest.fixture
def server(tmp_path):
    """`znippy serve` on a fresh data directory and a free port."""
    with serving(["--data", str(tmp_path / "data")], tmp_path / "serve.log") as srv:
        yield srv


@pytest.fixture
def duck(server):
    """A DuckDB connection, closed before the server stops."""
    con = duckdb_connection()
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


def duck_meta(con, archive_id):
    sql = LIVE_META_SQL.format(meta=ident(archive_id, "meta"))
    return {meta_fact(p, k, vt, vals) for p, k, vt, *vals in con.execute(sql).fetchall()}


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
    chunk = server.create(aid)["chunk_size"]
    rng = random.Random(11)
    big = rng.randbytes(5 * 1024 * 1024 + 321)  # > 1.5 MiB: several slices

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
    assert slices == -(-len(big) // chunk) > 1  # the size above is a sum over slices
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
    # files, meta, and a package table per plugin (docs/store.md, "Tables").
    packages = [(aid, f"packages_{p}") for p in ("crate", "deb", "maven", "npm", "python")]
    assert sorted(cat.list_tables(aid)) == [(aid, "files"), (aid, "meta"), *packages]
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
    # Maintenance runs on a thread of its own, after the change that finds a
    # table due, and keeps going until nothing is: the last rewrite may
    # still be running when the last change returns.
    deadline = time.monotonic() + 30
    while len(files.inspect.files()) > 33 and time.monotonic() < deadline:
        time.sleep(0.1)
        files = cat.load_table(("many", "files"))
    assert len(files.inspect.files()) <= 33
    assert files.scan().to_arrow().num_rows == puts + deletes
    assert duck_meta(duck, "many") == server.meta("many")
