//! Mounting the fault filesystem and ending it: unmounting, aborting its connection,
//! detaching it, and clearing the mounts of killed runs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fuser::MountOption;

use super::super::{content_at, next_seed, open_fd_targets};
use super::handlers::{Delayer, FaultFs};
use super::inodes::{FileState, Held, State};
use super::{file_name, FileSpec, FsStats, Serve};

/// The name of the filesystem in `/proc/self/mounts`: a prefix of its own, then the id of the
/// process that mounted it, so that a mount whose process is gone is known to be stale.
const FS_NAME: &str = "readahead-faults";

/// The fault filesystem, mounted in a temporary directory of its own.
///
/// Dropped without [`unmount`](Self::unmount) (a test that failed), it detaches the mount
/// lazily, so that nothing is left behind even where a file under it is still open.
#[derive(Debug)]
pub struct FaultMount {
    state: Arc<State>,
    session: Option<fuser::BackgroundSession>,
    /// The mount point, canonical, as `/proc/self/mounts` shows it.
    dir: PathBuf,
    /// Removed (it is empty) once the filesystem is unmounted.
    tempdir: Option<tempfile::TempDir>,
}

impl FaultMount {
    /// Mounts a filesystem serving `files` as `serve` says.
    ///
    /// # Errors
    ///
    /// Why it cannot be mounted here (no `/dev/fuse`, mounting refused), for the caller to
    /// print and skip.
    ///
    pub fn new(files: Vec<FileSpec>, serve: Serve) -> Result<FaultMount, String> {
        FaultMount::with_ttl(files, serve, Duration::ZERO)
    }

