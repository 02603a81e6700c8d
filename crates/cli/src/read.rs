//! The commands that only read an archive: `list`, `get`, `verify`, `info`
//! and `meta`. They run over any byte source, so `znippy` runs them on a
//! local file and `znippy-server` on a URL (`znippy-remote`), with one
//! implementation of each.

use std::io::{BufWriter, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use znippy_format::{Archive, Kind, ReadAt, Value};

use crate::output::{self, Output};
use crate::progress::human;
use crate::{print_meta, threads};

/// A command that reads an archive, local or remote.
#[derive(Subcommand)]
pub enum ReadCmd {
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
    /// Print the package rows the plugins recorded (reads no blob). Exit
    /// status: 0 rows printed, 1 none matched, 3 error (a plugin or a column
    /// no plugin has is an error, not a query that matches nothing).
    Packages(PackagesArgs),
    /// Write the content the archive's signatures sign: one line naming
    /// its identity (reads the index only).
    Identity(IdentityArgs),
    /// Write one of the archive's signatures (DER CMS), for an outside
    /// verifier: `openssl cms -verify -binary -inform DER -in SIG -content
    /// CONTENT -CAfile ca.pem -purpose any`.
    Signature(SignatureArgs),
}

impl ReadCmd {
    /// The archive it reads: a path, or an `https://`, `http://` or `s3://` URL.
    pub fn archive(&self) -> &Path {
        match self {
            ReadCmd::List(a) => &a.archive.archive,
            ReadCmd::Get(a) => &a.archive.archive,
            ReadCmd::Verify(a) => &a.archive.archive,
            ReadCmd::Info(a) => &a.archive.archive,
            ReadCmd::Meta(a) => &a.archive.archive,
            ReadCmd::Packages(a) => &a.archive.archive,
            ReadCmd::Identity(a) => &a.archive.archive,
            ReadCmd::Signature(a) => &a.archive.archive,
        }
    }

    /// Its name on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            ReadCmd::List(_) => "list",
            ReadCmd::Get(_) => "get",
            ReadCmd::Verify(_) => "verify",
            ReadCmd::Info(_) => "info",
            ReadCmd::Meta(_) => "meta",
            ReadCmd::Packages(_) => "packages",
            ReadCmd::Identity(_) => "identity",
            ReadCmd::Signature(_) => "signature",
        }
    }

    /// Whether its exit status 1 is an answer (no match), so that an error
    /// exits 3 ([`crate::exit`]).
    pub fn answers_with_status(&self) -> bool {
        matches!(self, ReadCmd::Meta(_) | ReadCmd::Packages(_))
    }

    /// Runs it on `a`.
    pub fn run<R: ReadAt>(&self, a: &Archive<R>) -> Result<ExitCode> {
        match self {
            ReadCmd::List(args) => list(a, args)?,
            ReadCmd::Get(args) => get(a, args)?,
            ReadCmd::Verify(args) => verify(a, args)?,
            ReadCmd::Info(args) => info(a, &args.archive.archive)?,
            ReadCmd::Meta(args) => return meta(a, args),
            ReadCmd::Packages(args) => return packages(a, args),
            ReadCmd::Identity(args) => identity(a, args)?,
            ReadCmd::Signature(args) => signature(a, args)?,
        }
        Ok(ExitCode::SUCCESS)
    }
}

/// The archive a read command reads.
#[derive(Args)]
pub struct ArchiveArg {
    /// The archive: a path, or an http://, https:// or s3://BUCKET/KEY URL
    /// (read in place by range requests; see docs/remote.md).
    pub archive: PathBuf,
}

#[derive(Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub archive: ArchiveArg,
    /// Only paths starting with this.
    #[arg(short, long, default_value = "")]
    pub prefix: String,
    /// Show mode and size too.
    #[arg(short, long)]
    pub long: bool,
}

#[derive(Args)]
pub struct GetArgs {
    #[command(flatten)]
    pub archive: ArchiveArg,
    /// Path inside the archive.
    pub path: String,
    /// Write here instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

#[derive(Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub archive: ArchiveArg,
    /// Threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Trust signers whose certificates lead to one of these CA
    /// certificates (PEM): every signature must, and there must be one.
    /// Without it, signatures are checked against their own certificates
    /// and reported as not checked against a CA.
    #[arg(long, value_name = "PEM")]
    pub ca: Option<PathBuf>,
}

