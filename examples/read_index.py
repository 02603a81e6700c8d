#!/usr/bin/env python3
"""Read a .znippy archive's index with pyarrow and DuckDB, no znippy code.

    python examples/read_index.py ARCHIVE [PATH]

Prints the manifest (one row per section). With PATH, asks DuckDB for that
file's rows of the data sub-index (its slices: where each piece's bytes are, and
their BLAKE3) and, if the archive has metadata, its meta rows.

The container (docs/format.md) ends with a 16-byte footer: b"ZNPYMIDX" and the
manifest's offset as a little-endian u64. The manifest, which runs from that
offset to the footer, is an Arrow IPC file listing every section by
(index_offset, index_len); each Arrow section is itself a complete IPC file.
Needs: pyarrow, duckdb.
"""

import struct
import sys

import pyarrow as pa
import pyarrow.ipc

FOOTER_MAGIC = b"ZNPYMIDX"
FOOTER_LEN = 16
DATA = "files"  # the data sub-index: every slice row, in chunk_seq order
LOOKUP = "__znippy_lookup__"  # versions 1 to 6 only
META = "__znippy_meta__"
TRIE = "__znippy_trie__"  # fst bytes, not Arrow
BATCH_TRIE = "__znippy_batch_trie__"  # version 8, instead of the trie: fst bytes
# Version 2 archives may hold links and directories: file-type bits in `mode`
# (docs/format.md, 5.3). Version 3 compresses the lookup's buffers (Arrow IPC
# body compression, which pyarrow inflates by itself). Version 4 keeps the blob
# columns and checksums in the data sub-index only: its lookup holds
# relative_path, chunk_seq, fdata_offset, uncompressed_size and mode. Version 5
# cuts the trie into shards, which this reader does not read. Version 6 adds
# package sections (pkg_type 1 and up: one per plugin and repo, a row per
# package). Version 7 has no lookup (a listing is the data sub-index's paths,
# ORDER BY relative_path) and pads Arrow buffers to 8 bytes, not 64. Version 8
# writes a batch trie instead of the trie when the data rows are in path order
# (every compress of a directory). Version 9 records the most a pack of small
# files holds (znippy.pack_size in the manifest), which no reader needs. The
# data sub-index reads the same way in all nine.
SUPPORTED_MAJOR = 9
META_TYPES = {0: "str", 1: "i64", 2: "f64", 3: "bool", 4: "bytes"}


def _read_ipc(data):
    """Decode one Arrow IPC file held in memory."""
    table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
    # Every section says which format version wrote it; refuse a newer major
    # rather than mis-read columns whose meaning may have changed.
    version = (table.schema.metadata or {}).get(b"znippy_format_version", b"1")
    if int(version.decode().split(".")[0]) > SUPPORTED_MAJOR:
        raise ValueError(f"znippy format version {version.decode()} is newer than this reader")
    return table


def read_footer(path):
    """Return the manifest offset and the offset where the footer starts."""
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        if size < FOOTER_LEN:
            raise ValueError(f"{path}: too short to be a .znippy archive")
        f.seek(size - FOOTER_LEN)
        magic, manifest_offset = struct.unpack("<8sQ", f.read(FOOTER_LEN))
    if magic != FOOTER_MAGIC or manifest_offset > size - FOOTER_LEN:
        raise ValueError(f"{path}: no znippy footer")
    return manifest_offset, size - FOOTER_LEN


def read_manifest(path):
    """The manifest as a pyarrow Table (pkg_type, repo, module_name, ...)."""
    start, end = read_footer(path)
    with open(path, "rb") as f:
        f.seek(start)
        return _read_ipc(f.read(end - start))


def section_bytes(path, name, manifest=None):
    """Raw bytes of the first section whose module_name is `name`, or None."""
    manifest = manifest if manifest is not None else read_manifest(path)
    for row in manifest.to_pylist():
        if row["module_name"] == name:
            with open(path, "rb") as f:
                f.seek(row["index_offset"])
                data = f.read(row["index_len"])
            if len(data) != row["index_len"]:
                raise ValueError(f"{path}: section {name} runs past the end of the file")
            return data
    return None


