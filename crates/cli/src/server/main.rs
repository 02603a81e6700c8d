//! `znippy-server`: the HTTP service and the live-archive commands.
//!
//! Users reach it through `znippy serve|live|seal`, which hands the process over
//! to this binary, so its help and messages speak as `znippy`. It is a binary of
//! its own because it links the store, Iceberg and the HTTP stack, which the
//! archiver commands must not pay for at every start.

mod gc;
mod live;
mod remote;
mod serve;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use znippy_cli::read::ReadCmd;
use znippy_cli::threads;

#[derive(Parser)]
#[command(
    name = "znippy",
    bin_name = "znippy",
    version,
    about = "The znippy service and its live archives"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Live archives in a data directory (the store `znippy serve` runs on).
    Live {
        /// The data directory.
        #[arg(long, default_value = "znippy-data")]
        data: PathBuf,
        /// Compression threads for appends (default: all cores).
        #[arg(long)]
        threads: Option<usize>,
        #[command(subcommand)]
        cmd: live::LiveCmd,
    },
    /// Run the HTTP service on a data directory (or a REST catalog and S3).
    Serve(Box<serve::ServeArgs>),
    /// Remove the blob segments no committed row names, on object storage.
    Gc(gc::GcArgs),
    /// A read command on a remote archive (`znippy list|get|verify|info|meta
    /// URL` come here).
    #[command(flatten)]
    Read(ReadCmd),
    /// Seal a live archive of a data directory into an immutable .znippy.
    Seal {
        /// The data directory.
        #[arg(long, default_value = "znippy-data")]
        data: PathBuf,
        /// The archive id.
        id: String,
        /// Also copy the sealed archive here.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    quiet_library_backtraces();
    let cli = Cli::parse();
    let answers = match &cli.cmd {
        Cmd::Live { cmd, .. } => matches!(cmd, live::LiveCmd::Meta { .. }),
        Cmd::Read(r) => r.answers_with_status(),
        _ => false,
    };
    znippy_cli::exit(run(cli.cmd), answers)
}

/// With `RUST_BACKTRACE` set and `RUST_LIB_BACKTRACE` not, makes library
/// errors capture no backtrace; panics still print theirs.
///
/// iceberg-rust builds errors on paths that succeed (`ok_or(Error::new(..))`
/// in `MetadataLocation::from_str`, which every commit parses) and drops
/// them, and each one walks the stack when backtraces are on: with
/// `RUST_BACKTRACE=1`, 1-2% of the server's CPU under small PUTs went to
/// unwinding (docs/deploy.md). `RUST_LIB_BACKTRACE=1` brings the errors'
/// back.
/// Called first in `main`, before any thread exists to read the
/// environment.
fn quiet_library_backtraces() {
    if std::env::var_os("RUST_BACKTRACE").is_some()
        && std::env::var_os("RUST_LIB_BACKTRACE").is_none()
    {
        std::env::set_var("RUST_LIB_BACKTRACE", "0");
    }
}

fn run(cmd: Cmd) -> Result<ExitCode> {
    match cmd {
        Cmd::Live {
            data,
            threads: t,
            cmd,
        } => live::run(data, threads(t), cmd),
        Cmd::Serve(args) => serve::run(*args).map(|()| ExitCode::SUCCESS),
        Cmd::Gc(args) => gc::run(args).map(|()| ExitCode::SUCCESS),
        Cmd::Read(cmd) => remote::run(&cmd),
        Cmd::Seal { data, id, output } => {
            live::seal(data, &id, output.as_deref()).map(|()| ExitCode::SUCCESS)
        }
    }
}
