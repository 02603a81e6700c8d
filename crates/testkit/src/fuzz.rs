//! The mutation fuzzers' shared parts: the generator, the mutations and
//! the time-bounded loop with its watchdog. Each fuzz test declares its own
//! capped allocator (`cap::Cap`), so that a buffer sized by a mutated field
//! fails the run.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::data::Rng;

/// Values that sit on the edges of the fields they land in.
const INTERESTING: [u64; 9] = [
    0,
    1,
    63,
    64,
    0x7fff_ffff,
    0xffff_ffff,
    0x8000_0000_0000_0000,
    u64::MAX,
    65_536,
];

/// One to four mutations of `b`: bit flips, bytes, edge values, truncation,
/// inserted junk, copied runs. With `tail_bias` most land in the last 40%
/// (an archive's tail is where its structure is).
pub fn mutate(rng: &mut Rng, mut b: Vec<u8>, tail_bias: bool) -> Vec<u8> {
    for _ in 0..1 + rng.below(4) {
        let len = b.len().max(1);
        // Most bytes worth hitting are in the tail: the last ~40%.
        let pos = if tail_bias && rng.below(10) < 7 {
            len - 1 - rng.below(len * 2 / 5 + 1).min(len - 1)
        } else {
            rng.below(len)
        };
        match rng.below(7) {
            0..=2 | 5 => in_place(rng, &mut b, pos),
            3 => b.truncate(rng.below(len)),
            4 => {
                let n = 1 + rng.below(64);
                let junk: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
                let at = pos.min(b.len());
                b.splice(at..at, junk);
            }
            _ => {
                let n = b.len();
                if n >= 8 {
                    // Point the manifest offset somewhere plausible but wrong.
                    let off = rng.below(n) as u64;
                    b[n - 8..].copy_from_slice(&off.to_le_bytes());
                }
            }
        }
    }
    b
}

/// One to four mutations of `b` that keep its length (bit flips, bytes, edge
/// values, copied runs): for a structure-aware fuzzer that mutates inside one
/// part of an input and then fixes up what describes that part.
pub fn mutate_within(rng: &mut Rng, b: &mut [u8]) {
    for _ in 0..1 + rng.below(4) {
        let pos = rng.below(b.len());
        in_place(rng, b, pos);
    }
}

/// One length-keeping mutation at `pos`.
fn in_place(rng: &mut Rng, b: &mut [u8], pos: usize) {
    let at = pos.min(b.len().saturating_sub(1));
    match rng.below(4) {
        0 if !b.is_empty() => b[at] ^= 1 << rng.below(8),
        1 if !b.is_empty() => b[at] = rng.next_u64() as u8,
        2 if b.len() > 64 => {
            let n = 1 + rng.below(64);
            let from = rng.below(b.len() - n);
            let to = rng.below(b.len() - n);
            let chunk = b[from..from + n].to_vec();
            b[to..to + n].copy_from_slice(&chunk);
        }
        _ => {
            let v = INTERESTING[rng.below(INTERESTING.len())].to_le_bytes();
            let w = [1, 2, 4, 8][rng.below(4)];
            for (k, byte) in v[..w].iter().enumerate() {
                if let Some(x) = b.get_mut(pos + k) {
                    *x = *byte;
                }
            }
        }
    }
}

/// The class of an outcome: an error's message without its digits (which
/// name offsets, sizes and counts), cut to 80 characters. Two inputs with the
/// same class most likely took the same path.
pub fn class(outcome: &dyn std::fmt::Display) -> String {
    outcome
        .to_string()
        .chars()
        .filter(|c| !c.is_ascii_digit())
        .take(80)
        .collect()
}

/// Most cases a corpus keeps.
const CORPUS_CASES: usize = 256;

/// A fuzzer's corpus, kept in the repository: the random state the last saved
/// run stopped at, and the cases (each a random state: the seed it mutates
/// and its mutations follow from it) that reached an outcome no earlier case
/// had.
#[derive(Default)]
struct Corpus {
    next: Option<u64>,
    cases: Vec<u64>,
}

