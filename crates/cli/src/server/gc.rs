//! `znippy gc`: removes the blob segments no committed row names.

use std::io::Write;

use anyhow::{bail, Context, Result};
use clap::Args;
use znippy_store::{Store, StoreOptions, GC_MIN_AGE};

use crate::serve::RemoteArgs;

#[derive(Args)]
pub struct GcArgs {
    #[command(flatten)]
    remote: RemoteArgs,
    /// Seconds a segment must have existed unnamed before it is removed
    /// (an append in flight has uploaded its segment and not yet committed).
    #[arg(long, default_value_t = GC_MIN_AGE.as_secs())]
    min_age: u64,
}

pub fn run(args: GcArgs) -> Result<()> {
    let Some(remote) = args.remote.remote()? else {
        bail!("gc is for --catalog rest: in a data directory a failed append's bytes are cut off the sidecar when it fails");
    };
    let rt = tokio::runtime::Runtime::new().context("starting the runtime")?;
    rt.block_on(async {
        let store = Store::open_remote(remote.connect().await?, StoreOptions::new(1)).await?;
        let min_age = std::time::Duration::from_secs(args.min_age);
        let collected = store.gc(min_age).await?;
        writeln!(
            std::io::stdout(),
            "removed {} unnamed segments ({} bytes)",
            collected.objects,
            collected.bytes
        )?;
        store.close().await;
        Ok(())
    })
}
