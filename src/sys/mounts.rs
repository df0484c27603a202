//! Which mount a descriptor lies on, and whether the kernel's table of mounts names that
//! mount's filesystem one known to be local: asked of the VFS and of `/proc`, never of the
//! filesystem, so that a reader's thread may ask it of any directory (`Dirs::place`).
//!
//! The table is read once a process, and again only after a mount or unmount changed it, not
//! once a reader: writing it out costs the kernel tens of µs for a few dozen mounts (far more
//! on a host with hundreds).

use std::fs::File;

/// The mount a descriptor lies on (`mnt_id` in `/proc/thread-self/fdinfo`, the calling
/// thread's table of descriptors, which may be its own): the VFS answers it, not
/// the filesystem (`statx`, even with `AT_STATX_DONT_SYNC`, may ask a 9p or CIFS server), so
/// the reader's thread may ask it of any descriptor. `None` without `/proc`, or off Linux.
pub(crate) fn mount_id(file: &File) -> Option<u64> {
    #[cfg(target_os = "linux")]
    {
        use std::io::Read;
        use std::os::fd::AsRawFd;
        // Every descriptor's fdinfo starts with `pos`, `flags` and `mnt_id`, written in one
        // piece, in well under this: one read, where a whole file would take a size check
        // and reads that double from 32 bytes.
        let mut info = [0; 256];
        let path = format!("/proc/thread-self/fdinfo/{}", file.as_raw_fd());
        let n = File::open(path).and_then(|mut f| f.read(&mut info)).ok()?;
        mnt_id(&info[..n])
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = file;
        None
    }
}

/// The `mnt_id` of `info`, the start of a descriptor's fdinfo: a whole line of its own.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn mnt_id(info: &[u8]) -> Option<u64> {
    let mut lines = info.split(|&b| b == b'\n');
    lines.next_back(); // The last, unless empty, may be cut short.
    let line = lines.find_map(|l| l.strip_prefix(b"mnt_id:"))?;
    std::str::from_utf8(line).ok()?.trim().parse().ok()
}

/// The longest table of mounts read (`mount_known_local`): a few hundred mounts. A host with
/// thousands (a container host) has its mounts checked on helper threads.
#[cfg(target_os = "linux")]
const MOUNT_TABLE_MAX: u64 = 64 << 10;

/// Whether the mount `mount` (an id from [`mount_id`]) is of a kind of filesystem known to
/// be local (see `may_hang`), as the kernel's table of mounts names it
/// (`/proc/self/mountinfo`). The kernel writes that table from what each mounted filesystem
/// holds in memory, under the lock of the mount table, asking no server or daemon, so the
/// reader's thread may read it, and no helper thread need check the mount. `false` where it
/// cannot tell (no `/proc`, a table longer than `MOUNT_TABLE_MAX`, a kind not listed, off
/// Linux): the mount is then checked on a helper thread.
///
/// The table is read again only once the kernel says it changed (`Table::changed`), so that
/// a mount's id, which the kernel gives again once its mount is gone, never finds the kind
/// of the mount it named before.
pub(crate) fn mount_known_local(mount: u64) -> bool {
    #[cfg(target_os = "linux")]
    {
        use std::sync::{Mutex, TryLockError};
        static TABLE: Mutex<Option<Table>> = Mutex::new(None);
        let mut table = match TABLE.try_lock() {
            Ok(table) => table,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            // Another thread reads the table (or held it when the process forked): this one
            // reads its own rather than wait.
            Err(TryLockError::WouldBlock) => {
                return Table::read().is_some_and(|t| t.local(mount));
            }
        };
        if table.as_ref().is_none_or(Table::changed) {
            *table = Table::read();
        }
        table.as_ref().is_some_and(|t| t.local(mount))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = mount;
        false
    }
}

/// The kernel's table of mounts as last read: the ids of its mounts of a kind known local,
/// with the table kept open to ask whether it changed since.
#[cfg(target_os = "linux")]
struct Table {
    /// `/proc/self/mountinfo`, open since before it was read: `poll` marks it `POLLPRI` once
    /// a mount or unmount in the mount namespace it was opened in changed it since the open,
    /// or since a `poll` on its open file description said so, in any process that shares it.
    file: File,
    /// Who opened `file`: the process (a child forked since shares the description, and
    /// its `poll` would take the parent's news), its mount namespace (`unshare` or `setns`
    /// since: the file still shows the one before), and the file itself (device, inode: a
    /// descriptor closed behind the reader's back, its number given to another file).
    opened: Opened,
    /// The ids of the mounts of a kind known local; none where the table was longer than
    /// `MOUNT_TABLE_MAX`.
    local: Vec<u64>,
}

