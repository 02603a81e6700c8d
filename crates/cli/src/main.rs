//! `znippy`: compress a directory into a seekable `.znippy` archive, pull single
//! files back out in milliseconds, list and search metadata without reading blobs.

use std::ffi::OsString;
use std::fs::{File, TryLockError};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Parser, Subcommand};
use znippy_cli::{gather, meta_args, threads, PropsArgs};
use znippy_format::{
    extract_all_with, undo_path, walk, Archive, ExtractOptions, Found, InputFile, MetaUpdate,
    Metadata, Plugins, Recovery, Scan, ScanOptions, Summary, TarEntries, WALK_STACK,
};

use znippy_cli::output::Output;
use znippy_cli::progress::Progress;
use znippy_cli::read::ReadCmd;

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
    #[command(flatten)]
    Read(ReadCmd),
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
    /// List the package plugins, what they claim and their columns.
    Handlers,
    /// Sign an archive: add a detached CMS signature over its identity
    /// (reads and writes the index only; an archive signed again keeps
    /// both signatures). `znippy verify --ca` checks them.
    Sign(SignArgs),
}

#[derive(Args)]
struct CompressArgs {
    /// Directory to archive; its files are stored relative to it, in byte
    /// order of their paths. A file is stored alone, under the path as
    /// given (relative, as `append` takes files).
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
    #[command(flatten)]
    props: PropsArgs,
    /// Metadata about a file: 'path=key=value' (value '@file' reads bytes).
    #[arg(long = "meta", value_name = "PATH=KEY=VALUE")]
    meta: Vec<String>,
    /// Metadata about the archive: 'key=value'.
    #[arg(long = "meta-archive", value_name = "KEY=VALUE")]
    meta_archive: Vec<String>,
    #[command(flatten)]
    plugins: PluginArgs,
}

/// Which plugins read the packages of a batch.
#[derive(Args)]
struct PluginArgs {
    /// The repository the batch's packages are filed under: their sections
    /// are (pkg_type, repo).
    #[arg(long, default_value = "")]
    repo: String,
    /// Run no plugin: packages are stored as plain files only.
    #[arg(long)]
    no_plugins: bool,
}

impl PluginArgs {
    fn plugins(&self) -> Result<Plugins> {
        let list = match self.no_plugins {
            true => Vec::new(),
            false => znippy_plugins::builtin(),
        };
        Ok(Plugins::new(list, &self.repo)?)
    }
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
    #[command(flatten)]
    plugins: PluginArgs,
}

#[derive(Args)]
struct RecoverArgs {
    archive: PathBuf,
}

