//! Scanning the fault filesystem ([`super::fusefs`]) with a reader, and checking each file by
//! what its faults allow: shared by the FUSE tests and the soak example.

use std::io;

use super::fusefs::{FaultMount, FileSpec, Serve};
use super::scan::{Got, Queue};
use super::{assert_bytes_eq, assert_names, inner_error};

/// Files whose open is fine are queued as owned or borrowed `File`s now and then (opened by
/// the test); the others by path, so that the reader opens them.
pub fn queue_of(i: usize, spec: &FileSpec) -> Queue {
    let f = &spec.faults;
    if f.open_error.is_some() || !f.open_delay.is_zero() {
        return Queue::Path;
    }
    match i % 5 {
        1 => Queue::Owned,
        3 => Queue::Borrowed,
        _ => Queue::Path,
    }
}

/// Checks what reading file `i` gave against what its faults allow, for a reader whose
/// largest read is `read_size`.
#[track_caller]
pub fn check_file(m: &FaultMount, i: usize, got: &Got, read_size: usize, what: &str) {
    let spec = m.spec(i);
    let f = &spec.faults;
    let what = format!("{what}: file {i} ({spec:?})");
    assert!(
        !got.short_not_at_end,
        "{what}: a short answer, which says the file ends, where it goes on or fails"
    );
    // Whatever happened, every byte that came out is the file's own, at its own offset; but
    // past a short reply (a shrunk file's replies past its new end are short) the kernel may
    // hand out the zeros it put in place of what the reply left out (see the shrink and
    // short-reply tests).
    let len = got.bytes.len();
    let page_cache = m.serve() == Serve::PageCache;
    let exact = match (f.short_replies, f.resize_to) {
        (Some(_), _) if page_cache => 0,
        (None, Some(to)) if to < spec.size && page_cache => len.min(to as usize),
        _ => len,
    };
    let mut own = m.bytes(i, 0, len);
    for &(at, k) in &got.skipped {
        own[at as usize..(at + k) as usize].fill(0); // never read: zeros in `got` too
    }
    assert_bytes_eq(&got.bytes[..exact], &own[..exact], &what);
    assert_own_or_zero(&got.bytes[exact..], &own[exact..], &what);
    let path = m.path(i).display().to_string();
    if let Some(errno) = f.open_error {
        let e = got
            .error
            .as_ref()
            .unwrap_or_else(|| panic!("{what}: opened"));
        assert_names(e, &path);
        assert_eq!(e.raw_os_error(), None, "{what}: {e}");
        let inner = inner_error(e).unwrap();
        assert!(
            matches!(inner, readahead::Error::Open { source, .. }
                if source.raw_os_error() == Some(i32::from(errno))),
            "{what}: {inner:?}"
        );
        return;
    }
    if let Some(at) = f.eio_at.filter(|&at| at < spec.final_size()) {
        match &got.error {
            Some(e) => return check_read_error(e, at, got, read_size, &path, &what),
            // Only a skip over the failing byte may pass it without reading it.
            None => assert!(
                skipped(got, at, at + 1),
                "{what}: read past {at} without error"
            ),
        }
    }
    if let Some(e) = &got.error {
        panic!("{what}: {e}");
    }
    let len = len as u64;
    match f.resize_to {
        Some(to) if to < spec.size && page_cache => {
            assert!((to..=spec.size).contains(&len), "{what}: {len} bytes")
        }
        // Skips stop at the size the file had when opened: past its new end, they are not
        // read, so cannot tell.
        Some(to) if to < spec.size && len > to => {
            assert!(
                len <= spec.size && skipped(got, to, len),
                "{what}: shrunk, {len} bytes"
            )
        }
        Some(to) if to < spec.size => assert_eq!(len, to, "{what}: shrunk"),
        Some(to) => assert!((spec.size..=to).contains(&len), "{what}: grew, {len} bytes"),
        None if f.short_replies.is_some() && page_cache => {
            assert!(len <= spec.size, "{what}: {len} bytes")
        }
        None => assert_eq!(len, spec.size, "{what}"),
    }
}

/// Whether every byte of `from..to` was passed over with `skip`.
fn skipped(got: &Got, from: u64, to: u64) -> bool {
    let mut at = from;
    for &(start, len) in &got.skipped {
        if start <= at && at < start + len {
            at = start + len;
        }
    }
    at >= to
}

/// Asserts every byte of `got` is that of `want` or a zero.
#[track_caller]
pub fn assert_own_or_zero(got: &[u8], want: &[u8], what: &str) {
    let bad = got.iter().zip(want).position(|(&g, &w)| g != w && g != 0);
    assert_eq!(bad, None, "{what}: a byte neither its own nor zero");
}

/// Checks a read error from `EIO` at offset `at`: it names the path and the offset of the
/// failed read (one that covers `at`, or its page), every byte before that offset came out,
/// and none from it on.
#[track_caller]
fn check_read_error(e: &io::Error, at: u64, got: &Got, read_size: usize, path: &str, what: &str) {
    assert!(!got.at_queue, "{what}: queuing failed: {e}");
    assert_names(e, path);
    let Some(readahead::Error::Read { offset, source, .. }) = inner_error(e) else {
        panic!("{what}: not a read error: {e:?}");
    };
    assert_eq!(source.raw_os_error(), Some(libc::EIO), "{what}: {e}");
    // In page-cache mode the kernel fills whole pages, so a read fails from the page of `at`
    // (and from past `at` in that page, where a skip moved the next read there).
    let page = at / 4096 * 4096;
    assert!(
        *offset < page + 4096 && offset + read_size as u64 > page,
        "{what}: the read at {offset} failed, not one over the page of {at}"
    );
    if got.skipped.is_empty() {
        assert!(
            *offset <= at,
            "{what}: the read at {offset} failed, past {at}"
        );
    }
    assert_names(e, &format!("at offset {offset}"));
    assert_eq!(
        got.bytes.len() as u64,
        *offset,
        "{what}: the bytes before the failed read, and none from it"
    );
    assert!(got.error_kept, "{what}: the error went away: {e}");
}

/// Asserts no descriptor of this process names a file under the mount, that it unmounts, and
/// that `/proc/self/mounts` no longer lists it.
#[track_caller]
pub fn assert_unmounts_clean(m: FaultMount, what: &str) {
    let left = super::settled(0, || m.open_fds());
    assert_eq!(left, 0, "{what}: descriptors left under the mount");
    // A file that may hang is closed on a helper thread: its descriptor goes from the table
    // as the close starts, the mount's busy count only once the close (a `FLUSH`, then the
    // `RELEASE`) is through. Every file opened is released first, or the unmount would race.
    let released = |s: super::fusefs::FsStats| s.releases + s.open_errors >= s.opens;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !released(m.stats()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    let dir = m.dir().to_path_buf();
    m.unmount()
        .unwrap_or_else(|e| panic!("{what}: unmount: {e}"));
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !mounts.contains(&*dir.to_string_lossy()),
        "{what}: still mounted"
    );
}
