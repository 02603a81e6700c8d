//! The plugins' thread: what a plugin reads from a claimed file (inflating
//! a tarball to its last member, say) runs here, beside the producer, which
//! goes on reading and hashing the next files. Files arrive in input order
//! and their rows are filed in that order, so the result is the one a
//! serial run gives. At most [`IN_FLIGHT`] windows wait, so memory stays
//! bounded whatever the batch.

use std::sync::mpsc::{self, SyncSender};
use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};

use crate::error::{Error, Result};
use crate::package::{Packages, Plugin, Plugins, Window};

/// Windows handed over and not read yet, at most.
const IN_FLIGHT: usize = 2;

/// What the producer hands over.
pub(crate) enum Msg {
    /// A claimed file, read.
    Read {
        plugin: Arc<dyn Plugin>,
        path: String,
        window: Window,
    },
    /// A hard link at `path` to the file at `to`, earlier in the batch:
    /// the rows `plugin` made of `to`, under `path`.
    Link {
        plugin: Arc<dyn Plugin>,
        path: String,
        to: String,
    },
}

/// The running thread.
pub(crate) struct Probes<'scope> {
    tx: SyncSender<Msg>,
    thread: ScopedJoinHandle<'scope, Packages>,
}

impl<'scope> Probes<'scope> {
    /// Starts the thread in `scope`, running `plugins`.
    pub(crate) fn start<'env>(scope: &'scope Scope<'scope, 'env>, plugins: Plugins) -> Self {
        let (tx, rx) = mpsc::sync_channel::<Msg>(IN_FLIGHT);
        let thread = scope.spawn(move || {
            let mut packages = Packages::default();
            for msg in rx {
                match msg {
                    Msg::Read {
                        plugin,
                        path,
                        window,
                    } => plugins.record(plugin.as_ref(), &path, &window, &mut packages),
                    Msg::Link { plugin, path, to } => {
                        let key = (plugin.pkg_type(), plugins.repo().to_string());
                        if let Some(t) = packages.tables.get_mut(&key) {
                            let copies: Vec<_> =
                                t.rows.iter().filter(|r| r.path == to).cloned().collect();
                            t.rows.extend(copies.into_iter().map(|mut r| {
                                r.path = path.clone();
                                r
                            }));
                        }
                    }
                }
            }
            packages
        });
        Probes { tx, thread }
    }

    /// Hands `msg` over, waiting while [`IN_FLIGHT`] are.
    pub(crate) fn send(&self, msg: Msg) {
        // A thread that is gone has panicked: `finish` says so.
        let _ = self.tx.send(msg);
    }

    /// Every row, once the thread has read what was handed over.
    pub(crate) fn finish(self) -> Result<Packages> {
        drop(self.tx);
        self.thread.join().map_err(|_| {
            Error::io(
                "reading packages",
                std::io::Error::other("a package plugin panicked"),
            )
        })
    }
}
