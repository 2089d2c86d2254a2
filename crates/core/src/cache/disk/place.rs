//! Where the disk tier may live, and that it stays there: never a system directory
//! or the root of a file system (the tier writes its block files and its own small
//! files into the directory), one process at a time (a lock file, held while the
//! tier is open), its size within what the engine and the descriptor limit allow,
//! and the same directory for as long as it runs (one deleted or replaced is
//! noticed: its files are gone with it).

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

use mdproxy_config::{Config, Env, MAX_DISK_BYTES, Problem};

/// The lock file's name in `cache.disk_path`: held (`flock`) while a process has the
/// tier open, and holding that process's ID.
pub const LOCK_FILE: &str = "mdproxy.lock";

/// The most block files the tier opens: larger disks get larger blocks (at
/// [`MAX_DISK_BYTES`], 256 MiB).
pub const MAX_FILES: u64 = 1024;

/// Descriptors kept for everything else than the tier's files and the client
/// connections: the upstream's pool, Redis, the listeners, logs.
const OTHER_DESCRIPTORS: u64 = 256;

/// Directories of the system a tier must never be written into (nor `/`).
const SYSTEM_DIRS: &[&str] = &[
    "/bin",
    "/boot",
    "/dev",
    "/etc",
    "/home",
    "/lib",
    "/lib32",
    "/lib64",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sbin",
    "/srv",
    "/sys",
    "/tmp",
    "/usr",
    "/usr/bin",
    "/usr/lib",
    "/usr/local",
    "/usr/sbin",
    "/var",
    "/var/cache",
    "/var/lib",
    "/var/log",
    "/var/run",
    "/var/tmp",
];

/// What is wrong with where or how large the tier is, for `check-config`, `serve`
/// and a reload: each problem with its key.
pub fn check(config: &Config, _env: &dyn Env) -> Vec<Problem> {
    let cache = &config.cache;
    let mut problems = Vec::new();
    if cache.disk_path.is_empty() {
        return problems;
    }
    let path = Path::new(&cache.disk_path);
    if let Some(why) = refused_place(path) {
        problems.push(Problem::new("cache.disk_path", why));
    } else if let Some(pid) = holder(path).filter(|pid| *pid != std::process::id()) {
        problems.push(Problem::new(
            "cache.disk_path",
            format!(
                "{} is in use by another mdproxy (process {pid}): give each process a directory of its own",
                path.display()
            ),
        ));
    }
    // Past its bound (the configuration's own check says so), nothing more to say.
    if cache.disk_bytes > MAX_DISK_BYTES {
        return problems;
    }
    if let Some(limit) = descriptor_limit() {
        let needed =
            files(cache.disk_bytes) + config.server.max_connections as u64 + OTHER_DESCRIPTORS;
        if needed > limit {
            problems.push(Problem::new(
                "cache.disk_bytes",
                format!(
                    "its {} block files, server.max_connections and {OTHER_DESCRIPTORS} more need {needed} file descriptors; this process may open {limit} (raise LimitNOFILE or ulimit -n, or lower these)",
                    files(cache.disk_bytes)
                ),
            ));
        }
    }
    problems
}

/// The block size for a tier of `capacity` bytes: `default` (a small disk's, or
/// 16 MiB), or larger so that the tier opens at most [`MAX_FILES`] files, in whole
/// MiB.
pub fn block_size(capacity: u64, default: u64) -> u64 {
    const MIB: u64 = 1 << 20;
    default.max(capacity.div_ceil(MAX_FILES).div_ceil(MIB) * MIB)
}

/// How many block files a tier of `capacity` bytes opens.
fn files(capacity: u64) -> u64 {
    if capacity == 0 {
        return 0;
    }
    capacity.div_ceil(block_size(capacity, 16 << 20))
}

/// How many files this process may open: the hard limit, to which `serve` raises
/// its soft limit at start (as nginx's `worker_rlimit_nofile` does), if it can be
/// read.
fn descriptor_limit() -> Option<u64> {
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE).ok()?;
    Some(hard)
}

/// Why the tier may not live at `path`: a system directory, the root of a file
/// system, or not a directory.
fn refused_place(path: &Path) -> Option<String> {
    if !path.is_absolute() {
        return Some(format!(
            "{} is relative: give an absolute path, a directory of the tier's own",
            path.display()
        ));
    }
    let normal: PathBuf = path
        .components()
        .filter(|c| !matches!(c, Component::CurDir))
        .collect();
    if normal == Path::new("/") || SYSTEM_DIRS.iter().any(|d| normal == Path::new(d)) {
        return Some(format!(
            "{} is a system directory: give the tier a directory of its own, such as /var/cache/mdproxy",
            path.display()
        ));
    }
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_dir() {
        return Some(format!("{} is not a directory", path.display()));
    }
    let parent = std::fs::metadata(path.join("..")).ok()?;
    (parent.dev() != meta.dev()).then(|| {
        format!(
            "{} is the root of a file system: give the tier a directory inside it, such as {}",
            path.display(),
            path.join("mdproxy").display()
        )
    })
}

