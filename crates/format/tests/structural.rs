//! Structural proofs of what each operation reads, counted through the reader's
//! I/O layer: two archives with the same names and payloads 100x apart must cost
//! the same bytes for `list` and `meta`, and the same plus that file's own blobs
//! for `get`. Timing-free, so it holds on a loaded machine.

mod common;

use std::sync::Arc;

use common::*;
use znippy_format::{Archive, ArchiveProps, MetaSearch};

fn build(scale: usize) -> Vec<u8> {
    // Every file stays below pack_threshold at both scales, so both archives have
    // one row per file and identical index shapes.
    let files: Vec<(String, Vec<u8>)> = (0..2000)
        .map(|i| {
            (
                format!("dir{}/file{i:05}.dat", i % 7),
                noise(i as u64, 40 * scale),
            )
        })
        .collect();
    let meta = meta_with(&[
        (Some("dir0/file00000.dat"), "license", "MIT"),
        (Some("dir1/file00001.dat"), "license", "Apache-2.0"),
        (None, "owner", "team"),
    ]);
    let props = ArchiveProps {
        chunk_size: 8 << 20,
        pack_threshold: 4 << 20,
        // One pack holds every file at both scales.
        pack_size: 8 << 20,
        level: 1,
    };
    archive_of(&files, props, &meta)
}

struct Costs {
    open: u64,
    list: u64,
    meta: u64,
    get_index: u64,
    get_blobs: u64,
    blob_bytes_touched_by_list_and_meta: u64,
}

fn measure(bytes: Vec<u8>) -> Costs {
    let src = Recording::new(bytes);
    let a = Archive::open(Arc::clone(&src)).unwrap();
    let open = src.total();
    src.take();
    let blob_end = a.blob_end();
    let in_blobs = |reads: &[(u64, u64)]| {
        reads
            .iter()
            .filter(|r| r.0 < blob_end)
            .map(|r| r.1)
            .sum::<u64>()
    };

    let names = a.list("dir3/").unwrap();
    assert_eq!(names.len(), (0..2000).filter(|i| i % 7 == 3).count());
    let list_reads = src.take();

    let md = a.metadata().unwrap();
    assert!(matches!(md.by_key("license"), MetaSearch::Hits(h) if h.len() == 2));
    let meta_reads = src.take();

    let target = "dir2/file01234.dat";
    let mut out = Vec::new();
    a.read_file(target, &mut out).unwrap();
    let get_reads = src.take();
    let rows = a.slices(target).unwrap();
    src.take();
    // The only blob bytes `get` read lie within that file's blobs.
    let own: u64 = rows.iter().map(|r| r.blob_size).sum();
    for &(off, len) in get_reads.iter().filter(|r| r.0 < blob_end) {
        assert!(
            rows.iter()
                .any(|r| off >= r.blob_offset && off + len <= r.blob_offset + r.blob_size),
            "get read blob bytes at {off}+{len} that are not its own"
        );
    }
    let get_total: u64 = get_reads.iter().map(|r| r.1).sum();
    Costs {
        open,
        list: list_reads.iter().map(|r| r.1).sum(),
        meta: meta_reads.iter().map(|r| r.1).sum(),
        get_index: get_total - in_blobs(&get_reads),
        get_blobs: own,
        blob_bytes_touched_by_list_and_meta: in_blobs(&list_reads) + in_blobs(&meta_reads),
    }
}

#[test]
fn list_meta_and_get_cost_the_same_for_payloads_100x_apart() {
    let small = build(1);
    let large = build(100);
    let blobs = |b: &Vec<u8>| Archive::open(b.as_slice()).unwrap().blob_end();
    assert!(blobs(&large) > 50 * blobs(&small), "payloads really differ");
    let (s, l) = (measure(small), measure(large));
    assert_eq!(
        s.blob_bytes_touched_by_list_and_meta, 0,
        "list/meta read no blob"
    );
    assert_eq!(
        l.blob_bytes_touched_by_list_and_meta, 0,
        "list/meta read no blob"
    );
    assert_eq!(s.open, l.open, "open");
    assert_eq!(s.list, l.list, "list");
    assert_eq!(s.meta, l.meta, "meta");
    // The lookup batch is compressed and holds larger offsets in the larger
    // archive, so its size differs by a few percent; it does not grow with it.
    assert!(
        l.get_index.abs_diff(s.get_index) * 10 < s.get_index,
        "get, index part: {} vs {}",
        s.get_index,
        l.get_index
    );
    assert!(
        l.get_blobs > 50 * s.get_blobs,
        "the file's own blobs scale with it"
    );
}