#[derive(Args)]
pub struct IdentityArgs {
    #[command(flatten)]
    pub archive: ArchiveArg,
    /// Write here instead of stdout.
    #[arg(short, long)]
    pub output: Option<PathBuf>,
}

#[derive(Args)]
pub struct SignatureArgs {
    #[command(flatten)]
    pub archive: ArchiveArg,
    /// Write here (DER).
    #[arg(short, long)]
    pub output: PathBuf,
    /// Which signature, counting from 1 in the order they were added.
    #[arg(short, long, default_value_t = 1)]
    pub number: usize,
}

#[derive(Args)]
pub struct InfoArgs {
    #[command(flatten)]
    pub archive: ArchiveArg,
}

#[derive(Args)]
pub struct MetaArgs {
    #[command(flatten)]
    pub archive: ArchiveArg,
    /// Exact key.
    #[arg(
        short,
        long,
        conflicts_with = "prefix",
        required_unless_present = "prefix"
    )]
    pub key: Option<String>,
    /// Key prefix.
    #[arg(short, long)]
    pub prefix: Option<String>,
    /// Print only the paths of matching rows ('-' for archive-level rows).
    #[arg(long)]
    pub paths_only: bool,
}

#[derive(Args)]
pub struct PackagesArgs {
    #[command(flatten)]
    pub archive: ArchiveArg,
    /// Only this plugin's rows (`maven`, `python`, `npm`, `crate`, `deb`).
    #[arg(short = 't', long = "type")]
    pub kind: Option<String>,
    /// Only rows filed under this repo.
    #[arg(long)]
    pub repo: Option<String>,
    /// Only rows whose column COL is VALUE (a list: holds VALUE; a map: has
    /// the key VALUE); repeat to require several.
    #[arg(short = 'w', long = "where", value_name = "COL=VALUE")]
    pub filter: Vec<String>,
}

/// Prints the package rows that pass the filters, one a line: path, plugin
/// and repo, then `column=value` for each value that is not null.
fn packages<R: ReadAt>(a: &Archive<R>, args: &PackagesArgs) -> Result<ExitCode> {
    let filters: Vec<(&str, &str)> = args
        .filter
        .iter()
        .map(|f| f.split_once('=').context("--where takes COL=VALUE"))
        .collect::<Result<_>>()?;
    let packages = a.packages()?;
    let columns: Vec<&str> = filters.iter().map(|(col, _)| *col).collect();
    packages
        .check_query(&znippy_plugins::builtin(), args.kind.as_deref(), &columns)
        .map_err(anyhow::Error::msg)?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let mut hits = 0u64;
    for ((_, repo), table, row) in packages.rows() {
        if args.kind.as_ref().is_some_and(|k| *k != table.name)
            || args.repo.as_ref().is_some_and(|r| r != repo)
        {
            continue;
        }
        let cells: Vec<(&str, &Value)> = table
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .zip(&row.values)
            .collect();
        let pass = filters.iter().all(|(col, want)| {
            cells
                .iter()
                .any(|(c, v)| c == col && value_matches(v, want))
        });
        if !pass {
            continue;
        }
        hits += 1;
        write!(out, "{}\t{}", printable(&row.path), table.name)?;
        if !repo.is_empty() {
            write!(out, "/{}", printable(repo))?;
        }
        if let Some(e) = &row.error {
            write!(out, "\terror={}", printable(e))?;
        }
        for (c, v) in cells {
            if *v != Value::Null {
                write!(out, "\t{c}={}", printable(&show(v)))?;
            }
        }
        writeln!(out)?;
    }
    out.flush()?;
    Ok(ExitCode::from(if hits > 0 { 0 } else { 1 }))
}

fn value_matches(v: &Value, want: &str) -> bool {
    match v {
        Value::Null => false,
        Value::Str(s) => s == want,
        Value::I64(i) => i.to_string() == want,
        Value::List(l) => l.iter().any(|s| s == want),
        Value::Map(m) => m.iter().any(|(k, _)| k == want),
    }
}

/// A value as one line: lists as `[a, b]`, maps as `{k: v, ...}`.
fn show(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::Str(s) => s.clone(),
        Value::I64(i) => i.to_string(),
        Value::List(l) => format!("[{}]", l.join(", ")),
        Value::Map(m) => {
            let pairs: Vec<String> = m.iter().map(|(k, v)| format!("{k}: {v}")).collect();
            format!("{{{}}}", pairs.join(", "))
        }
    }
}

