//! npm tarballs: `package/package.json`.

use serde_json::Value as Json;
use znippy_format::{Column, ColumnType, Follow, Outcome, Plugin, Value};

use crate::tarball;

pub(crate) struct Npm;

impl Plugin for Npm {
    fn name(&self) -> &'static str {
        "npm"
    }

    fn pkg_type(&self) -> i8 {
        3
    }

    fn columns(&self) -> Vec<Column> {
        let s = |n| Column::new(n, ColumnType::Str);
        let m = |n| Column::new(n, ColumnType::StrMap);
        vec![
            s("name"),
            s("version"),
            s("description"),
            s("license"),
            m("dependencies"),
            m("peer_dependencies"),
            m("dev_dependencies"),
        ]
    }

    fn matches_path(&self, path: &str) -> bool {
        crate::has_extension(path, &[".tgz"])
    }

    fn follow(&self, head: &[u8]) -> Option<Box<dyn Follow>> {
        let want = |p: &str| tarball::one_down(p, "package.json");
        Some(tarball::Follower::boxed(head, want, |_| false, read))
    }
}

/// `package/package.json`, read.
fn read(walked: tarball::Walked) -> Outcome {
    let bytes = match walked.found {
        Ok(Some((_, bytes))) => bytes,
        Ok(None) => return Outcome::NotAPackage,
        Err(e) => return Outcome::Damaged(e),
    };
    let json: Json = match serde_json::from_slice(&bytes) {
        Ok(j) => j,
        Err(e) => return Outcome::Damaged(format!("package.json: {e}")),
    };
    let s = |k: &str| Value::opt_str(json.get(k).and_then(Json::as_str));
    // `"license": "MIT"`, or the old `{"type": "MIT"}`.
    let license = json
        .get("license")
        .and_then(|l| l.as_str().or_else(|| l.get("type").and_then(Json::as_str)));
    let deps = |k: &str| match json.get(k).and_then(Json::as_object) {
        Some(o) => Value::Map(
            o.iter()
                .map(|(name, v)| (name.clone(), v.as_str().unwrap_or("").to_string()))
                .collect(),
        ),
        None => Value::Null,
    };
    Outcome::Package(vec![vec![
        s("name"),
        s("version"),
        s("description"),
        Value::opt_str(license),
        deps("dependencies"),
        deps("peerDependencies"),
        deps("devDependencies"),
    ]])
}
