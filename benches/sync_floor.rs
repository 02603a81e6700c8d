//! What the filesystem alone charges for one acknowledged small write, laid
//! out as znippy's embedded catalog lays out a commit and as SeaweedFS lays
//! out a PUT. No znippy code runs: these are the system calls of each layout,
//! timed, so that the floor under a small PUT is known apart from the server
//! built on it. Built and run by `benches/sync_floor.sh`, which says how.
//!
//! Layouts, each run `RUNS` times in turn with the others (round-robin, so
//! that they share the disk's state), p50 and p90 of each:
//!
//! - `append`: 3 KB appended to one volume file, then `fdatasync`: SeaweedFS
//!   with `fsync` on (its volume server syncs the volume file once a PUT).
//! - `commit`: a commit of the embedded catalog. The sidecar's append and
//!   `fdatasync`; a parquet file, a manifest, a manifest list and a metadata
//!   file created and written one after the other, each synced on a worker
//!   as soon as it is written, and the two directories that gained names
//!   synced; when all of that is done, the pointer's write and `fdatasync`
//!   (redb's commit: three pages and its header); then the path layout (a
//!   hard link, and the version hint written under a temporary name and
//!   renamed).
//! - `commit, spares`: the same, but each new file is a spare made earlier
//!   (outside the timing) and renamed to its name, so that no inode is
//!   allocated while the commit waits.
//! - `commit, syncs together`: `commit`, but the files' syncs all start
//!   once the last file is written.
//! - `commit, one syncfs`: `commit`, but nothing is synced file by file:
//!   once the sidecar and the four files are written, one `syncfs` makes
//!   the whole filesystem durable (one cache flush where a sync a file
//!   issues one each), then the pointer as before. It also waits for
//!   whatever else the filesystem has in flight, such as other uploads'
//!   blobs.
//! - `commit, no layout`: `commit` without the path layout.
//! - `pointer only`: the sidecar and the pointer, no table files: what a
//!   commit would cost if the rows lived in the pointer's database, which
//!   the Iceberg tables rule out.
//!
//! After each commit the files of the commit 20 before it are deleted
//! (outside the timing), as the store's expiry does, so that a filesystem
//! that is slow to reuse deleted inodes shows it.

use std::collections::VecDeque;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Sizes of a small commit's files, as `strace` shows them: parquet,
/// manifest, manifest list, metadata file.
const FILES: [(&str, usize); 4] = [
    ("data", 4_900),
    ("metadata", 4_700),
    ("metadata", 3_100),
    ("metadata", 25_000),
];
/// How many commits back the deleted files are.
const EXPIRY: usize = 20;

/// How a commit lays out its writes.
#[derive(Clone, Copy)]
struct Commit {
    /// It writes the four table files (otherwise only the sidecar and the
    /// pointer).
    files: bool,
    /// Each file is a spare renamed to its name.
    spares: bool,
    /// The files' syncs start once all four are written, not each as its
    /// file is.
    together: bool,
    /// The path layout follows the pointer.
    layout: bool,
    /// One `syncfs` after every write, instead of a sync a file.
    syncfs: bool,
}

extern "C" {
    /// glibc's `syncfs(2)`; std links libc, so no crate is needed.
    fn syncfs(fd: i32) -> i32;
}

const COMMIT: Commit = Commit {
    files: true,
    spares: false,
    together: false,
    layout: true,
    syncfs: false,
};

/// The layouts timed, `None` being SeaweedFS's append.
const LAYOUTS: [(&str, Option<Commit>); 7] = [
    ("append", None),
    ("commit", Some(COMMIT)),
    (
        "commit, one syncfs",
        Some(Commit {
            syncfs: true,
            ..COMMIT
        }),
    ),
    (
        "commit, spares",
        Some(Commit {
            spares: true,
            ..COMMIT
        }),
    ),
    (
        "commit, syncs together",
        Some(Commit {
            together: true,
            ..COMMIT
        }),
    ),
    (
        "commit, no layout",
        Some(Commit {
            layout: false,
            ..COMMIT
        }),
    ),
    (
        "pointer only",
        Some(Commit {
            files: false,
            layout: false,
            ..COMMIT
        }),
    ),
];

type Job = Box<dyn FnOnce() -> io::Result<()> + Send>;

/// Worker threads that run syncs, as the store's blocking pool does.
struct Pool {
    jobs: mpsc::Sender<(Job, mpsc::Sender<io::Result<()>>)>,
}

impl Pool {
    fn new(workers: usize) -> Pool {
        let (jobs, rx) = mpsc::channel::<(Job, mpsc::Sender<io::Result<()>>)>();
        let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
        for _ in 0..workers {
            let rx = std::sync::Arc::clone(&rx);
            thread::spawn(move || loop {
                let next = rx
                    .lock()
                    .map_err(|_| ())
                    .and_then(|r| r.recv().map_err(|_| ()));
                let Ok((job, done)) = next else { return };
                let _ = done.send(job());
            });
        }
        Pool { jobs }
    }

    fn start(&self, job: Job) -> mpsc::Receiver<io::Result<()>> {
        let (tx, rx) = mpsc::channel();
        self.jobs
            .send((job, tx))
            .expect("the pool outlives its jobs");
        rx
    }
}