fn list<R: ReadAt>(a: &Archive<R>, args: &ListArgs) -> Result<()> {
    let ListArgs { prefix, long, .. } = args;
    let mut out = BufWriter::new(std::io::stdout().lock());
    if *long {
        for e in a.entries(prefix)? {
            let kind = e.kind()?;
            let mode = e
                .mode
                .map_or("----".to_string(), |m| format!("{:04o}", m & 0o7777));
            let path = printable(&e.path);
            write!(out, "{}{mode} {:>12} {path}", kind.letter(), e.size)?;
            if kind == Kind::Symlink {
                let target = a.read_link(&e.path)?;
                write!(out, " -> {}", printable(&String::from_utf8_lossy(&target)))?;
            }
            writeln!(out)?;
        }
    } else {
        for p in a.list(prefix)? {
            writeln!(out, "{}", printable(&p))?;
        }
    }
    out.flush()?;
    Ok(())
}

fn get<R: ReadAt>(a: &Archive<R>, args: &GetArgs) -> Result<()> {
    let GetArgs { path, output, .. } = args;
    match output {
        None => {
            let mut out = BufWriter::new(std::io::stdout().lock());
            let e = a
                .read_entry_on(path, &mut out, 0)
                .map_err(|e| not_a_file(a, path, e))?;
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
            output::not_the_input(dest, &args.archive.archive)?;
            let mut out = Output::create(dest)?;
            let entry = a
                .read_entry_on(path, &mut out, 0)
                .map_err(|e| not_a_file(a, path, e))?;
            if entry.kind()? == Kind::Symlink {
                // The link itself, as extraction makes it, its target read
                // again with the cap on a link's length.
                drop(out);
                let target = a.read_link(path)?;
                let target = std::ffi::OsStr::from_bytes(&target);
                std::os::unix::fs::symlink(target, dest)
                    .with_context(|| format!("making the link {}", dest.display()))?;
            } else {
                out.finish()?;
            }
        }
    }
    Ok(())
}

/// `e`, unless it says `path` is not in the archive and the archive holds
/// files below it: then that it is a directory, which `get` does not take.
fn not_a_file<R: ReadAt>(a: &Archive<R>, path: &str, e: znippy_format::Error) -> anyhow::Error {
    let below = format!("{}/", path.trim_end_matches('/'));
    match e {
        znippy_format::Error::NotFound(_) if a.entries(&below).is_ok_and(|e| !e.is_empty()) => {
            anyhow::anyhow!(
                "{path} is a directory in the archive; get takes a file \
                 (`znippy list ARCHIVE --prefix {below}` lists what it holds)"
            )
        }
        e => e.into(),
    }
}

fn verify<R: ReadAt>(a: &Archive<R>, args: &VerifyArgs) -> Result<()> {
    // The CA file first: a typo in its name should not cost a full read.
    let anchors = match &args.ca {
        Some(ca) => Some(
            znippy_sign::certificates_from_pem(&znippy_sign::read_pem(ca)?)
                .with_context(|| format!("reading {}", ca.display()))?,
        ),
        None => None,
    };
    let n = a.verify(threads(args.threads))?;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "ok: {n} slices and {} sections verified",
        a.sections().len() + a.signature_sections().len()
    )?;
    let signatures = a.signatures()?;
    if signatures.is_empty() && anchors.is_some() {
        bail!("the archive is not signed");
    }
    let content = znippy_format::signed_content(&a.identity()?);
    let now = std::time::SystemTime::now();
    for (i, sig) in signatures.iter().enumerate() {
        let signers = znippy_sign::verify(sig, &content, anchors.as_deref(), now)
            .with_context(|| format!("signature {}", i + 1))?;
        for s in signers {
            let when = s
                .signing_time
                .map(|t| format!(", at {t}"))
                .unwrap_or_default();
            let trust = match s.trusted {
                true => "its certificate leads to the CA",
                false => "not checked against a CA (give --ca)",
            };
            writeln!(
                out,
                "signature {}: signed by {} (issuer {}){when}; {trust}",
                i + 1,
                printable(&s.signer),
                printable(&s.issuer)
            )?;
        }
    }
    Ok(())
}

fn identity<R: ReadAt>(a: &Archive<R>, args: &IdentityArgs) -> Result<()> {
    let content = znippy_format::signed_content(&a.identity()?);
    match &args.output {
        Some(path) => {
            std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))?
        }
        None => std::io::stdout().write_all(&content)?,
    }
    Ok(())
}

