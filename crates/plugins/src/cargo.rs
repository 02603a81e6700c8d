//! Rust crates: the normalized `NAME-VERSION/Cargo.toml` cargo packages.

use toml::Value as Toml;
use znippy_format::{Column, ColumnType, Follow, Outcome, Plugin, Value};

use crate::bounded::text;
use crate::tarball;

pub(crate) struct Cargo;

impl Plugin for Cargo {
    fn name(&self) -> &'static str {
        "crate"
    }

    fn pkg_type(&self) -> i8 {
        4
    }

    fn columns(&self) -> Vec<Column> {
        let s = |n| Column::new(n, ColumnType::Str);
        vec![
            s("name"),
            s("version"),
            s("edition"),
            s("license"),
            s("rust_version"),
            s("description"),
            Column::new("dependencies", ColumnType::StrMap),
        ]
    }

    fn matches_path(&self, path: &str) -> bool {
        crate::has_extension(path, &[".crate"])
    }

    fn follow(&self, head: &[u8]) -> Option<Box<dyn Follow>> {
        let want = |p: &str| tarball::one_down(p, "Cargo.toml");
        Some(tarball::Follower::boxed(head, want, |_| false, outcome))
    }
}

fn outcome(walked: tarball::Walked) -> Outcome {
    match read(walked) {
        Ok(row) => Outcome::Package(vec![row]),
        Err(e) => Outcome::Damaged(e),
    }
}

fn read(walked: tarball::Walked) -> Result<Vec<Value>, String> {
    let (_, bytes) = walked
        .found?
        .ok_or("a crate without NAME-VERSION/Cargo.toml")?;
    let manifest: toml::Table = text(bytes, "Cargo.toml")?
        .parse()
        .map_err(|e| format!("Cargo.toml: {e}"))?;
    let package = manifest
        .get("package")
        .ok_or("Cargo.toml has no [package]")?;
    let s = |k: &str| Value::opt_str(package.get(k).and_then(Toml::as_str));
    // A dependency is `name = "req"` or a table with its `version` (none for
    // a path or git dependency: "").
    let deps = match manifest.get("dependencies").and_then(Toml::as_table) {
        Some(t) => Value::Map(
            t.iter()
                .map(|(name, d)| {
                    let req = d
                        .as_str()
                        .or_else(|| d.get("version").and_then(Toml::as_str));
                    (name.clone(), req.unwrap_or("").to_string())
                })
                .collect(),
        ),
        None => Value::Map(Vec::new()),
    };
    Ok(vec![
        s("name"),
        s("version"),
        s("edition"),
        s("license"),
        s("rust-version"),
        s("description"),
        deps,
    ])
}
