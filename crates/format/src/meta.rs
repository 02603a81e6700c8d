//! The metadata table: typed key/value facts about entries or the whole archive.
//!
//! *No metadata* and *empty metadata* are different answers. An archive written
//! without a meta table has no section, and [`Metadata::Absent`] says so; one
//! written with an empty table has an empty section. Searches keep the difference
//! in [`MetaSearch`], so "never searched" can never pass for "found nothing".

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Arc;

use arrow_array::builder::{Int8Builder, StringBuilder};
use arrow_array::cast::AsArray;
use arrow_array::types::Int8Type;
use arrow_array::{Array, ArrayRef, RecordBatch};

use crate::error::{Error, Result};
use crate::meta_arrow::{MetaValueBuilder, MetaValueColumns};
use crate::path;
use crate::schema::meta_schema;

/// A typed metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// UTF-8 text (`value_type` 0).
    Str(String),
    /// Signed 64-bit integer (`value_type` 1).
    I64(i64),
    /// 64-bit float (`value_type` 2).
    F64(f64),
    /// Boolean (`value_type` 3).
    Bool(bool),
    /// Opaque bytes (`value_type` 4).
    Bytes(Vec<u8>),
}

impl MetaValue {
    /// Types a textual value by its shape: `true`/`false` is a bool, an integer an
    /// i64, a decimal an f64, anything else a string (so `1.0.2` stays a string).
    pub fn infer(text: &str) -> MetaValue {
        match text {
            "true" => return MetaValue::Bool(true),
            "false" => return MetaValue::Bool(false),
            _ => {}
        }
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
        if digits(unsigned) {
            if let Ok(v) = text.parse() {
                return MetaValue::I64(v);
            }
        }
        if let Some((int, frac)) = unsigned.split_once('.') {
            if digits(int) && digits(frac) {
                if let Ok(v) = text.parse() {
                    return MetaValue::F64(v);
                }
            }
        }
        MetaValue::Str(text.to_string())
    }

    /// The `value_type` code of this value.
    pub fn type_code(&self) -> i8 {
        match self {
            MetaValue::Str(_) => 0,
            MetaValue::I64(_) => 1,
            MetaValue::F64(_) => 2,
            MetaValue::Bool(_) => 3,
            MetaValue::Bytes(_) => 4,
        }
    }

    /// The name of this value's type, as the CLI prints it.
    pub fn type_name(&self) -> &'static str {
        match self {
            MetaValue::Str(_) => "str",
            MetaValue::I64(_) => "i64",
            MetaValue::F64(_) => "f64",
            MetaValue::Bool(_) => "bool",
            MetaValue::Bytes(_) => "bytes",
        }
    }
}

impl std::fmt::Display for MetaValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MetaValue::Str(s) => f.write_str(s),
            MetaValue::I64(v) => write!(f, "{v}"),
            MetaValue::F64(v) => write!(f, "{v:?}"),
            MetaValue::Bool(v) => write!(f, "{v}"),
            MetaValue::Bytes(b) => write!(f, "<{} bytes>", b.len()),
        }
    }
}

/// One fact: `key = value` about `path`, or about the archive when `path` is `None`.
#[derive(Debug, Clone, PartialEq)]
pub struct MetaRow {
    /// The entry the fact is about; `None` for the archive itself.
    pub path: Option<String>,
    /// The key.
    pub key: String,
    /// The value.
    pub value: MetaValue,
}

impl MetaRow {
    /// About how many bytes the row holds: its path, key and value.
    pub fn size(&self) -> usize {
        let value = match &self.value {
            MetaValue::Str(s) => s.len(),
            MetaValue::Bytes(b) => b.len(),
            MetaValue::I64(_) | MetaValue::F64(_) | MetaValue::Bool(_) => 8,
        };
        self.path.as_ref().map_or(0, String::len) + self.key.len() + value
    }

    /// Where a page that ends at this row resumes.
    pub fn cursor(&self) -> MetaCursor {
        MetaCursor {
            key: self.key.clone(),
            path: self.path.clone(),
        }
    }
}