#[derive(Args)]
struct SignArgs {
    archive: PathBuf,
    /// The private key (PEM: PKCS #8 or SEC1; ECDSA P-256 or Ed25519).
    #[arg(long, value_name = "PEM", required_unless_present = "signature")]
    key: Option<PathBuf>,
    /// The key's certificate (PEM).
    #[arg(long, value_name = "PEM", required_unless_present = "signature")]
    cert: Option<PathBuf>,
    /// Intermediate certificates between it and the CA (PEM), carried in
    /// the signature.
    #[arg(long, value_name = "PEM")]
    chain: Option<PathBuf>,
    /// Add this signature (DER CMS, made elsewhere, e.g. by `openssl cms
    /// -sign -binary` over what `znippy identity` writes) instead of
    /// signing; it must sign this archive's identity.
    #[arg(long, value_name = "DER", conflicts_with_all = ["key", "cert", "chain"])]
    signature: Option<PathBuf>,
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
            exclude: None,
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let answers = matches!(&cli.cmd, Cmd::Read(r) if r.answers_with_status());
    znippy_cli::exit(run(cli.cmd), answers)
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
        Cmd::Compress(args) => return compress(args),
        Cmd::Decompress(args) => decompress(args)?,
        Cmd::Read(cmd) => return read(cmd),
        Cmd::Live { args } => return Err(server("live", args)),
        Cmd::Serve { args } => return Err(server("serve", args)),
        Cmd::Gc { args } => return Err(server("gc", args)),
        Cmd::Seal { args } => return Err(server("seal", args)),
        Cmd::Append(args) => return append(args),
        Cmd::Recover(args) => recover(args)?,
        Cmd::Handlers => handlers()?,
        Cmd::Sign(args) => sign(args)?,
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs a read command on a local archive, or hands one on a URL over to
/// `znippy-server`, which links the HTTP and S3 clients.
fn read(cmd: ReadCmd) -> Result<ExitCode> {
    let archive = cmd.archive();
    if archive.to_str().is_some_and(|a| {
        ["http://", "https://", "s3://"]
            .iter()
            .any(|p| a.starts_with(p))
    }) {
        return Err(server(cmd.name(), std::env::args_os().skip(2).collect()));
    }
    cmd.run(&open(archive)?)
}

/// A warning for each file that changed while it was read, and exit status
/// 1 if any did: the archive is written, but it may hold no version of those
/// files that was ever whole on disk (as `tar` says "file changed as we read
/// it" and exits 1).
fn changed(summary: &Summary) -> ExitCode {
    for c in &summary.changed {
        eprintln!("znippy: {c}");
    }
    match summary.changed.is_empty() {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    }
}

fn compress(args: CompressArgs) -> Result<ExitCode> {
    let CompressArgs {
        dir,
        tar,
        tree,
        output,
        threads: t,
        props,
        meta,
        meta_archive,
        plugins,
    } = args;
    let plugins = plugins.plugins()?;
    let props = props.props()?;
    let meta = match meta_args::table(&meta, &meta_archive)? {
        Some(t) => Metadata::Present(t),
        None => Metadata::Absent,
    };
    let mut out = Output::create(&output)?;
    let bar = Progress::new(0, "compress");
    let (batch, total) = match (&dir, &tar) {
        (_, Some(tar)) => tar_batch(tar)?,
        (Some(dir), None) => {
            let opts = ScanOptions {
                exclude: Some(out.id()?),
                ..tree.options()
            };
            if dir.is_file() {
                files_batch(gather(std::slice::from_ref(dir), opts)?)
            } else {
                walk_batch(dir, opts, &bar)
            }
        }
        (None, None) => bail!("give a directory or --tar"),
    };
    bar.grow(total);
    let summary = znippy_format::compress_with(
        &mut out,
        [batch],
        props,
        threads(t),
        &meta,
        &plugins,
        &mut |n| bar.inc(n),
    )?;
    out.finish()?;
    bar.finish(
        "compressed",
        summary.files,
        summary.bytes_in,
        summary.archive_len,
    );
    Ok(changed(&summary))
}

fn decompress(args: DecompressArgs) -> Result<()> {
    let DecompressArgs {
        archive,
        output,
        same_permissions,
        threads: t,
    } = args;
    let a = open(&archive)?;
    let total = a
        .entries("")?
        .iter()
        .fold(0, |n: u64, e| n.saturating_add(e.size));
    let bar = Progress::new(total, "decompress");
    let opts = ExtractOptions {
        threads: threads(t),
        same_permissions,
    };
    let stats = extract_all_with(&a, &output, opts, &|n| bar.inc(n))?;
    bar.finish("extracted", stats.files, stats.bytes, a.archive_len());
    Ok(())
}

fn append(args: AppendArgs) -> Result<ExitCode> {
    let AppendArgs {
        archive,
        inputs,
        tar,
        tree,
        meta,
        meta_archive,
        threads: t,
        plugins,
    } = args;
    let plugins = plugins.plugins()?;
    let set = meta_args::table(&meta, &meta_archive)?;
    let (batch, total) = match &tar {
        Some(tar) => tar_batch(tar)?,
        None => {
            let exclude = std::fs::metadata(&archive)
                .with_context(|| format!("opening {}", archive.display()))?;
            let opts = ScanOptions {
                exclude: Some((exclude.dev(), exclude.ino())),
                ..tree.options()
            };
            files_batch(gather(&inputs, opts)?)
        }
    };
    if znippy_format::recover(&archive)? == Recovery::RolledBack {
        eprintln!(
            "znippy: an earlier append to {} did not finish; the archive is back as it was before it",
            archive.display()
        );
    }
    let bar = Progress::new(total, "append");
    let update = MetaUpdate { set };
    let s = znippy_format::append_with(&archive, batch, update, threads(t), &plugins, &mut |n| {
        bar.inc(n)
    })?;
    bar.finish("appended", s.files, s.bytes_in, s.archive_len);
    Ok(changed(&s))
}

fn handlers() -> Result<()> {
    let mut out = std::io::stdout().lock();
    for p in znippy_plugins::builtin() {
        writeln!(out, "{} (pkg_type {})", p.name(), p.pkg_type())?;
        for c in p.columns() {
            writeln!(out, "  {:<24} {}", c.name, c.ty)?;
        }
    }
    Ok(())
}

fn sign(args: SignArgs) -> Result<()> {
    let SignArgs {
        archive,
        key,
        cert,
        chain,
        signature,
    } = args;
    let identity = open(&archive)?.identity()?;
    let content = znippy_format::signed_content(&identity);
    let (signature, signer) = match (signature, key, cert) {
        (Some(path), _, _) => {
            let der =
                std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
            let signers = znippy_sign::verify(&der, &content, None, std::time::SystemTime::now())
                .with_context(|| {
                format!("{} does not sign {}", path.display(), archive.display())
            })?;
            let names: Vec<String> = signers.into_iter().map(|s| s.signer).collect();
            (der, names.join(", "))
        }
        (None, Some(key), Some(cert)) => {
            let signer = znippy_sign::Signer::from_files(&key, &cert, chain.as_deref())?;
            (signer.sign(&content)?, signer.subject())
        }
        _ => bail!("give --key and --cert, or --signature"),
    };
    let n = znippy_format::add_signature(&archive, &identity, signature)
        .with_context(|| format!("signing {}", archive.display()))?;
    writeln!(
        std::io::stdout(),
        "{}: signed by {signer} (signature {n})",
        archive.display()
    )?;
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
    writeln!(std::io::stdout(), "{}: {said}", archive.display())?;
    Ok(())
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
        eprintln!("znippy: {s}");
    }
    if !scan.skipped.is_empty() {
        eprintln!("{}", skipped_total(scan.skipped.len()));
    }
    let total = scan.files.iter().map(|f| f.size).sum();
    (
        Box::new(scan.files.into_iter().map(|f| Ok(f.input()))),
        total,
    )
}

