//! What the two binaries of this package share.
//!
//! `znippy` is the archiver: it links the container crate and nothing of the
//! service, so a one-file `get` starts like a small tool (a binary that links
//! the service spends over a millisecond relocating and faulting its tables in
//! before `main`). `znippy-server` runs the service and the live-archive
//! commands; `znippy serve|live|seal` hands over to it (see `main.rs`).

use std::collections::HashSet;
use std::path::PathBuf;

use std::io::Write;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use znippy_format::{scan_dir, ArchiveProps, MetaSearch, Scan, ScanOptions, ScannedFile};

pub mod meta_args;
pub mod output;
pub mod progress;
pub mod read;

/// How a new archive cuts, packs and compresses (docs/format.md, section 2):
/// the options of `compress` and of `live create`.
#[derive(clap::Args)]
pub struct PropsArgs {
    /// zstd level.
    #[arg(long, default_value_t = ArchiveProps::default().level)]
    level: i32,
    /// Size of the pieces large files are cut into, in bytes.
    #[arg(long, default_value_t = ArchiveProps::default().chunk_size)]
    chunk_size: u64,
    /// Files up to this size are packed together, in bytes.
    #[arg(long, default_value_t = ArchiveProps::default().pack_threshold)]
    pack_threshold: u64,
    /// The most bytes a pack of small files holds, from --pack-threshold to
    /// --chunk-size: getting a small file decodes its pack up to it
    /// [default: 524288 within those bounds].
    #[arg(long)]
    pack_size: Option<u64>,
}

impl PropsArgs {
    /// The properties asked for, checked.
    pub fn props(&self) -> Result<ArchiveProps> {
        let p = ArchiveProps::new(
            self.chunk_size,
            self.pack_threshold,
            self.pack_size,
            self.level,
        );
        p.validate()?;
        Ok(p)
    }
}

/// How a command ends: its exit code, or its error on stderr and 1 (3 for
/// the commands whose 1 and 2 are answers, `meta` and `packages`:
/// `answers`). A reader that stopped reading, as in `znippy list a.znippy |
/// head`, is not an error: the command stops quietly with 0, as ripgrep
/// does.
pub fn exit(result: Result<ExitCode>, answers: bool) -> ExitCode {
    match result {
        Ok(code) => code,
        Err(e) if stopped_reading(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("znippy: {}", message(&e));
            ExitCode::from(if answers { 3 } else { 1 })
        }
    }
}

/// The error and its causes, each said once: the libraries' I/O errors end
/// their own message with their source (`opening x: No such file ...`),
/// which the chain then names again.
fn message(e: &anyhow::Error) -> String {
    let mut out = e.to_string();
    for cause in e.chain().skip(1) {
        let cause = cause.to_string();
        if !out.ends_with(&cause) {
            out.push_str(": ");
            out.push_str(&cause);
        }
    }
    out
}

/// Whether `e` is a write to a pipe whose reader has gone (Rust ignores
/// SIGPIPE, so the write fails with EPIPE instead of killing the process).
/// Only the outermost I/O error counts: a remote read's error wraps the
/// errors of its connection, whose own broken pipe is a failure.
fn stopped_reading(e: &anyhow::Error) -> bool {
    e.chain()
        .find_map(|c| c.downcast_ref::<std::io::Error>())
        .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// Prints a metadata search of `archive`, one `path key type value` line a
/// fact (or only the paths), and gives the exit code the `meta` commands
/// document: 0 hits, 1 no match, 2 no metadata section.
pub fn print_meta(found: MetaSearch, archive: &str, paths_only: bool) -> Result<ExitCode> {
    let rows = match found {
        MetaSearch::NoSection => {
            eprintln!("znippy: {archive} has no metadata section");
            return Ok(ExitCode::from(2));
        }
        MetaSearch::NoMatch => return Ok(ExitCode::from(1)),
        MetaSearch::Hits(rows) => rows,
    };
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    // Facts are anyone's text: a control character is shown escaped, as
    // `list` shows a path, so that none reaches the terminal or splits a
    // line or a column.
    for r in rows {
        let path = read::printable(r.path.as_deref().unwrap_or("-"));
        if paths_only {
            writeln!(out, "{path}")?;
        } else {
            let (key, value) = (read::printable(&r.key), r.value.to_string());
            let value = read::printable(&value);
            writeln!(out, "{path}\t{key}\t{}\t{value}", r.value.type_name())?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Worker threads: as given, or one per core.
pub fn threads(n: Option<usize>) -> usize {
    n.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The files of an append, in argument order: a directory's files relative to it,
/// a file under the path given. The same path twice is refused.
pub fn gather(inputs: &[PathBuf], opts: ScanOptions) -> Result<Scan> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let mut out = Vec::new();
    let mut skipped = Vec::new();
    for input in inputs {
        let m = std::fs::metadata(input).with_context(|| format!("reading {}", input.display()))?;
        if m.is_dir() {
            let scan = scan_dir(input, opts)?;
            out.extend(scan.files);
            skipped.extend(scan.skipped);
        } else if m.is_file() {
            if opts.exclude == Some((m.dev(), m.ino())) {
                bail!("{} is the archive itself", input.display());
            }
            let given = input
                .to_str()
                .with_context(|| format!("{} is not UTF-8", input.display()))?;
            let path = given.trim_start_matches("./").to_string();
            znippy_format::validate_path(&path)
                .with_context(|| format!("{given} cannot be an archive path; give a relative path below the current directory"))?;
            out.push(ScannedFile {
                path,
                disk_path: input.clone(),
                size: m.len(),
                mode: m.permissions().mode() & 0o7777,
                target: None,
            });
        } else {
            bail!("{} is not a file or directory", input.display());
        }
    }
    let mut seen = HashSet::new();
    for f in &out {
        if !seen.insert(f.path.as_str()) {
            bail!("{} is given twice in one append", f.path);
        }
    }
    Ok(Scan {
        files: out,
        skipped,
    })
}
