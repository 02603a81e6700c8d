//! Debian packages: `control` from the `control.tar.*` member of the ar archive.

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
            Err(e) => Outcome::Damaged(beyond_head(file, e)),
        }
    }
}

fn read(file: &Window) -> Result<Vec<Value>, String> {
    let control_tar = control_tar(file.head())?;
    let (_, control) = tarball::find(control_tar, |p| p == "control")?
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

/// The `control.tar.*` member of the ar archive in `ar`: read by hand, as
/// the format is 60-byte headers of fixed fields, and a crate that reads
/// GNU and BSD long names sizes a buffer by a header's number.
fn control_tar(ar: &[u8]) -> Result<&[u8], String> {
    let mut rest = ar
        .strip_prefix(b"!<arch>\n")
        .ok_or("not an ar archive (no !<arch> magic)")?;
    while rest.len() >= 60 {
        let (header, after) = rest.split_at(60);
        if &header[58..60] != b"`\n" {
            return Err("not a readable ar archive: a header lacks its end".into());
        }
        let name = std::str::from_utf8(&header[..16]).unwrap_or("").trim_end();
        let size: usize = std::str::from_utf8(&header[48..58])
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .ok_or("not a readable ar archive: a member's size is not a number")?;
        if name.trim_end_matches('/').starts_with("control.tar") {
            if size as u64 > MAX_CONTROL_TAR {
                return Err(format!(
                    "{name} is larger than {} MiB",
                    MAX_CONTROL_TAR >> 20
                ));
            }
            return after
                .get(..size)
                .ok_or_else(|| format!("{name} lies past what was read of the package"));
        }
        // Members are padded to an even length.
        rest = after.get(size + size % 2..).unwrap_or(&[]);
    }
    Err("a .deb without control.tar".into())
}

/// `e`, saying that only the window's head was read when the package is
/// larger: its control archive is looked for there.
fn beyond_head(file: &Window, e: String) -> String {
    match file.len() <= 2 * znippy_format::WINDOW_HALF as u64 {
        true => e,
        false => format!(
            "{e} (only the first {} MiB of a {}-byte package are read)",
            znippy_format::WINDOW_HALF >> 20,
            file.len()
        ),
    }
}
