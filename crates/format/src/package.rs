//! Package sub-indexes: typed facts about the packages an archive holds (a
//! jar's Maven coordinates, a wheel's requirements), one Arrow section per
//! `(pkg_type, repo)`, so that SQL can ask "which archives hold log4j-core
//! below 2.17.1" without reading a blob.
//!
//! A [`Plugin`] claims paths and reads its typed columns out of a file's bytes
//! while the engine compresses it. It sees the file through a [`Window`]: the
//! first and the last [`WINDOW_HALF`] bytes, which hold what package formats
//! put their metadata in (a zip's central directory and a wheel's
//! `.dist-info` at the end, a jar's manifest and a `.deb`'s control archive
//! at the start). A plugin whose metadata may lie anywhere (a tarball's
//! member, after all that precedes it) follows the file instead: its
//! [`Follow`] reader is fed every byte, in order. So a plugin costs bounded
//! memory whatever the size of the package, and never sees a file it did
//! not claim.
//!
//! The sections are views, not a second home of the slices: every slice stays
//! in the one data sub-index a `get` reads, and a package row names its file's
//! first data row (`chunk_seq`) to join on. A row holds a common prefix of
//! columns ([`PREFIX`]), the same in every package section, then the plugin's
//! own; the plugin's column types are listed in the section's schema metadata
//! ([`COLUMNS_KEY`]), so a reader decodes a section of a plugin it does not
//! know. docs/format.md, section 6.5.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use arrow_array::builder::{
    Int64Builder, Int8Builder, ListBuilder, MapBuilder, StringBuilder, UInt64Builder,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, Int8Type, UInt64Type};
use arrow_array::{Array, ArrayRef, RecordBatch};
use arrow_schema::{DataType, Field, Fields, Schema, SchemaRef};

use crate::error::{Error, Result};

/// Bytes of the start and of the end of a claimed file a plugin sees.
pub const WINDOW_HALF: usize = 4 << 20;

/// Schema-metadata key listing a package section's own columns and their
/// types, space-separated: `name:type name:type`, types `str`, `i64`,
/// `list<str>`, `map<str,str>`.
pub const COLUMNS_KEY: &str = "znippy.columns";

/// The columns every package section begins with, in order.
pub const PREFIX: [&str; 6] = [
    "relative_path",
    "chunk_seq",
    "size",
    "pkg_type",
    "repo",
    "error",
];

/// Most bytes a plugin's error message keeps.
const MAX_ERROR_LEN: usize = 1_024;
/// Most bytes of one value a plugin may record; longer strings are cut at a
/// character boundary, longer lists and maps lose their last entries.
pub const MAX_VALUE_LEN: usize = 64 << 10;

/// The type of a plugin column.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ColumnType {
    /// Arrow Utf8.
    Str,
    /// Arrow Int64.
    I64,
    /// Arrow List of Utf8.
    StrList,
    /// Arrow Map of Utf8 to Utf8.
    StrMap,
}

impl ColumnType {
    fn token(self) -> &'static str {
        match self {
            ColumnType::Str => "str",
            ColumnType::I64 => "i64",
            ColumnType::StrList => "list<str>",
            ColumnType::StrMap => "map<str,str>",
        }
    }

    fn from_token(t: &str) -> Option<Self> {
        [
            ColumnType::Str,
            ColumnType::I64,
            ColumnType::StrList,
            ColumnType::StrMap,
        ]
        .into_iter()
        .find(|c| c.token() == t)
    }

    /// The Arrow type of a column of this type.
    pub fn arrow(self) -> DataType {
        match self {
            ColumnType::Str => DataType::Utf8,
            ColumnType::I64 => DataType::Int64,
            ColumnType::StrList => {
                DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)))
            }
            ColumnType::StrMap => DataType::Map(
                Arc::new(Field::new(
                    "entries",
                    DataType::Struct(Fields::from(vec![
                        Field::new("keys", DataType::Utf8, false),
                        Field::new("values", DataType::Utf8, true),
                    ])),
                    false,
                )),
                false,
            ),
        }
    }
}

impl std::fmt::Display for ColumnType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.token())
    }
}

/// One of a plugin's columns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Column {
    /// Its name: lower-case ASCII letters, digits and `_`, not one of [`PREFIX`].
    pub name: String,
    /// Its type.
    pub ty: ColumnType,
}

impl Column {
    /// A column named `name` of type `ty`.
    pub fn new(name: &str, ty: ColumnType) -> Self {
        Column {
            name: name.to_string(),
            ty,
        }
    }
}

/// A value of a plugin column; every column is nullable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Not known for this package.
    Null,
    /// A string.
    Str(String),
    /// An integer.
    I64(i64),
    /// A list of strings.
    List(Vec<String>),
    /// Pairs of strings, in the order the package gives them.
    Map(Vec<(String, String)>),
}

impl Value {
    /// `Some(s)` as a string, `None` as null.
    pub fn opt_str(s: Option<impl Into<String>>) -> Value {
        s.map_or(Value::Null, |s| Value::Str(s.into()))
    }

    fn fits(&self, ty: ColumnType) -> bool {
        matches!(
            (self, ty),
            (Value::Null, _)
                | (Value::Str(_), ColumnType::Str)
                | (Value::I64(_), ColumnType::I64)
                | (Value::List(_), ColumnType::StrList)
                | (Value::Map(_), ColumnType::StrMap)
        )
    }

    /// The value cut to [`MAX_VALUE_LEN`] bytes of text.
    fn bounded(self) -> Value {
        match self {
            Value::Str(s) => Value::Str(cut(s, MAX_VALUE_LEN)),
            Value::List(l) => {
                let mut room = MAX_VALUE_LEN;
                Value::List(
                    l.into_iter()
                        .take_while(|s| room.checked_sub(s.len() + 1).map(|r| room = r).is_some())
                        .collect(),
                )
            }
            Value::Map(m) => {
                let mut room = MAX_VALUE_LEN;
                Value::Map(
                    m.into_iter()
                        .take_while(|(k, v)| {
                            room.checked_sub(k.len() + v.len() + 1)
                                .map(|r| room = r)
                                .is_some()
                        })
                        .collect(),
                )
            }
            v => v,
        }
    }
}

fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// What a plugin makes of a file it claimed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not a package after all (a `.tar.gz` without `PKG-INFO`): no row.
    NotAPackage,
    /// One row per package the file holds (a shaded jar holds several), each
    /// with one value per column of the plugin.
    Package(Vec<Vec<Value>>),
    /// A package that could not be read: one row with this error and no values.
    Damaged(String),
}

