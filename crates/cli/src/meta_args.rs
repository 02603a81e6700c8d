//! `--meta 'path=key=value'` and `--meta-archive 'key=value'` arguments.
//!
//! Values are typed by shape ([`MetaValue::infer`]); `@file` reads the file's
//! bytes as a bytes value. The path and key are split at the first two `=`, so a
//! value may contain `=` but a path or key given this way may not.

use anyhow::{bail, Context, Result};
use znippy_format::{MetaTable, MetaValue};

fn value(text: &str) -> Result<MetaValue> {
    match text.strip_prefix('@') {
        Some(file) => {
            let bytes = std::fs::read(file)
                .with_context(|| format!("reading metadata value file {file}"))?;
            Ok(MetaValue::Bytes(bytes))
        }
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
        let Some((path, rest)) = e.split_once('=') else {
            bail!("--meta {e:?}: expected 'path=key=value'");
        };
        let Some((key, v)) = rest.split_once('=') else {
            bail!("--meta {e:?}: expected 'path=key=value'");
        };
        t.set(Some(path), key, value(v)?)
            .with_context(|| format!("--meta {e:?}"))?;
    }
    for e in archive {
        let Some((key, v)) = e.split_once('=') else {
            bail!("--meta-archive {e:?}: expected 'key=value'");
        };
        t.set(None, key, value(v)?)
            .with_context(|| format!("--meta-archive {e:?}"))?;
    }
    Ok(Some(t))
}