    /// As [`new`](Self::new), with entries and attributes the kernel may cache for `ttl`
    /// instead of not at all, as most FUSE filesystems let it: a name looked up once is then
    /// found again without asking the filesystem (`openat2` with `RESOLVE_CACHED` finds it,
    /// and only its open reaches the filesystem), and a size change may not show.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_ttl(
        files: Vec<FileSpec>,
        serve: Serve,
        ttl: Duration,
    ) -> Result<FaultMount, String> {
        if !Path::new("/dev/fuse").exists() {
            return Err("no /dev/fuse here".into());
        }
        unmount_stale();
        let tempdir = tempfile::Builder::new()
            .prefix("readahead-fuse-")
            .tempdir()
            .map_err(|e| format!("cannot make a mount point: {e}"))?;
        let dir = tempdir
            .path()
            .canonicalize()
            .expect("a canonical mount point");
        let state = Arc::new(State {
            files: files
                .into_iter()
                .map(|spec| FileState {
                    spec,
                    seed: next_seed(),
                    read_once: AtomicBool::new(false),
                    slow_sent: AtomicBool::new(false),
                })
                .collect(),
            serve,
            ttl,
            delayer: Delayer::new(),
            opens: AtomicU64::new(0),
            releases: AtomicU64::new(0),
            open_errors: AtomicU64::new(0),
            reads: AtomicU64::new(0),
            eio_replies: AtomicU64::new(0),
            slow_reads: AtomicU64::new(0),
            short_replies: AtomicU64::new(0),
            hung_reads: AtomicU64::new(0),
            hung_calls: AtomicU64::new(0),
            flushes: AtomicU64::new(0),
            readlinks: AtomicU64::new(0),
            hung: Held(Mutex::new(Some(Vec::new()))),
        });
        let mut config = fuser::Config::default();
        config.mount_options.extend([
            MountOption::RO,
            MountOption::FSName(format!("{FS_NAME}:{}", std::process::id())),
        ]);
        config.n_threads = Some(2);
        let session = fuser::spawn_mount(FaultFs(state.clone()), &dir, &config)
            .map_err(|e| format!("cannot mount a FUSE filesystem on {}: {e}", dir.display()))?;
        Ok(FaultMount {
            state,
            session: Some(session),
            dir,
            tempdir: Some(tempdir),
        })
    }

    /// How it answers opens.
    pub fn serve(&self) -> Serve {
        self.state.serve
    }

    /// The mount point.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The path of file `i`.
    pub fn path(&self, i: usize) -> PathBuf {
        self.dir.join(file_name(i))
    }

    /// The paths of every file, in order.
    pub fn paths(&self) -> Vec<PathBuf> {
        (0..self.state.files.len()).map(|i| self.path(i)).collect()
    }

    /// The spec file `i` was made with.
    pub fn spec(&self, i: usize) -> &FileSpec {
        &self.state.files[i].spec
    }

    /// The bytes file `i` holds at `offset..offset + len`, as the byte function says (whatever
    /// its size).
    pub fn bytes(&self, i: usize, offset: u64, len: usize) -> Vec<u8> {
        content_at(self.state.files[i].seed, offset, len)
    }

    /// The whole of file `i`, at its size once read (see
    /// [`FileSpec::final_size`](super::FileSpec::final_size)).
    pub fn expected(&self, i: usize) -> Vec<u8> {
        self.bytes(i, 0, self.spec(i).final_size() as usize)
    }

    /// What the filesystem has been asked and done so far.
    pub fn stats(&self) -> FsStats {
        let s = &self.state;
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        FsStats {
            opens: get(&s.opens),
            releases: get(&s.releases),
            open_errors: get(&s.open_errors),
            reads: get(&s.reads),
            eio_replies: get(&s.eio_replies),
            slow_reads: get(&s.slow_reads),
            short_replies: get(&s.short_replies),
            hung_reads: get(&s.hung_reads),
            hung_calls: get(&s.hung_calls),
            flushes: get(&s.flushes),
            readlinks: get(&s.readlinks),
        }
    }

    /// How many descriptors of this process name a file under the mount point.
    pub fn open_fds(&self) -> usize {
        let targets = open_fd_targets();
        targets.iter().filter(|t| t.starts_with(&self.dir)).count()
    }

    /// Whether `/proc/self/mounts` lists the mount point.
    pub fn is_mounted(&self) -> bool {
        mounts().iter().any(|(_, dir)| Path::new(dir) == self.dir)
    }

    /// Answers every read, open, `getattr` and `FLUSH` held by
    /// [`Faults::hang_at`](super::Faults::hang_at), [`Faults::hang_open`](super::Faults::hang_open)
    /// and the like, and from now on such calls at once.
    pub fn release_hung(&self) {
        let mut hung = self.state.hung.0.lock().unwrap_or_else(|e| e.into_inner());
        let held = hung.take().unwrap_or_default();
        drop(hung);
        held.into_iter().for_each(|reply| reply());
    }

    /// Ends a mount whose files stay open for good (a reader that leaked its descriptors):
    /// answers the reads it holds, aborts its connection (`/sys/fs/fuse/connections/N/abort`,
    /// through a `fusectl` mounted for the purpose), so that its session ends and any request
    /// left fails, and detaches it lazily, so that it is gone from the namespace at once (the
    /// kernel keeps it until its last file is closed). Returns whether the connection was
    /// aborted, saying why not on stderr.
    pub fn abandon(mut self) -> bool {
        self.release_hung();
        let aborted = abort_connection(&self.dir)
            .map_err(|e| eprintln!("cannot abort the FUSE connection: {e}"))
            .is_ok();
        detach(&self.dir);
        let session = self.session.take().expect("mounted");
        if aborted {
            // Its reads of the device fail now, which ends it.
            let _ = session.join();
        } else {
            // Serving on, for a mount nobody can reach; it ends with the process.
            std::mem::forget(session);
        }
        if let Some(dir) = self.tempdir.take() {
            let _ = dir.close();
        }
        aborted
    }

    /// Unmounts the filesystem and waits for its session to end.
    ///
    /// # Errors
    ///
    /// As `umount(2)`: `EBUSY` while a file under it is open.
    pub fn unmount(mut self) -> std::io::Result<()> {
        // A reader closes what it opened on a mount that may hang on helper threads, after it
        // is dropped, and the kernel lets go of a file closed there a moment after the close
        // returns: while the mount is busy, the unmount is tried again, for a while.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while let Err(e) = unmount_now(&self.dir) {
            if e.raw_os_error() != Some(libc::EBUSY) || std::time::Instant::now() > deadline {
                return Err(e);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        // Unmounted: the session's own unmount would find nothing to unmount.
        self.session.take().expect("mounted").join()?;
        if let Some(dir) = self.tempdir.take() {
            dir.close()?;
        }
        Ok(())
    }
}

