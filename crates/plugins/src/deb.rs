//! Debian packages: `control` from the `control.tar.*` member of the ar archive.

use std::io::Read;

use znippy_format::{Column, ColumnType, Outcome, Plugin, Value, Window};

use crate::bounded::text;
use crate::{headers, tarball};

/// Most bytes of `control.tar.*` read: it holds a few small scripts.
const MAX_CONTROL_TAR: u64 = 4 << 20;

pub(crate) struct Deb;

impl Plugin for Deb {
    fn name(&self) -> &'static str {
        "deb"
    }

    fn pkg_type(&self) -> i8 {
        5
    }

    fn columns(&self) -> Vec<Column> {
        let s = |n| Column::new(n, ColumnType::Str);
        vec![
            s("package"),
            s("version"),
            s("architecture"),
            s("maintainer"),
            s("section"),
            Column::new("installed_size", ColumnType::I64),
            Column::new("depends", ColumnType::StrList),
            s("description"),
        ]
    }

    fn matches_path(&self, path: &str) -> bool {
        crate::has_extension(path, &[".deb"])
    }

    fn extract(&self, file: &Window) -> Outcome {
        match read(file) {
            Ok(row) => Outcome::Package(vec![row]),
            Err(e) => Outcome::Damaged(crate::beyond_head(file, e)),
        }
    }
}

fn read(file: &Window) -> Result<Vec<Value>, String> {
    let mut ar = ar::Archive::new(file.head());
    let control_tar = loop {
        let entry = ar
            .next_entry()
            .ok_or("a .deb without control.tar")?
            .map_err(|e| format!("not a readable ar archive: {e}"))?;
        let name = String::from_utf8_lossy(entry.header().identifier()).into_owned();
        if name.starts_with("control.tar") {
            let mut bytes = Vec::new();
            entry
                .take(MAX_CONTROL_TAR + 1)
                .read_to_end(&mut bytes)
                .map_err(|e| format!("reading {name}: {e}"))?;
            if bytes.len() as u64 > MAX_CONTROL_TAR {
                return Err(format!(
                    "{name} is larger than {} MiB",
                    MAX_CONTROL_TAR >> 20
                ));
            }
            break bytes;
        }
    };
    let (_, control) = tarball::find(&control_tar, |p| p == "control")?
        .ok_or("control.tar holds no control file")?;
    let fields = headers::parse(&text(control, "control")?, false);
    let get = |k| Value::opt_str(headers::first(&fields, k));
    let depends = headers::first(&fields, "Depends").map(|d| {
        d.split(',')
            .map(|x| x.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|x| !x.is_empty())
            .collect()
    });
    let size = headers::first(&fields, "Installed-Size").and_then(|s| s.parse::<i64>().ok());
    // The synopsis: the description's first line.
    let description =
        headers::first(&fields, "Description").map(|d| d.lines().next().unwrap_or("").to_string());
    Ok(vec![
        get("Package"),
        get("Version"),
        get("Architecture"),
        get("Maintainer"),
        get("Section"),
        size.map_or(Value::Null, Value::I64),
        depends.map_or(Value::Null, Value::List),
        Value::opt_str(description),
    ])
}