/// The process holding the tier at `path`, if another holds it.
fn holder(path: &Path) -> Option<u32> {
    let file = File::open(path.join(LOCK_FILE)).ok()?;
    match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockShared) {
        Ok(()) => None,
        Err(_) => std::fs::read_to_string(path.join(LOCK_FILE))
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .or(Some(0)),
    }
}

/// The tier's hold on its directory: the lock, and the directory's identity at
/// open (its device and inode).
#[derive(Debug)]
pub struct Hold {
    /// Taken out when the engine is closed, so the same process may open the tier
    /// again (a restart in process): `flock` refuses a second open file even there.
    lock: std::sync::Mutex<Option<File>>,
    dir: PathBuf,
    identity: (u64, u64),
}

/// Why the tier could not take its directory.
#[derive(Debug, thiserror::Error)]
pub enum HoldError {
    #[error(
        "{path} is in use by another mdproxy (process {pid}): give each process a directory of its own"
    )]
    Held { path: String, pid: u32 },
    #[error("cannot lock {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

impl Hold {
    /// Locks the tier at `dir` (created beforehand) for this process, or says which
    /// process holds it.
    ///
    /// # Errors
    /// [`HoldError::Held`] when another process holds it, `Io` when the lock file
    /// cannot be made.
    pub fn take(dir: &Path) -> Result<Hold, HoldError> {
        use std::io::Write;
        let io = |source| HoldError::Io {
            path: dir.display().to_string(),
            source,
        };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(dir.join(LOCK_FILE))
            .map_err(io)?;
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Err(HoldError::Held {
                path: dir.display().to_string(),
                pid: holder(dir).unwrap_or(0),
            });
        }
        file.set_len(0).map_err(io)?;
        write!(file, "{}", std::process::id()).map_err(io)?;
        let meta = std::fs::metadata(dir).map_err(io)?;
        Ok(Hold {
            lock: std::sync::Mutex::new(Some(file)),
            dir: dir.to_owned(),
            identity: (meta.dev(), meta.ino()),
        })
    }

    /// Lets the directory go: the engine is closed.
    pub fn release(&self) {
        drop(
            self.lock
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take(),
        );
    }

    /// Whether the directory is still the one opened: not deleted, not replaced by
    /// another of the same name.
    pub fn still_there(&self) -> bool {
        std::fs::metadata(&self.dir).is_ok_and(|m| (m.dev(), m.ino()) == self.identity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("mdproxy-place-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// System directories, `/`, relative paths and files are refused; a directory
    /// of the tier's own is not.
    #[test]
    fn a_tier_needs_a_directory_of_its_own() {
        for refused in ["/", "/etc", "/var/lib/", "/usr/./lib", "relative/dir"] {
            assert!(refused_place(Path::new(refused)).is_some(), "{refused}");
        }
        let dir = scratch("own");
        assert_eq!(refused_place(&dir), None);
        let file = dir.join("a-file");
        std::fs::write(&file, b"x").unwrap();
        assert!(refused_place(&file).unwrap().contains("not a directory"));
        std::fs::remove_dir_all(&dir).ok();
    }

    /// One process at a time: a second hold is refused naming the first's process
    /// until the first lets go, and the hold notices its directory replaced.
    #[test]
    fn one_hold_at_a_time_and_the_directory_stays() {
        let dir = scratch("hold");
        let hold = Hold::take(&dir).unwrap();
        assert_eq!(holder(&dir), Some(std::process::id()));
        match Hold::take(&dir) {
            Err(HoldError::Held { pid, .. }) => assert_eq!(pid, std::process::id()),
            other => panic!("{other:?}"),
        }
        hold.release();
        let hold = Hold::take(&dir).expect("released, it can be taken again");
        assert!(hold.still_there());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(!hold.still_there(), "deleted");
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!hold.still_there(), "replaced by another of the same name");
        drop(hold);
        std::fs::remove_dir_all(&dir).ok();
    }

    /// Larger disks get larger blocks: never more than [`MAX_FILES`] files.
    #[test]
    fn blocks_grow_with_the_disk() {
        assert_eq!(block_size(20 << 30, 16 << 20), 20 << 20);
        assert_eq!(block_size(1 << 30, 16 << 20), 16 << 20);
        assert_eq!(files(MAX_DISK_BYTES), MAX_FILES);
        assert_eq!(files(20 << 30), 1024);
        assert_eq!(files(1 << 30), 64);
    }
}
