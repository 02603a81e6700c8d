//! Archive paths: the one validator used by writers and readers alike.
//!
//! A path in an archive is UTF-8, `/`-separated, relative, at most 4096 bytes, with
//! no empty, `.` or `..` component and no NUL, `\` or other control character
//! (C0, DEL, C1). Writers refuse anything else;
//! readers run the same check before touching the file system, so an archive cannot
//! make extraction write outside its target directory.
//!
//! Names are stored as given, not normalized. Writers refuse what no file
//! system could hold at once: an entry below a file or link
//! ([`check_nesting`]), and two names that are one name in Unicode
//! normalization form C ([`check_twins`]), which a file system that
//! normalizes names (macOS) would extract onto one file.

use std::borrow::Cow;
use std::collections::hash_map::{Entry, HashMap};
use std::collections::HashSet;

use unicode_normalization::{is_nfc_quick, IsNormalized, UnicodeNormalization};

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

/// `path` in Unicode normalization form C: borrowed when it is in it already
/// (every ASCII path is).
pub fn nfc(path: &str) -> Cow<'_, str> {
    if is_nfc_quick(path.chars()) == IsNormalized::Yes {
        return Cow::Borrowed(path);
    }
    let normal: String = path.nfc().collect();
    match normal == path {
        true => Cow::Borrowed(path),
        false => Cow::Owned(normal),
    }
}

/// Refuses two names that are one in NFC (`café` precomposed and `cafe` with
/// a combining accent). `paths` must hold every path of the result that is
/// not in NFC (others may come too, and a path may come twice);
/// `contains(p)` answers for every path of the result. A twin needs a name
/// not in NFC, so the caller passes only those it keeps track of.
pub fn check_twins<'a>(
    paths: impl IntoIterator<Item = &'a str>,
    contains: impl Fn(&str) -> bool,
) -> Result<()> {
    let mut seen: HashMap<String, &str> = HashMap::new();
    for path in paths {
        let Cow::Owned(key) = nfc(path) else {
            continue;
        };
        if contains(&key) {
            return Err(Error::UnicodeTwin {
                path: path.to_string(),
                other: key,
            });
        }
        match seen.entry(key) {
            Entry::Occupied(o) if *o.get() != path => {
                return Err(Error::UnicodeTwin {
                    path: path.to_string(),
                    other: o.get().to_string(),
                })
            }
            Entry::Occupied(_) => {}
            Entry::Vacant(v) => {
                v.insert(path);
            }
        }
    }
    Ok(())
}

/// Which path of a whole set lies below `p/`, for [`check_nesting`] over
/// every path of an archive. A set of every directory some path lies in
/// answers "none" with one lookup, as it does for all but a conflicting
/// path; only a conflict pays for a search, to name the path below.
pub(crate) struct Below<'a> {
    paths: Vec<&'a str>,
    parents: HashSet<&'a str, ahash::RandomState>,
}

impl<'a> Below<'a> {
    pub(crate) fn new(paths: Vec<&'a str>) -> Self {
        let mut parents = HashSet::default();
        for path in &paths {
            let mut at = *path;
            // An ancestor already known has had its own ancestors added.
            while let Some((parent, _)) = at.rsplit_once('/') {
                if !parents.insert(parent) {
                    break;
                }
                at = parent;
            }
        }
        Below { paths, parents }
    }

    /// The first path, in byte order, below `p/`.
    pub(crate) fn first(&self, p: &str) -> Option<String> {
        if !self.parents.contains(p) {
            return None;
        }
        self.paths
            .iter()
            .filter(|q| q.len() > p.len() && q.as_bytes()[p.len()] == b'/' && q.starts_with(p))
            .min()
            .map(|q| q.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::{check_twins, nfc, validate, Below};

    #[test]
    fn below_names_the_first_path_under_a_name_and_nothing_beside_it() {
        let below = Below::new(vec![
            "a.txt", "a/z/y", "a-b", "a/c", "a/b/x", "b/c/d", "ab/c",
        ]);
        assert_eq!(below.first("a").as_deref(), Some("a/b/x"));
        assert_eq!(below.first("a/b").as_deref(), Some("a/b/x"));
        assert_eq!(below.first("b").as_deref(), Some("b/c/d"));
        // Names that only begin with another, or lie beside it.
        for p in ["a.txt", "a-b", "a/c", "a/b/x", "b/c/d/e", "c", ""] {
            assert_eq!(below.first(p), None, "{p}");
        }
    }

    #[test]
    fn refuses_names_that_are_one_in_nfc() {
        let composed = "docs/caf\u{e9}.txt";
        let decomposed = "docs/cafe\u{301}.txt";
        assert_eq!(nfc(decomposed), composed);
        assert!(matches!(nfc(composed), std::borrow::Cow::Borrowed(_)));
        let paths = [composed, decomposed];
        let has = |p: &str| paths.contains(&p);
        let err = check_twins(paths, has).unwrap_err();
        assert!(err.to_string().contains("normalization"), "{err}");
        // Two spellings not in NFC of one name, with no NFC one beside them.
        let other = "docs/cafe\u{301}\u{301}.txt";
        assert!(check_twins([other, other], |_| false).is_ok());
        let twins = ["A\u{30a}", "\u{212b}"]; // Å as A + ring, and the angstrom sign
        assert_eq!(nfc(twins[0]), nfc(twins[1]));
        assert!(check_twins(twins, |_| false).is_err());
        // A path that comes again (a replace) is not its own twin.
        assert!(check_twins([decomposed, decomposed], |p| p == decomposed).is_ok());
    }

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