/// Which facts a search asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetaQuery {
    /// The facts whose key is exactly this.
    Key(String),
    /// The facts whose key starts with this.
    Prefix(String),
    /// Every fact about this file, in key order. The section is ordered by
    /// key first, so this reads every row (a page at a time).
    Path(String),
}

impl MetaQuery {
    fn matches(&self, key: &str, path: Option<&str>) -> bool {
        match self {
            MetaQuery::Key(k) => key == k,
            MetaQuery::Prefix(p) => key.starts_with(p.as_str()),
            MetaQuery::Path(p) => path == Some(p.as_str()),
        }
    }

    /// The smallest key a match can have.
    fn first_key(&self) -> &str {
        match self {
            MetaQuery::Key(k) | MetaQuery::Prefix(k) => k,
            MetaQuery::Path(_) => "",
        }
    }

    /// Whether matches lie anywhere in section order, rather than in one run
    /// of keys from [`MetaQuery::first_key`] on.
    fn scattered(&self) -> bool {
        matches!(self, MetaQuery::Path(_))
    }
}

/// A place in section order, `(key, path)`: a page resumes after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaCursor {
    /// The key of the last row seen.
    pub key: String,
    /// Its path; `None` for a fact about the archive (which sorts first).
    pub path: Option<String>,
}

/// How much one page of a search holds: at most `rows` rows, and no row
/// begins once `bytes` of rows are in it. A page with a match has at least
/// one row, whatever the limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageLimit {
    /// Most rows in the page.
    pub rows: usize,
    /// Bytes of rows (see [`MetaRow::size`]) after which the page ends.
    pub bytes: usize,
}

impl PageLimit {
    /// No limit: every match in one page.
    pub const ALL: PageLimit = PageLimit {
        rows: usize::MAX,
        bytes: usize::MAX,
    };
}

/// A metadata table, kept in section order: by `(key, path)`, archive-level first.
/// One value per `(key, path)`; setting it again replaces it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetaTable {
    rows: BTreeMap<(String, Option<String>), MetaValue>,
}

