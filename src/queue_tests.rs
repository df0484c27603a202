use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

use super::*;

fn path(p: &str) -> Source<'static> {
    Source::Path(Path::new(p).to_path_buf().into())
}

fn eio(at: u64) -> Error {
    Error::Read {
        path: FileName::Path("p".into()),
        offset: at,
        source: io::Error::from_raw_os_error(libc::EIO),
    }
}

#[test]
fn ids_follow_order_and_survive_pops() {
    let mut q = Queue::default();
    for p in ["a", "b", "c"] {
        q.push(path(p), 0, u64::MAX);
    }
    assert_eq!(q.by_id_mut(1).unwrap().name(), FileName::Path("b".into()));
    q.pop_front();
    assert!(q.by_id_mut(0).is_none());
    assert_eq!(q.by_id_mut(2).unwrap().name(), FileName::Path("c".into()));
    assert!(q.by_id_mut(3).is_none());
}

#[test]
fn cursor_skips_finished_files() {
    let mut q = Queue::default();
    let f = tempfile::tempfile().unwrap();
    for _ in 0..3 {
        q.push(path("x"), 0, 10);
    }
    assert_eq!(q.next_with_work(), Some(0));
    let e = q.get_mut(0).unwrap();
    e.fd = Some(FdRef::new(std::sync::Arc::new(
        crate::source::Descriptor::local(f),
    )));
    e.set_size(100, 1);
    assert_eq!(e.stop(), 10, "the limit caps the end");
    read_and_consume(&mut e.progress, 10, 0);
    assert_eq!(q.next_with_work(), Some(1));
    q.pop_front();
    assert_eq!(q.cursor, 0);
    assert_eq!(q.next_with_work(), Some(0));
}

#[test]
fn matches_on_descriptor_and_limit_from_the_start() {
    let f = tempfile::tempfile().unwrap();
    let mut q = Queue::default();
    q.push(path("p"), 0, 5);
    q.push(Source::Borrowed(&f), 0, 5);
    q.push(Source::Borrowed(&f), 0, 7);
    q.push(Source::Borrowed(&f), 3, 9);
    assert_eq!(q.position(f.as_raw_fd(), 7), Some(2));
    assert_eq!(q.position(f.as_raw_fd(), 5), Some(1));
    assert_eq!(q.position(f.as_raw_fd(), 6), None);
    assert_eq!(
        q.position(f.as_raw_fd(), 9),
        None,
        "a range is not from the start"
    );
}

#[test]
fn rewind_restores_the_sized_end_and_forgets_the_failure() {
    let mut q = Queue::default();
    q.push(path("p"), 0, u64::MAX);
    let e = q.front_mut().unwrap();
    e.set_size(1000, 1);
    e.end_at(300); // a read found the end early
    read_and_consume(&mut e.progress, 300, 200);
    e.rewind();
    let p = e.progress();
    assert_eq!((p.next_read(), p.consumed(), e.stop()), (0, 0, 1000));
    assert!(matches!(e.status().state(), FileState::Reading));
    e.fail(eio(500), 500);
    e.rewind();
    assert!(e.error().is_none());
    assert_eq!(e.stop(), 1000);
}

#[test]
fn a_failure_is_never_an_end() {
    let mut q = Queue::default();
    q.push(path("p"), 0, u64::MAX);
    let e = q.front_mut().unwrap();
    e.set_size(1000, 1);
    read_and_consume(&mut e.progress, 1000, 0);
    assert!(e.all_issued());
    assert!(e.fail(eio(600), 600), "the first failure counts");
    assert_eq!(e.stop(), 600, "bytes stop at the failure");
    assert!(!e.all_issued(), "a failed file is not at its end");
    assert!(!e.wants_reads());
    assert!(e.reads_finished());
    assert!(
        !e.fail(eio(400), 400),
        "an earlier failure is the same file's"
    );
    assert_eq!(e.stop(), 400);
    e.end_at(500);
    assert!(
        e.error().is_some(),
        "an end past the failure changes nothing"
    );
    e.end_at(100);
    assert!(
        matches!(e.status().state(), FileState::Ended { len: 100 }),
        "bytes end first"
    );
    assert!(
        !e.fail(eio(200), 200),
        "a failure past the end is not the file's"
    );
    assert!(e.error().is_none());
}

