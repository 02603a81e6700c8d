//! Python wheels (`*.dist-info/METADATA` and `WHEEL`) and sdists (`PKG-INFO`).

use znippy_format::{Column, ColumnType, Follow, Outcome, Plugin, Value, Window};

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

    /// An sdist (anything but a zip) is followed to its `PKG-INFO`.
    fn follow(&self, head: &[u8]) -> Option<Box<dyn Follow>> {
        let sdist = !head.starts_with(b"PK");
        sdist.then(|| tarball::Follower::boxed(head, pkg_info, build_file, read_sdist))
    }

    /// A wheel.
    fn extract(&self, file: &Window) -> Outcome {
        match read_wheel(file) {
            Ok(row) => Outcome::Package(vec![row]),
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

fn pkg_info(path: &str) -> bool {
    tarball::one_down(path, "PKG-INFO")
}

fn build_file(path: &str) -> bool {
    tarball::one_down(path, "pyproject.toml") || tarball::one_down(path, "setup.py")
}

/// `.tar.gz` does not say sdist: one is recognized by its PKG-INFO. A
/// tarball in which none is found is no package, unless it showed the build
/// files of one (`NAME-VERSION/pyproject.toml` or `setup.py`) before it could
/// not be read further: an sdist whose PKG-INFO lies past a damaged member
/// is one to report.
fn read_sdist(walked: tarball::Walked) -> Outcome {
    let bytes = match walked.found {
        Ok(Some((_, bytes))) => bytes,
        Err(e) if walked.marked => return Outcome::Damaged(e),
        Ok(None) | Err(_) => return Outcome::NotAPackage,
    };
    match text(bytes, "PKG-INFO") {
        Ok(t) => {
            let fields = headers::parse(&t, false);
            Outcome::Package(vec![row(&fields, "sdist", Value::Null)])
        }
        Err(e) => Outcome::Damaged(e),
    }
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
