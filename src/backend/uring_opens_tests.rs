//! Opens through the ring: files of a directory found local, whose inodes the kernel dropped
//! (opened by its workers, after the try in the submission finds them not cached), come back
//! as files that read what `std::fs::read` reads; a link among them goes to a helper thread.
//! Skipped, saying why, where io_uring is refused, or where the inodes cannot be dropped (not
//! root, or the kernel keeps them): see `crate::tests`.

use std::io::{Read, Seek};
use std::path::PathBuf;

use super::tests::small_ring;
use super::*;
use crate::tests::{disk_tempdir, io_uring_here, skip_refused};

/// Files of the directory beside the first, which teaches the ring the directory is local.
const FILES: usize = 24;

/// Drops the kernel's cached dentries and inodes (root only); why not, where it cannot.
fn drop_inodes() -> Result<(), String> {
    std::fs::write("/proc/sys/vm/drop_caches", "2").map_err(|e| e.to_string())
}

/// Waits for every open started on `ring` (the kernel's, and helper threads') and takes
/// what came of them.
fn take_all(ring: &mut Ring<'static>) -> Vec<(u64, OpenResult<'static>)> {
    let (mut got, mut reaped) = (Vec::new(), Vec::new());
    loop {
        ring.submit().unwrap();
        ring.take_opened(&mut got);
        if ring.flight.any_open_in_kernel() {
            let deadline = Instant::now() + Duration::from_secs(30);
            assert!(ring.reap_until(Some(deadline), &mut reaped).unwrap());
        } else if !ring.wait_opens() {
            break;
        }
    }
    assert!(reaped.is_empty(), "no read was queued");
    got
}

#[test]
fn cold_inodes_of_a_local_directory_open_through_the_ring() {
    if !io_uring_here() {
        return;
    }
    let dir = disk_tempdir();
    let path = |i: usize| dir.path().join(format!("f{i}"));
    for i in 0..=FILES {
        std::fs::write(path(i), vec![i as u8; 1000 + 37 * i]).unwrap();
    }
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(path(1), &link).unwrap();
    let pool = Pool::with_capacity(4096, false).unwrap();
    let mut ring = small_ring(&pool, false);
    // The first file finds the directory local: on a helper thread, or here where the
    // kernel's table of mounts names its kind.
    match ring.start_open(0, &path(0), false) {
        OpenStart::Refused => panic!("refused"),
        OpenStart::Started => assert!(matches!(&take_all(&mut ring)[..], [(0, Ok(_))])),
        OpenStart::Done(opened) => assert!(opened.is_ok()),
    }
    if let Err(why) = drop_inodes() {
        skip_refused("dropping inodes", why);
        return;
    }
    let mut paths: Vec<PathBuf> = (1..=FILES).map(path).collect();
    if cached_only_opens(dir.path(), &paths) == paths.len() {
        skip_refused("cold inodes", "the kernel kept every inode cached");
        return;
    }
    paths.push(link);
    for (i, path) in paths.iter().enumerate() {
        let file = 1 + i as u64;
        match ring.start_open(file, path, false) {
            OpenStart::Refused => panic!("{}: refused", path.display()),
            OpenStart::Started => {}
            OpenStart::Done(_) => panic!("{}: opened here, not by the ring", path.display()),
        }
        if ring.flight.opens_len() >= 2 {
            ring.submit().unwrap(); // The ring's depth: take what came before more.
            let got = take_all(&mut ring);
            check(&paths, got);
        }
    }
    check(&paths, take_all(&mut ring));
}

/// How many of `paths` (in `dir`) the kernel opens from its caches alone (`RESOLVE_CACHED`):
/// a path it refuses is cold, and a refused open brings nothing into the caches.
fn cached_only_opens(dir: &std::path::Path, paths: &[PathBuf]) -> usize {
    let dir = std::fs::File::open(dir).unwrap();
    let opener = crate::sys::Opener::default();
    let name = |p: &PathBuf| PathBuf::from(p.file_name().unwrap());
    let opened = paths
        .iter()
        .map(|p| opener.open_beneath(&dir, &name(p), false));
    opened.filter(Result::is_ok).count()
}

/// Each file opened reads what `std::fs::read` reads of its path.
fn check(paths: &[PathBuf], got: Vec<(u64, OpenResult<'static>)>) {
    for (file, opened) in got {
        let path = &paths[file as usize - 1];
        let opened = opened.unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let mut bytes = Vec::new();
        let mut file = opened.fd.file();
        // Reads go by offset: the file's position is where sizing it left it (its end).
        file.rewind().unwrap();
        file.read_to_end(&mut bytes).unwrap();
        assert_eq!(bytes, std::fs::read(path).unwrap(), "{}", path.display());
        let size = (opened.size).unwrap_or_else(|| crate::io::size_local(file).unwrap());
        assert_eq!(size, bytes.len() as u64);
    }
}
