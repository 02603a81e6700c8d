//! The trie is a fast path, never a second truth: an archive whose trie is
//! missing or damaged answers every question the same way through binary search
//! of its slices in path order (from format version 7, which has no lookup,
//! the data rows sorted once in memory). From format version 5 it is cut into shards
//! (docs/format.md, section 6.3): the writer's are of 4,096 keys, and the
//! sample's 2,502 paths are also read through shards of 1,024, laid out by
//! hand, three of them. From version 8 an archive whose data rows are in
//! path order has a batch trie instead (each data batch's first path), and
//! the same holds of it: missing, damaged or lying, it gives the answers of
//! the rows or an error, never another answer.

mod common;

use common::*;
use znippy_format::{
    Archive, ArchiveProps, Error, Metadata, SliceRow, TrieState, BATCH_TRIE, SMALL_BATCH_ROWS, TRIE,
};

fn sample() -> Vec<u8> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for i in 0..2_500 {
        let dir = ["a", "ab", "a/b", "b", "zz/top", "ü"][i % 6];
        files.push((format!("{dir}/f{i:04}"), text(i as u64, 50 + i % 400)));
    }
    files.push(("a/big".into(), text(9, 300_000)));
    files.push(("solo".into(), vec![]));
    archive_of(&files, small_props(), &Metadata::Absent)
}

/// The archive again with each section's bytes as `f` returns them, or
/// without the section where it returns `None`.
fn rebuilt(bytes: &[u8], f: impl Fn(&str, &[u8]) -> Option<Vec<u8>>) -> Vec<u8> {
    let a = Archive::open(bytes).unwrap();
    let sections: Vec<RawSection> = a
        .sections()
        .iter()
        .filter_map(|s| {
            let own = &bytes[s.index_offset as usize..(s.index_offset + s.index_len) as usize];
            Some(RawSection {
                pkg_type: s.pkg_type,
                module: s.module_name.clone(),
                bytes: f(&s.module_name, own)?,
                rows: s.row_count,
            })
        })
        .collect();
    assemble(
        &bytes[..a.blob_end() as usize],
        &sections,
        a.props(),
        &|_| {},
    )
}

fn without_trie(bytes: &[u8]) -> Vec<u8> {
    rebuilt(bytes, |name, own| (name != TRIE).then(|| own.to_vec()))
}

/// The archive with one byte of its trie section flipped, `from_end` bytes
/// before the section's end.
fn with_damaged_trie(bytes: &[u8], from_end: u64) -> Vec<u8> {
    let a = Archive::open(bytes).unwrap();
    let t = a.sections().iter().find(|s| s.module_name == TRIE).unwrap();
    let mut out = bytes.to_vec();
    out[(t.index_offset + t.index_len - from_end) as usize] ^= 0x5a;
    out
}

/// Each path and its first data row, in byte order of path: the trie's keys.
fn firsts(rows: &[SliceRow]) -> Vec<(&str, u64)> {
    let mut f: Vec<(&str, u64)> = rows
        .iter()
        .filter(|r| r.fdata_offset == 0)
        .map(|r| (r.relative_path.as_str(), r.chunk_seq))
        .collect();
    f.sort();
    f
}

/// The archive with its trie laid out by hand in shards of `shard_keys`.
fn resharded(bytes: &[u8], shard_keys: usize) -> Vec<u8> {
    let rows = Archive::open(bytes).unwrap().data_rows().unwrap();
    let keys: Vec<(&str, u64)> = firsts(&rows);
    let trie = sharded_trie(&keys, shard_keys);
    rebuilt(bytes, |name, own| {
        Some(if name == TRIE {
            trie.clone()
        } else {
            own.to_vec()
        })
    })
}

fn answers(a: &Archive<&[u8]>) -> Vec<String> {
    let mut out = Vec::new();
    for prefix in [
        "",
        "a",
        "a/",
        "a/b",
        "ab",
        "b",
        "zz/",
        "ü",
        "solo",
        "nothing",
        "zzz",
        "\u{10ffff}",
    ] {
        out.push(format!("list {prefix:?} {:?}", a.list(prefix).unwrap()));
        out.push(format!(
            "entries {prefix:?} {:?}",
            a.entries(prefix).unwrap()
        ));
    }
    for path in a.list("").unwrap() {
        out.push(format!("slices {path} {:?}", a.slices(&path).unwrap()));
    }
    for missing in ["", "a", "a/", "a/f00", "a/big/", "solo2", "0", "~"] {
        assert!(
            matches!(a.slices(missing), Err(Error::NotFound(_))),
            "{missing:?}"
        );
        out.push(format!(
            "contains {missing:?} {}",
            a.contains(missing).unwrap()
        ));
    }
    out
}

