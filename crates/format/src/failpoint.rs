//! Named failpoints: the steps of a commit where a crash test makes the
//! process die, so that each test knows exactly where the crash landed.
//!
//! Built with the `failpoints` feature (the CLI's tests turn it on), a call
//! [`failpoint`]`("store.blobs-written")` aborts the process, after saying so on
//! stderr, when the environment variable `ZNIPPY_FAILPOINT` names that point.
//! Without the feature it compiles to nothing. Abort, not panic: a crash must
//! skip every destructor, unwinding and buffered write, as `kill -9` would.
//!
//! The points, in the order a change reaches them, are listed in
//! docs/store.md ("Crash testing").

/// Dies here if `ZNIPPY_FAILPOINT` names `name` (with the `failpoints`
/// feature; a no-op otherwise).
#[inline]
pub fn failpoint(name: &str) {
    #[cfg(feature = "failpoints")]
    {
        use std::io::Write;
        static ARMED: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
        let armed = ARMED.get_or_init(|| std::env::var("ZNIPPY_FAILPOINT").ok());
        if armed.as_deref() == Some(name) {
            let _ = writeln!(std::io::stderr(), "znippy: failpoint {name} reached");
            std::process::abort();
        }
    }
    #[cfg(not(feature = "failpoints"))]
    let _ = name;
}
