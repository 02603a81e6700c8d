//! A real server on loopback, and a reqwest client for it.

#![allow(dead_code)]

use std::net::SocketAddr;

use reqwest::{Client, Response, StatusCode};
use serde_json::Value;
use tokio::sync::oneshot;
use znippy_http::Config;

pub struct Server {
    pub base: String,
    pub config: Config,
    pub dir: tempfile::TempDir,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), znippy_http::ServeError>>>,
}

impl Server {
    /// Starts a server on 127.0.0.1:0 over a fresh data directory.
    pub async fn start(tune: impl FnOnce(&mut Config)) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config {
            data: dir.path().join("data"),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            threads: 2,
            ..Config::default()
        };
        tune(&mut config);
        let listener = znippy_http::bind(&config).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(znippy_http::serve_on(listener, config.clone(), async {
            let _ = rx.await;
        }));
        Server {
            base,
            config,
            dir,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// Stops the server and starts a new one on the same data directory,
    /// after `between` has run on it.
    pub async fn restart(mut self, between: impl FnOnce(&std::path::Path)) -> Server {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
        between(&self.config.data);
        let listener = znippy_http::bind(&self.config).await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (tx, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(znippy_http::serve_on(
            listener,
            self.config.clone(),
            async {
                let _ = rx.await;
            },
        ));
        self.base = base;
        self.stop = Some(tx);
        self.task = Some(task);
        self
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Stops accepting and waits for the requests in flight.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.await.unwrap().unwrap();
        }
    }
}

pub fn client() -> Client {
    Client::new()
}

/// The JSON body of a response, after checking its status.
pub async fn json(r: Response, status: StatusCode) -> Value {
    let got = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(got, status, "body: {text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// The error code of a JSON error response, after checking its status.
pub async fn error_code(r: Response, status: StatusCode) -> String {
    let v = json(r, status).await;
    v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("no error code in {v}"))
        .to_string()
}

// Each test binary takes what it needs of these.
#[allow(unused_imports)]
pub use znippy_testkit::data::text;

/// A `multipart/form-data` body: parts `(name, filename, data)`, closed with
/// the final boundary when `close`.
pub fn multipart(boundary: &str, parts: &[(&str, Option<&str>, &[u8])], close: bool) -> Vec<u8> {
    let mut b = Vec::new();
    for (name, file, data) in parts {
        b.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
        match file {
            Some(f) => b.extend_from_slice(
                format!(
                    "Content-Disposition: form-data; name=\"{name}\"; filename=\"{f}\"\r\n\r\n"
                )
                .as_bytes(),
            ),
            None => b.extend_from_slice(
                format!("Content-Disposition: form-data; name=\"{name}\"\r\n\r\n").as_bytes(),
            ),
        }
        b.extend_from_slice(data);
        b.extend_from_slice(b"\r\n");
    }
    if close {
        b.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
    }
    b
}

pub async fn create(c: &Client, s: &Server, id: &str, metadata: bool) {
    let r = c
        .post(s.url("/archives"))
        .json(&serde_json::json!({ "id": id, "metadata": metadata }))
        .send()
        .await
        .unwrap();
    json(r, StatusCode::CREATED).await;
}

pub async fn put(c: &Client, s: &Server, id: &str, path: &str, body: Vec<u8>) -> Value {
    let r = c
        .put(s.url(&format!("/archives/{id}/files/{path}")))
        .body(body)
        .send()
        .await
        .unwrap();
    json(r, StatusCode::OK).await
}

pub async fn get(c: &Client, s: &Server, id: &str, path: &str) -> Vec<u8> {
    let r = c
        .get(s.url(&format!("/archives/{id}/files/{path}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "GET {path}");
    r.bytes().await.unwrap().to_vec()
}

/// Every live path of an archive, following `next` through all pages.
pub async fn list_all(c: &Client, s: &Server, id: &str, limit: usize) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut q = vec![("limit", limit.to_string())];
        if let Some(a) = &after {
            q.push(("after", a.clone()));
        }
        let r = c
            .get(s.url(&format!("/archives/{id}/files")))
            .query(&q)
            .send()
            .await
            .unwrap();
        let v = json(r, StatusCode::OK).await;
        for f in v["files"].as_array().unwrap() {
            out.push((
                f["path"].as_str().unwrap().to_string(),
                f["size"].as_u64().unwrap(),
            ));
        }
        match v["next"].as_str() {
            Some(n) => after = Some(n.to_string()),
            None => return out,
        }
    }
}

/// `bytes` as a body of unknown length (sent chunked). A declared length
/// past `--max-body` is refused from the request head, before the body is
/// sent, and a client that does not wait for `100 Continue` may then see its
/// send fail instead of the answer; tests of the limit counted as the body
/// arrives send it chunked.
pub fn chunked(bytes: Vec<u8>) -> reqwest::Body {
    let one = futures::stream::once(async move { Ok::<_, std::io::Error>(bytes) });
    reqwest::Body::wrap_stream(one)
}

/// The server's `/metrics` text.
pub async fn metrics(c: &Client, s: &Server) -> String {
    let r = c.get(s.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    r.text().await.unwrap()
}
