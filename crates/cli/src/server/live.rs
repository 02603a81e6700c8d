//! `znippy live …`: drive the live store in a data directory from a shell, the
//! same store `znippy serve` runs on.

use std::io::{BufWriter, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Subcommand;
use znippy_format::ScanOptions;
use znippy_store::{CreateOptions, SealedAt, Store, StoreOptions};

use znippy_cli::{gather, meta_args, print_meta, PropsArgs};

#[derive(Subcommand)]
pub enum LiveCmd {
    /// Create a live archive.
    Create {
        id: String,
        #[command(flatten)]
        props: PropsArgs,
        /// Start with an (empty) metadata section.
        #[arg(long)]
        with_meta: bool,
        /// The repo its package rows are filed under.
        #[arg(long, default_value = "")]
        repo: String,
        /// Run no package plugin on its appends.
        #[arg(long)]
        no_plugins: bool,
    },
    /// Drop an archive: its tables, namespace and blobs.
    Drop { id: String },
    /// List archives.
    Archives,
    /// Show an archive's state as JSON-like lines.
    Info { id: String },
    /// Append files (one batch, one commit); prints the receipt when durable.
    Append {
        id: String,
        /// Directories (stored relative to themselves) or files (under the path given).
        inputs: Vec<PathBuf>,
        /// Metadata about a file: 'path=key=value' (value '@file' reads bytes).
        #[arg(long = "meta", value_name = "PATH=KEY=VALUE")]
        meta: Vec<String>,
        /// Metadata about the archive: 'key=value'.
        #[arg(long = "meta-archive", value_name = "KEY=VALUE")]
        meta_archive: Vec<String>,
    },
    /// List the live files of an archive.
    Ls {
        id: String,
        #[arg(short, long, default_value = "")]
        prefix: String,
    },
    /// Write one live file to stdout, verified.
    Get { id: String, path: String },
    /// Delete one file.
    Rm { id: String, path: String },
    /// Search metadata by key. Exit status: 0 hits, 1 no match, 2 no metadata, 3 error.
    Meta { id: String, key: String },
}

/// The store in `data`, with the built-in package plugins, as `znippy serve`
/// opens it.
async fn open_store(data: &std::path::Path, threads: usize) -> Result<Store> {
    let opts = StoreOptions {
        plugins: znippy_plugins::builtin(),
        ..StoreOptions::new(threads)
    };
    Store::open_with(data, opts)
        .await
        .with_context(|| format!("opening the store in {}", data.display()))
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// `znippy seal`: seals, prints where the result is, its size and identity.
pub fn seal(data: PathBuf, id: &str, output: Option<&std::path::Path>) -> Result<()> {
    runtime()?.block_on(async move {
        let store = open_store(&data, 1).await?;
        let r = znippy_seal::seal(&store, id, None).await;
        store.close().await;
        let r = r?;
        if let Some(out) = output {
            let SealedAt::File(path) = &r.at else {
                bail!("{id} was sealed to object storage, not to a file: {}", r.at);
            };
            std::fs::copy(path, out).with_context(|| format!("copying to {}", out.display()))?;
        }
        let hex: String = r.identity.iter().map(|b| format!("{b:02x}")).collect();
        let how = if r.in_place {
            "tail written in place".to_string()
        } else {
            format!(
                "re-packed: {} blobs copied, {} rebuilt",
                r.repack.blobs_copied, r.repack.blobs_rebuilt
            )
        };
        writeln!(
            std::io::stdout(),
            "sealed {id}: {} ({} bytes, {how}, identity {hex})",
            r.at,
            r.size,
        )?;
        Ok(())
    })
}

pub fn run(data: PathBuf, threads: usize, cmd: LiveCmd) -> Result<std::process::ExitCode> {
    runtime()?.block_on(async move {
        let store = open_store(&data, threads).await?;
        let result = command(&store, cmd).await;
        // A commit may have started keeping the tables small: let it finish
        // rather than cut it off with the runtime.
        store.close().await;
        result
    })
}

async fn command(store: &Store, cmd: LiveCmd) -> Result<std::process::ExitCode> {
    // Not a StdoutLock: that is not Send, and `read_file` needs a Send writer.
    let mut out = BufWriter::new(std::io::stdout());
    match cmd {
        LiveCmd::Create {
            id,
            props,
            with_meta,
            repo,
            no_plugins,
        } => {
            let props = props.props()?;
            store
                .create(
                    &id,
                    CreateOptions {
                        props,
                        with_meta,
                        plugins: !no_plugins,
                        repo,
                    },
                )
                .await?;
            writeln!(out, "created {id}")?;
        }
        LiveCmd::Archives => {
            for id in store.list().await? {
                writeln!(out, "{id}")?;
            }
        }
        LiveCmd::Info { id } => {
            let i = store.info(&id).await?;
            writeln!(out, "id {}\nstate {:?}\nfiles {}\nbytes_in {}\nbytes_stored {}\nappends {}\nsnapshot {}\nmetadata {}",
                    i.id, i.state, i.files, i.bytes_in, i.bytes_stored, i.appends,
                    i.snapshot_id.map_or("-".into(), |s| s.to_string()), i.with_meta)?;
        }
        LiveCmd::Append {
            id,
            inputs,
            meta,
            meta_archive,
        } => {
            let set = meta_args::table(&meta, &meta_archive)?;
            let scan = gather(&inputs, ScanOptions::default())?;
            for s in &scan.skipped {
                eprintln!("znippy: {s}");
            }
            let files = scan.files.iter().map(|f| f.input()).collect();
            let r = store.append(&id, files, set).await?;
            writeln!(
                out,
                "appended {} files, {} bytes: append {} snapshot {} blob_end {}",
                r.files, r.bytes, r.append_seq, r.snapshot_id, r.blob_end
            )?;
        }
        LiveCmd::Ls { id, prefix } => {
            for e in store.list_files(&id, &prefix).await? {
                writeln!(out, "{:>12} {}", e.size, e.path)?;
            }
        }
        LiveCmd::Get { id, path } => {
            // Streamed slice by slice (each verified before it is written),
            // never held whole: the file may be larger than memory.
            store.read_file(&id, &path, &mut out).await?;
        }
        LiveCmd::Drop { id } => {
            store.drop_archive(&id).await?;
            writeln!(out, "dropped {id}")?;
        }
        LiveCmd::Rm { id, path } => {
            store.delete_file(&id, &path).await?;
            writeln!(out, "deleted {path}")?;
        }
        LiveCmd::Meta { id, key } => {
            return print_meta(store.meta_by_key(&id, &key).await?, &id, false);
        }
    }
    out.flush()?;
    Ok(std::process::ExitCode::SUCCESS)
}