#[test]
fn missing_and_damaged_tries_give_identical_answers() {
    let written = sample();
    let good = resharded(&written, 1_024);
    let w = Archive::open(written.as_slice()).unwrap();
    let g = Archive::open(good.as_slice()).unwrap();
    assert_eq!(w.trie_state(), TrieState::Used);
    assert_eq!(g.trie_state(), TrieState::Used);
    let expected = answers(&g);
    assert_eq!(answers(&w), expected);
    let missing = without_trie(&good);
    let m = Archive::open(missing.as_slice()).unwrap();
    assert_eq!(m.trie_state(), TrieState::Missing);
    assert_eq!(answers(&m), expected);
    // Readers answer without it; `verify` refuses a tail no writer of this
    // format makes, as it cannot check its manifest.
    assert!(
        matches!(m.verify(2), Err(Error::Corrupt(e)) if e.contains("this writer does not make")),
        "a tail without its trie passed verify"
    );
    let mut x = Vec::new();
    m.read_file("a/big", &mut x).unwrap();
    assert_eq!(x, text(9, 300_000));

    let t = g.sections().iter().find(|s| s.module_name == TRIE).unwrap();
    // A flipped byte in the trailer's hash, in the fence, and in the middle
    // shard: the first two leave no trie; the third only the questions
    // that need that shard without it.
    for (from_end, state) in [
        (50, TrieState::Damaged),
        (56 + 3 * 40 + 5, TrieState::Damaged),
        (t.index_len / 2, TrieState::Used),
    ] {
        let damaged = with_damaged_trie(&good, from_end);
        let d = Archive::open(damaged.as_slice()).unwrap();
        assert_eq!(d.trie_state(), state, "{from_end}");
        assert_eq!(answers(&d), expected, "{from_end}");
        assert!(
            matches!(d.verify(2), Err(Error::Checksum(_))),
            "verify reports the damage"
        );
    }
}

/// From version 8 a shard is a zstd frame of its map, and its hash is of
/// the frame: one that hashes right but is no such frame (a map stored
/// plain, as before version 8; a frame that does not state its size, or
/// states more than a shard may hold, which must not size a buffer; a frame
/// of bytes that are no map) leaves the questions that need that shard to
/// the rows, with the same answers.
#[test]
fn a_shard_that_does_not_inflate_to_its_map_is_damaged() {
    let good = resharded(&sample(), 1_024);
    let expected = answers(&Archive::open(good.as_slice()).unwrap());
    let rows = Archive::open(good.as_slice()).unwrap().data_rows().unwrap();
    let keys: Vec<(&str, u64)> = firsts(&rows);
    // Magic, a header naming an 8-byte content size of 1 TiB, an empty last
    // raw block.
    let mut huge = vec![0x28, 0xb5, 0x2f, 0xfd, 0xe0];
    huge.extend_from_slice(&(1u64 << 40).to_le_bytes());
    huge.extend_from_slice(&[1, 0, 0]);
    let bad: [&dyn Fn(Vec<u8>) -> Vec<u8>; 4] = [
        &|map| map,
        &|map| zstd::stream::encode_all(map.as_slice(), 3).unwrap(),
        &|_| huge.clone(),
        &|_| zstd::bulk::compress(b"no map", 3).unwrap(),
    ];
    for (k, bad) in bad.iter().enumerate() {
        let trie = sharded_trie_with(&keys, 1_024, |i, map| match i {
            1 => bad(map),
            _ => zstd::bulk::compress(&map, 3).unwrap(),
        });
        let spliced = rebuilt(&good, |name, own| {
            Some(match name == TRIE {
                true => trie.clone(),
                false => own.to_vec(),
            })
        });
        let a = Archive::open(spliced.as_slice()).unwrap();
        assert_eq!(a.trie_state(), TrieState::Used, "{k}");
        assert_eq!(answers(&a), expected, "{k}");
    }
}

