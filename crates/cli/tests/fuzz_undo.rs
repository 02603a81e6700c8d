//! A mutation fuzzer for the undo file (docs/format.md, 11.1), bounded in time
//! like the format crate's (`ZNIPPY_FUZZ_SECS`). A real interrupted append is
//! made once, by a `znippy append` that dies at `append.tail-written`; then each
//! case puts a mutated copy of its undo file beside a copy of the half-written
//! archive and runs `recover`. Oracle: a rollback gives the archive as it was
//! before the append, byte for byte; any other outcome (a torn file discarded,
//! a refusal) leaves the archive exactly as recover found it. Never a panic,
//! a hang or an allocation sized by the file (the allocator is capped).

use std::alloc::System;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;

use znippy_format::{recover, undo_path, Recovery};
use znippy_testkit::{data, fuzz};

#[global_allocator]
static ALLOC: cap::Cap<System> = cap::Cap::new(System, 1 << 30);

fn znippy(args: &[&str], failpoint: Option<&str>) -> std::process::Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_znippy"));
    c.args(args);
    if let Some(p) = failpoint {
        c.env("ZNIPPY_FAILPOINT", p);
    }
    c.output().unwrap()
}

fn tree(dir: &Path, seed: u8) {
    std::fs::create_dir_all(dir).unwrap();
    for i in 0..4u8 {
        let bytes = data::mixed(
            u64::from(seed) * 4 + u64::from(i),
            3000 + 700 * usize::from(i),
        );
        std::fs::write(dir.join(format!("f{seed}-{i}")), bytes).unwrap();
    }
}

#[test]
fn recover_survives_mutated_undo_files() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    tree(&a, 1);
    tree(&b, 2);
    let arc = tmp.path().join("x.znippy");
    let s = |p: &Path| p.to_str().unwrap().to_string();
    assert!(znippy(&["compress", &s(&a), "-o", &s(&arc)], None)
        .status
        .success());
    let before = std::fs::read(&arc).unwrap();
    let died = znippy(&["append", &s(&arc), &s(&b)], Some("append.tail-written"));
    assert_eq!(died.status.signal(), Some(libc::SIGABRT), "{died:?}");
    let crashed = std::fs::read(&arc).unwrap();
    let undo = std::fs::read(undo_path(&arc)).unwrap();
    assert_ne!(crashed, before, "the append had written its tail");

    let work = tmp.path().join("case.znippy");
    let work_undo = undo_path(&work);
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/fuzz_undo.txt");
    let cases = fuzz::run(&corpus, &[(undo, ())], false, |input, _, _, _| {
        std::fs::write(&work, &crashed).unwrap();
        std::fs::write(&work_undo, input).unwrap();
        let outcome = recover(&work);
        let now = std::fs::read(&work).unwrap();
        match outcome {
            Ok(Recovery::RolledBack) => assert!(now == before, "a rollback to other bytes"),
            _ => assert!(now == crashed, "recover changed the archive: {outcome:?}"),
        }
        let _ = std::fs::remove_file(&work_undo);
        outcome.map_or_else(|e| fuzz::class(&e), |r| format!("{r:?}"))
    });
    // The unmutated file rolls back: the oracle's good case is reachable.
    std::fs::write(&work, &crashed).unwrap();
    std::fs::copy(undo_path(&arc), &work_undo).unwrap();
    assert!(matches!(recover(&work), Ok(Recovery::RolledBack)));
    assert_eq!(std::fs::read(&work).unwrap(), before);
    assert!(cases > 0);
}
