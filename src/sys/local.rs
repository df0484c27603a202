//! The filesystems known to be local, on local devices or in memory, where no call waits on
//! a server or daemon for good: known by `fstatfs`'s `f_type` (`unix::may_hang`) and by the
//! names the kernel's table of mounts gives them (`mounts`). One table for both, so that the
//! two never disagree about a kind.

/// Filesystems on local devices or in memory: their `f_type` (`linux/magic.h`), and the
/// names the kernel gives their mounts (`/proc/self/mountinfo`). Overlayfs is local by its
/// `f_type` alone: `fstatfs` of it asks its upper layer, so one on a hung server is never
/// found local, while its name says nothing of where its layers lie.
const LOCAL: [(i64, &[&str]); 24] = [
    (0xef53, &["ext2", "ext3", "ext4"]),
    (0x5846_5342, &["xfs"]),
    (0x9123_683e, &["btrfs"]),
    (0x0102_1994, &["tmpfs"]),
    (0x8584_58f6, &["ramfs"]),
    (0x9584_58f6, &["hugetlbfs"]),
    (0xf2f5_2010, &["f2fs"]),
    (0x2fc1_2fc1, &["zfs"]),
    (0xca45_1a4e, &["bcachefs"]),
    (0x3153_464a, &["jfs"]),
    (0x5265_4973, &["reiserfs"]),
    (0x4d44, &["vfat", "msdos"]),
    (0x2011_bab0, &["exfat"]),
    (0x5346_544e, &["ntfs", "ntfs3"]),
    (0x7371_7368, &["squashfs"]),
    (0xe0f5_e1e2, &["erofs"]),
    (0x9660, &["iso9660"]),
    (0x1501_3346, &["udf"]),
    (0x3434, &["nilfs2"]),
    (0x482b, &["hfsplus"]),
    (0x794c_7630, &[]),
    (0x9fa0, &["proc"]),
    (0x6265_6572, &["sysfs"]),
    (0x28cd_3d45, &["cramfs"]),
];

/// Whether `f_type`, a filesystem's magic number as `fstatfs` gives it, is one known to be
/// local (see `unix::may_hang`).
pub(super) fn magic_is_local(f_type: i64) -> bool {
    LOCAL.iter().any(|&(magic, _)| magic == f_type)
}

/// Whether `kind`, a filesystem's name in the kernel's table of mounts, is one known to be
/// local (see `mounts::mount_known_local`).
pub(super) fn kind_is_local(kind: &str) -> bool {
    LOCAL.iter().any(|(_, names)| names.contains(&kind))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_kind_that_may_hang_is_named_local() {
        for kind in ["ext4", "xfs", "btrfs", "tmpfs"] {
            assert!(kind_is_local(kind), "{kind}");
        }
        // Overlay is local by `fstatfs` alone, which asks its upper layer (see `LOCAL`).
        let may_hang = [
            "fuse",
            "fuseblk",
            "fuse.ext4",
            "nfs",
            "nfs4",
            "cifs",
            "smb3",
            "9p",
            "ceph",
            "overlay",
            "devtmpfs",
            "",
        ];
        for kind in may_hang {
            assert!(!kind_is_local(kind), "{kind}");
        }
    }
}