/// A package format the index knows: it claims paths and reads typed columns
/// out of a claimed file's [`Window`].
///
/// A plugin must be deterministic (the same bytes give the same outcome: the
/// archive's bytes depend on it), must not panic, and must bound what it
/// allocates and decodes by constants, whatever the window says; what it
/// cannot read it reports as [`Outcome::Damaged`].
pub trait Plugin: Send + Sync {
    /// Its name, also its sections' `module_name`: lower-case ASCII letters,
    /// digits and `_`.
    fn name(&self) -> &'static str;
    /// Its `pkg_type`, 1 to 127, unique among the plugins of one run.
    fn pkg_type(&self) -> i8;
    /// Its columns, after the common [`PREFIX`].
    fn columns(&self) -> Vec<Column>;
    /// Whether it wants to read the file at `path`.
    fn matches_path(&self, path: &str) -> bool;
    /// Whether it reads the zip member `name` (a claimed file that is a zip
    /// keeps such members wherever they lie in it; see [`Window`]).
    fn zip_member(&self, name: &str) -> bool {
        let _ = name;
        false
    }
    /// A reader that follows the file from its first byte, for a plugin
    /// whose metadata may lie anywhere in it (a tarball's member, after all
    /// that precedes it); `head` is the file's start. `None`: the plugin
    /// reads the [`Window`] instead ([`Plugin::extract`]).
    ///
    /// A file the window holds whole is fed to it once read; a larger one
    /// from the moment the window would lose its middle, as it streams past.
    fn follow(&self, head: &[u8]) -> Option<Box<dyn Follow>> {
        let _ = head;
        None
    }
    /// Reads the file, through its window, when [`Plugin::follow`] gave no
    /// reader. A plugin that always follows never sees this call.
    fn extract(&self, file: &Window) -> Outcome {
        let _ = file;
        Outcome::NotAPackage
    }
}

/// A plugin's reader of one file as it streams past ([`Plugin::follow`]):
/// fed the file's bytes in order, cut anywhere, then asked what it made of
/// them. Its outcome must not depend on where the cuts fall, and what it
/// holds and decodes must be bounded by constants, as for
/// [`Plugin::extract`].
pub trait Follow: Send {
    /// Takes the file's next bytes.
    fn feed(&mut self, bytes: &[u8]);
    /// What the plugin makes of the file, all of it fed.
    fn finish(self: Box<Self>) -> Outcome;
}

/// The plugins a compress or append runs, and the repository their rows are
/// filed under.
#[derive(Clone)]
pub struct Plugins {
    list: Vec<Arc<dyn Plugin>>,
    repo: String,
}

impl std::fmt::Debug for Plugins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugins")
            .field(
                "names",
                &self.list.iter().map(|p| p.name()).collect::<Vec<_>>(),
            )
            .field("repo", &self.repo)
            .finish()
    }
}

impl Plugins {
    /// No plugin: every file stays in the data sub-index only.
    pub fn none() -> Self {
        Plugins {
            list: Vec::new(),
            repo: String::new(),
        }
    }

    /// `list`, filing rows under `repo`. Refuses two plugins with one
    /// `pkg_type` or name, a name or column a section cannot carry, and a
    /// repo name that is not a short line of text.
    pub fn new(list: Vec<Arc<dyn Plugin>>, repo: &str) -> Result<Self> {
        let bad = |m: String| {
            Err(Error::Input {
                path: repo.to_string(),
                reason: m,
            })
        };
        if repo.len() > 256 || repo.chars().any(char::is_control) {
            return bad("a repo name is at most 256 bytes without control characters".into());
        }
        let mut seen = HashSet::new();
        for p in &list {
            let name = p.name();
            if !(1..=127).contains(&p.pkg_type()) || !seen.insert(p.pkg_type()) {
                return bad(format!(
                    "plugin {name}: pkg_type {} is taken or out of 1..=127",
                    p.pkg_type()
                ));
            }
            let taken = name == crate::schema::DEFAULT_MODULE;
            if !is_ident(name) || taken || list.iter().filter(|q| q.name() == name).count() > 1 {
                return bad(format!("plugin name {name:?} is taken or not [a-z0-9_]"));
            }
            let mut cols = HashSet::new();
            for c in p.columns() {
                if !is_ident(&c.name)
                    || PREFIX.contains(&c.name.as_str())
                    || !cols.insert(c.name.clone())
                {
                    return bad(format!(
                        "plugin {name}: column {:?} is taken or not [a-z0-9_]",
                        c.name
                    ));
                }
            }
        }
        Ok(Plugins {
            list,
            repo: repo.to_string(),
        })
    }

    /// Whether there is no plugin to run.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The repository their rows are filed under.
    pub fn repo(&self) -> &str {
        &self.repo
    }

    /// The plugins.
    pub fn list(&self) -> &[Arc<dyn Plugin>] {
        &self.list
    }

    /// The first plugin that claims `path`.
    pub(crate) fn claim(&self, path: &str) -> Option<&Arc<dyn Plugin>> {
        self.list.iter().find(|p| p.matches_path(path))
    }

    /// Files the rows `plugin` reads from `file` (its window) for `path` in
    /// `into`.
    pub(crate) fn record(
        &self,
        plugin: &dyn Plugin,
        path: &str,
        file: Window,
        into: &mut Packages,
    ) {
        let columns = plugin.columns();
        // A plugin is not to panic; one that does (on a package that a crate
        // it reads with does not expect) fails that package, not the archive.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| file.outcome()))
            .unwrap_or_else(|_| Box::new(Panicked(plugin.name())).finish());
        let rows = match outcome {
            Outcome::NotAPackage => return,
            Outcome::Damaged(e) => vec![PackageRow::damaged(path, e, columns.len())],
            Outcome::Package(rows) if rows.is_empty() => return,
            Outcome::Package(rows) => rows
                .into_iter()
                .map(|values| {
                    let fits = values.len() == columns.len()
                        && values.iter().zip(&columns).all(|(v, c)| v.fits(c.ty));
                    match fits {
                        true => PackageRow {
                            path: path.to_string(),
                            error: None,
                            values: values.into_iter().map(Value::bounded).collect(),
                        },
                        false => PackageRow::damaged(
                            path,
                            format!(
                                "plugin {} gave values that do not fit its columns",
                                plugin.name()
                            ),
                            columns.len(),
                        ),
                    }
                })
                .collect(),
        };
        let key = (plugin.pkg_type(), self.repo.clone());
        let table = into.tables.entry(key).or_insert_with(|| PackageTable {
            name: plugin.name().to_string(),
            columns,
            rows: Vec::new(),
        });
        table.rows.extend(rows);
    }
}

