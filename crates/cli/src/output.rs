//! Where a command's `-o FILE` goes.
//!
//! A new name, or a regular file, is written beside itself and renamed into
//! place once the command has succeeded, so a failed command leaves no
//! half-written file and keeps the file it would have replaced. Anything
//! else that already has the name (`/dev/null`, `/dev/stdout`, a FIFO, a
//! symbolic link) is opened and written through: renaming over it would put
//! a regular file where a device node or a link was, which as root turns
//! `-o /dev/null` into a file on disk.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Refuses `dest` when it is the file `input` names, through links too:
/// writing there would destroy what the command reads.
pub fn not_the_input(dest: &Path, input: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    if let (Ok(d), Ok(i)) = (std::fs::metadata(dest), std::fs::metadata(input)) {
        if (d.dev(), d.ino()) == (i.dev(), i.ino()) {
            bail!(
                "{} is the archive being read; name another file",
                dest.display()
            );
        }
    }
    Ok(())
}

/// An output being written; [`Output::finish`] publishes it. Dropped
/// unfinished, it removes what it wrote beside the name.
pub struct Output {
    out: BufWriter<File>,
    /// The temporary file and the name it becomes, when written beside.
    rename: Option<(PathBuf, PathBuf)>,
}

impl Output {
    /// Opens `dest` for a command's whole output.
    pub fn create(dest: &Path) -> Result<Output> {
        let beside = match std::fs::symlink_metadata(dest) {
            Ok(m) if m.is_dir() => bail!("{} is a directory; name a file", dest.display()),
            Ok(m) => m.is_file(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(e).with_context(|| format!("looking at {}", dest.display())),
        };
        let (path, rename) = if beside {
            let mut name = dest.as_os_str().to_owned();
            name.push(".partial");
            let tmp = PathBuf::from(name);
            (tmp.clone(), Some((tmp, dest.to_path_buf())))
        } else {
            (dest.to_path_buf(), None)
        };
        let file = File::create(&path).with_context(|| format!("creating {}", path.display()))?;
        Ok(Output {
            out: BufWriter::new(file),
            rename,
        })
    }

    /// The device and inode number of the file being written, which a walk
    /// of a tree that holds it leaves out.
    pub fn id(&self) -> Result<(u64, u64)> {
        use std::os::unix::fs::MetadataExt;
        let m = self.out.get_ref().metadata()?;
        Ok((m.dev(), m.ino()))
    }

    /// Flushes what is written and puts it under its name.
    pub fn finish(mut self) -> Result<()> {
        self.out.flush()?;
        if let Some((tmp, dest)) = self.rename.take() {
            std::fs::rename(&tmp, &dest).with_context(|| format!("writing {}", dest.display()))?;
        }
        Ok(())
    }
}

impl Write for Output {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.out.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

impl Drop for Output {
    fn drop(&mut self) {
        if let Some((tmp, _)) = self.rename.take() {
            let _ = std::fs::remove_file(tmp);
        }
    }
}