impl Corpus {
    fn load(path: &Path) -> Corpus {
        let Ok(text) = std::fs::read_to_string(path) else {
            return Corpus::default();
        };
        let mut c = Corpus::default();
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            let number = |v: &str| {
                v.parse::<u64>()
                    .unwrap_or_else(|e| panic!("{}: {line:?}: {e}", path.display()))
            };
            match line.split_once(' ') {
                Some(("next", v)) => c.next = Some(number(v)),
                Some(("case", v)) => c.cases.push(number(v)),
                _ => panic!("{}: {line:?} is not `next N` or `case N`", path.display()),
            }
        }
        c
    }

    fn save(&self, path: &Path) {
        let mut text = String::from(
            "# A fuzz corpus (crates/testkit/src/fuzz.rs): the cases are replayed first,\n\
             # then the run goes on from `next`. Rewritten by a run with ZNIPPY_FUZZ_SAVE=1.\n",
        );
        if let Some(n) = self.next {
            text.push_str(&format!("next {n}\n"));
        }
        for c in &self.cases {
            text.push_str(&format!("case {c}\n"));
        }
        std::fs::write(path, text).unwrap();
    }
}

/// Runs `case` on mutations of the `seeds` for `ZNIPPY_FUZZ_SECS` (default 5)
/// and returns the number of cases; `case` returns its outcome's [`class`].
/// The cases of the `corpus` file run first; then the run goes on from the
/// random state the corpus saved (or `ZNIPPY_FUZZ_SEED`). With
/// `ZNIPPY_FUZZ_SAVE=1` the corpus is rewritten: the cases that reached a new
/// class, and where this run stopped. A panicking case fails the run with the
/// case's state and the input kept on disk; a case running for over 20 s
/// aborts it (a hang).
pub fn run<S>(
    corpus: &Path,
    seeds: &[(Vec<u8>, S)],
    tail_bias: bool,
    case: impl FnMut(&[u8], &S, u64, &Path) -> String,
) -> u64 {
    run_with(
        corpus,
        seeds,
        |rng, seed, _| mutate(rng, seed.to_vec(), tail_bias),
        case,
    )
}

/// [`run`], with the fuzzer's own mutator: `mutator(rng, seed, seed_info)`
/// gives the next input.
pub fn run_with<S>(
    corpus: &Path,
    seeds: &[(Vec<u8>, S)],
    mut mutator: impl FnMut(&mut Rng, &[u8], &S) -> Vec<u8>,
    mut case: impl FnMut(&[u8], &S, u64, &Path) -> String,
) -> u64 {
    let secs: u64 = std::env::var("ZNIPPY_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let saved = Corpus::load(corpus);
    let seed: u64 = std::env::var("ZNIPPY_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .or(saved.next)
        .unwrap_or(0x5eed);
    let tmp = tempfile::tempdir().unwrap();
    let mut rng = Rng::from_state(seed);
    let start = Instant::now();
    let deadline = start + Duration::from_secs(secs);
    // When the running case started (ms since `start`), for the watchdog.
    static CASE_STARTED: AtomicU64 = AtomicU64::new(IDLE);
    const IDLE: u64 = u64::MAX;
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let began = CASE_STARTED.load(Ordering::Relaxed);
        if began != IDLE && start.elapsed().as_millis() as u64 > began + 20_000 {
            eprintln!("a fuzz case ran for over 20 s: a hang");
            std::process::abort();
        }
    });
    let mut iterations = 0u64;
    let mut seen = std::collections::HashSet::new();
    let mut kept = Corpus::default();
    let mut one = |state: u64| {
        CASE_STARTED.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        let mut r = Rng::from_state(state);
        let (seed_bytes, seed_info) = &seeds[r.below(seeds.len())];
        let input = mutator(&mut r, seed_bytes, seed_info);
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            case(&input, seed_info, iterations, tmp.path())
        }));
        let Ok(class) = outcome else {
            let kept = std::env::temp_dir().join(format!("znippy-fuzz-{state}.input"));
            std::fs::write(&kept, &input).unwrap();
            panic!(
                "panic on case {state} (iteration {iterations}); input kept in {}",
                kept.display()
            );
        };
        iterations += 1;
        if seen.insert(class) && kept.cases.len() < CORPUS_CASES {
            kept.cases.push(state);
        }
    };
    for &state in &saved.cases {
        one(state);
    }
    let replayed = saved.cases.len();
    while Instant::now() < deadline {
        one(rng.next_u64());
    }
    CASE_STARTED.store(IDLE, Ordering::Relaxed);
    eprintln!(
        "fuzzed {iterations} inputs ({replayed} from the corpus) in {secs} s: {} classes of outcome",
        seen.len()
    );
    if std::env::var_os("ZNIPPY_FUZZ_SAVE").is_some() {
        kept.next = Some(rng.state());
        kept.save(corpus);
    }
    assert!(iterations > 0);
    iterations
}