/// A plugin's or a column's name: 1 to 64 of `[a-z0-9_]`.
pub(crate) fn is_ident(s: &str) -> bool {
    (1..=64).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Most bytes of one zip member a [`Window`] keeps from the middle of a file.
pub const MAX_KEPT_MEMBER: u64 = 1 << 20;
/// Most pieces a [`Window`] keeps from the middle of a file, and most bytes
/// in all: what a zip of many wanted members can cost.
const MAX_KEPT: usize = 1_024;
const MAX_KEPT_TOTAL: u64 = 16 << 20;
/// Longest member name looked for; wanted names are short.
const MAX_NAME: usize = 1_024;
/// A zip local file header's signature and fixed length.
const LOCAL: &[u8; 4] = b"PK\x03\x04";
const LOCAL_LEN: usize = 30;

/// What a plugin sees of a file: all of it up to `2 x WINDOW_HALF` bytes,
/// else its first and last [`WINDOW_HALF`] bytes, and, for a plugin that
/// names zip members it wants ([`Plugin::zip_member`]), each such member's
/// local header and first [`MAX_KEPT_MEMBER`] bytes wherever they lie (a
/// shaded jar keeps its `pom.properties` in the middle). For a plugin that
/// follows the file ([`Plugin::follow`]), from the moment it grows past
/// what the window holds, the plugin's reader instead, fed every byte.
#[derive(Default)]
pub struct Window {
    len: u64,
    head: Vec<u8>,
    /// The last bytes seen, as a ring once the head is full.
    tail: Vec<u8>,
    tail_at: usize,
    plugin: Option<Arc<dyn Plugin>>,
    members: Members,
    follow: Option<Box<dyn Follow>>,
}

impl std::fmt::Debug for Window {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Window")
            .field("len", &self.len)
            .field("head", &self.head.len())
            .field("tail", &self.tail.len())
            .field("kept", &self.members.kept.len())
            .field("followed", &self.follow.is_some())
            .finish()
    }
}

/// The zip members a window keeps as the file streams past.
#[derive(Default)]
struct Members {
    /// `(offset, bytes)` of each kept piece of the file: from a wanted
    /// member's local header on, grown over every wanted member that starts
    /// inside it.
    kept: Vec<(u64, Vec<u8>)>,
    /// Where the last piece is to end.
    until: u64,
    /// The stream's last bytes, where a header cut by a feed's end is found.
    carry: Vec<u8>,
}

impl Window {
    /// A window on `bytes`, as if fed in one piece.
    pub fn of(bytes: &[u8]) -> Self {
        let mut w = Window::default();
        w.feed(bytes);
        w
    }

    /// An empty window on a file `plugin` claimed: it also keeps the zip
    /// members `plugin` wants, or feeds the plugin's reader.
    pub fn for_plugin(plugin: &Arc<dyn Plugin>) -> Self {
        Window {
            plugin: Some(Arc::clone(plugin)),
            ..Window::default()
        }
    }

    /// Takes the file's next bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        let whole = 2 * WINDOW_HALF as u64;
        if self.follow.is_none() && self.len <= whole && self.len + bytes.len() as u64 > whole {
            // The window is about to lose the file's middle, which it holds
            // whole until now (the tail is no ring yet): a plugin that
            // follows files takes it from here.
            if let Some(p) = &self.plugin {
                let (head, tail) = (&self.head, &self.tail);
                self.follow = guard(p.name(), || {
                    let mut f = p.follow(head)?;
                    f.feed(head);
                    f.feed(tail);
                    Some(f)
                });
            }
            if self.follow.is_some() {
                // No longer kept up: a read there fails rather than give
                // stale bytes.
                self.tail = Vec::new();
            }
        }
        if let Some(mut f) = self.follow.take() {
            let name = self.plugin.as_ref().map_or("", |p| p.name());
            self.follow = guard(name, move || {
                f.feed(bytes);
                Some(f)
            });
            self.len += bytes.len() as u64;
            return;
        }
        if let Some(p) = &self.plugin {
            self.members.feed(p.as_ref(), self.len, bytes);
        }
        self.len += bytes.len() as u64;
        let n = (WINDOW_HALF - self.head.len()).min(bytes.len());
        self.head.extend_from_slice(&bytes[..n]);
        let mut rest = &bytes[n..];
        if rest.len() >= WINDOW_HALF {
            rest = &rest[rest.len() - WINDOW_HALF..];
            self.tail.clear();
            self.tail_at = 0;
        }
        // Until the ring is full it is in file order from 0.
        let grow = (WINDOW_HALF - self.tail.len()).min(rest.len());
        self.tail.extend_from_slice(&rest[..grow]);
        self.ring(&rest[grow..]);
    }

    fn ring(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let n = (WINDOW_HALF - self.tail_at).min(bytes.len());
            self.tail[self.tail_at..self.tail_at + n].copy_from_slice(&bytes[..n]);
            self.tail_at = (self.tail_at + n) % WINDOW_HALF;
            bytes = &bytes[n..];
        }
    }

    /// The file's length.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The whole file, when the window holds all of it.
    pub fn whole(&self) -> Option<Vec<u8>> {
        self.whole_held().then(|| {
            let mut v = vec![0; self.head.len() + self.tail.len()];
            // Cannot fail: the window holds every byte.
            let _ = self.read_at(0, &mut v);
            v
        })
    }

    /// The first bytes of the file the window holds.
    pub fn head(&self) -> &[u8] {
        &self.head
    }

    /// Copies the file's bytes at `offset..offset + buf.len()`, or says which
    /// part of the file the window does not hold.
    pub fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::result::Result<(), String> {
        let mut at = offset;
        let mut done = 0;
        while done < buf.len() {
            let n = self.copy(at, &mut buf[done..]).ok_or_else(|| {
                format!(
                    "byte {at} lies outside the first and last {} MiB of a {}-byte file",
                    WINDOW_HALF >> 20,
                    self.len
                )
            })?;
            done += n;
            at += n as u64;
        }
        Ok(())
    }

    /// Copies what the window holds from `at` on, up to the end of the piece
    /// that holds it; `None` when no piece holds `at`.
    fn copy(&self, at: u64, buf: &mut [u8]) -> Option<usize> {
        if at >= self.len {
            return None;
        }
        let head = self.head.len() as u64;
        if at < head {
            let n = buf.len().min((head - at) as usize);
            buf[..n].copy_from_slice(&self.head[at as usize..at as usize + n]);
            return Some(n);
        }
        let tail_start = self.len - self.tail.len() as u64;
        if at >= tail_start {
            let n = buf.len().min((self.len - at) as usize);
            let mut i = (self.tail_at + (at - tail_start) as usize) % self.tail.len();
            for b in &mut buf[..n] {
                *b = self.tail[i];
                i = (i + 1) % self.tail.len();
            }
            return Some(n);
        }
        let (start, bytes) = self
            .members
            .kept
            .iter()
            .find(|(s, b)| *s <= at && at < s + b.len() as u64)?;
        let from = (at - start) as usize;
        let n = buf.len().min(bytes.len() - from);
        buf[..n].copy_from_slice(&bytes[from..from + n]);
        Some(n)
    }

    /// The window as a `Read + Seek` over the whole file: reads outside what
    /// it holds fail, so a parser gets an error instead of zeros.
    pub fn reader(&self) -> WindowReader<'_> {
        WindowReader { w: self, pos: 0 }
    }

    /// What the plugin that claimed the file makes of it, all of it fed:
    /// its reader's outcome when it follows the file, else its reading of
    /// the window. A window no plugin claimed holds no package.
    pub fn outcome(mut self) -> Outcome {
        let Some(plugin) = self.plugin.clone() else {
            return Outcome::NotAPackage;
        };
        if self.follow.is_none() && self.whole_held() {
            self.follow = plugin.follow(&self.head);
            // A tail that holds the rest of the file is no ring yet.
            if let Some(f) = &mut self.follow {
                f.feed(&self.head);
                f.feed(&self.tail);
            }
        }
        match self.follow.take() {
            Some(f) => f.finish(),
            None => plugin.extract(&self),
        }
    }

    /// Whether the head and the tail hold every byte of the file.
    fn whole_held(&self) -> bool {
        self.len == (self.head.len() + self.tail.len()) as u64
    }
}

