//! `ThreadOpens`: where each file opens, and what comes back.

use std::os::unix::fs::symlink;

use super::*;

/// Waits for every open under way, and every mount check, and takes what came of the opens.
fn take_all(opens: &mut ThreadOpens) -> Vec<(u64, OpenResult<'static>)> {
    let mut out = Vec::new();
    while !opens.started.is_empty() {
        opens.wait();
        opens.take(&mut out);
    }
    // A mount's check is a job of its own, which may answer after the open: what the next
    // open may do depends on it.
    while opens.out > 0 {
        let answer = opens.rx.recv().expect("`tx` is never dropped");
        opens.answered_with(answer);
    }
    opens.take(&mut out);
    out
}

/// Starts opening `path` as file `id` without a ring; whether on a helper thread. An
/// answer made on the spot is kept with the others, for `take_all`.
fn start(opens: &mut ThreadOpens, id: u64, path: &Path) -> bool {
    if let Some(opened) = opens.start(id, path, false, None).unwrap() {
        opens.answered.push((id, opened));
    }
    opens.started.contains_key(&id)
}

/// The size of a file opened, sized here where its open left it unsized (see `Opened::size`).
fn size_of(opened: &Opened<'_>) -> u64 {
    opened
        .size
        .unwrap_or_else(|| crate::io::size_local(opened.fd.file()).unwrap())
}

/// Opens `path` as file `id` on `opens` and waits for it: its size, or why not.
fn opened_size(opens: &mut ThreadOpens, id: u64, path: &Path) -> Result<u64, String> {
    start(opens, id, path);
    match &take_all(opens)[..] {
        [(got, Ok(o))] if *got == id => Ok(size_of(o)),
        other => Err(format!("{other:?}")),
    }
}

#[test]
fn a_directory_checked_local_opens_its_files_here_but_not_its_links() {
    let dir = crate::tests::disk_tempdir();
    let path = |name: &str| dir.path().join(name);
    std::fs::write(path("a"), b"aa").unwrap();
    std::fs::write(path("b"), b"bbb").unwrap();
    symlink(path("b"), path("l")).unwrap();
    let mut opens = ThreadOpens::new(Duration::from_secs(30));
    // The first file of the directory: here where the kernel's table of mounts names its
    // mount's kind local, else on a helper thread, which checks the mount.
    let handle = std::fs::File::open(dir.path()).unwrap();
    let known = sys::mount_id(&handle).is_some_and(sys::mount_known_local);
    assert_eq!(
        start(&mut opens, 1, &path("a")),
        !known,
        "on a helper thread"
    );
    let got = take_all(&mut opens);
    assert!(
        matches!(&got[..], [(1, Ok(o))] if size_of(o) == 2),
        "{got:?}"
    );
    // The mount is checked local now: opened at once, here.
    assert!(!start(&mut opens, 2, &path("b")), "opened on this thread");
    let got = take_all(&mut opens);
    assert!(matches!(&got[..], [(2, Ok(o))] if size_of(o) == 3 && !o.fd.may_hang()));
    // A link may lead anywhere: on a helper thread, and followed there.
    assert!(
        start(&mut opens, 3, &path("l")),
        "a link goes to a helper thread"
    );
    let got = take_all(&mut opens);
    assert!(
        matches!(&got[..], [(3, Ok(o))] if size_of(o) == 3),
        "{got:?}"
    );
    // A missing file of the local directory fails, naming itself.
    start(&mut opens, 4, &path("missing"));
    let got = take_all(&mut opens);
    assert!(matches!(&got[..], [(4, Err(e))] if e.to_string().contains("missing")));
}

#[test]
fn another_directory_on_a_mount_checked_local_opens_its_files_here() {
    let dir = crate::tests::disk_tempdir();
    let (a, sub) = (dir.path().join("a"), dir.path().join("sub"));
    std::fs::write(&a, b"aa").unwrap();
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("b"), b"bbb").unwrap();
    let mut opens = ThreadOpens::new(Duration::from_secs(30));
    assert_eq!(opened_size(&mut opens, 1, &a), Ok(2));
    assert!(
        !start(&mut opens, 2, &sub.join("b")),
        "the same mount: here"
    );
    assert_eq!(take_all(&mut opens).len(), 1);
}

