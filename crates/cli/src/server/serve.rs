//! `znippy serve`: the HTTP service on a data directory.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use clap::Args;
use znippy_http::{
    Config, RemoteConfig, StoreOptions, DEFAULT_MAX_BODY, DEFAULT_SHUTDOWN_GRACE, DEFAULT_TIMEOUT,
};

#[derive(Args)]
pub struct ServeArgs {
    /// The data directory (catalog, tables, sidecars, sealed archives).
    #[arg(long, env = "ZNIPPY_DATA", default_value = "znippy-data")]
    data: PathBuf,
    #[command(flatten)]
    remote: RemoteArgs,
    /// Address to listen on. Beyond loopback a token is required, unless
    /// --insecure-open.
    #[arg(long, env = "ZNIPPY_LISTEN", default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Bearer token that writes (and private reads) must present.
    #[arg(long, env = "ZNIPPY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Reads need the token too.
    #[arg(long, env = "ZNIPPY_PRIVATE_READS")]
    private_reads: bool,
    /// Allow listening beyond loopback without a token.
    #[arg(long)]
    insecure_open: bool,
    /// Sign every seal with this private key (PEM, ECDSA P-256 or Ed25519):
    /// a detached CMS signature over the sealed archive's identity.
    #[arg(
        long,
        env = "ZNIPPY_SIGN_KEY",
        value_name = "PEM",
        requires = "sign_cert"
    )]
    sign_key: Option<PathBuf>,
    /// The signing key's certificate (PEM).
    #[arg(
        long,
        env = "ZNIPPY_SIGN_CERT",
        value_name = "PEM",
        requires = "sign_key"
    )]
    sign_cert: Option<PathBuf>,
    /// Intermediate certificates the signatures carry (PEM).
    #[arg(
        long,
        env = "ZNIPPY_SIGN_CHAIN",
        value_name = "PEM",
        requires = "sign_key"
    )]
    sign_chain: Option<PathBuf>,
    /// Largest request body, in bytes.
    // A constant, not Config::default(): clap builds every subcommand's
    // defaults on each run, and Config::default() counts the cores.
    #[arg(long, env = "ZNIPPY_MAX_BODY", default_value_t = DEFAULT_MAX_BODY)]
    max_body: u64,
    /// Seconds a connection may take to send a request's headers, from when
    /// it opens and again after each response (so also how long an idle
    /// keep-alive connection stays open).
    #[arg(long, env = "ZNIPPY_HEADER_TIMEOUT", default_value_t = DEFAULT_TIMEOUT.as_secs())]
    header_timeout: u64,
    /// Seconds within which a request body must bring 64 KiB more (or end);
    /// a slower upload fails with 408 and commits nothing. A client must take
    /// 64 KiB of an answer within it too, or its connection is closed.
    #[arg(long, env = "ZNIPPY_BODY_TIMEOUT", default_value_t = DEFAULT_TIMEOUT.as_secs())]
    body_timeout: u64,
    /// Seconds shutdown (SIGTERM, Ctrl-C) waits for requests in flight before
    /// it closes their connections.
    #[arg(long, env = "ZNIPPY_SHUTDOWN_GRACE", default_value_t = DEFAULT_SHUTDOWN_GRACE.as_secs())]
    shutdown_grace: u64,
    /// Compression threads per append (default: all cores).
    #[arg(long)]
    threads: Option<usize>,
    /// Bytes of compression memory all appends in flight share (default:
    /// 1 GiB, or eight appends of default archives if that is more). An
    /// append waits until its worst case fits; an archive whose worst case
    /// exceeds it cannot be created.
    #[arg(long, env = "ZNIPPY_ENGINE_MEMORY")]
    engine_memory: Option<u64>,
    /// Log filter, e.g. info, debug, znippy=debug.
    #[arg(long, env = "ZNIPPY_LOG", default_value = "info")]
    log: String,
}