/// Who opened the table (see `Table::opened`).
#[cfg(target_os = "linux")]
#[derive(PartialEq)]
struct Opened {
    process: u32,
    namespace: Option<u64>,
    file: Option<(u64, u64)>,
}

#[cfg(target_os = "linux")]
impl Opened {
    fn now(file: &File) -> Opened {
        use std::os::unix::fs::MetadataExt;
        let namespace = std::fs::metadata("/proc/self/ns/mnt").ok();
        Opened {
            process: std::process::id(),
            namespace: namespace.map(|ns| ns.ino()),
            file: file.metadata().ok().map(|meta| (meta.dev(), meta.ino())),
        }
    }
}

#[cfg(target_os = "linux")]
impl Table {
    /// The table as it is now; `None` where it cannot be read (no `/proc`).
    fn read() -> Option<Table> {
        use std::io::Read;
        let file = File::open("/proc/self/mountinfo").ok()?;
        let opened = Opened::now(&file);
        // Room for a usual table at once: into an empty `Vec`, `read_to_end` starts with a
        // read of 32 bytes and doubles, and each read of the kernel's text walks its mounts
        // again up to where the last stopped (nine reads for a table of 2 KiB).
        let mut text = Vec::with_capacity(16 << 10);
        (&file)
            .take(MOUNT_TABLE_MAX + 1)
            .read_to_end(&mut text)
            .ok()?;
        let local = if text.len() as u64 > MOUNT_TABLE_MAX {
            Vec::new()
        } else {
            let lines = text.split(|&b| b == b'\n').filter_map(id_and_kind);
            lines
                .filter(|&(_, kind)| super::local::kind_is_local(kind))
                .map(|(id, _)| id)
                .collect()
        };
        Some(Table {
            file,
            opened,
            local,
        })
    }

    /// Whether a mount or unmount changed the table since it was read, or the kernel cannot
    /// tell: asked only of the process, namespace and file it was read in (see `opened`).
    fn changed(&self) -> bool {
        Opened::now(&self.file) != self.opened || super::unix::priority_event(&self.file)
    }

    fn local(&self, mount: u64) -> bool {
        self.local.contains(&mount)
    }
}