/// The trailer's numbers are not under its hash: ones that overrun the
/// section, or do not fit the keys, leave no trie, and the same answers.
#[test]
fn a_trailer_that_does_not_fit_leaves_no_trie() {
    let good = resharded(&sample(), 1_024);
    let expected = answers(&Archive::open(good.as_slice()).unwrap());
    let t = Archive::open(good.as_slice())
        .unwrap()
        .sections()
        .iter()
        .find(|s| s.module_name == TRIE)
        .unwrap()
        .clone();
    let end = (t.index_offset + t.index_len) as usize;
    // (fence length, shard count, keys per shard), from the section's end.
    for (word, value) in [
        (24, u64::MAX),
        (24, t.index_len),
        (16, 0),
        (16, u64::MAX / 40),
        (8, 0),
        (8, u64::MAX),
    ] {
        let mut bad = good.clone();
        bad[end - word..end - word + 8].copy_from_slice(&value.to_le_bytes());
        let a = Archive::open(bad.as_slice()).unwrap();
        assert_eq!(a.trie_state(), TrieState::Damaged, "{word} {value}");
        assert_eq!(answers(&a), expected, "{word} {value}");
    }
}

/// The writer's trie section is the layout docs/format.md describes, and
/// the sample needs three shards of it.
#[test]
fn the_trie_is_the_documented_layout() {
    let good = sample();
    let a = Archive::open(good.as_slice()).unwrap();
    let rows = a.data_rows().unwrap();
    let keys: Vec<(&str, u64)> = firsts(&rows);
    assert_eq!(keys.len(), 2_502);
    let t = a.sections().iter().find(|s| s.module_name == TRIE).unwrap();
    let own = &good[t.index_offset as usize..(t.index_offset + t.index_len) as usize];
    assert!(own == sharded_trie(&keys, 4_096).as_slice());
    assert_eq!(t.row_count, 2_502);
}

#[test]
fn prefix_listing_is_a_byte_prefix_in_order() {
    let good = sample();
    let a = Archive::open(good.as_slice()).unwrap();
    let all = a.list("").unwrap();
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted);
    let ab: Vec<_> = all
        .iter()
        .filter(|p| p.starts_with("ab"))
        .cloned()
        .collect();
    assert_eq!(a.list("ab").unwrap(), ab);
    assert_eq!(ab.len(), 417);
}

/// From format version 4 the trie names rows of the data sub-index. One that
/// names another file's row, with every hash in the archive right, is an
/// error: never the other file's bytes.
#[test]
fn a_trie_that_names_another_files_row_is_refused() {
    let good = sample();
    let rows = Archive::open(good.as_slice()).unwrap().data_rows().unwrap();
    let firsts = firsts(&rows);
    let refused = |bytes: &[u8]| {
        let a = Archive::open(bytes).unwrap();
        assert_eq!(a.trie_state(), TrieState::Used);
        for &(p, _) in &firsts {
            assert!(matches!(a.slices(p), Err(Error::Corrupt(_))), "{p}");
            let mut out = Vec::new();
            assert!(a.read_file(p, &mut out).is_err() && out.is_empty(), "{p}");
            assert!(a.contains(p).is_err(), "{p}");
        }
    };

    // A trie that points each path at the next path's first row.
    let misleading: Vec<(&str, u64)> = (0..firsts.len())
        .map(|i| {
            let next = firsts[(i + 1) % firsts.len()];
            (firsts[i].0, next.1)
        })
        .collect();
    let trie = sharded_trie(&misleading, 1_024);
    let misled = rebuilt(&good, |name, own| {
        Some(if name == TRIE {
            trie.clone()
        } else {
            own.to_vec()
        })
    });
    refused(&misled);
    // A listing with sizes takes its rows where the trie says, and so is
    // refused too, unless it lists nothing.
    let (g, m) = (
        Archive::open(good.as_slice()).unwrap(),
        Archive::open(misled.as_slice()).unwrap(),
    );
    for prefix in ["", "a", "a/b", "ab/", "solo", "zz", "~"] {
        match g.entries(prefix).unwrap().is_empty() {
            true => assert_eq!(m.entries(prefix).unwrap(), [], "{prefix:?}"),
            false => assert!(
                matches!(m.entries(prefix), Err(Error::Corrupt(_))),
                "{prefix:?}"
            ),
        }
    }
}

/// The sample's files in path order, its big file in 700 slices of 4 KiB
/// that fill three data batches: the batch trie has a key for the first
/// only, so it has fewer keys than the data sub-index has batches.
fn in_order() -> Vec<u8> {
    let mut files: Vec<(String, Vec<u8>)> = (0..2_500)
        .map(|i| {
            let dir = ["a", "ab", "a/b", "b", "zz/top", "ü"][i % 6];
            (format!("{dir}/f{i:04}"), text(i as u64, 50 + i % 400))
        })
        .collect();
    files.push(("a/big".into(), text(9, 700 << 12)));
    files.push(("solo".into(), vec![]));
    files.sort();
    let props = ArchiveProps {
        chunk_size: 4 << 10,
        pack_threshold: 2 << 10,
        pack_size: 4 << 10,
        level: 3,
    };
    archive_of(&files, props, &Metadata::Absent)
}