/// Where the archives are, when not in a data directory.
#[derive(Args)]
pub struct RemoteArgs {
    /// Where the tables are: `embedded`, a catalog in --data, or `rest`, an
    /// Iceberg REST catalog shared by any number of nodes, the blobs then
    /// in object storage under --warehouse (S3 credentials from the usual
    /// AWS_* environment variables).
    #[arg(long, env = "ZNIPPY_CATALOG", value_enum, default_value = "embedded")]
    catalog: CatalogKind,
    /// The REST catalog's URL.
    #[arg(long, env = "ZNIPPY_CATALOG_URI", required_if_eq("catalog", "rest"))]
    catalog_uri: Option<String>,
    /// The REST catalog's OAuth2 client credentials, ID:SECRET.
    #[arg(long, env = "ZNIPPY_CATALOG_CREDENTIAL", hide_env_values = true)]
    catalog_credential: Option<String>,
    /// The REST catalog's warehouse, if not --warehouse: a location, or a
    /// table bucket's name.
    #[arg(long, env = "ZNIPPY_CATALOG_WAREHOUSE")]
    catalog_warehouse: Option<String>,
    /// Where the blobs go with --catalog rest: s3://BUCKET/PREFIX.
    #[arg(long, env = "ZNIPPY_WAREHOUSE", required_if_eq("catalog", "rest"))]
    warehouse: Option<String>,
    /// An S3 endpoint other than AWS's, e.g. http://127.0.0.1:8333.
    #[arg(long, env = "ZNIPPY_S3_ENDPOINT")]
    s3_endpoint: Option<String>,
    /// Redirect downloads of sealed archives to presigned URLs of their
    /// objects (valid 15 minutes), so large downloads bypass the nodes.
    #[arg(long, env = "ZNIPPY_PRESIGN")]
    pub presign: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum CatalogKind {
    Embedded,
    Rest,
}

impl RemoteArgs {
    /// The scaled-out deployment, with `--catalog rest`.
    pub fn remote(&self) -> Result<Option<RemoteConfig>> {
        if self.catalog == CatalogKind::Embedded {
            let rest_only = [
                ("--catalog-uri", self.catalog_uri.is_some()),
                ("--catalog-credential", self.catalog_credential.is_some()),
                ("--catalog-warehouse", self.catalog_warehouse.is_some()),
                ("--warehouse", self.warehouse.is_some()),
                ("--s3-endpoint", self.s3_endpoint.is_some()),
                ("--presign", self.presign),
            ];
            if let Some((flag, _)) = rest_only.iter().find(|(_, set)| *set) {
                bail!("{flag} goes with --catalog rest");
            }
            return Ok(None);
        }
        let (Some(uri), Some(warehouse)) = (&self.catalog_uri, &self.warehouse) else {
            bail!("--catalog rest needs --catalog-uri and --warehouse");
        };
        Ok(Some(RemoteConfig {
            catalog_uri: uri.clone(),
            catalog_credential: self.catalog_credential.clone(),
            catalog_warehouse: self.catalog_warehouse.clone(),
            warehouse: warehouse.clone(),
            s3_endpoint: self.s3_endpoint.clone(),
            s3_credentials: None,
        }))
    }
}

pub fn run(args: ServeArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_new(&args.log)
                .with_context(|| format!("--log {:?}", args.log))?,
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let threads = args.threads.unwrap_or(Config::default().threads).max(1);
    let remote = args.remote.remote()?;
    let signer = match (&args.sign_key, &args.sign_cert) {
        (Some(key), Some(cert)) => Some(std::sync::Arc::new(
            znippy_sign::Signer::from_files(key, cert, args.sign_chain.as_deref())
                .context("--sign-key and --sign-cert")?,
        )),
        _ => None,
    };
    let config = Config {
        signer,
        remote,
        data: args.data,
        listen: args.listen,
        token: args.token.filter(|t| !t.is_empty()),
        private_reads: args.private_reads,
        presign: args.remote.presign,
        insecure_open: args.insecure_open,
        max_body: args.max_body,
        threads,
        engine_memory: args
            .engine_memory
            .unwrap_or(StoreOptions::new(threads).engine_memory),
        header_timeout: Duration::from_secs(args.header_timeout.max(1)),
        body_timeout: Duration::from_secs(args.body_timeout.max(1)),
        shutdown_grace: Duration::from_secs(args.shutdown_grace),
    };
    let rt = tokio::runtime::Runtime::new().context("starting the runtime")?;
    rt.block_on(async {
        let listener = znippy_http::bind(&config).await?;
        // Tests and scripts read this line to find the port of --listen ...:0.
        // A reader that has gone (`| head -1`) or no stdout at all does not
        // stop the service.
        let _ = writeln!(
            std::io::stdout(),
            "listening on http://{}",
            listener.local_addr()?
        );
        znippy_http::serve_on(listener, config, shutdown()).await?;
        tracing::info!("stopped");
        Ok(())
    })
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown() {
    use tokio::signal::unix::{signal, SignalKind};
    let term = async {
        match signal(SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {},
        _ = term => {},
    }
    tracing::info!("shutting down: finishing requests in flight");
}
