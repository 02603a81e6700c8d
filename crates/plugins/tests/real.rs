//! Each plugin on real packages from the registries (`scripts/packages`
//! downloads them; `./scripts/test` runs it first), fed to a window the way
//! the engine feeds it: in 1.5 MiB pieces.

use std::path::PathBuf;
use std::sync::Arc;

use znippy_format::{Outcome, Plugin, Value, Window};

fn packages() -> PathBuf {
    let dir = std::env::var_os("ZNIPPY_PACKAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.packages"));
    assert!(
        dir.join(".stamp").exists(),
        "no real packages at {}: run ./scripts/packages",
        dir.display()
    );
    dir
}

/// What the plugin that claims `name` makes of it, with its column names.
fn extract(name: &str) -> (String, Vec<String>, Outcome) {
    let bytes = std::fs::read(packages().join(name)).unwrap();
    let plugins = znippy_plugins::builtin();
    let plugin: &Arc<dyn Plugin> = plugins.iter().find(|p| p.matches_path(name)).unwrap();
    let mut window = Window::for_plugin(plugin);
    for piece in bytes.chunks(1_572_864) {
        window.feed(piece);
    }
    let columns = plugin.columns().into_iter().map(|c| c.name).collect();
    (plugin.name().to_string(), columns, window.outcome())
}

/// The rows, as `column -> value` lookups.
fn read(name: &str) -> (String, Vec<Vec<(String, Value)>>) {
    let (plugin, columns, outcome) = extract(name);
    let Outcome::Package(rows) = outcome else {
        panic!("{name}: {outcome:?}");
    };
    let rows = rows
        .into_iter()
        .map(|r| columns.iter().cloned().zip(r).collect())
        .collect();
    (plugin, rows)
}

fn get<'a>(row: &'a [(String, Value)], col: &str) -> &'a Value {
    &row.iter().find(|(c, _)| c == col).unwrap().1
}

fn s(v: &str) -> Value {
    Value::Str(v.into())
}

#[test]
fn a_shaded_jar_lists_each_artifact_from_the_middle_of_a_large_file() {
    let (plugin, rows) = read("closure-compiler.jar");
    assert_eq!(plugin, "maven");
    let artifacts: Vec<&Value> = rows.iter().map(|r| get(r, "artifact_id")).collect();
    assert_eq!(rows.len(), 8, "{artifacts:?}");
    assert!(artifacts.contains(&&s("guava")), "{artifacts:?}");
    let guava = rows
        .iter()
        .find(|r| get(r, "artifact_id") == &s("guava"))
        .unwrap();
    assert_eq!(get(guava, "group_id"), &s("com.google.guava"));
    let Value::I64(classes) = get(guava, "class_count") else {
        panic!()
    };
    assert!(*classes > 5_000, "{classes}");
}

#[test]
fn a_maven_jar_gives_its_coordinates_and_its_manifest() {
    let (_, rows) = read("commons-lang3-3.12.0.jar");
    assert_eq!(rows.len(), 1);
    let r = &rows[0];
    assert_eq!(get(r, "group_id"), &s("org.apache.commons"));
    assert_eq!(get(r, "artifact_id"), &s("commons-lang3"));
    assert_eq!(get(r, "version"), &s("3.12.0"));
    assert_eq!(
        get(r, "bundle_symbolic_name"),
        &s("org.apache.commons.lang3")
    );
}

#[test]
fn a_jar_without_pom_properties_says_what_its_manifest_and_entries_do() {
    let (_, rows) = read("py4j.jar");
    assert_eq!(rows.len(), 1);
    assert_eq!(get(&rows[0], "artifact_id"), &Value::Null);
    let Value::I64(classes) = get(&rows[0], "class_count") else {
        panic!()
    };
    assert!(*classes > 10, "{classes}");
}

