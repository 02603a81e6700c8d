//! The built-in package plugins: what znippy's index knows about the packages
//! it stores.
//!
//! Each plugin claims paths by name and reads typed columns out of a claimed
//! file's [`Window`] (its first and last few MiB, `znippy_format::package`)
//! while the engine compresses it, or, for a tarball, follows the file from
//! its first byte to the member it wants, however large ([`Follow`]):
//!
//! | plugin | `pkg_type` | claims | reads |
//! |---|---|---|---|
//! | `maven` | 1 | `*.jar *.war *.ear` | every `META-INF/maven/*/*/pom.properties` (a shaded jar has several: a row each), the manifest's `Implementation-*` and `Bundle-*`, the class count |
//! | `python` | 2 | `*.whl`, `*.tar.gz` | a wheel's `*.dist-info/METADATA` and `WHEEL`, an sdist's `PKG-INFO` |
//! | `npm` | 3 | `*.tgz` | `package/package.json` |
//! | `crate` | 4 | `*.crate` | `NAME-VERSION/Cargo.toml` |
//! | `deb` | 5 | `*.deb` | `control` inside `control.tar.*` |
//!
//! Modules: `zipped.rs` (zip members, through the `zip` crate), `tarball.rs`
//! (tar members under gzip, xz, zstd or bzip2, walked as the bytes are
//! pushed), `bounded.rs` (the caps every read keeps), `headers.rs` (RFC 822
//! style headers: `PKG-INFO`, `control`, `MANIFEST.MF`), then one module per
//! plugin.
//!
//! Everything a plugin reads is untrusted: a member is read through a cap of
//! [`MAX_MEMBER`] bytes, a decompressor through a cap of [`MAX_DECODED`]
//! bytes (a bomb costs a bounded time), nothing is extracted to disk and no
//! nested archive is opened. A package that cannot be read gives
//! [`Outcome::Damaged`] with the reason, recorded on that file's row; it
//! never fails the archive.

mod bounded;
mod cargo;
mod deb;
mod headers;
mod maven;
mod npm;
mod python;
mod tarball;
mod zipped;

use std::sync::Arc;

use znippy_format::Plugin;
pub use znippy_format::{Follow, Outcome, Window};

pub use bounded::{MAX_DECODED, MAX_MEMBER};

/// Every built-in plugin, in the order they are asked to claim a path.
pub fn builtin() -> Vec<Arc<dyn Plugin>> {
    vec![
        Arc::new(maven::Maven),
        Arc::new(python::Python),
        Arc::new(npm::Npm),
        Arc::new(cargo::Cargo),
        Arc::new(deb::Deb),
    ]
}

/// Whether the last component of `path` ends with one of `exts`, ASCII case
/// ignored, after a non-empty stem.
fn has_extension(path: &str, exts: &[&str]) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path).as_bytes();
    exts.iter().any(|e| {
        let e = e.as_bytes();
        name.len() > e.len() && name[name.len() - e.len()..].eq_ignore_ascii_case(e)
    })
}