impl Members {
    /// Finds the wanted members' local headers in `bytes`, which start at
    /// `offset` in the file, and keeps what follows them.
    fn feed(&mut self, plugin: &dyn Plugin, offset: u64, bytes: &[u8]) {
        let mut carry = std::mem::take(&mut self.carry);
        let carried = carry.len();
        let carry_at = offset - carried as u64;
        // Headers that begin in the carry and were cut by the last feed's
        // end: found now, with this feed's first bytes.
        carry.extend_from_slice(&bytes[..bytes.len().min(LOCAL_LEN + MAX_NAME)]);
        let mut starts: Vec<(u64, u64)> = memchr::memmem::find_iter(&carry, LOCAL)
            .take_while(|&at| at < carried)
            .filter_map(|at| {
                let len = wanted(plugin, &carry, at)?;
                (at as u64 + len > carried as u64).then_some((carry_at + at as u64, len))
            })
            .collect();
        starts.extend(
            memchr::memmem::find_iter(bytes, LOCAL)
                .filter_map(|at| Some((offset + at as u64, wanted(plugin, bytes, at)?))),
        );
        carry.truncate(carried);
        let src = Source {
            carry: &carry,
            carry_at,
            bytes,
            offset,
        };
        for (at, header) in starts {
            self.copy_until(&src, at);
            let kept: u64 = self.kept.iter().map(|(_, b)| b.len() as u64).sum();
            if self.kept.len() >= MAX_KEPT || kept >= MAX_KEPT_TOTAL {
                break;
            }
            if at >= self.until {
                self.kept.push((at, Vec::new()));
            }
            let room = MAX_KEPT_TOTAL - kept;
            let end = at + header + MAX_KEPT_MEMBER.min(room);
            self.until = self.until.max(end);
        }
        self.copy_until(&src, u64::MAX);
        // The stream's last bytes, for the next feed.
        let keep = LOCAL_LEN + MAX_NAME;
        carry.extend_from_slice(&bytes[bytes.len().saturating_sub(keep)..]);
        self.carry = carry.split_off(carry.len().saturating_sub(keep));
    }

    /// Appends to the last kept piece what `src` holds of it, up to `to`.
    fn copy_until(&mut self, src: &Source<'_>, to: u64) {
        let Some((start, b)) = self.kept.last_mut() else {
            return;
        };
        let from = *start + b.len() as u64;
        let to = to.min(self.until).min(src.offset + src.bytes.len() as u64);
        if from >= to {
            return;
        }
        if from < src.offset {
            let i = (from - src.carry_at) as usize;
            let j = (to.min(src.offset) - src.carry_at) as usize;
            b.extend_from_slice(&src.carry[i..j]);
        }
        // A piece that a header in the carry grows may still end in it.
        if to > src.offset {
            let i = from.max(src.offset) - src.offset;
            b.extend_from_slice(&src.bytes[i as usize..(to - src.offset) as usize]);
        }
    }
}

/// The length of the local header at `buf[at]` when it names a member
/// `plugin` wants; `None` for any other, or one cut short.
fn wanted(plugin: &dyn Plugin, buf: &[u8], at: usize) -> Option<u64> {
    let h = buf.get(at..at + LOCAL_LEN)?;
    let u16_at = |i: usize| u16::from_le_bytes([h[i], h[i + 1]]) as usize;
    let (name_len, extra_len) = (u16_at(26), u16_at(28));
    if name_len > MAX_NAME {
        return None;
    }
    let name = buf.get(at + LOCAL_LEN..at + LOCAL_LEN + name_len)?;
    let name = std::str::from_utf8(name).ok()?;
    plugin
        .zip_member(name)
        .then_some((LOCAL_LEN + name_len + extra_len) as u64)
}

/// Runs `step` on a plugin's reader, on the producer's thread: a reader
/// that panics (which a plugin is not to do) is replaced by one whose
/// outcome says so, and fails its file's row, not the archive.
fn guard(
    plugin: &'static str,
    step: impl FnOnce() -> Option<Box<dyn Follow>>,
) -> Option<Box<dyn Follow>> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(step))
        .unwrap_or_else(|_| Some(Box::new(Panicked(plugin))))
}