fn wait(started: Vec<mpsc::Receiver<io::Result<()>>>) -> io::Result<()> {
    for s in started {
        s.recv()
            .map_err(|_| io::Error::other("a sync worker died"))??;
    }
    Ok(())
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

struct Layout {
    root: PathBuf,
    volume: File,
    pointer: File,
    pool: Pool,
    spares: Vec<PathBuf>,
    made: VecDeque<Vec<PathBuf>>,
    n: u64,
}

impl Layout {
    fn new(root: &Path) -> io::Result<Layout> {
        for d in ["data", "metadata"] {
            fs::create_dir_all(root.join(d))?;
        }
        let open = |name| {
            OpenOptions::new()
                .create(true)
                .read(true)
                .append(name == "volume")
                .write(true)
                .open(root.join(name))
        };
        let pointer = open("pointer")?;
        pointer.write_all_at(&[0; 65_536], 0)?;
        pointer.sync_all()?;
        Ok(Layout {
            root: root.to_path_buf(),
            volume: open("volume")?,
            pointer,
            pool: Pool::new(8),
            spares: Vec::new(),
            made: VecDeque::new(),
            n: 0,
        })
    }

    fn name(&mut self, dir: &str, what: &str) -> PathBuf {
        self.n += 1;
        self.root.join(dir).join(format!("{what}-{}", self.n))
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.volume.write_all(&bytes[..3_000])?;
        self.volume.sync_data()
    }

    /// One commit laid out as `how` says.
    fn commit(&mut self, bytes: &[u8], how: Commit) -> io::Result<()> {
        let mut started = Vec::new();
        if how.syncfs {
            self.volume.write_all(&bytes[..3_000])?;
        } else {
            let volume = self.volume.try_clone()?;
            let side = bytes[..3_000].to_vec();
            started.push(self.pool.start(Box::new(move || {
                (&volume).write_all(&side)?;
                volume.sync_data()
            })));
        }
        let mut made = Vec::new();
        let mut unsynced = Vec::new();
        if how.files {
            let spared = if how.spares {
                std::mem::take(&mut self.spares)
            } else {
                Vec::new()
            };
            for (i, (dir, size)) in FILES.iter().enumerate() {
                let path = self.name(dir, "file");
                let mut f = match spared.get(i) {
                    Some(spare) => {
                        fs::rename(spare, &path)?;
                        OpenOptions::new().write(true).open(&path)?
                    }
                    None => File::create(&path)?,
                };
                f.write_all(&bytes[..*size])?;
                made.push(path);
                let mut syncs: Vec<Job> = vec![Box::new(move || f.sync_all())];
                if i == 0 || i == FILES.len() - 1 {
                    let dir = self.root.join(dir);
                    syncs.push(Box::new(move || sync_dir(&dir)));
                }
                for sync in syncs {
                    match (how.syncfs, how.together) {
                        (true, _) => {}
                        (false, true) => unsynced.push(sync),
                        (false, false) => started.push(self.pool.start(sync)),
                    }
                }
            }
        }
        started.extend(unsynced.into_iter().map(|sync| self.pool.start(sync)));
        wait(started)?;
        if how.syncfs {
            use std::os::fd::AsRawFd;
            let root = File::open(&self.root)?;
            // SAFETY: `root` is an open descriptor for the call's length.
            if unsafe { syncfs(root.as_raw_fd()) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        for (page, at) in [
            (4_096, 536_576),
            (4_096, 552_960),
            (4_096, 565_248),
            (320, 0),
        ] {
            self.pointer.write_all_at(&bytes[..page], at)?;
        }
        self.pointer.sync_data()?;
        if how.layout {
            let link = self.name("metadata", "v");
            fs::hard_link(&made[made.len() - 1], &link)?;
            made.push(link);
            let tmp = self.root.join("metadata/.hint.tmp");
            fs::write(&tmp, self.n.to_string())?;
            fs::rename(&tmp, self.root.join("metadata/version-hint.text"))?;
        }
        self.made.push_back(made);
        Ok(())
    }

    /// What the store does between commits: expiry deletes the files of an
    /// old commit; and, for `commit, spares`, the spares used are made again.
    fn between(&mut self) -> io::Result<()> {
        if self.made.len() > EXPIRY {
            for p in self.made.pop_front().unwrap_or_default() {
                fs::remove_file(p)?;
            }
        }
        if self.spares.is_empty() {
            for (dir, _) in FILES {
                let spare = self.name(dir, ".spare");
                File::create(&spare)?;
                self.spares.push(spare);
            }
        }
        // The spares' names are made durable before any commit renames one.
        sync_dir(&self.root.join("data"))?;
        sync_dir(&self.root.join("metadata"))
    }
}

fn main() -> io::Result<()> {
    let dir = PathBuf::from(std::env::args().nth(1).ok_or_else(|| {
        io::Error::other("usage: sync-floor DIR (an empty directory on the filesystem to measure)")
    })?);
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(300);
    let mut layout = Layout::new(&dir)?;
    let bytes: Vec<u8> = (0..65_536u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut times: Vec<Vec<Duration>> = vec![Vec::new(); LAYOUTS.len()];
    layout.between()?;
    for _ in 0..runs {
        for ((_, how), t) in LAYOUTS.iter().zip(&mut times) {
            let start = Instant::now();
            match how {
                None => layout.append(&bytes)?,
                Some(how) => layout.commit(&bytes, *how)?,
            }
            t.push(start.elapsed());
            layout.between()?;
        }
    }
    println!("| layout | p50 (ms) | p90 (ms) | against `append` (p50) |");
    println!("|---|---:|---:|---:|");
    let p = |t: &mut Vec<Duration>, q: f64| {
        t.sort();
        t[((t.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e3
    };
    let base = p(&mut times[0], 0.5);
    for ((name, _), t) in LAYOUTS.iter().zip(&mut times) {
        let (p50, p90) = (p(t, 0.5), p(t, 0.9));
        println!("| {name} | {p50:.2} | {p90:.2} | {:.2}x |", p50 / base);
    }
    Ok(())
}
