//! Reading files whole: short reads continued, an early end, errors failing their file
//! alone, retries and their bound, completions out of order, ranges, and unread errors.

use super::*;
use crate::consts::MAX_RETRIES;

#[test]
fn reads_in_order_across_files() {
    let f = files(&[0, 1, 4095, 4096, 4097, 20_000, 100_000]);
    let mut e = engine(Scripted::new(|_| Act::Full), 64 << 10, 8192);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
}

#[test]
fn short_reads_of_every_length_are_continued() {
    let f = files(&[3 * 4096 + 123, 5000]);
    for short in (1..=300).chain([511, 4095, 4096, 4097, 8191]) {
        let mut e = engine(first_attempts(1, Act::Short(short)), 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        assert!(e.stats().short_reads > 0, "short {short}");
        assert_pool_empty(&e);
    }
}

/// The rest of a short read, queued while a completion is handled by a step that does not
/// block (`refill`, as `consume` and `skip` call it), is submitted by that step: it must not
/// wait in the submission queue until the consumer next blocks.
#[test]
fn continuations_are_submitted_by_the_step_that_makes_them() {
    let f = files(&[16 << 10]);
    let io = first_attempts(1, Act::Short(100));
    let log = io.log.clone();
    let mut e = engine(io, 64 << 10, 8192);
    // Queuing issues the file's two reads, and submits them.
    queue_paths(&mut e, &f);
    assert_eq!(log.lock().unwrap().reads.len(), 2);
    assert_eq!(log.lock().unwrap().unsubmitted, 0);
    // Both come back short; nothing else is left to issue, so only the continuations go.
    e.stream.ahead.refill().unwrap();
    let log = log.lock().unwrap();
    assert_eq!(e.stats().short_reads, 2);
    assert_eq!(
        log.reads.len(),
        4,
        "the rest of each short read was asked for"
    );
    assert_eq!(log.unsubmitted, 0, "continuations queued but not submitted");
}

#[test]
fn one_byte_at_a_time() {
    let f = files(&[9000, 3]);
    let mut e = engine(Scripted::new(|_| Act::Short(1)), 16 << 10, 4096);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
}

#[test]
fn eof_in_the_middle_of_a_region_ends_the_file_there() {
    let f = files(&[30_000, 5000]);
    // The file "shrinks": the read at 8192 returns 100 bytes, then end of file.
    let mut e = engine(
        Scripted::new(|c| match (c.offset, c.attempt) {
            (8192, 0) => Act::Short(100),
            (8292, _) => Act::Eof,
            (o, _) if o > 8192 && o < 30_000 => Act::Eof,
            _ => Act::Full,
        }),
        64 << 10,
        8192,
    );
    queue_paths(&mut e, &f);
    let got = read_all(&mut e);
    assert_eq!(got[0].as_ref().unwrap(), &f.data[0][..8292]);
    assert_eq!(got[1].as_ref().unwrap(), &f.data[1]);
    assert_pool_empty(&e);
}

#[test]
fn an_error_fails_its_file_alone_naming_path_and_offset() {
    let f = files(&[10_000, 20_000, 3000]);
    let mut e = engine(fail_at(8192, 8192, libc::EIO), 64 << 10, 8192);
    queue_paths(&mut e, &f);
    // File 1's second region fails; its first region is delivered, then the error.
    let mut first = Vec::new();
    assert_eq!(e.fill_buf().unwrap(), &f.data[0][..8192]);
    e.consume(8192);
    first.extend(e.fill_buf().unwrap().to_vec());
    let n = first.len();
    e.consume(n);
    assert!(e.fill_buf().unwrap().is_empty());
    assert!(e.move_to_next_file().unwrap());
    let mut second = Vec::new();
    let err = loop {
        match e.fill_buf() {
            Ok(b) => {
                assert!(!b.is_empty(), "the error comes before the end");
                second.extend_from_slice(b);
                let n = b.len();
                e.consume(n);
            }
            Err(err) => break err,
        }
    };
    assert_eq!(second, &f.data[1][..8192]);
    let msg = err.to_string();
    assert!(
        msg.contains(&*f.paths[1].to_string_lossy()) && msg.contains("offset 8192"),
        "{msg}"
    );
    assert_eq!(err.raw_os_error(), None);
    assert!(err.get_ref().unwrap().is::<Error>());
    // It keeps failing until the reader moves on.
    assert!(e.fill_buf().is_err());
    assert!(e.move_to_next_file().unwrap());
    let rest = read_all(&mut e);
    assert_exact(&rest, &f.data[2..]);
    assert_eq!(e.stats().files_failed, 1);
    assert_pool_empty(&e);
}

#[test]
fn passing_errors_are_retried() {
    let sizes = [20_000, 100];
    // Each read of 8 KiB (or the tail) fails twice, then goes through.
    let reads: usize = sizes.iter().map(|s: &usize| s.div_ceil(8192)).sum();
    for errno in [libc::EINTR, libc::EAGAIN, libc::ECANCELED] {
        let f = files(&sizes);
        let mut e = engine(first_attempts(2, Act::Fail(errno)), 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        assert_eq!(e.stats().retries, 2 * reads as u64, "errno {errno}");
    }
}

#[test]
fn retries_are_bounded() {
    let f = files(&[5000, 100]);
    let mut e = engine(fail_at(0, 5000, libc::EAGAIN), 64 << 10, 8192);
    queue_paths(&mut e, &f);
    let got = read_all(&mut e);
    assert!(got[0].as_ref().unwrap_err().contains("offset 0"));
    assert_eq!(got[1].as_ref().unwrap(), &f.data[1]);
    assert_eq!(e.stats().retries, u64::from(MAX_RETRIES));
}

#[test]
fn completions_out_of_order() {
    let f = files(&[50_000, 7, 12_345, 0, 70_000]);
    let mut io = first_attempts(1, Act::Short(1000));
    io.reverse = true;
    let mut e = engine(io, 32 << 10, 4096);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
}

/// A range of a file: its bytes from `start` for `len`, ending early at the file's end.
#[test]
fn ranges_read_their_bytes_only() {
    let f = files(&[50_000, 9000, 20_000]);
    for order in ORDERS {
        let io = first_attempts(1, Act::Short(1000)).ordered(order);
        let mut e = engine(io, 8 * 4096, 4096);
        let ranges = [(0, 10_000), (4097, 100_000), (12_345, 0), (19_999, 5)];
        for (i, &(start, len)) in ranges.iter().enumerate() {
            let p = f.paths[i.min(2)].as_path();
            e.push_range(Source::Path(p.into()), start, len, false)
                .unwrap();
        }
        let want: Vec<Vec<u8>> = ranges
            .iter()
            .enumerate()
            .map(|(i, &(start, len))| {
                let d = &f.data[i.min(2)];
                let from = (start as usize).min(d.len());
                d[from..(start + len).min(d.len() as u64) as usize].to_vec()
            })
            .collect();
        assert_eq!(e.file_offset(), 0);
        assert_exact(&read_all(&mut e), &want);
        assert_pool_empty(&e);
    }
}

/// Queuing is all or nothing: where starting the file's reads fails (a broken ring), the
/// file is not queued and the error comes back.
#[test]
fn a_file_whose_reads_cannot_start_is_not_queued() {
    let f = files(&[10_000, 10_000]);
    let mut io = Scripted::new(|_| Act::Full);
    io.fail_submit = true;
    let mut e = engine(io, 64 << 10, 4096);
    let err = e
        .push_range(
            Source::Path(f.paths[0].as_path().into()),
            0,
            u64::MAX,
            false,
        )
        .unwrap_err();
    assert!(err.to_string().contains("submit"), "{err}");
    assert_eq!(e.current_index(), None, "not queued");
    assert!(!e.move_to_next_file().unwrap());
}

/// The first error no caller was given is kept for `take_unread_error`: a file moved past
/// before its error was read, or else a queued file that failed unread; an error once
/// returned, or taken, is not.
#[test]
fn the_first_error_nobody_read_is_kept() {
    let f = files(&[20_000, 20_000, 20_000]);
    let io = Scripted::new(|c| {
        if c.offset == 8192 {
            Act::Fail(libc::EIO)
        } else {
            Act::Full
        }
    });
    let mut e = engine(io, 256 << 10, 8192);
    queue_paths(&mut e, &f);
    // File 0: its error returned, so read.
    while e.fill_buf().is_ok_and(|b| !b.is_empty()) {
        e.consume(100);
    }
    assert!(e.fill_buf().is_err());
    assert!(e.move_to_next_file().unwrap());
    // File 1: moved past before reading to its error (its failing read done by then).
    let _ = e.fill_buf_at_least(8192).unwrap();
    assert!(e.move_to_next_file().unwrap());
    let err = e.take_unread_error().expect("file 1's error, never read");
    assert!(
        err.to_string().contains(&*f.paths[1].to_string_lossy()),
        "{err}"
    );
    // File 2, current and failed, not read yet: its error, still queued, is the next.
    let _ = e.fill_buf_at_least(8192).unwrap();
    let err = e.take_unread_error().expect("file 2's error, not read yet");
    assert!(
        err.to_string().contains(&*f.paths[2].to_string_lossy()),
        "{err}"
    );
    assert!(e.take_unread_error().is_none(), "taken");
    assert!(e.fill_buf_at_least(8193).is_err());
    assert!(e.take_unread_error().is_none(), "read now");
}

/// A file handed in `O_NONBLOCK` has its uncached reads answered `EAGAIN` (by a ring that
/// honours the flag), however often retried: its descriptor is made blocking, and it reads.
#[test]
fn a_file_whose_reads_come_back_eagain_while_nonblocking_reads() {
    use std::os::unix::fs::OpenOptionsExt;
    let f = files(&[100_000, 10]);
    for order in ORDERS {
        let io = Scripted::new(|c| match c.nonblocking {
            true => Act::Fail(libc::EAGAIN),
            false => Act::Full,
        });
        let mut e = engine(io.ordered(order), 16 << 10, 4096);
        let file = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&f.paths[0])
            .unwrap();
        e.push_range(
            Source::Owned(Arc::new(crate::source::Descriptor::new(file))),
            0,
            u64::MAX,
            false,
        )
        .unwrap();
        e.push_range(
            Source::Path(f.paths[1].as_path().into()),
            0,
            u64::MAX,
            false,
        )
        .unwrap();
        assert_exact(&read_all(&mut e), &f.data);
    }
}