/// The reader of a plugin that panicked.
struct Panicked(&'static str);

impl Follow for Panicked {
    fn feed(&mut self, _: &[u8]) {}

    fn finish(self: Box<Self>) -> Outcome {
        Outcome::Damaged(format!("plugin {} failed on it", self.0))
    }
}

/// Where the bytes around one feed are: the carry before it, and its own.
struct Source<'a> {
    carry: &'a [u8],
    carry_at: u64,
    bytes: &'a [u8],
    offset: u64,
}

/// [`Window::reader`].
#[derive(Debug)]
pub struct WindowReader<'a> {
    w: &'a Window,
    pos: u64,
}

impl std::io::Read for WindowReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() || self.pos >= self.w.len {
            return Ok(0);
        }
        let n = self.w.copy(self.pos, buf).ok_or_else(|| {
            let e = self.w.read_at(self.pos, &mut [0]).err().unwrap_or_default();
            std::io::Error::other(e)
        })?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl std::io::Seek for WindowReader<'_> {
    fn seek(&mut self, to: std::io::SeekFrom) -> std::io::Result<u64> {
        let pos = match to {
            std::io::SeekFrom::Start(p) => Some(p),
            std::io::SeekFrom::End(d) => self.w.len.checked_add_signed(d),
            std::io::SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = pos.ok_or_else(|| std::io::Error::other("seek out of range"))?;
        Ok(self.pos)
    }
}

/// One row of a package section: a package in the file at `path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageRow {
    /// The file's path.
    pub path: String,
    /// Why the plugin could not read it; then every value is null.
    pub error: Option<String>,
    /// One value per column of the section.
    pub values: Vec<Value>,
}

impl PackageRow {
    fn damaged(path: &str, error: String, columns: usize) -> Self {
        PackageRow {
            path: path.to_string(),
            error: Some(cut(error, MAX_ERROR_LEN)),
            values: vec![Value::Null; columns],
        }
    }
}

/// The rows of one package section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageTable {
    /// The plugin's name, the section's `module_name`.
    pub name: String,
    /// The plugin's columns.
    pub columns: Vec<Column>,
    /// The rows, a file's in the order the plugin gave them.
    pub rows: Vec<PackageRow>,
}

impl PackageTable {
    /// The table's name and columns, without rows.
    pub(crate) fn clone_empty(&self) -> Self {
        PackageTable {
            name: self.name.clone(),
            columns: self.columns.clone(),
            rows: Vec::new(),
        }
    }
}

/// Every package section of an archive, by `(pkg_type, repo)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Packages {
    /// The sections, in the order they are written.
    pub tables: BTreeMap<(i8, String), PackageTable>,
}

impl Packages {
    /// Whether no file is a package (the tail has no package section).
    pub fn is_empty(&self) -> bool {
        self.tables.values().all(|t| t.rows.is_empty())
    }

    /// Folds a batch's packages in: every row of a path the batch wrote is
    /// dropped (a replaced jar loses its coordinates, even when the new file
    /// is no package), then the batch's rows are added.
    pub fn merge(&mut self, written: &HashSet<&str>, batch: Packages) -> Result<()> {
        self.retain(|p| !written.contains(p));
        for (key, t) in batch.tables {
            match self.tables.get_mut(&key) {
                None => {
                    self.tables.insert(key, t);
                }
                Some(old) if old.name != t.name || old.columns != t.columns => {
                    return Err(Error::Input {
                        path: t.name,
                        reason: format!(
                            "the archive's section ({}, {:?}) is of plugin {} with other columns; \
                             append with the same plugins, or to a new archive",
                            key.0, key.1, old.name
                        ),
                    });
                }
                Some(old) => old.rows.extend(t.rows),
            }
        }
        Ok(())
    }

    /// Keeps the rows whose path passes `keep`, and the sections left with any.
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        for t in self.tables.values_mut() {
            t.rows.retain(|r| keep(&r.path));
        }
        self.tables.retain(|_, t| !t.rows.is_empty());
    }

    /// Checks a query's plugin name and columns against `plugins` (the ones
    /// this build has) and the archive's own sections (one may be of a plugin
    /// this build lacks): a name or a column neither knows is a typo, and
    /// answering it with no rows would hide that. The error says what the
    /// names are.
    pub fn check_query(
        &self,
        plugins: &[Arc<dyn Plugin>],
        kind: Option<&str>,
        columns: &[&str],
    ) -> std::result::Result<(), String> {
        let known: Vec<(String, Vec<Column>)> = plugins
            .iter()
            .map(|p| (p.name().to_string(), p.columns()))
            .chain(
                self.tables
                    .values()
                    .map(|t| (t.name.clone(), t.columns.clone())),
            )
            .collect();
        let mut names: Vec<&str> = Vec::new();
        for (name, _) in &known {
            if !names.contains(&name.as_str()) {
                names.push(name);
            }
        }
        if let Some(kind) = kind {
            if !names.contains(&kind) {
                return Err(format!(
                    "no plugin is named {kind} (they are {})",
                    names.join(", ")
                ));
            }
        }
        let queried = known.iter().filter(|(n, _)| kind.is_none_or(|k| k == n));
        let mut have: Vec<&str> = queried
            .flat_map(|(_, cols)| cols.iter().map(|c| c.name.as_str()))
            .collect();
        for col in columns {
            if !have.contains(col) {
                have.sort_unstable();
                have.dedup();
                return Err(match kind {
                    Some(k) => {
                        format!("{k} has no column {col} (its columns: {})", have.join(", "))
                    }
                    None => format!(
                        "no plugin has a column {col} (the columns: {})",
                        have.join(", ")
                    ),
                });
            }
        }
        Ok(())
    }

    /// The rows of every section, with their `(pkg_type, repo)`.
    pub fn rows(&self) -> impl Iterator<Item = (&(i8, String), &PackageTable, &PackageRow)> {
        self.tables
            .iter()
            .flat_map(|(k, t)| t.rows.iter().map(move |r| (k, t, r)))
    }
}

