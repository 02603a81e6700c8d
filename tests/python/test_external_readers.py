"""External readers: the index of a .znippy archive, read with pyarrow and DuckDB
through examples/read_index.py alone (no znippy code), must agree with the files
that went in and with the CLI.

Run: ZNIPPY_BIN=target/debug/znippy python -m pytest -q tests/python
"""

import importlib.util
import random
import subprocess
import sys
from pathlib import Path

import blake3
import duckdb
import pytest

from binary import znippy_bin

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "read_index.py"

# Load the example as a module: the test uses exactly what users are shown.
_spec = importlib.util.spec_from_file_location("read_index", EXAMPLE)
ri = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ri)


LARGE = "data/sub/large.bin"
UNICODE = "données/ünïcödé €.txt"

# file -> key -> (CLI value, value_type code, column, expected value)
META = {
    LARGE: {"lic": ("MIT", 0, "v_str", "MIT"), "stars": ("42", 1, "v_i64", 42)},
    "a.txt": {"ratio": ("1.5", 2, "v_f64", 1.5)},
    UNICODE: {"ok": ("true", 3, "v_bool", True)},
}
ARCHIVE_META = {"owner": ("team", 0, "v_str", "team")}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    """A small tree: returns (root, {relative_path: bytes})."""
    root = tmp_path_factory.mktemp("tree")
    rng = random.Random(1234)  # fixed seed: the same archive every run
    files = {
        "a.txt": b"hello znippy\n" * 100,
        "empty": b"",
        "data/b.csv": b"id,name\n1,x\n2,y\n",
        "data/sub/deeper/c.json": b'{"k": [1, 2, 3]}\n',
        # Random (so no two chunks dedupe) and larger than a chunk (1.5 MiB): several slices.
        LARGE: rng.randbytes(5 * 1024 * 1024 + 12345),
        UNICODE: "héllo wörld\n".encode(),
    }
    for rel, data in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root, files


@pytest.fixture(scope="module")
def archive(tree, tmp_path_factory):
    root, _ = tree
    out = tmp_path_factory.mktemp("out") / "a.znippy"
    cmd = [znippy_bin(), "compress", str(root), "-o", str(out)]
    for path, kv in META.items():
        for key, (text, *_) in kv.items():
            cmd += ["--meta", f"{path}={key}={text}"]
    for key, (text, *_) in ARCHIVE_META.items():
        cmd += ["--meta-archive", f"{key}={text}"]
    subprocess.run(cmd, check=True, capture_output=True)
    return out


