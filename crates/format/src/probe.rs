//! The plugins' threads: what a plugin reads from a claimed file (inflating
//! a tarball to its last member, say) runs on them, beside the producer,
//! which goes on reading and hashing the next files. Each file's rows are
//! filed by its place in the input, so the result is the one a serial run
//! gives, whatever thread read which file. At most [`IN_FLIGHT`] windows
//! wait, so memory stays bounded whatever the batch.

use std::sync::mpsc::{self, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::{Scope, ScopedJoinHandle};

use crate::error::{Error, Result};
use crate::package::{Packages, Plugin, Plugins, Window};

/// Windows handed over and not taken by a thread yet, at most.
const IN_FLIGHT: usize = 2;

/// A claimed file, read, and its place in the input.
struct Read {
    at: u64,
    plugin: Arc<dyn Plugin>,
    path: String,
    window: Window,
}

/// A hard link at `path` to the file at `to`, earlier in the batch.
struct Link {
    plugin: Arc<dyn Plugin>,
    path: String,
    to: String,
}

/// The running threads.
pub(crate) struct Probes<'scope> {
    tx: SyncSender<Read>,
    threads: Vec<ScopedJoinHandle<'scope, Vec<(u64, Packages)>>>,
    links: Vec<Link>,
    next: u64,
    repo: String,
}

impl<'scope> Probes<'scope> {
    /// Starts `threads` threads in `scope`, running `plugins`.
    pub(crate) fn start<'env>(
        scope: &'scope Scope<'scope, 'env>,
        plugins: Plugins,
        threads: usize,
    ) -> Self {
        let (tx, rx) = mpsc::sync_channel::<Read>(IN_FLIGHT);
        let rx = Arc::new(Mutex::new(rx));
        let repo = plugins.repo().to_string();
        let threads = (0..threads.max(1))
            .map(|_| {
                let (rx, plugins) = (Arc::clone(&rx), plugins.clone());
                scope.spawn(move || read_all(&rx, &plugins))
            })
            .collect();
        Probes {
            tx,
            threads,
            links: Vec::new(),
            next: 0,
            repo,
        }
    }

    /// Hands a claimed file over, waiting while [`IN_FLIGHT`] are.
    pub(crate) fn read(&mut self, plugin: Arc<dyn Plugin>, path: String, window: Window) {
        let at = self.next;
        self.next += 1;
        // Threads that are gone have panicked: `finish` says so.
        let _ = self.tx.send(Read {
            at,
            plugin,
            path,
            window,
        });
    }

    /// A hard link at `path` to `to`: the rows `plugin` made of `to`, under
    /// `path`, once every file is read.
    pub(crate) fn link(&mut self, plugin: Arc<dyn Plugin>, path: String, to: String) {
        self.links.push(Link { plugin, path, to });
    }

    /// Every row, in input order, once the threads have read every file.
    pub(crate) fn finish(self) -> Result<Packages> {
        drop(self.tx);
        let mut filed = Vec::new();
        for t in self.threads {
            filed.extend(t.join().map_err(|_| {
                Error::io(
                    "reading packages",
                    std::io::Error::other("a package plugin panicked"),
                )
            })?);
        }
        filed.sort_unstable_by_key(|(at, _)| *at);
        let mut out = Packages::default();
        for (_, p) in filed {
            for (key, t) in p.tables {
                out.tables
                    .entry(key)
                    .or_insert_with(|| t.clone_empty())
                    .rows
                    .extend(t.rows);
            }
        }
        for Link { plugin, path, to } in self.links {
            if let Some(t) = out.tables.get_mut(&(plugin.pkg_type(), self.repo.clone())) {
                let copies: Vec<_> = t.rows.iter().filter(|r| r.path == to).cloned().collect();
                t.rows.extend(copies.into_iter().map(|mut r| {
                    r.path = path.clone();
                    r
                }));
            }
        }
        Ok(out)
    }
}

/// One thread's share: each file it takes, read into rows of its own.
fn read_all(rx: &Mutex<Receiver<Read>>, plugins: &Plugins) -> Vec<(u64, Packages)> {
    let mut filed = Vec::new();
    loop {
        let next = match rx.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return filed,
        };
        let Ok(Read {
            at,
            plugin,
            path,
            window,
        }) = next
        else {
            return filed;
        };
        let mut p = Packages::default();
        plugins.record(plugin.as_ref(), &path, window, &mut p);
        filed.push((at, p));
    }
}