/// The Arrow schema of a package section with `columns` after the prefix.
pub(crate) fn schema(columns: &[Column]) -> SchemaRef {
    let mut fields = vec![
        Field::new("relative_path", DataType::Utf8, false),
        Field::new("chunk_seq", DataType::UInt64, false),
        Field::new("size", DataType::UInt64, false),
        Field::new("pkg_type", DataType::Int8, false),
        Field::new("repo", DataType::Utf8, false),
        Field::new("error", DataType::Utf8, true),
    ];
    fields.extend(
        columns
            .iter()
            .map(|c| Field::new(&c.name, c.ty.arrow(), true)),
    );
    let listed: Vec<String> = columns
        .iter()
        .map(|c| format!("{}:{}", c.name, c.ty))
        .collect();
    let md = HashMap::from([(COLUMNS_KEY.to_string(), listed.join(" "))]);
    Arc::new(Schema::new_with_metadata(fields, md))
}

/// The columns a section's schema metadata lists, checked as a writer would.
pub(crate) fn columns_of(md: &HashMap<String, String>, what: &str) -> Result<Vec<Column>> {
    let bad = |m: String| Error::corrupt(format!("{what}: {m}"));
    let listed = md
        .get(COLUMNS_KEY)
        .ok_or_else(|| bad(format!("no {COLUMNS_KEY}")))?;
    let mut out: Vec<Column> = Vec::new();
    for item in listed.split(' ').filter(|s| !s.is_empty()) {
        let (name, ty) = item
            .split_once(':')
            .ok_or_else(|| bad(format!("column {item:?} has no type")))?;
        let ty = ColumnType::from_token(ty).ok_or_else(|| bad(format!("column type {ty:?}")))?;
        if !is_ident(name) || PREFIX.contains(&name) || out.iter().any(|c| c.name == name) {
            return Err(bad(format!("column name {name:?}")));
        }
        out.push(Column::new(name, ty));
    }
    Ok(out)
}

/// A section's rows as one record batch: `first_seq` and `size` give each
/// path's first data row and length.
pub(crate) fn to_batch(
    key: &(i8, String),
    table: &PackageTable,
    files: &HashMap<&str, (u64, u64)>,
) -> Result<RecordBatch> {
    let n = table.rows.len();
    let mut path = StringBuilder::new();
    let mut seq = UInt64Builder::with_capacity(n);
    let mut size = UInt64Builder::with_capacity(n);
    let mut pkg = Int8Builder::with_capacity(n);
    let mut repo = StringBuilder::new();
    let mut error = StringBuilder::new();
    let mut rows: Vec<(u64, u64, &PackageRow)> = Vec::with_capacity(n);
    for r in &table.rows {
        let &(s, len) = files.get(r.path.as_str()).ok_or_else(|| Error::Input {
            path: r.path.clone(),
            reason: "a package row names a file the archive does not hold".into(),
        })?;
        rows.push((s, len, r));
    }
    // Write order, a file's rows as the plugin gave them: the bytes depend on
    // the rows, not on the order batches were folded in.
    rows.sort_by_key(|&(s, _, _)| s);
    for &(s, len, r) in &rows {
        path.append_value(&r.path);
        seq.append_value(s);
        size.append_value(len);
        pkg.append_value(key.0);
        repo.append_value(&key.1);
        error.append_option(r.error.as_deref());
    }
    let mut cols: Vec<ArrayRef> = vec![
        Arc::new(path.finish()),
        Arc::new(seq.finish()),
        Arc::new(size.finish()),
        Arc::new(pkg.finish()),
        Arc::new(repo.finish()),
        Arc::new(error.finish()),
    ];
    for (i, c) in table.columns.iter().enumerate() {
        let values = rows
            .iter()
            .map(|(_, _, r)| r.values.get(i).unwrap_or(&Value::Null));
        cols.push(column(c.ty, values));
    }
    RecordBatch::try_new(schema(&table.columns), cols)
        .map_err(|e| Error::corrupt(format!("package section {}: {e}", table.name)))
}

