//! Maven jars: coordinates from each `META-INF/maven/G/A/pom.properties`,
//! the manifest's `Implementation-*` and `Bundle-*`, and the class count.

use znippy_format::{Column, ColumnType, Outcome, Plugin, Value, Window};

use crate::bounded::text;
use crate::headers;
use crate::zipped::Zip;

/// Most `pom.properties` read from one jar (a shaded jar has one per
/// artifact folded in).
const MAX_POMS: usize = 1_024;

pub(crate) struct Maven;

const MANIFEST_FIELDS: [(&str, &str); 5] = [
    ("implementation_title", "Implementation-Title"),
    ("implementation_version", "Implementation-Version"),
    ("implementation_vendor", "Implementation-Vendor"),
    ("bundle_symbolic_name", "Bundle-SymbolicName"),
    ("bundle_version", "Bundle-Version"),
];

impl Plugin for Maven {
    fn name(&self) -> &'static str {
        "maven"
    }

    fn pkg_type(&self) -> i8 {
        1
    }

    fn columns(&self) -> Vec<Column> {
        let mut c: Vec<Column> = ["group_id", "artifact_id", "version"]
            .iter()
            .chain(MANIFEST_FIELDS.iter().map(|(c, _)| c))
            .map(|n| Column::new(n, ColumnType::Str))
            .collect();
        c.push(Column::new("class_count", ColumnType::I64));
        c
    }

    fn matches_path(&self, path: &str) -> bool {
        crate::has_extension(path, &[".jar", ".war", ".ear"])
    }

    fn zip_member(&self, name: &str) -> bool {
        name == "META-INF/MANIFEST.MF" || is_pom(name)
    }

    fn extract(&self, file: &Window) -> Outcome {
        match read(file) {
            Ok(rows) => Outcome::Package(rows),
            Err(e) => Outcome::Damaged(e),
        }
    }
}

fn read(file: &Window) -> Result<Vec<Vec<Value>>, String> {
    let mut zip = Zip::open(file)?;
    let names = zip.names();
    let classes = names.iter().filter(|n| n.ends_with(".class")).count() as i64;
    let manifest = match names.iter().any(|n| n == "META-INF/MANIFEST.MF") {
        true => headers::parse(
            &text(zip.member("META-INF/MANIFEST.MF")?, "MANIFEST.MF")?,
            true,
        ),
        false => Vec::new(),
    };
    let from_manifest: Vec<Value> = MANIFEST_FIELDS
        .iter()
        .map(|(_, field)| {
            let v = headers::first(&manifest, field);
            // `Bundle-SymbolicName: a.b;singleton:=true` names `a.b`.
            Value::opt_str(v.map(|v| v.split(';').next().unwrap_or("").trim().to_string()))
        })
        .collect();
    let poms: Vec<&String> = names.iter().filter(|n| is_pom(n)).take(MAX_POMS).collect();
    let mut rows = Vec::new();
    for pom in &poms {
        let props = properties(&text(zip.member(pom)?, pom)?);
        let get =
            |k: &str| Value::opt_str(props.iter().find(|(p, _)| p == k).map(|(_, v)| v.clone()));
        let mut row = vec![get("groupId"), get("artifactId"), get("version")];
        row.extend(from_manifest.iter().cloned());
        row.push(Value::I64(classes));
        rows.push(row);
    }
    if rows.is_empty() {
        // No pom.properties (a jar not built by Maven): what the manifest and
        // the entries say.
        let mut row = vec![Value::Null, Value::Null, Value::Null];
        row.extend(from_manifest);
        row.push(Value::I64(classes));
        rows.push(row);
    }
    Ok(rows)
}

/// `META-INF/maven/GROUP/ARTIFACT/pom.properties`.
fn is_pom(name: &str) -> bool {
    let parts: Vec<&str> = name.split('/').collect();
    matches!(parts[..], ["META-INF", "maven", g, a, "pom.properties"] if !g.is_empty() && !a.is_empty())
}

/// A Java properties file's `key=value` (or `key: value`) lines; comments and
/// blank lines skipped. Escapes are left as written: coordinates have none.
fn properties(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with('!'))
        .filter_map(|l| {
            let at = l.find(['=', ':'])?;
            Some((l[..at].trim().to_string(), l[at + 1..].trim().to_string()))
        })
        .collect()
}