/// Entries handed over at a time: one hand-over, and at most one wake-up of
/// the other thread, per this many files.
const WALK_CHUNK: usize = 256;
/// Chunks a directory's walk may be ahead of the engine: it lists a tree
/// about ten times as fast as the engine reads it, so a few chunks keep the
/// engine fed, and the entries in memory do not grow with the tree.
const WALK_AHEAD: usize = 16;

/// A directory's entries as a walk on a thread of its own finds them, so the
/// engine compresses the first files while the walk goes on, instead of
/// waiting for the whole tree to be listed (a tenth of a compress of a source
/// tree). The bar's total grows as files are found.
fn walk_batch(dir: &Path, opts: ScanOptions, bar: &Progress) -> Batch {
    let (tx, rx) = std::sync::mpsc::sync_channel(WALK_AHEAD);
    let (dir, bar) = (dir.to_path_buf(), bar.clone());
    let walker = std::thread::Builder::new()
        .stack_size(WALK_STACK)
        .spawn(move || {
            let mut chunk = Vec::with_capacity(WALK_CHUNK);
            let mut skipped = 0;
            let walked = walk(&dir, opts, &mut |found| {
                match found {
                    Found::Entry(f) => {
                        bar.grow(f.size);
                        chunk.push(Ok(f.input()));
                        if chunk.len() == WALK_CHUNK {
                            let full =
                                std::mem::replace(&mut chunk, Vec::with_capacity(WALK_CHUNK));
                            // The engine stopped (it failed, and says why): so does the walk.
                            tx.send(full).map_err(|_| znippy_format::Error::Io {
                                context: "handing the walk over".into(),
                                source: std::io::ErrorKind::BrokenPipe.into(),
                            })?;
                        }
                    }
                    Found::Skipped(s) => {
                        skipped += 1;
                        bar.println(&format!("znippy: {s}"));
                    }
                }
                Ok(())
            });
            if skipped > 0 {
                bar.println(&skipped_total(skipped));
            }
            if let Err(e) = walked {
                chunk.push(Err(e));
            }
            let _ = tx.send(chunk);
        });
    let walker = match walker {
        Ok(w) => w,
        Err(e) => {
            let e = znippy_format::Error::Io {
                context: "starting the walk of the directory".into(),
                source: e,
            };
            return (Box::new(std::iter::once(Err(e))), 0);
        }
    };
    // A walk that died without its last word is an error, not a shorter batch.
    let died = std::iter::once_with(move || walker.join()).filter_map(|joined| {
        joined.err().map(|_| {
            Err(znippy_format::Error::Io {
                context: "walking the directory".into(),
                source: std::io::Error::other("the walk stopped before its end"),
            })
        })
    });
    (Box::new(rx.into_iter().flatten().chain(died)), 0)
}

fn skipped_total(n: usize) -> String {
    format!("znippy: {n} entries skipped (--strict makes that an error)")
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
