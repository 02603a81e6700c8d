"""Live archives: the Iceberg tables `files` and `meta`, read by DuckDB's iceberg
extension and by pyiceberg (no znippy code), must agree with `znippy live` after
appends, a replacement and a delete.

Run: ZNIPPY_BIN=target/debug/znippy python -m pytest -q tests/python
"""

import os
import random
import re
import subprocess
from pathlib import Path

import pytest
from pyiceberg.table import StaticTable

from service import LIVE_FILES_SQL, LIVE_META_SQL, duckdb_connection

REPO = Path(__file__).resolve().parents[2]
ZNIPPY = os.environ.get("ZNIPPY_BIN", str(REPO / "target" / "debug" / "znippy"))
ID = "t1"

BIG = "data/big.bin"
BATCH1 = {
    "a.txt": b"hello\n",
    "gone.txt": b"to be removed\n",
    "empty": b"",
    "docs/read me.txt": "héllo wörld\n".encode(),
    BIG: random.Random(7).randbytes(5 * 1024 * 1024 + 123),  # > 1.5 MiB: slices
}
META1 = ["a.txt=lic=MIT", f"{BIG}=stars=42", "gone.txt=ratio=1.5", "empty=ok=true"]
BATCH2 = {"a.txt": b"replaced, and longer\n", "new/c.txt": b"c" * 1000}
META2 = ["a.txt=lic=GPL", "new/c.txt=lic=BSD"]
TYPE_NAMES = {0: "str", 1: "i64", 2: "f64", 3: "bool"}


def znippy(store, *args, ok=(0,)):
    r = subprocess.run([ZNIPPY, "live", "--data", str(store), *args],
                       capture_output=True, text=True)
    assert r.returncode in ok, r.stderr
    return r


def append(store, src, files, meta, archive_meta=()):
    """Writes `files` under the new directory `src` and appends them as one
    batch; returns the printed (append_seq, blob_end)."""
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    args = [f"--meta={m}" for m in meta] + [f"--meta-archive={m}" for m in archive_meta]
    out = znippy(store, "append", ID, str(src), *args).stdout
    m = re.search(r"append (\d+) snapshot \d+ blob_end (\d+)", out)
    assert m, out
    return int(m[1]), int(m[2])


def cli_ls(store):
    lines = znippy(store, "ls", ID).stdout.splitlines()
    return {p: int(s) for s, p in (l.lstrip().split(" ", 1) for l in lines)}


def cli_meta(store, keys):
    rows = set()
    for key in keys:
        r = znippy(store, "meta", ID, key, ok=(0, 1))
        rows |= {tuple(l.split("\t")) for l in r.stdout.splitlines()}
    return rows


def table_dir(store, name):
    return store / "warehouse" / "znippy" / ID / name


def current_table(store, name):
    """The table as a path-based reader finds it, with no catalog: pyiceberg,
    like Spark's HadoopCatalog, reads `metadata/version-hint.text` holding N
    and opens `metadata/vN.metadata.json`."""
    hint = (table_dir(store, name) / "metadata" / "version-hint.text").read_text()
    assert hint.isdigit(), hint
    t = StaticTable.from_metadata(str(table_dir(store, name)))
    assert t.metadata_location.endswith(f"/metadata/v{hint}.metadata.json")
    return t


def pyiceberg_live(store):
    """Latest-wins over the `files` rows, in plain Python."""
    rows = current_table(store, "files").scan().to_arrow().to_pylist()
    latest = {}
    for r in rows:
        latest[r["relative_path"]] = max(latest.get(r["relative_path"], -1), r["append_seq"])
    size, dead = {}, set()
    for r in rows:
        p = r["relative_path"]
        if r["append_seq"] == latest[p]:
            size[p] = size.get(p, 0) + r["uncompressed_size"]
            if r["tombstone"]:
                dead.add(p)
    return {p: s for p, s in size.items() if p not in dead}


def duckdb_live(con, store):
    # docs/store.md's query, on the table directory.
    sql = LIVE_FILES_SQL.format(files=f"iceberg_scan('{table_dir(store, 'files')}')")
    return dict(con.execute(sql).fetchall())


def duckdb_meta(con, store):
    rows = set()
    sql = LIVE_META_SQL.format(meta=f"iceberg_scan('{table_dir(store, 'meta')}')")
    for path, key, vt, *values in con.execute(sql).fetchall():
        value = values[vt]
        text = str(value).lower() if vt == 3 else str(value)
        rows.add((path or "-", key, TYPE_NAMES[vt], text))
    return rows


