//! Progress bars on a terminal, and the one-line summary everywhere.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

/// A byte-progress bar that exists only when stderr is a terminal.
#[derive(Clone)]
pub struct Progress {
    bar: Option<ProgressBar>,
    start: Instant,
}

impl Progress {
    pub fn new(total_bytes: u64, verb: &str) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar = ProgressBar::new(total_bytes);
            let style = ProgressStyle::with_template(&format!(
                "{verb} {{bar:40}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} eta {{eta}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            bar,
            start: Instant::now(),
        }
    }

    /// Adds `n` bytes to the total, as they are found.
    pub fn grow(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc_length(n);
        }
    }

    /// Prints a line to stderr above the bar.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    pub fn inc(&self, n: u64) {
        if let Some(b) = &self.bar {
            b.inc(n);
        }
    }

    /// Clears the bar and prints `files, bytes, ratio, MB/s` to stderr.
    pub fn finish(&self, what: &str, files: u64, raw: u64, stored: u64) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        let secs = self.start.elapsed().as_secs_f64().max(1e-9);
        let ratio = if stored == 0 {
            0.0
        } else {
            raw as f64 / stored as f64
        };
        eprintln!(
            "{what} {files} files, {} -> {} (ratio {ratio:.2}) in {secs:.2} s, {:.1} MB/s",
            human(raw),
            human(stored),
            raw as f64 / 1e6 / secs
        );
    }
}

pub fn human(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
