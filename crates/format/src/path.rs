//! Archive paths: the one validator used by writers and readers alike.
//!
//! A path in an archive is UTF-8, `/`-separated, relative, at most 4096 bytes, with
//! no empty, `.` or `..` component and no NUL or `\`. Writers refuse anything else;
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
            &long,
        ] {
            assert!(validate(p).is_err(), "{p:?} accepted");
        }
    }
}