def slices_of(archive, size):
    """How many pieces a file of `size` bytes is cut into: the archive records
    the piece size in its manifest's schema metadata."""
    chunk = int(ri.read_manifest(archive).schema.metadata[b"znippy.chunk_size"])
    return chunk, -(-size // chunk)


@pytest.fixture(scope="module")
def data(archive):
    return ri.read_section(archive, ri.DATA)


@pytest.fixture(scope="module")
def meta(archive):
    table = ri.read_section(archive, ri.META)
    assert table is not None, "archive written with --meta has no meta section"
    return table


def test_data_rows_match_files(data, tree):
    _, files = tree
    rows = data.to_pylist()
    assert {r["relative_path"] for r in rows} == set(files)
    # In chunk_seq order, numbered from 0, a file's slices one after another.
    assert [r["chunk_seq"] for r in rows] == list(range(len(rows)))
    paths = [r["relative_path"] for r in rows]
    runs = [p for i, p in enumerate(paths) if i == 0 or paths[i - 1] != p]
    assert len(runs) == len(set(runs))

    for rel, content in files.items():
        slices = [r for r in rows if r["relative_path"] == rel]
        # Slices tile the file: contiguous from 0, sizes sum to its length.
        offset = 0
        for r in slices:
            assert r["fdata_offset"] == offset
            offset += r["uncompressed_size"]
            piece = content[r["fdata_offset"]:offset]
            assert len(r["checksum"]) == 32
            assert r["checksum"] == blake3.blake3(piece).digest(), rel
        assert offset == len(content), rel
    assert len([r for r in rows if r["relative_path"] == "empty"]) == 1


def test_duckdb_lists_and_locates_files_from_the_data_rows(archive, data, tree):
    _, files = tree
    # From format version 7 there is no lookup: a listing is the data rows by
    # path (from version 8 a directory's rows are in that order already).
    assert ri.read_section(archive, ri.LOOKUP) is None
    assert data.schema.metadata[b"znippy_format_version"] == b"9"
    con = duckdb.connect()
    con.register("files", data)
    listing = con.execute(
        "SELECT relative_path, sum(uncompressed_size) FROM files"
        " GROUP BY relative_path ORDER BY relative_path"
    ).fetchall()
    assert dict(listing) == {p: len(b) for p, b in files.items()}
    assert [p for p, _ in listing] == sorted(files, key=str.encode)
    # Where a file's bytes are: its data rows.
    count, total = con.execute(
        "SELECT count(*), sum(blob_size) FROM files WHERE relative_path = ?",
        [LARGE],
    ).fetchone()
    chunk, slices = slices_of(archive, len(files[LARGE]))
    assert count == slices > 1
    assert total == len(files[LARGE]), "random bytes are stored raw"
    # The example's helper gives the same rows, in file order.
    rows = ri.query_slices(data, LARGE)
    assert [r[2] for r in rows] == [i * chunk for i in range(count)]
    # Every slice's BLAKE3 is the hash of that piece of the file.
    for (_, _, off, size, *_rest, checksum, _mode) in rows:
        assert bytes(checksum) == blake3.blake3(files[LARGE][off:off + size]).digest()
    # Non-ASCII paths round-trip through Arrow and DuckDB unchanged.
    assert len(ri.query_slices(data, UNICODE)) == 1


def test_meta_via_pyarrow(meta):
    rows = meta.to_pylist()
    value_cols = ["v_str", "v_i64", "v_f64", "v_bool", "v_bytes"]
    expected = {(p, k): v for p, kv in META.items() for k, v in kv.items()}
    expected |= {(None, k): v for k, v in ARCHIVE_META.items()}
    got = {}
    for r in rows:
        # Exactly one value column is set: the one value_type names.
        set_cols = [c for c in value_cols if r[c] is not None]
        assert set_cols == [value_cols[r["value_type"]]], r
        got[(r["relative_path"], r["key"])] = (r["value_type"], r[set_cols[0]])
    assert got == {k: (code, value) for k, (_, code, _, value) in expected.items()}

    # Sorted by (key, relative_path), NULL (archive-level) first.
    order = [(r["key"], r["relative_path"] is not None, r["relative_path"] or "") for r in rows]
    assert order == sorted(order)


def test_meta_via_duckdb(meta):
    con = duckdb.connect()
    con.register("meta", meta)
    assert con.execute(
        "SELECT relative_path, value_type, v_str FROM meta WHERE key = 'lic'"
    ).fetchall() == [(LARGE, 0, "MIT")]
    assert con.execute(
        "SELECT relative_path, v_str FROM meta WHERE key = 'owner'"
    ).fetchall() == [(None, "team")]
    types = dict(con.execute("SELECT key, value_type FROM meta").fetchall())
    assert types == {"lic": 0, "stars": 1, "ratio": 2, "ok": 3, "owner": 0}
    assert con.execute(
        "SELECT relative_path FROM meta WHERE key = 'ok' AND v_bool"
    ).fetchall() == [(UNICODE,)]


def test_manifest_hashes_and_layout(archive):
    manifest = ri.read_manifest(archive)
    rows = manifest.to_pylist()
    names = [r["module_name"] for r in rows]
    # A directory's rows are in path order: a batch trie, not a trie.
    for name in ("files", ri.BATCH_TRIE, ri.META):
        assert names.count(name) == 1, names
    assert ri.LOOKUP not in names and ri.TRIE not in names
    manifest_offset, _ = ri.read_footer(archive)
    for r in rows:
        data = ri.section_bytes(archive, r["module_name"], manifest)
        assert blake3.blake3(data).digest() == r["blake3"], r["module_name"]
        assert r["index_offset"] % 64 == 0, r["module_name"]
        assert r["index_offset"] + r["index_len"] <= manifest_offset
        if r["module_name"] != ri.BATCH_TRIE:  # fst bytes, not Arrow
            assert ri.read_section(archive, r["module_name"], manifest).num_rows == r["row_count"]


def test_no_meta_section_without_metadata(tree, tmp_path):
    root, _ = tree
    out = tmp_path / "plain.znippy"
    subprocess.run([znippy_bin(), "compress", str(root), "-o", str(out)], check=True,
                   capture_output=True)
    assert ri.read_section(out, ri.META) is None


def test_cli_list_agrees_with_the_data_rows(archive, data):
    out = subprocess.run([znippy_bin(), "list", str(archive)], check=True,
                         capture_output=True, text=True, encoding="utf-8").stdout
    paths = set(data.column("relative_path").to_pylist())
    assert out.splitlines() == sorted(paths, key=str.encode)


def test_example_script_runs(archive, tree):
    _, files = tree
    res = subprocess.run([sys.executable, str(EXAMPLE), str(archive), LARGE],
                         capture_output=True, text=True, encoding="utf-8")
    assert res.returncode == 0, res.stderr
    assert ri.BATCH_TRIE in res.stdout and ri.META in res.stdout
    _, slices = slices_of(archive, len(files[LARGE]))
    assert f"{LARGE}: {slices} slice(s)" in res.stdout
    assert "meta lic (str) = MIT" in res.stdout
