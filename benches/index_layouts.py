#!/usr/bin/env python3
"""What other layouts of the index would weigh, measured on real archives.

    .venv/bin/python benches/index_layouts.py A.znippy [B.znippy ...]

For each archive, reads its data sub-index and lookup (format versions 1 to
6; version 7 has none) with pyarrow (no znippy code), writes them again as Arrow IPC files in other layouts, and prints the
bytes of each, per file, with the 32-byte BLAKE3 of every slice taken out
(issue 49 counts everything but those). The trie and the other sections are
counted as they are. Nothing is written back: this measures, it does not
change the format.

The layouts, each from the one before unless it says otherwise:

- stored: the sections as the archive holds them (arrow-rs, zstd level 3
  per buffer, 256-row batches; 64-byte alignment before version 7, 8 from
  it). On a version-7 archive the layouts up to no-lookup are what it
  stores, and are not printed.
- align8: the same batches, buffers aligned to 8 bytes (pyarrow's writer,
  as in every layout below): what the 64-byte padding of each of the ~20
  buffers of a batch costs.
- no-data-paths: the data sub-index without `relative_path` (the lookup
  holds each path; the data rows would be named by row number only).
- no-lookup: the data sub-index with its paths, and no lookup: a listing
  would read the data sub-index and sort (the trie still finds one path).
- narrow: no lookup, and the data sub-index's sizes and offsets within a
  file or blob as uint32 where every value fits, `chunk_seq` dropped (it is
  the row number, a rule since version 4).
- delta: narrow, with `blob_offset` as the difference from the row before.
- batch1024: delta, in 1,024-row batches (a `get` would inflate four times
  the rows it does now).

Then the bytes of the record-batch messages' metadata in the stored data
sub-index (the flatbuffer that lists each batch's buffers, about 600 bytes
a batch), and a grid: the stored columns, unchanged, in 256-, 512- and
1,024-row batches at zstd levels 3, 9 and 19.
"""

import struct
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc

FOOTER = 16
HASH = 32


def sections(path):
    """The manifest's rows: module name -> (offset, length, rows)."""
    data = open(path, "rb").read()
    magic, manifest_at = struct.unpack("<8sQ", data[-FOOTER:])
    assert magic == b"ZNPYMIDX", f"{path}: not a .znippy archive"
    manifest = pa.ipc.open_file(pa.BufferReader(data[manifest_at:-FOOTER])).read_all()
    out = {}
    for row in manifest.to_pylist():
        out[row["module_name"]] = (row["index_offset"], row["index_len"], row["row_count"])
    return data, out


def table(data, entry):
    offset, length, _ = entry
    return pa.ipc.open_file(pa.BufferReader(data[offset : offset + length])).read_all()


def ipc_len(t, batch_rows, level=3):
    """Bytes of `t` as an Arrow IPC file, zstd at `level` per buffer, `batch_rows` a batch."""
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=level))
    with pa.ipc.new_file(sink, t.schema, options=options) as w:
        for batch in t.combine_chunks().to_batches(max_chunksize=batch_rows):
            w.write_batch(batch)
    return sink.getvalue().size


def narrow(t):
    """Sizes and offsets within a file or blob as uint32 where all fit; no chunk_seq."""
    cols = {}
    for name in t.column_names:
        if name == "chunk_seq":
            continue
        col = t[name]
        if name in ("fdata_offset", "uncompressed_size", "blob_size", "blob_inner_offset"):
            top = pc.max(col).as_py() or 0
            if top < 2**32:
                col = col.cast(pa.uint32())
        cols[name] = col
    return pa.table(cols)


def delta(t):
    offsets = t["blob_offset"].to_pylist()
    diffs = [b - a for a, b in zip([0] + offsets[:-1], offsets)]
    return t.set_column(t.column_names.index("blob_offset"), "blob_offset", pa.array(diffs, pa.int64()))


def framing(section):
    """Bytes of an IPC file's record-batch messages that are not their bodies."""
    pos, total = 8, 0
    while pos + 8 <= len(section):
        marker, length = struct.unpack_from("<Ii", section, pos)
        if marker != 0xFFFFFFFF or length <= 0:
            break
        message = pa.ipc.read_message(pa.BufferReader(section[pos:]))
        if message.type == "record batch":
            total += 8 + length
        pos += 8 + length + message.body.size
    return total


def grid(data_t, files, slices):
    """The stored columns in other batch sizes and zstd levels, without the BLAKE3s."""
    levels = (3, 9, 19)
    print("\n| data sub-index, bytes a file without the BLAKE3s | " + " | ".join(f"zstd {l}" for l in levels) + " |")
    print("|---|" + "---:|" * len(levels))
    for rows in (256, 512, 1024):
        sizes = [(ipc_len(data_t, rows, l) - HASH * slices) / files for l in levels]
        print(f"| {rows}-row batches | " + " | ".join(f"{n:.2f}" for n in sizes) + " |")


def measure(path):
    data, s = sections(path)
    lookup = s.get("__znippy_lookup__")  # format versions 1 to 6 only
    data_t = table(data, s["files"])
    slices = s["files"][2]
    files = len(set(data_t["relative_path"].to_pylist()))
    rest = sum(e[1] for m, e in s.items() if m not in ("files", "__znippy_lookup__"))
    # The manifest and footer: what the archive's tail holds past the sections.
    tail = len(data) - min(e[0] for e in s.values()) - sum(e[1] for e in s.values())
    fixed = rest + max(tail, 0)
    layouts = [("stored", s["files"][1] + (lookup[1] if lookup else 0))]
    if lookup:
        lookup_t = table(data, lookup)
        no_paths = data_t.drop_columns(["relative_path"])
        layouts += [
            ("align8", ipc_len(data_t, 256) + ipc_len(lookup_t, 256)),
            ("no-data-paths", ipc_len(no_paths, 256) + ipc_len(lookup_t, 256)),
            ("no-lookup", ipc_len(data_t, 256)),
        ]
    layouts += [
        ("narrow", ipc_len(narrow(data_t), 256)),
        ("delta", ipc_len(delta(narrow(data_t)), 256)),
        ("batch1024", ipc_len(delta(narrow(data_t)), 1024)),
    ]
    print(f"\n{path}: {files:,} files, {slices:,} slices; trie, manifest and the rest {fixed:,} bytes")
    print("| layout | data + lookup bytes | index bytes per file | without the BLAKE3s |")
    print("|---|---:|---:|---:|")
    for name, n in layouts:
        index = n + fixed
        print(f"| {name} | {n:,} | {index / files:.1f} | {(index - HASH * slices) / files:.1f} |")
    offset, length, _ = s["files"]
    frames = framing(data[offset : offset + length])
    print(f"\nrecord-batch messages' metadata: {frames:,} bytes, {frames / files:.2f} a file")
    grid(data_t, files, slices)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        measure(p)
