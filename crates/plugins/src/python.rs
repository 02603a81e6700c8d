//! Python wheels (`*.dist-info/METADATA` and `WHEEL`) and sdists (`PKG-INFO`).

use znippy_format::{Column, ColumnType, Outcome, Plugin, Value, Window};

use crate::bounded::text;
use crate::headers;
use crate::tarball;
use crate::zipped::Zip;

pub(crate) struct Python;

impl Plugin for Python {
    fn name(&self) -> &'static str {
        "python"
    }

    fn pkg_type(&self) -> i8 {
        2
    }

    fn columns(&self) -> Vec<Column> {
        let s = |n| Column::new(n, ColumnType::Str);
        let l = |n| Column::new(n, ColumnType::StrList);
        vec![
            s("name"),
            s("version"),
            s("kind"),
            s("summary"),
            s("license"),
            s("requires_python"),
            l("requires_dist"),
            l("tags"),
        ]
    }

    fn matches_path(&self, path: &str) -> bool {
        crate::has_extension(path, &[".whl", ".tar.gz"])
    }

    fn zip_member(&self, name: &str) -> bool {
        dist_info(name, "METADATA") || dist_info(name, "WHEEL")
    }

    fn extract(&self, file: &Window) -> Outcome {
        let wheel = file.head().starts_with(b"PK");
        let read = match wheel {
            true => read_wheel(file).map(Some),
            false => read_sdist(file),
        };
        match read {
            Ok(Some(row)) => Outcome::Package(vec![row]),
            Ok(None) => Outcome::NotAPackage,
            Err(e) => Outcome::Damaged(e),
        }
    }
}

fn read_wheel(file: &Window) -> Result<Vec<Value>, String> {
    let mut zip = Zip::open(file)?;
    // The wheel's own `NAME-VERSION.dist-info/`, at the top.
    let names = zip.names();
    let find = |leaf: &str| names.iter().find(|n| dist_info(n, leaf)).cloned();
    let (metadata, wheel) = (find("METADATA"), find("WHEEL"));
    let metadata = metadata.ok_or("a wheel without *.dist-info/METADATA")?;
    let fields = headers::parse(&text(zip.member(&metadata)?, "METADATA")?, false);
    let tags = match wheel {
        Some(w) => headers::all(
            &headers::parse(&text(zip.member(&w)?, "WHEEL")?, false),
            "Tag",
        ),
        None => Vec::new(),
    };
    Ok(row(&fields, "wheel", Value::List(tags)))
}

/// Whether `name` is the wheel's own `NAME-VERSION.dist-info/LEAF`.
fn dist_info(name: &str, leaf: &str) -> bool {
    name.split_once('/')
        .is_some_and(|(d, rest)| d.ends_with(".dist-info") && rest == leaf)
}

fn read_sdist(file: &Window) -> Result<Option<Vec<Value>>, String> {
    // `.tar.gz` does not say sdist: one is recognized by its PKG-INFO. A
    // tarball in which none is found is no package, unless it showed the
    // build files of one (`NAME-VERSION/pyproject.toml` or `setup.py`)
    // before it could not be read further: an sdist whose PKG-INFO lies
    // past the window or past a damaged member is one to report.
    let mut built = false;
    let found = tarball::find(file.head(), file.reader(), |p| {
        built |= tarball::one_down(p, "pyproject.toml") || tarball::one_down(p, "setup.py");
        tarball::one_down(p, "PKG-INFO")
    });
    let bytes = match found {
        Ok(Some((_, bytes))) => bytes,
        Err(e) if built => return Err(crate::beyond_head(file, e)),
        Ok(None) | Err(_) => return Ok(None),
    };
    let fields = headers::parse(&text(bytes, "PKG-INFO")?, false);
    Ok(Some(row(&fields, "sdist", Value::Null)))
}

fn row(fields: &[(String, String)], kind: &str, tags: Value) -> Vec<Value> {
    let get = |k| Value::opt_str(headers::first(fields, k));
    let license =
        headers::first(fields, "License-Expression").or_else(|| headers::first(fields, "License"));
    vec![
        get("Name"),
        get("Version"),
        Value::Str(kind.into()),
        get("Summary"),
        Value::opt_str(license),
        get("Requires-Python"),
        Value::List(headers::all(fields, "Requires-Dist")),
        tags,
    ]
}