impl Drop for FaultMount {
    fn drop(&mut self) {
        // A read held for good would keep the thread that asked for it, and whatever waits
        // for that thread, from ever finishing.
        self.release_hung();
        if self.session.is_some() {
            // A file left open under the mount would be flushed when the process exits,
            // after the filesystem's threads are gone: an exit that never ends. Aborted, the
            // connection fails it at once.
            if self.open_fds() > 0 {
                let _ = abort_connection(&self.dir);
            }
            detach(&self.dir);
        }
    }
}

/// The (source, mount point) of every mount of this process's namespace.
fn mounts() -> Vec<(String, String)> {
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split(' ');
            let source = fields.next()?;
            let dir = fields.next()?.replace("\\040", " ");
            Some((source.to_string(), dir))
        })
        .collect()
}

/// Unmounts the fault filesystems left by processes that are gone (a killed test), and
/// removes their mount points.
pub fn unmount_stale() {
    for (source, dir) in mounts() {
        let Some(pid) = source
            .strip_prefix(FS_NAME)
            .and_then(|s| s.strip_prefix(':'))
        else {
            continue;
        };
        if alive(pid) {
            continue;
        }
        detach(Path::new(&dir));
        let _ = std::fs::remove_dir(&dir);
    }
}

/// Whether process `pid` is running: a zombie (killed, not yet reaped) no longer serves its
/// mounts.
fn alive(pid: &str) -> bool {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    matches!(state, Some(s) if s != 'Z' && s != 'X')
}

/// Aborts the FUSE connection of the filesystem mounted at `dir`, through a `fusectl`
/// filesystem mounted on a temporary directory of its own (there is one `fusectl`, wherever
/// it is mounted, and `/sys/fs/fuse/connections` may not have it).
fn abort_connection(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let dev = std::fs::metadata(dir)?.dev();
    // The kernel names a connection by its device number, encoded as the kernel does.
    let conn = (u64::from(libc::major(dev)) << 20) | u64::from(libc::minor(dev));
    let ctl = tempfile::Builder::new()
        .prefix("readahead-fusectl-")
        .tempdir()?;
    mount_fusectl(ctl.path())?;
    let written = std::fs::write(ctl.path().join(conn.to_string()).join("abort"), "1");
    detach(ctl.path());
    written
}

/// Mounts the `fusectl` filesystem at `dir`.
fn mount_fusectl(dir: &Path) -> std::io::Result<()> {
    let target = c_path(dir);
    // SAFETY: every pointer is a NUL-terminated string that outlives the call; no data.
    let rc = unsafe {
        libc::mount(
            c"fusectl".as_ptr(),
            target.as_ptr(),
            c"fusectl".as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// `umount2(dir, 0)`: the session's thread then finds its mount gone, and ends.
fn unmount_now(dir: &Path) -> std::io::Result<()> {
    umount2(dir, 0)
}

/// Unmounts `dir` lazily: at once from the namespace, for good once nothing uses it.
fn detach(dir: &Path) {
    let _ = umount2(dir, libc::MNT_DETACH);
}

/// `umount2(dir, flags)`.
fn umount2(dir: &Path, flags: i32) -> std::io::Result<()> {
    let c = c_path(dir);
    // SAFETY: `c` is a NUL-terminated path that outlives the call.
    match unsafe { libc::umount2(c.as_ptr(), flags) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// A bind mount (`mount --bind`), detached (`umount2(MNT_DETACH)`) when dropped, a failed
/// test's too.
#[derive(Debug)]
pub struct Bound(PathBuf);

/// Bind-mounts `src` onto `dst` (a directory onto a directory, a file onto a file); why not,
/// where it cannot (not root).
pub fn bind(src: &Path, dst: &Path) -> Result<Bound, String> {
    let (c_src, c_dst) = (c_path(src), c_path(dst));
    // SAFETY: both paths are NUL-terminated and alive for the call; no data is passed.
    let rc = unsafe {
        let none = std::ptr::null();
        libc::mount(
            c_src.as_ptr(),
            c_dst.as_ptr(),
            none,
            libc::MS_BIND,
            none.cast(),
        )
    };
    match rc {
        0 => Ok(Bound(dst.to_path_buf())),
        _ => Err(format!("mount --bind: {}", std::io::Error::last_os_error())),
    }
}

impl Drop for Bound {
    fn drop(&mut self) {
        let c = c_path(&self.0);
        // SAFETY: a NUL-terminated path, alive for the call.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

fn c_path(p: &Path) -> std::ffi::CString {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(p.as_os_str().as_bytes()).expect("a path without NUL")
}
