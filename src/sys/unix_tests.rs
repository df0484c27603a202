//! Descriptor flags on Unix: turning direct I/O off keeps the descriptor and its other flags.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::*;
use crate::sys::{clear_direct, status_flags, Opener};

/// `count` files of distinct sizes and bytes in `dir`, readable by every user.
fn make_files(dir: &Path, count: usize) -> (Vec<PathBuf>, Vec<Vec<u8>>) {
    let mut paths = Vec::new();
    let mut data = Vec::new();
    for i in 0..count {
        let path = dir.join(format!("f{i}"));
        let bytes: Vec<u8> = (0..1000 + 777 * i)
            .map(|j| (i * 31 + j % 251) as u8)
            .collect();
        std::fs::write(&path, &bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        paths.push(path);
        data.push(bytes);
    }
    (paths, data)
}

#[test]
fn clear_direct_turns_o_direct_off_on_the_same_descriptor() {
    let dir = tempfile::tempdir().unwrap();
    let (paths, data) = make_files(dir.path(), 1);
    let (file, flags) = Opener::default().open(&paths[0], true).unwrap();
    if flags & libc::O_DIRECT == 0 {
        eprintln!("skipped: {} refuses O_DIRECT", dir.path().display());
        return;
    }
    assert_ne!(status_flags(&file).unwrap() & libc::O_DIRECT, 0);
    clear_direct(&file).unwrap();
    let now = status_flags(&file).unwrap();
    assert_eq!(now & libc::O_DIRECT, 0, "flags {now:o}");
    assert_eq!(
        now & libc::O_NOATIME,
        flags & libc::O_NOATIME,
        "the rest kept"
    );
    // A read O_DIRECT refuses (unaligned) now goes through.
    let mut buf = [0u8; 10];
    assert_eq!(read_at(&file, &mut buf, 3).unwrap(), 10);
    assert_eq!(buf, data[0][3..13]);
}
