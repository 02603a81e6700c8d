//! Where a remote archive is, and the client that reads it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use object_store::aws::AmazonS3Builder;
use object_store::http::HttpBuilder;
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, RetryConfig};

use crate::error::RemoteError;

/// A remote archive: a URL, or a key in an S3 bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `http://` or `https://`: `origin` is scheme and authority, `path` the
    /// rest (without the leading `/`, still percent-encoded).
    Http {
        /// Scheme and authority, e.g. `https://example.com:8443`.
        origin: String,
        /// The path on that server.
        path: String,
    },
    /// `s3://bucket/key`.
    S3 {
        /// The bucket.
        bucket: String,
        /// The object's key.
        key: String,
    },
}

impl Location {
    /// The remote location `s` names, or `None` when it is not a URL (a local
    /// path). A URL this crate cannot read is an error.
    pub fn parse(s: &str) -> Option<Result<Location, RemoteError>> {
        let bad = || Err(RemoteError::BadLocation(s.to_string()));
        if let Some(rest) = s.strip_prefix("s3://") {
            return Some(match rest.split_once('/') {
                Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => Ok(Location::S3 {
                    bucket: bucket.into(),
                    key: key.into(),
                }),
                _ => bad(),
            });
        }
        let scheme_end = ["http://", "https://"]
            .iter()
            .find(|p| s.starts_with(*p))?
            .len();
        // A query string (a presigned URL's signature, say) would be dropped
        // by the client: refuse it rather than fetch another object.
        if s.contains(['?', '#']) {
            return Some(bad());
        }
        Some(match s[scheme_end..].split_once('/') {
            Some((host, path)) if !host.is_empty() && !path.is_empty() => Ok(Location::Http {
                origin: s[..scheme_end + host.len()].to_string(),
                path: path.to_string(),
            }),
            _ => bad(),
        })
    }

    /// The client of this location and the object's path in it.
    ///
    /// Requests time out after `ZNIPPY_REMOTE_TIMEOUT` seconds (default 30)
    /// and are retried twice. S3 takes credentials, region and endpoint from
    /// the usual `AWS_*` variables (`AWS_ENDPOINT_URL` for a server other
    /// than AWS; plain `http://` is allowed when the endpoint says so). Over
    /// HTTP, `ZNIPPY_TOKEN` is sent as a bearer token, as `znippy serve
    /// --token` wants it.
    pub(crate) fn client(&self) -> Result<(Arc<dyn ObjectStore>, ObjectPath), RemoteError> {
        let config = |source| RemoteError::Config {
            location: self.to_string(),
            source,
        };
        let timeout = std::env::var("ZNIPPY_REMOTE_TIMEOUT")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|s| *s > 0.0 && s.is_finite())
            .map_or(Duration::from_secs(30), Duration::from_secs_f64);
        let mut options = ClientOptions::new()
            .with_timeout(timeout)
            .with_connect_timeout(timeout.min(Duration::from_secs(10)));
        let retry = RetryConfig {
            max_retries: 2,
            retry_timeout: timeout,
            ..RetryConfig::default()
        };
        match self {
            Location::Http { origin, path } => {
                options = options.with_allow_http(origin.starts_with("http://"));
                if let Ok(token) = std::env::var("ZNIPPY_TOKEN") {
                    let mut headers = http::HeaderMap::new();
                    let value =
                        http::HeaderValue::try_from(format!("Bearer {token}")).map_err(|e| {
                            config(object_store::Error::Generic {
                                store: "HTTP",
                                source: Box::new(e),
                            })
                        })?;
                    headers.insert(http::header::AUTHORIZATION, value);
                    options = options.with_default_headers(headers);
                }
                let store = HttpBuilder::new()
                    .with_url(origin.as_str())
                    .with_client_options(options)
                    .with_retry(retry)
                    .build()
                    .map_err(config)?;
                let path = ObjectPath::from_url_path(path)
                    .map_err(|e| config(object_store::Error::InvalidPath { source: e }))?;
                Ok((Arc::new(store), path))
            }
            Location::S3 { bucket, key } => {
                let endpoint = ["AWS_ENDPOINT_URL", "AWS_ENDPOINT"]
                    .iter()
                    .find_map(|k| std::env::var(k).ok());
                options =
                    options.with_allow_http(endpoint.is_some_and(|e| e.starts_with("http://")));
                let store = AmazonS3Builder::from_env()
                    .with_bucket_name(bucket)
                    .with_client_options(options)
                    .with_retry(retry)
                    .build()
                    .map_err(config)?;
                let path = ObjectPath::parse(key)
                    .map_err(|e| config(object_store::Error::InvalidPath { source: e }))?;
                Ok((Arc::new(store), path))
            }
        }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Http { origin, path } => write!(f, "{origin}/{path}"),
            Location::S3 { bucket, key } => write!(f, "s3://{bucket}/{key}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_paths() {
        assert!(Location::parse("dir/a.znippy").is_none());
        assert!(Location::parse("/abs/a.znippy").is_none());
        let http = Location::parse("http://127.0.0.1:8080/archives/x/archive.znippy")
            .unwrap()
            .unwrap();
        assert_eq!(
            http,
            Location::Http {
                origin: "http://127.0.0.1:8080".into(),
                path: "archives/x/archive.znippy".into()
            }
        );
        assert_eq!(
            http.to_string(),
            "http://127.0.0.1:8080/archives/x/archive.znippy"
        );
        let s3 = Location::parse("s3://b/k/a.znippy").unwrap().unwrap();
        assert_eq!(s3.to_string(), "s3://b/k/a.znippy");
        for bad in [
            "s3://bucket",
            "s3:///key",
            "http://host",
            "https://host/",
            "https://h/a.znippy?X-Amz-Signature=1",
        ] {
            assert!(
                matches!(Location::parse(bad), Some(Err(RemoteError::BadLocation(_)))),
                "{bad}"
            );
        }
    }
}