#[test]
fn a_range_starts_at_its_offset_and_ends_at_its_length() {
    let mut q = Queue::default();
    q.push(path("p"), 5000, 3000);
    let e = q.front_mut().unwrap();
    let p = e.progress();
    assert_eq!((p.consumed(), p.next_read()), (5000, 5000));
    e.set_size(1 << 20, 4096);
    assert_eq!(e.stop(), 8000);
    assert_eq!(
        (e.progress().consumed(), e.progress().next_read()),
        (5000, 4096),
        "direct reads start aligned"
    );
    e.set_size(6000, 1);
    assert_eq!(e.stop(), 6000, "the file's end comes first");
    q.push(path("p"), 8000, 100);
    let e = q.get_mut(1).unwrap();
    e.set_size(8000, 4096);
    assert_eq!(
        e.progress().next_read(),
        8000,
        "at the end, no aligned read of bytes before it"
    );
    assert!(e.all_issued());
}

#[test]
fn an_exact_range_the_file_holds_only_part_of_fails() {
    let mut q = Queue::default();
    q.push_range(path("p"), 1000, 5000, true);
    let e = q.front_mut().unwrap();
    assert!(e.set_size(3000, 1), "short when sized: failed at once");
    assert_eq!((e.stop(), e.status().sized_len()), (1000, Some(2000)));
    assert!(!e.wants_reads(), "no byte of a range that cannot be whole");
    let Some(Error::EndedEarly {
        offset, range_end, ..
    }) = e.error()
    else {
        panic!("{:?}", e.status().state())
    };
    assert_eq!((*offset, *range_end), (3000, 6000));
    e.rewind();
    assert!(e.error().is_some(), "read again, it is as short");
    // Whole when sized, cut while read: it fails where a read found the end.
    q.push_range(path("p"), 0, 5000, true);
    let e = q.get_mut(1).unwrap();
    assert!(!e.set_size(8000, 1));
    assert!(e.end_at(4000));
    assert_eq!(e.stop(), 4000);
    assert!(matches!(
        e.error(),
        Some(Error::EndedEarly { offset: 4000, .. })
    ));
    // All of `0..u64::MAX` (`exact_range(0..u64::MAX)`): no file holds it.
    q.push_range(path("p"), 0, u64::MAX, true);
    let e = q.get_mut(2).unwrap();
    assert!(e.set_size(10, 1));
    assert!(matches!(
        e.error(),
        Some(Error::EndedEarly { offset: 10, .. })
    ));
    // To the end of the file, wherever it is: nothing to hold.
    q.push_range(path("p"), 0, u64::MAX, false);
    let e = q.get_mut(3).unwrap();
    assert!(!e.set_size(10, 1));
    assert!(!e.end_at(5));
    assert!(matches!(e.status().state(), FileState::Ended { len: 5 }));
}

#[test]
fn opening_is_a_state_of_its_own() {
    let mut q = Queue::default();
    q.push(path("p"), 0, u64::MAX);
    let e = q.front_mut().unwrap();
    assert!(e.wants_open());
    e.set_opening();
    assert!(e.status().is_opening() && !e.wants_open() && e.wants_reads());
    e.set_open_returned();
    assert!(e.wants_open());
}

/// Moves `progress` as the engine would: one read of `read` bytes sent and back, and
/// `consumed` bytes of it taken by the consumer.
fn read_and_consume(progress: &mut super::progress::FileProgress, read: u64, consumed: u64) {
    progress.issued(read as usize);
    progress.read_done();
    progress.read_up_to(read);
    progress.consume(consumed);
}

#[test]
fn prefetching_past_the_end_or_a_file_handed_in_changes_nothing() {
    let file = tempfile::tempfile().unwrap();
    let mut q = Queue::default();
    q.prefetch_after(0);
    q.push(path("a"), 0, 10);
    q.push(Source::Borrowed(&file), 0, 10);
    q.push(path(""), 0, 10);
    for index in 0..5 {
        q.prefetch_after(index);
    }
    assert_eq!(q.len(), 3);
    assert_eq!(q.get_mut(0).unwrap().name(), FileName::Path("a".into()));
}