#[test]
fn a_wheel_and_an_sdist_give_name_version_and_requirements() {
    let (plugin, wheel) = read("idna-3.7-py3-none-any.whl");
    assert_eq!(plugin, "python");
    let w = &wheel[0];
    assert_eq!(get(w, "name"), &s("idna"));
    assert_eq!(get(w, "version"), &s("3.7"));
    assert_eq!(get(w, "kind"), &s("wheel"));
    assert_eq!(get(w, "requires_python"), &s(">=3.5"));
    assert_eq!(get(w, "tags"), &Value::List(vec!["py3-none-any".into()]));
    let (_, sdist) = read("idna-3.7.tar.gz");
    assert_eq!(get(&sdist[0], "name"), &s("idna"));
    assert_eq!(get(&sdist[0], "kind"), &s("sdist"));
    let (_, py4j) = read("py4j-0.10.9.9-py2.py3-none-any.whl");
    assert_eq!(get(&py4j[0], "name"), &s("py4j"));
}

/// Hatch puts `PKG-INFO` last, so a 5 MB sdist's metadata is past the
/// window's head: the window holds all of a file of up to twice that, and
/// the tarball is read through it to its end.
#[test]
fn a_large_sdist_whose_pkg_info_is_last_is_read_to_its_end() {
    let name = "pygments-2.21.0.tar.gz";
    let len = std::fs::metadata(packages().join(name)).unwrap().len();
    assert!(len > znippy_format::WINDOW_HALF as u64, "{len}");
    let (_, rows) = read(name);
    assert_eq!(get(&rows[0], "name"), &s("Pygments"));
    assert_eq!(get(&rows[0], "version"), &s("2.21.0"));
    assert_eq!(get(&rows[0], "kind"), &s("sdist"));
}

/// numpy's sdist is 20 MB, its `PKG-INFO` the last member after 68 MB of
/// tar: past what a window holds, the plugin follows the file as it streams
/// past, to that member.
#[test]
fn a_20_mb_sdist_is_followed_to_its_last_member() {
    let name = "numpy-2.1.3.tar.gz";
    let len = std::fs::metadata(packages().join(name)).unwrap().len();
    assert!(len > 2 * znippy_format::WINDOW_HALF as u64, "{len}");
    let (_, rows) = read(name);
    assert_eq!(get(&rows[0], "name"), &s("numpy"));
    assert_eq!(get(&rows[0], "version"), &s("2.1.3"));
    assert_eq!(get(&rows[0], "requires_python"), &s(">=3.10"));
}

#[test]
fn an_npm_tarball_gives_its_dependencies_as_a_map() {
    let (plugin, rows) = read("semver-7.6.0.tgz");
    assert_eq!(plugin, "npm");
    let r = &rows[0];
    assert_eq!(get(r, "name"), &s("semver"));
    assert_eq!(get(r, "license"), &s("ISC"));
    let Value::Map(deps) = get(r, "dependencies") else {
        panic!("{r:?}")
    };
    assert!(deps.iter().any(|(k, _)| k == "lru-cache"), "{deps:?}");
}

#[test]
fn a_crate_gives_its_manifest() {
    let (plugin, rows) = read("fst-0.4.7.crate");
    assert_eq!(plugin, "crate");
    let r = &rows[0];
    assert_eq!(get(r, "name"), &s("fst"));
    assert_eq!(get(r, "version"), &s("0.4.7"));
    assert_eq!(get(r, "edition"), &s("2018"));
    let Value::Map(deps) = get(r, "dependencies") else {
        panic!("{r:?}")
    };
    assert!(deps.iter().any(|(k, _)| k == "utf8-ranges"), "{deps:?}");
}

#[test]
fn a_deb_gives_its_control_fields() {
    let (plugin, rows) = read("hello_2.10-3_amd64.deb");
    assert_eq!(plugin, "deb");
    let r = &rows[0];
    assert_eq!(get(r, "package"), &s("hello"));
    assert_eq!(get(r, "version"), &s("2.10-3"));
    assert_eq!(get(r, "architecture"), &s("amd64"));
    let Value::List(deps) = get(r, "depends") else {
        panic!("{r:?}")
    };
    assert!(deps.iter().any(|d| d.starts_with("libc6")), "{deps:?}");
    let (_, lang3) = read("libcommons-lang3-java_3.12.0-2+deb12u1_all.deb");
    assert_eq!(get(&lang3[0], "package"), &s("libcommons-lang3-java"));
}