/// The id and kind of filesystem of a mount, from its line in `/proc/self/mountinfo`: its id
/// first, its kind the first field after ` - ` (the fields before it escape their spaces, so
/// ` - ` appears nowhere else). Bytes: a path in the table need not be UTF-8; an id and a
/// kind are ASCII.
#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
fn id_and_kind(line: &[u8]) -> Option<(u64, &str)> {
    let first = line.split(|&b| b == b' ').next()?;
    let id = std::str::from_utf8(first).ok()?.parse().ok()?;
    let at = line.windows(3).position(|w| w == b" - ")?;
    let kind = line[at + 3..].split(|&b| b == b' ').next()?;
    Some((id, std::str::from_utf8(kind).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(target_os = "linux")]
    use crate::tests::Mounted;

    /// The kind of mount `mount` in `table`, as `Table::read` finds it.
    fn kind_of(table: &[u8], mount: u64) -> Option<&str> {
        let mut lines = table.split(|&b| b == b'\n').filter_map(id_and_kind);
        lines.find(|&(id, _)| id == mount).map(|(_, kind)| kind)
    }

    #[test]
    fn a_mount_s_kind_is_the_field_after_the_separator_of_its_own_line() {
        let table = b"\
22 1 0:21 / /proc rw,nosuid shared:5 - proc proc rw
98 22 8:1 /a\\040-\\040b /mnt/x\\040-\\040y\xff rw master:1 - ext4 /dev/sda1 rw
980 22 0:55 / /mnt/f rw,nosuid - fuse.sshfs host:/ rw,user_id=0
981 22 0:56 / /mnt/g rw
";
        assert_eq!(kind_of(table, 22), Some("proc"));
        assert_eq!(
            kind_of(table, 98),
            Some("ext4"),
            "escaped spaces, a path not UTF-8, optional fields"
        );
        assert_eq!(kind_of(table, 980), Some("fuse.sshfs"));
        assert_eq!(kind_of(table, 981), None, "no separator");
        assert_eq!(
            kind_of(table, 9),
            None,
            "an id that is only a prefix of another"
        );
        assert_eq!(kind_of(table, 7), None, "not in the table");
    }

    #[test]
    fn a_mount_id_is_read_from_its_whole_line_alone() {
        assert_eq!(
            mnt_id(b"pos:\t0\nflags:\t012200000\nmnt_id:\t27\nino:\t5\n"),
            Some(27)
        );
        assert_eq!(
            mnt_id(b"pos:\t0\nmnt_id:\t27\n"),
            Some(27),
            "the last line, whole"
        );
        assert_eq!(
            mnt_id(b"pos:\t0\nmnt_id:\t27"),
            None,
            "cut short: 27 may be 271"
        );
        assert_eq!(mnt_id(b"pos:\t0\nflags:\t0\n"), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_mount_of_a_local_directory_is_known_local_where_proc_says_so() {
        let dir = File::open(std::env::temp_dir()).unwrap();
        let Some(mount) = mount_id(&dir) else {
            return eprintln!("skipped: no /proc/self/fdinfo");
        };
        let local = !super::super::unix::may_hang(&dir);
        // Never local where `fstatfs` says it may hang; local where both can tell.
        assert!(!mount_known_local(mount) || local);
        let table = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
        let Some(kind) = kind_of(&table, mount) else {
            return eprintln!("skipped: the temporary directory's mount is not in the table");
        };
        let listed = super::super::local::kind_is_local(kind);
        assert!(!mount_known_local(mount) || listed, "{kind}");
        if table.len() as u64 <= MOUNT_TABLE_MAX {
            assert_eq!(mount_known_local(mount), listed && local, "{kind}");
        }
    }

    /// A directory of its own to mount filesystems on, in the temporary directory, removed
    /// when dropped, a test's panic included (what is mounted on it is detached by its
    /// `Mounted`, dropped first).
    #[cfg(target_os = "linux")]
    struct MountPoint(std::path::PathBuf);

    #[cfg(target_os = "linux")]
    impl MountPoint {
        /// `test`: the test's own name for it, so that tests run at once mount apart.
        fn new(test: &str) -> MountPoint {
            let name = format!("readahead-mounts-{}-{test}", std::process::id());
            let dir = std::env::temp_dir().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            MountPoint(dir)
        }

        /// Mounts `kind` (a filesystem that needs no device) here: it and its mount's id, or
        /// `None` where it could not (root, with `mount(8)`, and `/proc`).
        fn mount(&self, kind: &str) -> Option<(Mounted, u64)> {
            let mounted = Mounted::new(kind, &self.0)?;
            Some((mounted, mount_id(&File::open(&self.0).unwrap())?))
        }
    }

    #[cfg(target_os = "linux")]
    impl Drop for MountPoint {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir(&self.0);
        }
    }

    /// A tmpfs mounted on `dir`, found local (the table read with it), then unmounted and an
    /// mqueue mounted in its place (not listed local: taken for one that may hang), which
    /// the kernel gives the tmpfs's id again where that is free: their ids, or `None` where
    /// they cannot be mounted here; and the mqueue, unmounted when dropped.
    #[cfg(target_os = "linux")]
    fn tmpfs_then_mqueue(dir: &MountPoint) -> Option<(u64, u64, Mounted)> {
        let Some((mounted, tmpfs)) = dir.mount("tmpfs") else {
            eprintln!("skipped: cannot mount a tmpfs here (root, mount(8), /proc)");
            return None;
        };
        assert!(mount_known_local(tmpfs), "a tmpfs is local");
        drop(mounted);
        let Some((mounted, mqueue)) = dir.mount("mqueue") else {
            eprintln!("skipped: cannot mount an mqueue here");
            return None;
        };
        if mqueue != tmpfs {
            eprintln!("the kernel gave the mqueue id {mqueue}, not {tmpfs}: no id given again");
        }
        Some((tmpfs, mqueue, mounted))
    }

    /// The table read once is read again after a mount or unmount: a mount made after it,
    /// where one the table knew as local was, under the same id where the kernel gives it
    /// again, is not taken for it.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_mount_made_after_the_table_was_read_is_known_by_its_own_kind() {
        let dir = MountPoint::new("after");
        if let Some((tmpfs, mqueue, _mounted)) = tmpfs_then_mqueue(&dir) {
            assert!(!mount_known_local(mqueue), "mount {mqueue}, after {tmpfs}");
        }
    }

    /// A child forked after the table was read shares its open file description, on which
    /// the kernel marks a change seen: the child's look at the table leaves the parent's
    /// news of a newer mount, under the id of one it knew local, where it was.
    #[cfg(target_os = "linux")]
    #[test]
    fn a_forked_child_leaves_its_parent_the_news_of_a_mount() {
        let dir = MountPoint::new("fork");
        let Some((tmpfs, mqueue, _mounted)) = tmpfs_then_mqueue(&dir) else {
            return;
        };
        // The table's lock is only tried: a child never waits on it.
        let child = super::super::unix::in_forked_child(|| {
            let _ = mount_known_local(0);
        });
        assert!(child, "the child returned");
        assert!(!mount_known_local(mqueue), "mount {mqueue}, after {tmpfs}");
    }
}
