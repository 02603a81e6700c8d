//! `znippy`: compress a directory into a seekable `.znippy` archive, pull single
//! files back out in milliseconds, list and search metadata without reading blobs.

mod progress;

use std::ffi::OsString;
use std::fs::{File, TryLockError};
use std::io::{BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use znippy_cli::{gather, meta_args, print_meta, threads};
use znippy_format::{
    extract_all_with, scan_dir, undo_path, Archive, ArchiveProps, ExtractOptions, InputFile, Kind,
    MetaUpdate, Metadata, Recovery, Scan, ScanOptions, TarEntries,
};

use progress::{human, Progress};

#[derive(Parser)]
#[command(
    name = "znippy",
    version,
    about = "A seekable, deduplicating archiver with an Arrow index"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Compress a directory, or a tar stream, into a new archive.
    Compress(CompressArgs),
    /// Extract every file of an archive into a directory.
    Decompress(DecompressArgs),
    /// List the files of an archive (reads no blob).
    List(ListArgs),
    /// Write one file's bytes to stdout or to a file, verified.
    Get(GetArgs),
    /// Check every section and every slice against its checksum.
    Verify(VerifyArgs),
    /// Show properties, sections, counts and sizes.
    Info(InfoArgs),
    /// Search metadata by key or key prefix. Exit status: 0 hits, 1 no match,
    /// 2 the archive has no metadata section, 3 error.
    Meta(MetaArgs),
    /// Live archives in a data directory (the store `znippy serve` runs on).
    #[command(disable_help_flag = true)]
    Live {
        /// Run `znippy live --help` for these.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Run the HTTP service on a data directory.
    #[command(disable_help_flag = true)]
    Serve {
        /// Run `znippy serve --help` for these.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Remove the blob segments no committed row names, on object storage.
    #[command(disable_help_flag = true)]
    Gc {
        /// Run `znippy gc --help` for these.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Seal a live archive of a data directory into an immutable .znippy.
    #[command(disable_help_flag = true)]
    Seal {
        /// Run `znippy seal --help` for these.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
    /// Append files to an archive; a path already present is replaced.
    Append(AppendArgs),
    /// Put an archive back as it was before an append that did not finish (the
    /// process or the machine died in the middle). The next append does this
    /// by itself; other commands refuse the archive until then.
    Recover(RecoverArgs),
}

#[derive(Args)]
struct CompressArgs {
    /// Directory to archive; its files are stored relative to it, in byte
    /// order of their paths.
    #[arg(required_unless_present = "tar", conflicts_with = "tar")]
    dir: Option<PathBuf>,
    /// Read the files from a tar archive instead ('-' for standard input),
    /// in the stream's order: `zstd -dc x.tar.zst | znippy compress --tar - -o x.znippy`.
    #[arg(long, value_name = "FILE|-")]
    tar: Option<PathBuf>,
    #[command(flatten)]
    tree: TreeArgs,
    /// Archive to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Compression threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// zstd level.
    #[arg(long, default_value_t = ArchiveProps::default().level)]
    level: i32,
    /// Size of the pieces large files are cut into, in bytes.
    #[arg(long, default_value_t = ArchiveProps::default().chunk_size)]
    chunk_size: u64,
    /// Files up to this size are packed together, in bytes.
    #[arg(long, default_value_t = ArchiveProps::default().pack_threshold)]
    pack_threshold: u64,
    /// Metadata about a file: 'path=key=value' (value '@file' reads bytes).
    #[arg(long = "meta", value_name = "PATH=KEY=VALUE")]
    meta: Vec<String>,
    /// Metadata about the archive: 'key=value'.
    #[arg(long = "meta-archive", value_name = "KEY=VALUE")]
    meta_archive: Vec<String>,
}

#[derive(Args)]
struct DecompressArgs {
    archive: PathBuf,
    /// Target directory (created if needed).
    #[arg(short, long)]
    output: PathBuf,
    /// Keep set-uid, set-gid and sticky bits (cleared by default).
    #[arg(long)]
    same_permissions: bool,
    /// Threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Args)]
struct ListArgs {
    archive: PathBuf,
    /// Only paths starting with this.
    #[arg(short, long, default_value = "")]
    prefix: String,
    /// Show mode and size too.
    #[arg(short, long)]
    long: bool,
}

#[derive(Args)]
struct GetArgs {
    archive: PathBuf,
    /// Path inside the archive.
    path: String,
    /// Write here instead of stdout.
    #[arg(short, long)]
    output: Option<PathBuf>,
}

#[derive(Args)]
struct VerifyArgs {
    archive: PathBuf,
    /// Threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Args)]
struct InfoArgs {
    archive: PathBuf,
}

#[derive(Args)]
struct MetaArgs {
    archive: PathBuf,
    /// Exact key.
    #[arg(
        short,
        long,
        conflicts_with = "prefix",
        required_unless_present = "prefix"
    )]
    key: Option<String>,
    /// Key prefix.
    #[arg(short, long)]
    prefix: Option<String>,
    /// Print only the paths of matching rows ('-' for archive-level rows).
    #[arg(long)]
    paths_only: bool,
}

#[derive(Args)]
struct AppendArgs {
    archive: PathBuf,
    /// Directories (stored relative to themselves) or files (stored under the
    /// path as given).
    #[arg(required_unless_present_any = ["meta", "meta_archive", "tar"], conflicts_with = "tar")]
    inputs: Vec<PathBuf>,
    /// Append the files of a tar archive instead ('-' for standard input),
    /// in the stream's order.
    #[arg(long, value_name = "FILE|-")]
    tar: Option<PathBuf>,
    #[command(flatten)]
    tree: TreeArgs,
    /// Metadata about a file: 'path=key=value' (value '@file' reads bytes).
    #[arg(long = "meta", value_name = "PATH=KEY=VALUE")]
    meta: Vec<String>,
    /// Metadata about the archive: 'key=value'.
    #[arg(long = "meta-archive", value_name = "KEY=VALUE")]
    meta_archive: Vec<String>,
    /// Compression threads (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
}

#[derive(Args)]
struct RecoverArgs {
    archive: PathBuf,
}

/// How directories are read.
#[derive(Args)]
struct TreeArgs {
    /// Store what symbolic links point to instead of the links (tar's -h);
    /// a loop of links is an error.
    #[arg(long)]
    dereference: bool,
    /// Fail on FIFOs, sockets and devices instead of skipping them.
    #[arg(long)]
    strict: bool,
    /// Skip files and directories that cannot be read instead of failing.
    #[arg(long)]
    skip_unreadable: bool,
}

impl TreeArgs {
    fn options(&self) -> ScanOptions {
        ScanOptions {
            dereference: self.dereference,
            strict: self.strict,
            skip_unreadable: self.skip_unreadable,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let is_meta = matches!(cli.cmd, Cmd::Meta(_));
    match run(cli.cmd) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("znippy: {e:#}");
            ExitCode::from(if is_meta { 3 } else { 1 })
        }
    }
}

fn open(path: &Path) -> Result<Archive<File>> {
    let f = File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let undo = undo_path(path);
    if undo.exists() {
        // A running append holds the archive's lock; an interrupted one left
        // its undo file and no lock.
        match f.try_lock_shared() {
            Err(TryLockError::WouldBlock) => {
                bail!(
                    "an append to {} is running; try again when it is done",
                    path.display()
                )
            }
            _ if undo.exists() => bail!(
                "an append to {0} did not finish ({1} is still there): `znippy recover {0}` \
                 puts the archive back as it was before it",
                path.display(),
                undo.display()
            ),
            _ => {}
        }
    }
    Archive::open(f).with_context(|| format!("reading {}", path.display()))
}

fn run(cmd: Cmd) -> Result<ExitCode> {
    match cmd {
        Cmd::Compress(args) => compress(args)?,
        Cmd::Decompress(args) => decompress(args)?,
        Cmd::List(args) => list(args)?,
        Cmd::Get(args) => get(args)?,
        Cmd::Verify(args) => verify(args)?,
        Cmd::Info(args) => info(&args.archive)?,
        Cmd::Meta(args) => return meta(args),
        Cmd::Live { args } => return Err(server("live", args)),
        Cmd::Serve { args } => return Err(server("serve", args)),
        Cmd::Gc { args } => return Err(server("gc", args)),
        Cmd::Seal { args } => return Err(server("seal", args)),
        Cmd::Append(args) => append(args)?,
        Cmd::Recover(args) => recover(args)?,
    }
    Ok(ExitCode::SUCCESS)
}

fn compress(args: CompressArgs) -> Result<()> {
    let CompressArgs {
        dir,
        tar,
        tree,
        output,
        threads: t,
        level,
        chunk_size,
        pack_threshold,
        meta,
        meta_archive,
    } = args;
    let props = ArchiveProps {
        chunk_size,
        pack_threshold,
        level,
    };
    props.validate()?;
    let meta = match meta_args::table(&meta, &meta_archive)? {
        Some(t) => Metadata::Present(t),
        None => Metadata::Absent,
    };
    let (batch, total) = match (&dir, &tar) {
        (_, Some(tar)) => tar_batch(tar)?,
        (Some(dir), None) => files_batch(scan_dir(dir, tree.options())?),
        (None, None) => bail!("give a directory or --tar"),
    };
    let bar = Progress::new(total, "compress");
    let tmp = output.with_extension("znippy.partial");
    let out = File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let mut out = BufWriter::new(out);
    let result = znippy_format::compress(&mut out, [batch], props, threads(t), &meta, &mut |n| {
        bar.inc(n)
    });
    let summary = match result {
        Ok(s) => s,
        Err(e) => {
            drop(out);
            let _ = std::fs::remove_file(&tmp);
            return Err(e.into());
        }
    };
    drop(out);
    std::fs::rename(&tmp, &output).with_context(|| format!("writing {}", output.display()))?;
    bar.finish(
        "compressed",
        summary.files,
        summary.bytes_in,
        summary.archive_len,
    );
    Ok(())
}

fn decompress(args: DecompressArgs) -> Result<()> {
    let DecompressArgs {
        archive,
        output,
        same_permissions,
        threads: t,
    } = args;
    let a = open(&archive)?;
    let bar = Progress::new(a.entries("")?.iter().map(|e| e.size).sum(), "decompress");
    let opts = ExtractOptions {
        threads: threads(t),
        same_permissions,
    };
    let stats = extract_all_with(&a, &output, opts, &|n| bar.inc(n))?;
    bar.finish("extracted", stats.files, stats.bytes, a.archive_len());
    Ok(())
}

fn list(args: ListArgs) -> Result<()> {
    let ListArgs {
        archive,
        prefix,
        long,
    } = args;
    let a = open(&archive)?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    if long {
        for e in a.entries(&prefix)? {
            let kind = e.kind()?;
            let mode = e
                .mode
                .map_or("----".to_string(), |m| format!("{:04o}", m & 0o7777));
            let path = printable(&e.path);
            write!(out, "{}{mode} {:>12} {path}", kind.letter(), e.size)?;
            if kind == Kind::Symlink {
                let mut target = Vec::new();
                a.read_file(&e.path, &mut target)?;
                write!(out, " -> {}", printable(&String::from_utf8_lossy(&target)))?;
            }
            writeln!(out)?;
        }
    } else {
        for p in a.list(&prefix)? {
            writeln!(out, "{}", printable(&p))?;
        }
    }
    out.flush()?;
    Ok(())
}

fn get(args: GetArgs) -> Result<()> {
    let GetArgs {
        archive,
        path,
        output,
    } = args;
    let a = open(&archive)?;
    match output {
        None => {
            let mut out = BufWriter::new(std::io::stdout().lock());
            let e = a.read_entry(&path, &mut out)?;
            out.flush()?;
            match e.kind()? {
                Kind::File => {}
                Kind::Symlink => {
                    eprintln!("znippy: {path} is a symbolic link; its target is above")
                }
                Kind::Dir => eprintln!("znippy: {path} is an empty directory"),
            }
        }
        Some(dest) => {
            // Written beside the target and renamed, so a failed check
            // leaves no half-written file behind.
            let tmp = dest.with_extension("znippy-get.partial");
            let mut out = BufWriter::new(
                File::create(&tmp).with_context(|| format!("creating {}", tmp.display()))?,
            );
            let res = a
                .read_entry(&path, &mut out)
                .map_err(anyhow::Error::from)
                .and_then(|e| {
                    out.flush()?;
                    Ok(e)
                });
            drop(out);
            let entry = match res {
                Ok(e) => e,
                Err(e) => {
                    let _ = std::fs::remove_file(&tmp);
                    return Err(e);
                }
            };
            if entry.kind()? == Kind::Symlink {
                // The link itself, as extraction makes it.
                let target = std::fs::read(&tmp)?;
                std::fs::remove_file(&tmp)?;
                let target = std::ffi::OsStr::from_bytes(&target);
                std::os::unix::fs::symlink(target, &dest)
                    .with_context(|| format!("making the link {}", dest.display()))?;
            } else {
                std::fs::rename(&tmp, &dest)?;
            }
        }
    }
    Ok(())
}

fn verify(args: VerifyArgs) -> Result<()> {
    let VerifyArgs {
        archive,
        threads: t,
    } = args;
    let a = open(&archive)?;
    let n = a.verify(threads(t))?;
    println!(
        "ok: {n} slices and {} sections verified",
        a.sections().len()
    );
    Ok(())
}

fn meta(args: MetaArgs) -> Result<ExitCode> {
    let MetaArgs {
        archive,
        key,
        prefix,
        paths_only,
    } = args;
    let a = open(&archive)?;
    let md = a.metadata()?;
    let found = match (&key, &prefix) {
        (Some(k), _) => md.by_key(k),
        (None, Some(p)) => md.by_prefix(p),
        (None, None) => bail!("give --key or --prefix"),
    };
    print_meta(found, &archive.display().to_string(), paths_only)
}

fn append(args: AppendArgs) -> Result<()> {
    let AppendArgs {
        archive,
        inputs,
        tar,
        tree,
        meta,
        meta_archive,
        threads: t,
    } = args;
    let set = meta_args::table(&meta, &meta_archive)?;
    let (batch, total) = match &tar {
        Some(tar) => tar_batch(tar)?,
        None => files_batch(gather(&inputs, tree.options())?),
    };
    if znippy_format::recover(&archive)? == Recovery::RolledBack {
        eprintln!(
            "znippy: an earlier append to {} did not finish; the archive is back as it was before it",
            archive.display()
        );
    }
    let bar = Progress::new(total, "append");
    let s = znippy_format::append(&archive, batch, MetaUpdate { set }, threads(t), &mut |n| {
        bar.inc(n)
    })?;
    bar.finish("appended", s.files, s.bytes_in, s.archive_len);
    Ok(())
}

fn recover(args: RecoverArgs) -> Result<()> {
    let RecoverArgs { archive } = args;
    let said = match znippy_format::recover(&archive)? {
        Recovery::Clean => "nothing to recover",
        Recovery::RolledBack => "back as it was before the append that did not finish",
        Recovery::DiscardedTorn => {
            "the append stopped before changing the archive; its undo file is removed"
        }
    };
    println!("{}: {said}", archive.display());
    Ok(())
}

/// `s` with control characters escaped (`\n`, `\u{1b}`): a path from a
/// hand-made archive never drives the terminal it is listed on.
fn printable(s: &str) -> std::borrow::Cow<'_, str> {
    if s.chars().any(char::is_control) {
        s.chars()
            .map(|c| match c.is_control() {
                true => c.escape_default().to_string(),
                false => c.to_string(),
            })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// A batch for the engine, and its size in bytes as far as it is known up
/// front (for the progress bar).
type Batch = (
    Box<dyn Iterator<Item = znippy_format::Result<InputFile>>>,
    u64,
);

/// The entries a scan found, after a warning line for each one it skipped.
fn files_batch(scan: Scan) -> Batch {
    for s in &scan.skipped {
        eprintln!("znippy: skipped {}: {}", s.disk_path.display(), s.reason);
    }
    if !scan.skipped.is_empty() {
        eprintln!(
            "znippy: {} entries skipped (--strict makes that an error)",
            scan.skipped.len()
        );
    }
    let total = scan.files.iter().map(|f| f.size).sum();
    (
        Box::new(scan.files.into_iter().map(|f| Ok(f.input()))),
        total,
    )
}

/// A tar archive's files, in the stream's order; `-` is standard input.
fn tar_batch(tar: &Path) -> Result<Batch> {
    let (src, total): (Box<dyn std::io::Read + Send>, u64) = if tar == Path::new("-") {
        (Box::new(std::io::stdin()), 0)
    } else {
        let f = File::open(tar).with_context(|| format!("opening {}", tar.display()))?;
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        (Box::new(std::io::BufReader::new(f)), len)
    };
    Ok((Box::new(TarEntries::new(src)), total))
}

/// Hands a service command over to `znippy-server`, installed beside this
/// binary, in this process (same pid, signals and standard streams). Returns
/// only why that could not start.
fn server(cmd: &str, args: Vec<OsString>) -> anyhow::Error {
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return anyhow::Error::new(e).context("locating the znippy binary"),
    };
    let path = exe.with_file_name("znippy-server");
    let err = std::process::Command::new(&path).arg(cmd).args(args).exec();
    anyhow::Error::new(err).context(format!(
        "znippy {cmd} runs {}, which did not start; build or install both binaries \
         (cargo build --release -p znippy)",
        path.display()
    ))
}

fn info(path: &Path) -> Result<()> {
    let a = open(path)?;
    let p = a.props();
    let entries = a.entries("")?;
    let raw: u64 = entries.iter().map(|e| e.size).sum();
    println!("archive        {}", path.display());
    println!(
        "size           {} ({} bytes)",
        human(a.archive_len()),
        a.archive_len()
    );
    println!("files          {}", entries.len());
    println!("slices         {}", a.row_count());
    println!("uncompressed   {} ({raw} bytes)", human(raw));
    println!(
        "blob region    {} ({} bytes)",
        human(a.blob_end()),
        a.blob_end()
    );
    let ratio = if a.archive_len() == 0 {
        0.0
    } else {
        raw as f64 / a.archive_len() as f64
    };
    println!("ratio          {ratio:.3}");
    let id: String = a.identity()?.iter().map(|b| format!("{b:02x}")).collect();
    println!("identity       {id}");
    println!(
        "properties     codec={} level={} chunk_size={} pack_threshold={}",
        znippy_format::CODEC,
        p.level,
        p.chunk_size,
        p.pack_threshold
    );
    println!("trie           {:?}", a.trie_state());
    println!("sections:");
    println!(
        "  {:>8} {:<20} {:>12} {:>12} {:>10}",
        "pkg_type", "module", "offset", "length", "rows"
    );
    for s in a.sections() {
        println!(
            "  {:>8} {:<20} {:>12} {:>12} {:>10}",
            s.pkg_type, s.module_name, s.index_offset, s.index_len, s.row_count
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn listed_paths_never_carry_control_characters() {
        assert_eq!(printable("plain/ü.txt"), "plain/ü.txt");
        assert_eq!(
            printable("a\u{1b}[31mb\nc\u{9b}"),
            "a\\u{1b}[31mb\\nc\\u{9b}"
        );
    }
}