/// A column of `ty` holding `values`, as a package section lays it out (the
/// store's package tables too, after renaming the nested fields).
pub fn column<'a>(ty: ColumnType, values: impl Iterator<Item = &'a Value>) -> ArrayRef {
    match ty {
        ColumnType::Str => {
            let mut b = StringBuilder::new();
            for v in values {
                b.append_option(match v {
                    Value::Str(s) => Some(s),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        ColumnType::I64 => {
            let mut b = Int64Builder::new();
            for v in values {
                b.append_option(match v {
                    Value::I64(x) => Some(*x),
                    _ => None,
                });
            }
            Arc::new(b.finish())
        }
        ColumnType::StrList => {
            let mut b = ListBuilder::new(StringBuilder::new());
            for v in values {
                match v {
                    Value::List(l) => {
                        for s in l {
                            b.values().append_value(s);
                        }
                        b.append(true);
                    }
                    _ => b.append(false),
                }
            }
            Arc::new(b.finish())
        }
        ColumnType::StrMap => {
            let mut b = MapBuilder::new(None, StringBuilder::new(), StringBuilder::new());
            for v in values {
                match v {
                    Value::Map(m) => {
                        for (k, x) in m {
                            b.keys().append_value(k);
                            b.values().append_value(x);
                        }
                        // Only fails when keys and values differ in length.
                        let _ = b.append(true);
                    }
                    _ => {
                        let _ = b.append(false);
                    }
                }
            }
            Arc::new(b.finish())
        }
    }
}

/// Reads the rows of a decoded batch of a package section with `columns`
/// into `table`; `pkg_type` and `repo` must be the manifest's.
pub(crate) fn extend_from_batch(
    table: &mut PackageTable,
    key: &(i8, String),
    batch: &RecordBatch,
    what: &str,
) -> Result<()> {
    let bad = |m: &str| Error::corrupt(format!("{what}: {m}"));
    let path = batch
        .column(0)
        .as_string_opt::<i32>()
        .ok_or_else(|| bad("relative_path"))?;
    batch
        .column(1)
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| bad("chunk_seq"))?;
    batch
        .column(2)
        .as_primitive_opt::<UInt64Type>()
        .ok_or_else(|| bad("size"))?;
    let pkg = batch
        .column(3)
        .as_primitive_opt::<Int8Type>()
        .ok_or_else(|| bad("pkg_type"))?;
    let repo = batch
        .column(4)
        .as_string_opt::<i32>()
        .ok_or_else(|| bad("repo"))?;
    let error = batch
        .column(5)
        .as_string_opt::<i32>()
        .ok_or_else(|| bad("error"))?;
    for r in 0..batch.num_rows() {
        if pkg.value(r) != key.0 || repo.value(r) != key.1 {
            return Err(bad("a row's pkg_type or repo is not its section's"));
        }
        let mut values = Vec::with_capacity(table.columns.len());
        for (i, c) in table.columns.iter().enumerate() {
            let col = batch.column(PREFIX.len() + i);
            values.push(
                value(col.as_ref(), c.ty, r).ok_or_else(|| bad(&format!("column {}", c.name)))?,
            );
        }
        table.rows.push(PackageRow {
            path: path.value(r).to_string(),
            error: error.is_valid(r).then(|| error.value(r).to_string()),
            values,
        });
    }
    Ok(())
}

/// Row `r` of a column of `ty`, whatever its nested fields are named; `None`
/// when the column is not of that type.
pub fn value(col: &dyn Array, ty: ColumnType, r: usize) -> Option<Value> {
    if col.is_null(r) {
        return Some(Value::Null);
    }
    Some(match ty {
        ColumnType::Str => Value::Str(col.as_string_opt::<i32>()?.value(r).to_string()),
        ColumnType::I64 => Value::I64(col.as_primitive_opt::<Int64Type>()?.value(r)),
        ColumnType::StrList => {
            let items = col.as_list_opt::<i32>()?.value(r);
            let items = items.as_string_opt::<i32>()?;
            Value::List(items.iter().map(|s| s.unwrap_or("").to_string()).collect())
        }
        ColumnType::StrMap => {
            let entries = col.as_map_opt()?.value(r);
            let keys = entries.column(0).as_string_opt::<i32>()?;
            let values = entries.column(1).as_string_opt::<i32>()?;
            Value::Map(
                keys.iter()
                    .zip(values.iter())
                    .map(|(k, v)| (k.unwrap_or("").to_string(), v.unwrap_or("").to_string()))
                    .collect(),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin for these tests: it claims every file, wants the zip
    /// members `zip` names, and follows files with the reader `follow` makes.
    struct Test {
        name: &'static str,
        zip: fn(&str) -> bool,
        follow: fn() -> Option<Box<dyn Follow>>,
    }

    impl Plugin for Test {
        fn name(&self) -> &'static str {
            self.name
        }
        fn pkg_type(&self) -> i8 {
            1
        }
        fn columns(&self) -> Vec<Column> {
            Vec::new()
        }
        fn matches_path(&self, _: &str) -> bool {
            true
        }
        fn zip_member(&self, name: &str) -> bool {
            (self.zip)(name)
        }
        fn follow(&self, _: &[u8]) -> Option<Box<dyn Follow>> {
            (self.follow)()
        }
    }

    /// A plugin that wants the zip members named `*want.txt`.
    fn wants() -> Arc<dyn Plugin> {
        Arc::new(Test {
            name: "wants",
            zip: |name| name.ends_with("want.txt"),
            follow: || None,
        })
    }

    /// A local header for `name` followed by `data`.
    fn member(name: &str, data: &[u8]) -> Vec<u8> {
        let mut h = LOCAL.to_vec();
        h.extend_from_slice(&[0; 22]);
        h.extend_from_slice(&(name.len() as u16).to_le_bytes());
        h.extend_from_slice(&0u16.to_le_bytes());
        h.extend_from_slice(name.as_bytes());
        h.extend_from_slice(data);
        h
    }

    /// A file of `len` pseudo-random bytes with wanted and unwanted members
    /// at `at`.
    fn file(len: usize, at: &[(usize, &str)]) -> Vec<u8> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut f: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                // Never a 'P': no signature but the ones placed.
                (x as u8) & 0x7f | 0x01
            })
            .collect();
        for (i, name) in at {
            let m = member(name, format!("data of {name}").as_bytes());
            f[*i..*i + m.len()].copy_from_slice(&m);
        }
        f
    }

    /// Kept pieces: `(offset, bytes)`.
    type Kept = Vec<(u64, Vec<u8>)>;

    /// What a window holds: its head, its tail in file order, its kept pieces.
    fn held(w: &Window) -> (Vec<u8>, Vec<u8>, Kept) {
        let tail = [&w.tail[w.tail_at..], &w.tail[..w.tail_at]].concat();
        (w.head.clone(), tail, w.members.kept.clone())
    }

    #[test]
    fn a_window_holds_the_same_bytes_however_the_file_is_cut() {
        let plugin = wants();
        let len = 2 * WINDOW_HALF + (6 << 20);
        let mid = WINDOW_HALF + 1_000;
        let members = [
            (mid, "a/want.txt"),
            (mid + 5_000, "skip.txt"),
            // Inside the first one's kept piece, which grows over it.
            (mid + MAX_KEPT_MEMBER as usize - 10, "b/want.txt"),
            (mid + (3 << 20), "c/want.txt"),
        ];
        let f = file(len, &members);
        let mut whole = Window::for_plugin(&plugin);
        whole.feed(&f);
        let oracle = held(&whole);
        let starts: Vec<u64> = oracle.2.iter().map(|(s, _)| *s).collect();
        assert_eq!(starts, [mid as u64, (mid + (3 << 20)) as u64]);
        let piece = |at: usize, n: usize| {
            let mut b = vec![0; n];
            whole.read_at(at as u64, &mut b).map(|_| b)
        };
        // What is held is the file's bytes: the head, the tail, and what
        // follows each wanted header (grown over the second one).
        assert_eq!(piece(0, WINDOW_HALF).unwrap(), f[..WINDOW_HALF]);
        assert_eq!(
            piece(len - WINDOW_HALF, WINDOW_HALF).unwrap(),
            f[len - WINDOW_HALF..]
        );
        let grown = 2 * MAX_KEPT_MEMBER as usize;
        assert_eq!(piece(mid, grown).unwrap(), f[mid..mid + grown]);
        assert!(piece(mid - 5, 10).is_err());
        assert!(piece(mid + (3 << 20) - 1, 2).is_err());
        assert!(piece(len - 5, 10).is_err());
        // Feeds cut anywhere, and around every header at each byte of its
        // fixed part and name, keep the same.
        let mut cuts: Vec<Vec<usize>> = [7usize << 10, 65_536, 1_572_864]
            .iter()
            .map(|&n| (n..len).step_by(n).collect())
            .collect();
        for k in [1, 2, 4, 26, 28, 29, 30, 31, 33, 36, 40] {
            let mut c: Vec<usize> = (65_536..len).step_by(65_536).collect();
            c.extend(members.iter().map(|(at, _)| at + k));
            c.sort_unstable();
            cuts.push(c);
        }
        for c in cuts {
            let mut w = Window::for_plugin(&plugin);
            let mut from = 0;
            for &to in c.iter().chain([&len]) {
                w.feed(&f[from..to]);
                from = to;
            }
            let odd = c.iter().find(|x| **x % 65_536 != 0);
            assert!(held(&w) == oracle, "cut near {odd:?}");
        }
    }

    /// Two wanted headers, the second inside the first's name, both cut by
    /// the end of a feed: both are found in the carry, and the piece the
    /// first starts grows over the second.
    #[test]
    fn overlapping_headers_cut_by_a_feed_are_kept() {
        let plugin = wants();
        let at = 3 * WINDOW_HALF / 2;
        let mut f = file(3 * WINDOW_HALF, &[]);
        // The first header's name is "A", the second's name length (8) and
        // extra length (0), then "want.txt": the second's own name.
        let mut first = LOCAL.to_vec();
        first.extend_from_slice(&[0; 22]);
        first.extend_from_slice(&13u16.to_le_bytes());
        first.extend_from_slice(&0u16.to_le_bytes());
        first.extend_from_slice(b"A\x08\0\0\0want.txt");
        f[at..at + first.len()].copy_from_slice(&first);
        f[at + 5..at + 9].copy_from_slice(LOCAL);
        let mut whole = Window::for_plugin(&plugin);
        whole.feed(&f);
        let mut cut = Window::for_plugin(&plugin);
        cut.feed(&f[..at + 20]);
        cut.feed(&f[at + 20..]);
        assert!(held(&cut) == held(&whole));
        let mut b = vec![0; 100];
        cut.read_at(at as u64, &mut b).unwrap();
        assert_eq!(b, f[at..at + 100]);
    }

    /// A reader that says what it was fed: its length and BLAKE3.
    struct Fed(u64, blake3::Hasher);

    impl Follow for Fed {
        fn feed(&mut self, bytes: &[u8]) {
            self.0 += bytes.len() as u64;
            self.1.update(bytes);
        }
        fn finish(self: Box<Self>) -> Outcome {
            let hash = self.1.finalize().to_hex().to_string();
            Outcome::Package(vec![vec![Value::I64(self.0 as i64), Value::Str(hash)]])
        }
    }

    /// A following plugin is fed every byte of the file once, in order,
    /// whether the window held it whole (fed once read) or not (fed from
    /// the moment the window would lose its middle), however it is cut.
    #[test]
    fn a_following_plugin_is_fed_the_whole_file_however_it_is_cut() {
        let plugin: Arc<dyn Plugin> = Arc::new(Test {
            name: "follows",
            zip: |_| false,
            follow: || Some(Box::new(Fed(0, blake3::Hasher::new()))),
        });
        let whole = 2 * WINDOW_HALF;
        for len in [0, 5_000, whole, whole + 1, whole + (5 << 20) + 7] {
            let f = file(len, &[]);
            let want = Outcome::Package(vec![vec![
                Value::I64(len as i64),
                Value::Str(blake3::hash(&f).to_hex().to_string()),
            ]]);
            for step in [len.max(1), 1 << 20, 1_572_864, 65_537] {
                let mut w = Window::for_plugin(&plugin);
                for piece in f.chunks(step) {
                    w.feed(piece);
                }
                assert_eq!(w.outcome(), want, "{len} bytes in pieces of {step}");
            }
        }
    }

    /// A reader that panics on bytes that start with `boom`.
    struct Panics;

    impl Follow for Panics {
        fn feed(&mut self, bytes: &[u8]) {
            assert!(!bytes.starts_with(b"boom"), "a reader that panics");
        }
        fn finish(self: Box<Self>) -> Outcome {
            Outcome::NotAPackage
        }
    }

    /// A reader is fed on the producer's thread, outside the plugin
    /// threads' guard: one that panics there fails its file's row, and the
    /// window takes the rest of the file.
    #[test]
    fn a_reader_that_panics_as_it_is_fed_fails_its_file_only() {
        let plugin: Arc<dyn Plugin> = Arc::new(Test {
            name: "panics",
            zip: |_| false,
            follow: || Some(Box::new(Panics)),
        });
        let mut w = Window::for_plugin(&plugin);
        w.feed(&vec![0; 2 * WINDOW_HALF]);
        w.feed(b"boom");
        w.feed(b"more");
        assert_eq!(w.len(), 2 * WINDOW_HALF as u64 + 8);
        // What the window no longer keeps up is not read stale.
        assert!(w.read_at(w.len() - 4, &mut [0; 4]).is_err());
        assert!(w.read_at(0, &mut [0; 4]).is_ok());
        let said = Outcome::Damaged("plugin panics failed on it".into());
        assert_eq!(w.outcome(), said);
    }

    #[test]
    fn a_small_file_is_held_whole() {
        let w = Window::of(b"hello");
        assert_eq!(w.whole().as_deref(), Some(&b"hello"[..]));
        let mut r = w.reader();
        let mut s = String::new();
        std::io::Read::read_to_string(&mut r, &mut s).unwrap();
        assert_eq!(s, "hello");
    }

    /// A query names a plugin and columns this build or the archive knows;
    /// a section of a plugin the build lacks still answers for its own.
    #[test]
    fn a_query_is_checked_against_the_plugins_and_the_archive() {
        let build: Vec<Arc<dyn Plugin>> = vec![Arc::new(Test {
            name: "jar",
            zip: |_| false,
            follow: || None,
        })];
        let mut archive = Packages::default();
        let theirs = PackageTable {
            name: "wheel".into(),
            columns: vec![Column::new("requires", ColumnType::StrList)],
            rows: Vec::new(),
        };
        archive.tables.insert((2, String::new()), theirs);
        let check = |kind, cols: &[&str]| archive.check_query(&build, kind, cols);
        assert_eq!(check(Some("jar"), &[]), Ok(()));
        assert_eq!(check(Some("wheel"), &["requires"]), Ok(()));
        assert_eq!(check(None, &["requires"]), Ok(()));
        assert_eq!(
            check(Some("whl"), &[]),
            Err("no plugin is named whl (they are jar, wheel)".into())
        );
        assert_eq!(
            check(Some("jar"), &["requires"]),
            Err("jar has no column requires (its columns: )".into())
        );
        assert_eq!(
            check(None, &["require"]),
            Err("no plugin has a column require (the columns: requires)".into())
        );
    }
}