#[test]
fn a_directory_reached_through_a_link_is_checked_by_its_own_mount() {
    let dir = crate::tests::disk_tempdir();
    let (sub, link) = (dir.path().join("sub"), dir.path().join("link"));
    std::fs::create_dir(&sub).unwrap();
    std::fs::write(sub.join("a"), b"aa").unwrap();
    std::fs::write(sub.join("b"), b"bbb").unwrap();
    symlink(&sub, &link).unwrap();
    let mut opens = ThreadOpens::new(Duration::from_secs(30));
    // The handle is the directory the link leads to, whose own mount is checked.
    assert_eq!(opened_size(&mut opens, 1, &link.join("a")), Ok(2));
    assert!(
        !start(&mut opens, 2, &link.join("b")),
        "its mount is local: here"
    );
    assert_eq!(take_all(&mut opens).len(), 1);
}

#[test]
fn a_file_handed_in_on_a_mount_checked_local_is_sized_here() {
    let dir = crate::tests::disk_tempdir();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, b"aa").unwrap();
    std::fs::write(&b, b"bbb").unwrap();
    let handed_in = || ToOpen::File {
        file: Arc::new(Descriptor::new(std::fs::File::open(&b).unwrap())),
        dup: false,
    };
    let mut opens = ThreadOpens::new(Duration::from_secs(30));
    let ToOpen::File { file, .. } = handed_in() else {
        unreachable!()
    };
    assert!(!opens.dirs.holds_file(&file), "no mount checked yet");
    assert_eq!(opened_size(&mut opens, 1, &a), Ok(2));
    assert!(opens.dirs.holds_file(&file), "the same mount");
    let opened = opens.open(handed_in(), false).unwrap();
    assert_eq!(
        opened.size,
        Some(3),
        "a file handed in is sized as it opens"
    );
    assert!(!opened.fd.may_hang(), "known local");
}

/// A ring that takes up to `room` opens and records each it was offered, with whether the
/// kernel would try them in the submission (`in_submission`: no kernel thread submits).
struct FakeRing {
    in_submission: bool,
    room: usize,
    offered: Vec<u64>,
}

impl RingOpen for FakeRing {
    fn opens_in_submission(&self) -> bool {
        self.in_submission
    }

    fn open_in(&mut self, file: u64, _: &Path, _: LocalDir<'_>, _: &Opener, _: bool) -> bool {
        self.offered.push(file);
        self.offered.len() <= self.room
    }
}

/// A path of a directory checked local goes to the ring first where the kernel tries it in
/// the submission; where the ring takes no more, it is opened here from the caches. Where a
/// kernel thread submits (`sq_poll`), it is opened here, and never offered to the ring while
/// the caches have it.
#[test]
fn a_local_path_goes_to_the_ring_first_unless_a_kernel_thread_submits() {
    let dir = crate::tests::disk_tempdir();
    let path = |name: &str| dir.path().join(name);
    for name in ["a", "b", "c"] {
        std::fs::write(path(name), name).unwrap();
    }
    let mut opens = ThreadOpens::new(Duration::from_secs(30));
    assert!(opened_size(&mut opens, 1, &path("a")).is_ok()); // The mount is checked now.
    let mut ring = FakeRing {
        in_submission: true,
        room: 1,
        offered: Vec::new(),
    };
    let to_ring = opens.start(2, &path("b"), false, Some(&mut ring)).unwrap();
    assert!(to_ring.is_none(), "the ring took it");
    let here = opens.start(3, &path("c"), false, Some(&mut ring)).unwrap();
    assert!(
        matches!(here, Some(Ok(_))),
        "the ring was full: opened here"
    );
    assert_eq!(ring.offered, [2, 3]);
    let mut polled = FakeRing {
        in_submission: false,
        room: usize::MAX,
        offered: Vec::new(),
    };
    let here = opens
        .start(4, &path("b"), false, Some(&mut polled))
        .unwrap();
    assert!(matches!(here, Some(Ok(_))), "opened here from the caches");
    assert!(polled.offered.is_empty(), "a kernel thread never tries it");
    // What the caches cannot open here (a missing name) goes to the ring's workers there,
    // and to a helper thread where the ring is full: offered once either way.
    let missing = path("missing");
    assert!(opens
        .start(5, &missing, false, Some(&mut polled))
        .unwrap()
        .is_none());
    assert_eq!(polled.offered, [5], "to the workers, once");
    assert!(
        start_with(&mut opens, 6, &missing, &mut ring),
        "on a helper thread"
    );
    assert_eq!(
        ring.offered,
        [2, 3, 6],
        "offered once, then a helper thread"
    );
    let got = take_all(&mut opens);
    assert!(matches!(&got[..], [(6, Err(e))] if e.to_string().contains("missing")));
}

/// Starts opening `path` as file `id` with `ring`; whether on a helper thread.
fn start_with(opens: &mut ThreadOpens, id: u64, path: &Path, ring: &mut FakeRing) -> bool {
    assert!(opens.start(id, path, false, Some(ring)).unwrap().is_none());
    opens.started.contains_key(&id)
}
