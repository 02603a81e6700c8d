//! Headers of the `Name: value` kind: Python's `PKG-INFO` and `METADATA`, a
//! wheel's `WHEEL`, Debian's `control`, a jar's `MANIFEST.MF`.

/// The fields of the first paragraph (up to the first empty line), in order,
/// names as written. A line that starts with a space or a tab continues the
/// field before it, even one of nothing else (a blank line inside a
/// license's text, as Python's email parser reads it): joined with a
/// newline (RFC 822), or, for a jar manifest (`jar = true`), with the one
/// leading space removed, as the manifest format wraps at 72 bytes.
pub(crate) fn parse(text: &str, jar: bool) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, v)) = out.last_mut() {
                match jar {
                    true => v.push_str(&line[1..]),
                    false => {
                        v.push('\n');
                        v.push_str(line.trim());
                    }
                }
            }
            continue;
        }
        if let Some((k, v)) = line.split_once(':') {
            out.push((k.trim().to_string(), v.trim().to_string()));
        }
    }
    out
}

/// The first value of field `name` (ASCII case ignored).
pub(crate) fn first(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
}

/// Every value of field `name`, in order.
pub(crate) fn all(fields: &[(String, String)], name: &str) -> Vec<String> {
    fields
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuations_join_as_each_format_wraps() {
        let f = parse("Name: a\nDescription: one\n two\n\nBody: x\n", false);
        assert_eq!(first(&f, "description").as_deref(), Some("one\ntwo"));
        assert_eq!(first(&f, "Body"), None);
        // numpy's PKG-INFO: its license's blank lines are indented.
        let f = parse(
            "License: a\n         \n         b\nRequires-Python: >=3\n",
            false,
        );
        assert_eq!(first(&f, "License").as_deref(), Some("a\n\nb"));
        assert_eq!(first(&f, "Requires-Python").as_deref(), Some(">=3"));
        let m = parse("Implementation-Title: abcdefg\n hij\r\n", true);
        assert_eq!(
            first(&m, "Implementation-Title").as_deref(),
            Some("abcdefghij")
        );
    }
}
