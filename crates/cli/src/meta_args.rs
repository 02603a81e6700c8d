//! `--meta 'path=key=value'` and `--meta-archive 'key=value'` arguments.
//!
//! Values are typed by shape ([`MetaValue::infer`]); `@file` reads the file's
//! bytes as a bytes value. The path and key are split at the first two `=`, so a
//! value may contain `=` but a path or key given this way may not.

use anyhow::{Context, Result};
use znippy_format::{MetaTable, MetaValue};

fn value(text: &str) -> znippy_format::Result<MetaValue> {
    match text.strip_prefix('@') {
        Some(file) => std::fs::read(file).map(MetaValue::Bytes).map_err(|e| {
            znippy_format::Error::Meta(format!("reading metadata value file {file}: {e}"))
        }),
        None => Ok(MetaValue::infer(text)),
    }
}

/// Builds a table from the arguments; `None` when there are none.
pub fn table(entries: &[String], archive: &[String]) -> Result<Option<MetaTable>> {
    if entries.is_empty() && archive.is_empty() {
        return Ok(None);
    }
    let mut t = MetaTable::new();
    for e in entries {
        t.set_text(e, true, value).context("--meta")?;
    }
    for e in archive {
        t.set_text(e, false, value).context("--meta-archive")?;
    }
    Ok(Some(t))
}
