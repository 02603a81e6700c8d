//! Archive paths: the one validator used by writers and readers alike.
//!
//! A path in an archive is UTF-8, `/`-separated, relative, at most 4096 bytes, with
//! no empty, `.` or `..` component and no NUL, `\` or other control character
//! (C0, DEL, C1). Writers refuse anything else;
//! readers run the same check before touching the file system, so an archive cannot
//! make extraction write outside its target directory.

use crate::error::{Error, Result};

/// Longest path accepted, in bytes.
pub const MAX_PATH_LEN: usize = 4096;

/// Checks that `path` is a valid archive path, naming the rule it breaks if not.
pub fn validate(path: &str) -> Result<()> {
    let reason = if path.is_empty() {
        Some("empty path")
    } else if path.len() > MAX_PATH_LEN {
        Some("longer than 4096 bytes")
    } else if path.starts_with('/') {
        Some("absolute paths are not allowed")
    } else if path.contains('\0') {
        Some("contains a NUL byte")
    } else if path.contains('\\') {
        Some("contains a backslash")
    } else if path.chars().any(char::is_control) {
        // A newline breaks every line-based listing; ESC and the C1 controls
        // drive terminals.
        Some("contains a control character")
    } else {
        path.split('/').find_map(|c| match c {
            "" => Some("empty path component"),
            "." => Some("'.' component"),
            ".." => Some("'..' component"),
            _ => None,
        })
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(Error::InvalidPath {
            path: path.chars().take(200).collect(),
            reason,
        }),
    }
}

/// Refuses `x` beside `x/y`: no entry may lie below one that is not a
/// directory, as no file system can hold both. `added` are the paths being
/// written, with whether each is a directory entry; `is_dir` answers for every
/// path of the result, `first_below(p)` gives a path of the result below `p/`.
pub fn check_nesting<'a>(
    added: impl IntoIterator<Item = (&'a str, bool)>,
    is_dir: impl Fn(&str) -> Option<bool>,
    first_below: impl Fn(&str) -> Option<String>,
) -> Result<()> {
    for (path, dir) in added {
        let mut at = path;
        while let Some((parent, _)) = at.rsplit_once('/') {
            if is_dir(parent) == Some(false) {
                return Err(Error::PathConflict {
                    path: path.to_string(),
                    other: parent.to_string(),
                });
            }
            at = parent;
        }
        if !dir {
            if let Some(below) = first_below(path) {
                return Err(Error::PathConflict {
                    path: path.to_string(),
                    other: below,
                });
            }
        }
    }
    Ok(())
}

/// The first of `sorted` paths that lies below `p/`.
pub(crate) fn first_below(sorted: &[&str], p: &str) -> Option<String> {
    let dir = format!("{p}/");
    let i = sorted.partition_point(|q| *q < dir.as_str());
    sorted
        .get(i)
        .filter(|q| q.starts_with(&dir))
        .map(|q| q.to_string())
}

#[cfg(test)]
mod tests {
    use super::validate;

    #[test]
    fn accepts_normal_paths() {
        for p in ["a", "a/b.txt", "ü/日本/x y", ".hidden/.x", "a..b/c.."] {
            validate(p).unwrap();
        }
    }

    #[test]
    fn refuses_escapes_and_junk() {
        let long = "a".repeat(4097);
        for p in [
            "",
            "/etc/x",
            "../x",
            "a/../../x",
            "a/./b",
            "a//b",
            "a/",
            "a\0b",
            "a\\b",
            "a\nb",
            "a\u{1b}[31m",
            "a\u{7f}",
            "a\u{9b}b",
            &long,
        ] {
            assert!(validate(p).is_err(), "{p:?} accepted");
        }
    }
}