fn signature<R: ReadAt>(a: &Archive<R>, args: &SignatureArgs) -> Result<()> {
    let mut signatures = a.signatures()?;
    let count = signatures.len();
    if count == 0 {
        bail!("the archive is not signed");
    }
    if args.number == 0 || args.number > count {
        bail!("the archive has {count} signatures; give a number from 1 to {count}");
    }
    let sig = signatures.swap_remove(args.number - 1);
    output::not_the_input(&args.output, &args.archive.archive)?;
    std::fs::write(&args.output, sig).with_context(|| format!("writing {}", args.output.display()))
}

fn meta<R: ReadAt>(a: &Archive<R>, args: &MetaArgs) -> Result<ExitCode> {
    let MetaArgs {
        archive,
        key,
        prefix,
        paths_only,
    } = args;
    let md = a.metadata()?;
    let found = match (&key, &prefix) {
        (Some(k), _) => md.by_key(k),
        (None, Some(p)) => md.by_prefix(p),
        (None, None) => bail!("give --key or --prefix"),
    };
    print_meta(found, &archive.archive.display().to_string(), *paths_only)
}

/// `s` with control characters escaped (`\n`, `\u{1b}`): a path from a
/// hand-made archive never drives the terminal it is listed on.
pub(crate) fn printable(s: &str) -> std::borrow::Cow<'_, str> {
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

fn info<R: ReadAt>(a: &Archive<R>, path: &Path) -> Result<()> {
    let p = a.props();
    let entries = a.entries("")?;
    let raw = entries.iter().fold(0, |n: u64, e| n.saturating_add(e.size));
    let mut out = std::io::stdout().lock();
    writeln!(out, "archive        {}", path.display())?;
    writeln!(
        out,
        "size           {} ({} bytes)",
        human(a.archive_len()),
        a.archive_len()
    )?;
    writeln!(out, "files          {}", entries.len())?;
    writeln!(out, "slices         {}", a.row_count())?;
    writeln!(out, "uncompressed   {} ({raw} bytes)", human(raw))?;
    writeln!(
        out,
        "blob region    {} ({} bytes)",
        human(a.blob_end()),
        a.blob_end()
    )?;
    // The tail up to its signatures, which sign it and are not index; and
    // that less the BLAKE3 every slice carries, which the index must hold
    // and a tool without one would not: the part a leaner layout can cut.
    let index = a.signed_len() - a.blob_end();
    let files = entries.len().max(1) as f64;
    let checksums = a.row_count().saturating_mul(32);
    writeln!(
        out,
        "index          {} ({index} bytes, {:.0} per file; {:.0} without the 32-byte BLAKE3 of each slice)",
        human(index),
        index as f64 / files,
        index.saturating_sub(checksums) as f64 / files
    )?;
    writeln!(out, "format         version {}", a.format_version())?;
    let ratio = if a.archive_len() == 0 {
        0.0
    } else {
        raw as f64 / a.archive_len() as f64
    };
    writeln!(out, "ratio          {ratio:.3}")?;
    let id: String = a.identity()?.iter().map(|b| format!("{b:02x}")).collect();
    writeln!(out, "identity       {id}")?;
    let signed = match a.signature_sections().len() {
        0 => "none".to_string(),
        n => format!(
            "{n}, after byte {} (`znippy verify` checks them)",
            a.signed_len()
        ),
    };
    writeln!(out, "signatures     {signed}")?;
    writeln!(
        out,
        "properties     codec={} level={} chunk_size={} pack_threshold={} pack_size={}",
        znippy_format::CODEC,
        p.level,
        p.chunk_size,
        p.pack_threshold,
        p.pack_size
    )?;
    writeln!(out, "trie           {:?}", a.trie_state())?;
    writeln!(out, "sections:")?;
    writeln!(
        out,
        "  {:>8} {:<20} {:<12} {:>12} {:>12} {:>10}",
        "pkg_type", "module", "repo", "offset", "length", "rows"
    )?;
    for s in a.sections().iter().chain(a.signature_sections()) {
        writeln!(
            out,
            "  {:>8} {:<20} {:<12} {:>12} {:>12} {:>10}",
            s.pkg_type,
            s.module_name,
            printable(&s.repo),
            s.index_offset,
            s.index_len,
            s.row_count
        )?;
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