/// `(first path of each data batch, its first row)`, a path's first batch
/// only: what the writer's batch trie holds.
fn batch_keys(rows: &[SliceRow]) -> Vec<(&str, u64)> {
    let mut keys: Vec<(&str, u64)> = Vec::new();
    for r in rows.iter().step_by(SMALL_BATCH_ROWS) {
        if keys.last().is_none_or(|k| k.0 != r.relative_path) {
            keys.push((&r.relative_path, r.chunk_seq));
        }
    }
    keys
}

#[test]
fn a_batch_trie_answers_as_the_rows_do_without_it() {
    let written = in_order();
    let a = Archive::open(written.as_slice()).unwrap();
    assert_eq!(a.trie_state(), TrieState::Batches);
    assert!(a.sections().iter().all(|s| s.module_name != TRIE));
    let rows = a.data_rows().unwrap();
    let b = a
        .sections()
        .iter()
        .find(|s| s.module_name == BATCH_TRIE)
        .unwrap()
        .clone();
    // The layout docs/format.md describes (6.3.1), keys as it says them.
    let keys = batch_keys(&rows);
    assert_eq!(b.row_count, keys.len() as u64);
    let own = &written[b.index_offset as usize..(b.index_offset + b.index_len) as usize];
    assert!(own == sharded_trie(&keys, 4_096).as_slice());
    assert!(b.row_count < rows.len().div_ceil(SMALL_BATCH_ROWS) as u64);
    assert_eq!(a.verify(2).unwrap(), rows.len() as u64);
    let expected = answers(&a);

    // Without it the rows are sorted in memory; damaged, searched whole.
    let missing = rebuilt(&written, |name, own| {
        (name != BATCH_TRIE).then(|| own.to_vec())
    });
    let m = Archive::open(missing.as_slice()).unwrap();
    assert_eq!(m.trie_state(), TrieState::Missing);
    assert_eq!(answers(&m), expected);
    let mut damaged = written.clone();
    damaged[(b.index_offset + b.index_len - 50) as usize] ^= 0x5a;
    let d = Archive::open(damaged.as_slice()).unwrap();
    assert_eq!(d.trie_state(), TrieState::Damaged);
    assert_eq!(answers(&d), expected);
    assert!(matches!(d.verify(2), Err(Error::Checksum(_))));
}

/// A batch trie whose hashes are good but whose keys name the batch after
/// their own: a `get` gives the file or an error, never "not found", and
/// `verify` finds the index is not what the rows make. A trie beside a batch
/// trie is refused at open.
#[test]
fn a_batch_trie_that_lies_gives_errors_not_answers() {
    let written = in_order();
    let a = Archive::open(written.as_slice()).unwrap();
    let rows = a.data_rows().unwrap();
    let shifted: Vec<(&str, u64)> = batch_keys(&rows)
        .into_iter()
        .map(|(k, r)| (k, (r + SMALL_BATCH_ROWS as u64).min(rows.len() as u64)))
        .collect();
    let lying = rebuilt(&written, |name, own| {
        Some(match name == BATCH_TRIE {
            true => sharded_trie(&shifted, 4_096),
            false => own.to_vec(),
        })
    });
    let l = Archive::open(lying.as_slice()).unwrap();
    let mut refused = 0;
    for path in a.list("").unwrap() {
        match l.slices(&path) {
            Ok(got) => assert_eq!(got, a.slices(&path).unwrap(), "{path}"),
            Err(Error::Corrupt(_)) => refused += 1,
            Err(e) => panic!("{path}: {e}"),
        }
    }
    assert!(refused > 0);
    assert!(matches!(l.verify(2), Err(Error::Corrupt(_))));

    let mut sections: Vec<RawSection> = a
        .sections()
        .iter()
        .map(|s| RawSection {
            pkg_type: s.pkg_type,
            module: s.module_name.clone(),
            bytes: written[s.index_offset as usize..(s.index_offset + s.index_len) as usize]
                .to_vec(),
            rows: s.row_count,
        })
        .collect();
    let keys = firsts(&rows);
    sections.push(RawSection {
        pkg_type: znippy_format::RESERVED_PKG_TYPE,
        module: TRIE.into(),
        bytes: sharded_trie(&keys, 4_096),
        rows: keys.len() as u64,
    });
    let both = assemble(
        &written[..a.blob_end() as usize],
        &sections,
        a.props(),
        &|_| {},
    );
    assert!(matches!(
        Archive::open(both.as_slice()),
        Err(Error::Corrupt(_))
    ));
}