def read_section(path, name, manifest=None):
    """An Arrow section ("files", META, LOOKUP before version 7) as a pyarrow
    Table, or None when the archive has no such section (e.g. no metadata was
    written)."""
    data = section_bytes(path, name, manifest)
    return None if data is None else _read_ipc(data)


def read_packages(path, manifest=None):
    """Every package section as {(module_name, repo): pyarrow Table}: a row per
    package, the columns relative_path, chunk_seq, size, pkg_type, repo, error,
    then the plugin's own (docs/format.md, 6.5)."""
    manifest = manifest if manifest is not None else read_manifest(path)
    out = {}
    with open(path, "rb") as f:
        for row in manifest.to_pylist():
            if row["pkg_type"] > 0:
                f.seek(row["index_offset"])
                out[(row["module_name"], row["repo"])] = _read_ipc(f.read(row["index_len"]))
    return out


def query_slices(files, relative_path):
    """The rows (slices) of one file in the data sub-index, via DuckDB over the
    pyarrow table, in file order."""
    import duckdb  # only needed for queries

    con = duckdb.connect()  # in-memory; querying Arrow needs no extension
    con.register("files", files)
    return con.execute(
        "SELECT relative_path, chunk_seq, fdata_offset, uncompressed_size,"
        " blob_offset, blob_size, blob_inner_offset, compressed, checksum, mode"
        " FROM files WHERE relative_path = ? ORDER BY fdata_offset",
        [relative_path],
    ).fetchall()


def query_meta(meta, relative_path):
    """(key, value_type, value) of one file's metadata, via DuckDB."""
    import duckdb

    con = duckdb.connect()
    con.register("meta", meta)
    # Exactly one v_* column is non-null: the one value_type names.
    return con.execute(
        "SELECT key, value_type,"
        " CASE value_type WHEN 0 THEN v_str WHEN 1 THEN CAST(v_i64 AS VARCHAR)"
        " WHEN 2 THEN CAST(v_f64 AS VARCHAR) WHEN 3 THEN CAST(v_bool AS VARCHAR)"
        " ELSE hex(v_bytes) END AS value"
        " FROM meta WHERE relative_path = ? ORDER BY key",
        [relative_path],
    ).fetchall()


def main(argv):
    if len(argv) not in (2, 3):
        print("usage: python examples/read_index.py ARCHIVE [PATH]", file=sys.stderr)
        return 2
    archive = argv[1]
    manifest = read_manifest(archive)
    print(f"manifest of {archive}:")
    print(f"{'pkg_type':>8} {'module_name':<22} {'offset':>12} {'length':>10} {'rows':>8}  blake3")
    for r in manifest.to_pylist():
        print(f"{r['pkg_type']:>8} {r['module_name']:<22} {r['index_offset']:>12}"
              f" {r['index_len']:>10} {r['row_count']:>8}  {r['blake3'].hex()}")

    files = read_section(archive, DATA, manifest)
    meta = read_section(archive, META, manifest)
    print(f"data: {files.num_rows} rows; meta: "
          + ("none" if meta is None else f"{meta.num_rows} rows"))
    for (plugin, repo), table in read_packages(archive, manifest).items():
        print(f"packages {plugin} {repo!r}: {table.num_rows} rows,"
              f" columns {', '.join(table.column_names[6:])}")

    if len(argv) == 3:
        path = argv[2]
        rows = query_slices(files, path)
        if not rows:
            print(f"{path}: not in the archive")
            return 1
        print(f"{path}: {len(rows)} slice(s)")
        for (_, seq, off, size, blob_off, blob_size, inner, comp, checksum, mode) in rows:
            mode = "-" if mode is None else oct(mode)
            print(f"  chunk_seq={seq} fdata_offset={off} size={size} blob={blob_off}+{blob_size}"
                  f" inner={inner} compressed={comp} mode={mode} blake3={bytes(checksum).hex()}")
        for key, vtype, value in (query_meta(meta, path) if meta is not None else []):
            print(f"  meta {key} ({META_TYPES[vtype]}) = {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