impl MetaTable {
    /// An empty table (which still writes a section).
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` of `path` (or of the archive), replacing an earlier value.
    pub fn set(&mut self, path: Option<&str>, key: &str, value: MetaValue) -> Result<()> {
        check_fact(path, key)?;
        self.rows
            .insert((key.to_string(), path.map(str::to_string)), value);
        Ok(())
    }

    /// Sets a fact given as text: `path=key=value` about a file, or `key=value`
    /// about the archive when `about_file` is false. Path and key end at the
    /// first `=`s, so a value may contain `=`; `value` types the value text.
    pub fn set_text(
        &mut self,
        text: &str,
        about_file: bool,
        value: impl FnOnce(&str) -> Result<MetaValue>,
    ) -> Result<()> {
        let (path, rest) = if about_file {
            match text.split_once('=') {
                Some((p, rest)) => (Some(p), rest),
                None => return Err(Error::Meta(format!("{text:?}: expected 'path=key=value'"))),
            }
        } else {
            (None, text)
        };
        let Some((key, v)) = rest.split_once('=') else {
            let shape = if about_file {
                "path=key=value"
            } else {
                "key=value"
            };
            return Err(Error::Meta(format!("{text:?}: expected '{shape}'")));
        };
        self.set(path, key, value(v)?)
    }

    /// Adds every row of `other`, its values winning over ours.
    pub fn merge(&mut self, other: MetaTable) {
        self.rows.extend(other.rows);
    }

    /// Removes `key` of `path` (or of the archive), if set.
    pub fn remove(&mut self, path: Option<&str>, key: &str) {
        self.rows
            .remove(&(key.to_string(), path.map(str::to_string)));
    }

    /// Removes every fact about `path`.
    pub fn remove_path(&mut self, path: &str) {
        self.rows.retain(|(_, p), _| p.as_deref() != Some(path));
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// All rows, in section order.
    pub fn rows(&self) -> impl Iterator<Item = MetaRow> + '_ {
        self.rows.iter().map(to_row)
    }

    /// Rows whose key is exactly `key`.
    pub fn by_key(&self, key: &str) -> Vec<MetaRow> {
        self.page(&MetaQuery::Key(key.into()), None, &PageLimit::ALL)
            .0
    }

    /// Rows whose key starts with `prefix`.
    pub fn by_prefix(&self, prefix: &str) -> Vec<MetaRow> {
        self.page(&MetaQuery::Prefix(prefix.into()), None, &PageLimit::ALL)
            .0
    }

    /// The rows `query` matches that come after `after` in section order, up
    /// to `limit`, and whether more follow. Only the rows returned are copied.
    pub fn page(
        &self,
        query: &MetaQuery,
        after: Option<&MetaCursor>,
        limit: &PageLimit,
    ) -> (Vec<MetaRow>, bool) {
        let start = query.first_key();
        // A cursor before the first match starts at the first match.
        let from = match after {
            Some(c) if c.key.as_str() >= start => Bound::Excluded((c.key.clone(), c.path.clone())),
            _ => Bound::Included((start.to_string(), None)),
        };
        let hits = self
            .rows
            .range((from, Bound::Unbounded))
            .take_while(|((k, p), _)| query.scattered() || query.matches(k, p.as_deref()))
            .filter(|((k, p), _)| query.matches(k, p.as_deref()));
        let (mut rows, mut bytes) = (Vec::new(), 0usize);
        for row in hits {
            let full = rows.len() >= limit.rows || bytes >= limit.bytes;
            if full && !rows.is_empty() {
                return (rows, true);
            }
            let r = to_row(row);
            bytes += r.size();
            rows.push(r);
        }
        (rows, false)
    }

    pub(crate) fn to_batch(&self) -> Result<RecordBatch> {
        let n = self.rows.len();
        let mut path = StringBuilder::new();
        let mut key = StringBuilder::new();
        let mut ty = Int8Builder::with_capacity(n);
        let mut values = MetaValueBuilder::<i32>::default();
        for ((k, p), v) in &self.rows {
            path.append_option(p.as_deref());
            key.append_value(k);
            ty.append_value(v.type_code());
            values.append(v);
        }
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(path.finish()),
            Arc::new(key.finish()),
            Arc::new(ty.finish()),
        ];
        cols.extend(values.finish());
        RecordBatch::try_new(meta_schema(), cols)
            .map_err(|e| Error::corrupt(format!("meta batch: {e}")))
    }

    /// Adds the rows of a decoded meta batch, checking every rule of the section.
    pub(crate) fn extend_from_batch(&mut self, batch: &RecordBatch) -> Result<()> {
        let bad = |m: &str| Error::corrupt(format!("meta section: {m}"));
        let col = |i: usize| batch.column(i).as_ref();
        let path = col(0)
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("relative_path type"))?;
        let key = col(1)
            .as_string_opt::<i32>()
            .ok_or_else(|| bad("key type"))?;
        let ty = col(2)
            .as_primitive_opt::<Int8Type>()
            .ok_or_else(|| bad("value_type type"))?;
        let values = MetaValueColumns::<i32>::of(batch, "meta section")?;
        for r in 0..batch.num_rows() {
            let value = values.value(i64::from(ty.value(r)), r)?;
            let p = path.is_valid(r).then(|| path.value(r).to_string());
            // What a writer refuses, a reader refuses too: an append would
            // otherwise carry the row into its new tail.
            check_fact(p.as_deref(), key.value(r)).map_err(|e| bad(&format!("row {r}: {e}")))?;
            let k = (key.value(r).to_string(), p);
            if self
                .rows
                .last_key_value()
                .is_some_and(|(last, _)| k <= *last)
            {
                return Err(bad(&format!("row {r} is out of (key, path) order")));
            }
            self.rows.insert(k, value);
        }
        Ok(())
    }
}

/// A fact's path follows the path rules and its key is not empty.
fn check_fact(path: Option<&str>, key: &str) -> Result<()> {
    if let Some(p) = path {
        path::validate(p)?;
    }
    if key.is_empty() {
        return Err(Error::Meta("empty key".into()));
    }
    Ok(())
}

fn to_row(((key, path), value): (&(String, Option<String>), &MetaValue)) -> MetaRow {
    MetaRow {
        path: path.clone(),
        key: key.clone(),
        value: value.clone(),
    }
}

/// What an archive says about metadata: no section at all, or a table.
#[derive(Debug, Clone, PartialEq)]
pub enum Metadata {
    /// The archive has no meta section: it was never given metadata.
    Absent,
    /// The archive has a meta section (possibly empty).
    Present(MetaTable),
}

/// The answer to a metadata search.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaSearch {
    /// There is no meta section to search.
    NoSection,
    /// The section was searched and nothing matched.
    NoMatch,
    /// Matching rows, in section order.
    Hits(Vec<MetaRow>),
}

impl MetaSearch {
    pub(crate) fn from_rows(rows: Vec<MetaRow>) -> Self {
        if rows.is_empty() {
            MetaSearch::NoMatch
        } else {
            MetaSearch::Hits(rows)
        }
    }
}

impl Metadata {
    /// Rows whose key is exactly `key`.
    pub fn by_key(&self, key: &str) -> MetaSearch {
        match self {
            Metadata::Absent => MetaSearch::NoSection,
            Metadata::Present(t) => MetaSearch::from_rows(t.by_key(key)),
        }
    }

    /// Rows whose key starts with `prefix`.
    pub fn by_prefix(&self, prefix: &str) -> MetaSearch {
        match self {
            Metadata::Absent => MetaSearch::NoSection,
            Metadata::Present(t) => MetaSearch::from_rows(t.by_prefix(prefix)),
        }
    }

    /// One page of a search (see [`MetaTable::page`]), and whether more follow.
    pub fn page(
        &self,
        query: &MetaQuery,
        after: Option<&MetaCursor>,
        limit: &PageLimit,
    ) -> (MetaSearch, bool) {
        match self {
            Metadata::Absent => (MetaSearch::NoSection, false),
            Metadata::Present(t) => {
                let (rows, more) = t.page(query, after, limit);
                (MetaSearch::from_rows(rows), more)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn infers_types_by_shape() {
        assert_eq!(MetaValue::infer("true"), MetaValue::Bool(true));
        assert_eq!(MetaValue::infer("false"), MetaValue::Bool(false));
        assert_eq!(MetaValue::infer("42"), MetaValue::I64(42));
        assert_eq!(MetaValue::infer("-7"), MetaValue::I64(-7));
        assert_eq!(MetaValue::infer("1.5"), MetaValue::F64(1.5));
        assert_eq!(MetaValue::infer("1.0.2"), MetaValue::Str("1.0.2".into()));
        assert_eq!(MetaValue::infer("1e5"), MetaValue::Str("1e5".into()));
        assert_eq!(MetaValue::infer("nan"), MetaValue::Str("nan".into()));
        assert_eq!(MetaValue::infer(""), MetaValue::Str("".into()));
        assert_eq!(
            MetaValue::infer("99999999999999999999"),
            MetaValue::Str("99999999999999999999".into())
        );
    }

    #[test]
    fn searches_by_key_and_prefix() {
        let mut t = MetaTable::new();
        t.set(Some("b"), "lic", MetaValue::infer("MIT")).unwrap();
        t.set(None, "lic", MetaValue::infer("Apache")).unwrap();
        t.set(Some("a"), "license", MetaValue::infer("x")).unwrap();
        t.set(Some("a"), "size", MetaValue::infer("3")).unwrap();
        let m = Metadata::Present(t);
        let MetaSearch::Hits(h) = m.by_key("lic") else {
            panic!()
        };
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].path, None);
        let MetaSearch::Hits(h) = m.by_prefix("lic") else {
            panic!()
        };
        assert_eq!(h.len(), 3);
        assert_eq!(m.by_key("nope"), MetaSearch::NoMatch);
        assert_eq!(Metadata::Absent.by_key("lic"), MetaSearch::NoSection);
    }

    /// Paging through any search, by rows and by bytes, yields exactly the
    /// rows of the unpaged search (the oracle), in order, each once.
    #[test]
    fn pages_cover_a_search_exactly() {
        let mut t = MetaTable::new();
        t.set(None, "k", MetaValue::Str("archive".into())).unwrap();
        for i in 0..50 {
            let path = format!("f{i:02}");
            t.set(Some(&path), "k", MetaValue::Str("x".repeat(i * 10)))
                .unwrap();
            t.set(Some(&path), "kind", MetaValue::I64(i as i64))
                .unwrap();
            t.set(Some(&path), "z", MetaValue::Bool(true)).unwrap();
        }
        let queries = [
            MetaQuery::Key("k".into()),
            MetaQuery::Prefix("k".into()),
            MetaQuery::Prefix(String::new()),
            MetaQuery::Key("none".into()),
            MetaQuery::Path("f07".into()),
            MetaQuery::Path("f49".into()),
            MetaQuery::Path("none".into()),
        ];
        let limits = [(1, usize::MAX), (7, usize::MAX), (1000, 1), (1000, 300)];
        for q in &queries {
            let all: Vec<MetaRow> = t
                .rows()
                .filter(|r| match q {
                    MetaQuery::Key(k) => r.key == *k,
                    MetaQuery::Prefix(p) => r.key.starts_with(p.as_str()),
                    MetaQuery::Path(p) => r.path.as_deref() == Some(p.as_str()),
                })
                .collect();
            for (rows, bytes) in limits {
                let limit = PageLimit { rows, bytes };
                let (mut got, mut after, mut pages) = (Vec::new(), None, 0);
                loop {
                    let (page, more) = t.page(q, after.as_ref(), &limit);
                    assert!(page.len() <= rows);
                    // A page ends at the first row past the byte limit.
                    let before_last: usize = page.iter().rev().skip(1).map(MetaRow::size).sum();
                    assert!(page.len() <= 1 || before_last < bytes, "{q:?} {limit:?}");
                    pages += 1;
                    after = page.last().map(MetaRow::cursor);
                    got.extend(page);
                    if !more {
                        break;
                    }
                    assert!(after.is_some(), "more follow a page with rows");
                }
                assert_eq!(got, all, "{q:?} {limit:?} in {pages} pages");
            }
        }
        // A cursor from before the matches starts at the first one.
        let early = MetaCursor {
            key: "a".into(),
            path: None,
        };
        let (page, _) = t.page(&MetaQuery::Key("k".into()), Some(&early), &PageLimit::ALL);
        assert_eq!(page, t.by_key("k"));
    }

    /// Found by review: a meta section's rows were taken as they came, so
    /// an append carried a fact about `../x`, or with an empty key, into the
    /// tail it wrote. A reader refuses what `set` refuses.
    #[test]
    fn a_section_row_a_writer_would_refuse_is_corrupt() {
        let mut t = MetaTable::new();
        t.set(Some("a"), "k", MetaValue::I64(1)).unwrap();
        let good = t.to_batch().unwrap();
        assert!(MetaTable::new().extend_from_batch(&good).is_ok());
        for (path, key) in [("../x", "k"), ("a", "")] {
            let mut cols = good.columns().to_vec();
            cols[0] = Arc::new(arrow_array::StringArray::from(vec![path]));
            cols[1] = Arc::new(arrow_array::StringArray::from(vec![key]));
            let bad = RecordBatch::try_new(good.schema(), cols).unwrap();
            let err = MetaTable::new().extend_from_batch(&bad).unwrap_err();
            assert!(
                matches!(&err, Error::Corrupt(m) if m.contains("row 0")),
                "{err}"
            );
        }
    }
}