@pytest.fixture(scope="module")
def con():
    return duckdb_connection()


def check_readers(con, store):
    live = cli_ls(store)
    assert duckdb_live(con, store) == live
    assert pyiceberg_live(store) == live
    meta = duckdb_meta(con, store)
    assert meta and meta == cli_meta(store, {k for _, k, _, _ in meta} | {"nokey"})
    return live, meta


def test_live_tables(con, tmp_path):
    store = tmp_path / "store"
    znippy(store, "create", ID, "--with-meta")

    seq, end = append(store, tmp_path / "b1", BATCH1, META1, ["owner=team"])
    live, meta = check_readers(con, store)
    assert live == {p: len(d) for p, d in BATCH1.items()}
    slices = con.execute(f"SELECT count(*) FROM iceberg_scan('{table_dir(store, 'files')}') "
                         "WHERE relative_path = ?", [BIG]).fetchone()[0]
    assert slices > 1  # the sizes above are sums over slices
    assert ("-", "owner", "str", "team") in meta
    assert ("gone.txt", "ratio", "f64", "1.5") in meta

    seq, end = append(store, tmp_path / "b2", BATCH2, META2)
    summary = current_table(store, "files").current_snapshot().summary
    assert (summary["znippy.blob-end"], summary["znippy.append-seq"]) == (str(end), str(seq))

    znippy(store, "rm", ID, "gone.txt")
    live, meta = check_readers(con, store)  # the same connection sees the new snapshots
    assert "gone.txt" not in live and live["new/c.txt"] == 1000
    assert live["a.txt"] == len(BATCH2["a.txt"])
    assert ("a.txt", "lic", "str", "GPL") in meta

    # The delete is a commit of its own: a new append number, the same blob end.
    summary = current_table(store, "files").current_snapshot().summary
    assert (summary["znippy.blob-end"], summary["znippy.append-seq"]) == (str(end), str(seq + 1))


def test_kind_and_link_target_columns(con, tmp_path):
    """Links and empty directories: `files.kind` and `files.link_target` say
    what each entry is, for readers that do not decode `mode`."""
    store, src = tmp_path / "store", tmp_path / "tree"
    (src / "empty").mkdir(parents=True)
    (src / "f.txt").write_bytes(b"text\n")
    links = {"rel": "f.txt", "abs": "/etc/hostname", "dangling": "../nowhere/x"}
    for name, target in links.items():
        (src / name).symlink_to(target)
    znippy(store, "create", ID)
    znippy(store, "append", ID, str(src))

    want = {("f.txt", "file", None), ("empty", "dir", None)}
    want |= {(name, "symlink", target) for name, target in links.items()}
    sql = (f"SELECT relative_path, kind, link_target FROM iceberg_scan('{table_dir(store, 'files')}') "
           "WHERE NOT tombstone")
    assert set(con.execute(sql).fetchall()) == want
    rows = current_table(store, "files").scan(
        selected_fields=("relative_path", "kind", "link_target")).to_arrow().to_pylist()
    assert {(r["relative_path"], r["kind"], r["link_target"]) for r in rows} == want


def test_readers_after_rewrites_and_expiry(con, tmp_path):
    """70 appends: the tables have been rewritten (size-tiered, the manifests
    committed meanwhile carried over) and their snapshots expired, and DuckDB
    and pyiceberg still read exactly the live files and facts."""
    store = tmp_path / "store"
    znippy(store, "create", ID, "--with-meta")
    for i in range(70):
        # Every fifth append replaces an earlier path.
        path = f"f{i - 3}.txt" if i % 5 == 4 else f"f{i}.txt"
        append(store, tmp_path / f"b{i}", {path: f"{i}\n".encode() * (i + 1)}, [f"{path}=n={i}"])
    live, meta = check_readers(con, store)
    assert len(live) == 70 - 70 // 5
    assert ("f0.txt", "n", "i64", "0") in meta
    files = current_table(store, "files")
    data_files = len(list(files.scan().plan_files()))
    assert data_files <= 33, f"{data_files} data files after 70 appends"
    assert len(files.metadata.snapshots) <= 33
    ops = {s.summary.operation.value for s in files.metadata.snapshots}
    assert "replace" in ops, ops