#[test]
fn get_and_a_listing_with_sizes_each_read_a_batch_or_two_of_one_section() {
    // 150,000 files make 586 batches of the data sub-index. Written in path
    // order (as `compress` writes a directory) they get a batch trie of 586
    // keys, from format version 8; written in reverse, 37 shards of a trie.
    // Since format version 4 a get goes from the trie to its file's data
    // row: one data batch; since version 5, of the trie only its fence and
    // the one shard that holds the path. With a batch trie, the same three
    // reads find the batch, and the path is searched in it. From version 7,
    // which has no lookup, a listing with sizes takes its paths from the trie
    // and the rest from the data rows they name, or with a batch trie walks
    // the rows from the first: a batch or two either way.
    let files: Vec<(String, Vec<u8>)> = (0..150_000)
        .map(|i| (format!("f/{i:06}"), i.to_string().into_bytes()))
        .collect();
    let reversed: Vec<_> = files.iter().rev().cloned().collect();
    let mut index_len = Vec::new();
    for (files, index) in [
        (files, znippy_format::BATCH_TRIE),
        (reversed, znippy_format::TRIE),
    ] {
        let bytes = archive_of(
            &files,
            ArchiveProps::default(),
            &znippy_format::Metadata::Absent,
        );
        let src = Recording::new(bytes);
        let a = Archive::open(Arc::clone(&src)).unwrap();
        let section = |name: &str| {
            a.sections()
                .iter()
                .find(|s| s.module_name == name)
                .unwrap()
                .clone()
        };
        assert!(
            a.sections()
                .iter()
                .all(|s| s.module_name != znippy_format::LOOKUP),
            "no lookup from version 7"
        );
        let data = section("files");
        let within = |reads: &[(u64, u64)], s: &znippy_format::SectionEntry| {
            reads
                .iter()
                .filter(|r| r.0 >= s.index_offset && r.0 < s.index_offset + s.index_len)
                .map(|r| r.1)
                .collect::<Vec<_>>()
        };
        let trie = section(index);
        index_len.push(trie.index_len);
        src.take();
        let mut out = Vec::new();
        a.read_file("f/070000", &mut out).unwrap();
        let reads = src.take();
        // The trailer, the fence with the shards' records (40 bytes a
        // shard), and one shard; these keys compress so well that the
        // records are a seventh of the trie.
        let in_trie = within(&reads, &trie);
        assert_eq!(in_trie.len(), 3, "{index}: {in_trie:?}");
        assert_eq!(within(&reads, &data).len(), 1, "{index}: one data batch");
        // Another part of the archive, from nothing read yet.
        let a = Archive::open(Arc::clone(&src)).unwrap();
        src.take();
        let mut out = Vec::new();
        a.read_file("f/140000", &mut out).unwrap();
        assert_eq!(out, b"140000");
        let reads = src.take();
        let read: u64 = within(&reads, &data).iter().sum();
        assert!(
            read > 0 && read * 100 < data.index_len,
            "{index}: a get read {read} of {} data bytes",
            data.index_len
        );

        let listed = a.entries("f/1400").unwrap();
        assert_eq!(listed.len(), 100);
        assert_eq!(listed[0].path, "f/140000");
        assert_eq!(listed[99].path, "f/140099");
        assert_eq!(listed[99].size, 6);
        let reads = src.take();
        // Rows 140,000 to 140,099: the batch the get above decoded, and the
        // next one; a scan would read all 586.
        let in_data = within(&reads, &data);
        assert!(
            (1..=2).contains(&in_data.len()),
            "{index}: a listing read {in_data:?} of the data"
        );
    }
    // A key a batch, not a path: even against a trie of numbered names,
    // which fst shares nearly all of, the batch trie is a fraction.
    assert!(
        index_len[0] * 5 < index_len[1],
        "batch trie and trie: {index_len:?}"
    );
}

#[test]
fn get_reads_and_decodes_a_pack_only_as_far_as_the_file() {
    // 64 compressible files of 30 KB share one pack whose compressed blob spans
    // several read pieces: the first file must not read the whole blob, the
    // last must, and every file must come back intact.
    let files: Vec<(String, Vec<u8>)> = (0..64)
        .map(|i| (format!("pack/{i:02}.txt"), mixed(i, 30_000)))
        .collect();
    let props = ArchiveProps {
        chunk_size: 4 << 20,
        pack_threshold: 1 << 20,
        pack_size: 4 << 20,
        level: 1,
    };
    let src = Recording::new(archive_of(&files, props, &znippy_format::Metadata::Absent));
    let a = Archive::open(Arc::clone(&src)).unwrap();
    let blob_end = a.blob_end();
    let first = a.slices("pack/00.txt").unwrap();
    let last = a.slices("pack/63.txt").unwrap();
    assert!(first[0].compressed);
    assert_eq!(first[0].blob_offset, last[0].blob_offset, "one pack");
    assert!(
        first[0].blob_size > 512 << 10,
        "the blob spans several pieces"
    );
    let mut blob_bytes = Vec::new();
    for (name, want) in &files {
        src.take();
        let mut out = Vec::new();
        a.read_file(name, &mut out).unwrap();
        assert!(out == *want, "{name} reads back");
        let read: u64 = src
            .take()
            .iter()
            .filter(|r| r.0 < blob_end)
            .map(|r| r.1)
            .sum();
        blob_bytes.push(read);
    }
    assert!(blob_bytes[0] < first[0].blob_size / 2, "{blob_bytes:?}");
    assert_eq!(blob_bytes[63], last[0].blob_size);
    assert!(
        blob_bytes.windows(2).all(|w| w[0] <= w[1]),
        "{blob_bytes:?}"
    );
}
