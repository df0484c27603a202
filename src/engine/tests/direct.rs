//! Reading with `O_DIRECT`: reads the filesystem refuses going on buffered, short and
//! shrunk direct files, and skips to the end that read nothing more.

use super::*;
use crate::tests::direct_io_on;

/// An engine reading with `O_DIRECT`, or `None` where `f`'s filesystem (the disk) refuses it
/// (see `skip_refused`).
fn direct_engine<'a>(io: Scripted<'a>, f: &Files) -> Option<Engine<'a>> {
    direct_engine_sized(io, f, (256 << 10, 16 << 10))
}

/// Like [`direct_engine`], with a pool and reads of these sizes: `(pool, read_size)`.
fn direct_engine_sized<'a>(
    io: Scripted<'a>,
    f: &Files,
    sizes: (usize, usize),
) -> Option<Engine<'a>> {
    if !direct_io_on(&f.paths[0]) {
        return None;
    }
    Some(engine_with(io, sizes, |l| l.direct = true))
}

/// Reads `f` with `O_DIRECT` from a filesystem that refuses `O_DIRECT` reads (not opens),
/// checking the bytes; what the source saw, or `None` where the test is skipped.
fn read_with_direct_reads_refused(f: &Files) -> Option<Arc<Mutex<Log>>> {
    let io = Scripted::new(|c| {
        if c.direct {
            Act::Fail(libc::EINVAL)
        } else {
            Act::Full
        }
    });
    let log = io.log.clone();
    let mut e = direct_engine(io, f)?;
    queue_paths(&mut e, f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
    assert!(e.stats().reads_direct > 0, "{:?}", e.stats());
    drop(e);
    assert_eq!(fds_under(&f.dir()), 0);
    Some(log)
}

#[test]
fn einval_on_a_direct_read_goes_on_buffered_on_the_same_descriptor() {
    let f = files(&[12_345, 100]);
    let Some(log) = read_with_direct_reads_refused(&f) else {
        return;
    };
    let log = log.lock().unwrap();
    let cleared: Vec<_> = log.direct_cleared.iter().map(|(_, p)| p.clone()).collect();
    let paths: Vec<_> = f.paths.iter().map(|p| p.canonicalize().unwrap()).collect();
    assert_eq!(cleared, paths, "each file once");
    assert_eq!(
        log.sync_opens, f.paths,
        "each file opened once, never again"
    );
    assert!(log.reads.iter().any(|c| !c.direct));
}

#[test]
fn einval_on_reads_issued_direct_before_it_was_turned_off_reads_them_again() {
    let f = files(&[200_000]);
    let Some(log) = read_with_direct_reads_refused(&f) else {
        return;
    };
    let log = log.lock().unwrap();
    // Several reads were in flight with O_DIRECT when the first failed: it was turned off
    // once, and the others were read again, buffered, on the same descriptor.
    let direct = log.reads.iter().filter(|c| c.direct).count();
    assert!(direct > 1, "{direct} direct reads");
    assert_eq!(log.direct_cleared.len(), 1);
}

#[test]
fn a_short_direct_read_before_the_end_is_read_on() {
    let f = files(&[100_000, 33_333, 5000]);
    for short in [1, 100, 4095, 4097, 10_000] {
        for order in ORDERS {
            let what = format!("short {short}, order {order:?}");
            let io = first_attempts(1, Act::Short(short)).ordered(order);
            let log = io.log.clone();
            let Some(mut e) = direct_engine(io, &f) else {
                return;
            };
            queue_paths(&mut e, &f);
            assert_exact(&read_all(&mut e), &f.data);
            assert!(e.stats().short_reads > 0, "{what}");
            assert!(e.stats().reads_direct > 0, "{what}");
            assert_pool_empty(&e);
            drop(e);
            assert_eq!(fds_under(&f.dir()), 0, "{what}");
            assert!(log.lock().unwrap().reads.iter().any(|c| c.direct), "{what}");
        }
    }
}

#[test]
fn a_direct_file_replying_one_byte_at_a_time_reads_whole() {
    let f = files(&[33_333, 9000]);
    let Some(mut e) = direct_engine(Scripted::new(|_| Act::Short(1)), &f) else {
        return;
    };
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert!(e.stats().reads_direct > 0, "{:?}", e.stats());
    assert_pool_empty(&e);
}

#[test]
fn a_direct_file_that_shrank_ends_where_its_reads_end() {
    let f = files(&[50_000, 5000]);
    // The file "shrinks" to 20,100 bytes: reads past that are short, then at its end.
    let io = Scripted::new(|c| match c.offset {
        o if o >= 20_100 => Act::Eof,
        o if o + c.len as u64 > 20_100 => Act::Short((20_100 - o) as usize),
        _ => Act::Full,
    });
    let Some(mut e) = direct_engine(io, &f) else {
        return;
    };
    queue_paths(&mut e, &f);
    let got = read_all(&mut e);
    assert_eq!(got[0].as_ref().unwrap(), &f.data[0][..20_100]);
    assert_eq!(got[1].as_ref().unwrap(), &f.data[1]);
    assert!(e.stats().reads_direct > 0, "{:?}", e.stats());
    assert_pool_empty(&e);
}

/// With `O_DIRECT`, a skip to the end of a file issues no aligned read of the bytes before
/// the end (which would be asked for nothing, and could fail for nothing): the file ends.
#[test]
fn a_direct_skip_to_the_end_reads_nothing_more() {
    let f = files(&[150_000, 100]);
    let last = 150_000 / 4096 * 4096;
    let io = Scripted::new(move |c| {
        if c.offset == last {
            Act::Fail(libc::EIO)
        } else {
            Act::Full
        }
    });
    let log = io.log.clone();
    // A pool of 8 reads: the read-ahead is far from the end when the skip passes it.
    let Some(mut e) = direct_engine_sized(io, &f, (8 * 4096, 4096)) else {
        return;
    };
    queue_paths(&mut e, &f);
    assert_eq!(e.fill_buf_at_least(10).unwrap()[..10], f.data[0][..10]);
    assert_eq!(e.skip(1 << 20).unwrap(), 150_000);
    assert!(e.fill_buf().unwrap().is_empty(), "the end, not an error");
    let late = log.lock().unwrap().reads.iter().any(|c| c.offset == last);
    assert!(!late, "the last block was read after the skip passed it");
    assert!(e.move_to_next_file().unwrap());
    assert_exact(&read_all(&mut e), &f.data[1..]);
}

/// A skip to a file's end drops the reads in flight that hold nothing of the file past it:
/// with `O_DIRECT` the last read is rounded up past the end, and were it kept and to fail,
/// the file would fail for bytes nobody wants.
#[test]
fn a_skip_to_the_end_drops_the_last_read_in_flight() {
    let f = files(&[20_000, 100]);
    for order in ORDERS {
        // The last read: 3,616 bytes of the file, asked as 4,096.
        let io = fail_at(16_384, 4096, libc::EIO).ordered(order);
        let Some(mut e) = direct_engine_sized(io, &f, (256 << 10, 8192)) else {
            return;
        };
        queue_paths(&mut e, &f);
        assert_eq!(e.fill_buf_at_least(10).unwrap()[..10], f.data[0][..10]);
        if e.stream.ahead.core.queue.front().unwrap().error().is_some() {
            continue; // This order completed the failing read first: nothing to check.
        }
        assert_eq!(e.skip(1 << 20).unwrap(), 20_000, "{order:?}");
        assert!(
            e.fill_buf().unwrap().is_empty(),
            "{order:?}: the end, not an error"
        );
        assert!(e.move_to_next_file().unwrap());
        assert_exact(&read_all(&mut e), &f.data[1..]);
    }
}

/// The first direct read of the first file is refused (`EINVAL`), once another file has
/// been renamed over its path: the reader goes on buffered with the file it opened, never
/// with what the path names by then.
#[test]
fn a_file_renamed_over_before_direct_reads_are_refused_is_not_read() {
    let f = files(&[12_345, 100]);
    let other = f.dir().join("other");
    std::fs::write(&other, content(7, 12_345)).unwrap();
    let (from, to) = (other.clone(), f.paths[0].clone());
    let mut renamed = false;
    let io = Scripted::new(move |c| {
        if !c.direct {
            return Act::Full;
        }
        if !renamed {
            std::fs::rename(&from, &to).unwrap();
            renamed = true;
        }
        Act::Fail(libc::EINVAL)
    });
    let log = io.log.clone();
    let Some(mut e) = direct_engine(io, &f) else {
        return;
    };
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
    drop(e);
    assert_eq!(fds_under(&f.dir()), 0);
    assert!(log.lock().unwrap().reads.iter().any(|c| c.direct));
    assert_ne!(
        std::fs::read(&f.paths[0]).unwrap(),
        f.data[0],
        "renamed over"
    );
}
