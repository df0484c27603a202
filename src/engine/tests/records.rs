//! Records and skips: `fill_buf_at_least` across the pool's end and over failures, `skip`
//! up to a failure, and files that end early or were cut after a skip.

use super::*;

/// `fill_buf_at_least` over a pool of five pages read a page at a time, in every completion
/// order: runs of every length up to the pool, from every position, come back exact; those
/// straddling the pool's end (or a short read's gap) are copied, the others are not.
#[test]
fn runs_across_the_pool_end_are_spilled_exactly() {
    let f = files(&[150_001, 9000]);
    for order in ORDERS {
        for n in [1, 100, 4095, 4096, 4097, 9000, 5 * 4096] {
            let io = Scripted::new(|_| Act::Full).ordered(order);
            let mut e = engine(io, 5 * 4096, 4096);
            queue_paths(&mut e, &f);
            let mut got = Vec::new();
            loop {
                let run = e.fill_buf_at_least(n).unwrap();
                let left = f.data[0].len() - got.len();
                assert!(run.len() >= n.min(left), "{order:?} n={n}: {}", run.len());
                assert!(
                    !run.contains(&POISON),
                    "{order:?} n={n}: bytes no read wrote"
                );
                if run.is_empty() {
                    break;
                }
                // Consume a little less than asked, so runs start everywhere.
                let take = run.len().min(n.div_ceil(2) + 1);
                got.extend_from_slice(&run[..take]);
                e.consume(take);
            }
            assert!(got == f.data[0], "{order:?} n={n}: {} bytes", got.len());
            let spilled = e.stats().bytes_spilled;
            assert_eq!(spilled == 0, n == 1, "{order:?} n={n}: {spilled} spilled");
            assert!(e.move_to_next_file().unwrap());
            assert_exact(&read_all(&mut e), &f.data[1..]);
            assert_pool_empty(&e);
        }
    }
}

/// Records read with a window of one read in a pool of sixteen: each record that straddles
/// into the next read needs a read not yet issued, which would be stretched past the window.
/// No read goes past the window for them: the records touch one read's bytes of the pool,
/// not all of it (copied where they straddle), and come back exact. A record longer than
/// the window still lies in place: its reads go on past the window.
#[test]
fn records_straddling_reads_not_yet_issued_stay_within_the_window() {
    let read_size = 64 << 10;
    let f = files(&[16 * read_size + 1000]);
    for order in ORDERS {
        let mut io = Scripted::new(|_| Act::Full).ordered(order);
        io.cached = Some(true);
        let log = io.log.clone();
        let mut e = poisoned(io, 16 * read_size, cache::limits(read_size, read_size));
        queue_paths(&mut e, &f);
        let got = records_of(&mut e, 1000);
        assert!(got == f.data[0], "{order:?}: {} bytes", got.len());
        let touched = touched(&mem::take(&mut log.lock().unwrap().reads));
        assert!(touched <= read_size, "{order:?}: {touched} bytes touched");

        let mut io = Scripted::new(|_| Act::Full).ordered(order);
        io.cached = Some(true);
        let mut e = poisoned(io, 16 * read_size, cache::limits(read_size, read_size));
        queue_paths(&mut e, &f);
        let n = 4 * read_size + 1000;
        assert!(
            e.fill_buf_at_least(n).unwrap()[..n] == f.data[0][..n],
            "{order:?}"
        );
        assert_eq!(e.stats().bytes_spilled, 0, "{order:?}");
    }
}

/// Records of cached files, copied on the consumer's thread, keep the inline window, not the
/// warm one (whose copies would leave the CPU's cache before they are parsed): the pool's
/// bytes their reads touch stay within it, or within two reads where a read fills it.
#[test]
fn cached_records_keep_the_inline_window_of_two_reads_at_least() {
    let f = files(&[3 << 20]);
    // Reads of at least `OFFLOAD_MIN`: smaller ones keep the small window.
    let cases = [
        (64 << 10, 256 << 10, 256 << 10),
        (128 << 10, 128 << 10, 256 << 10),
    ];
    for (read_size, inline, window) in cases {
        for order in ORDERS {
            let mut io = Scripted::new(|_| Act::Full).ordered(order);
            io.cached = Some(true);
            let log = io.log.clone();
            let limits = Limits {
                inline_window: inline,
                offload: false,
                ..cache::limits(read_size, 1 << 20)
            };
            let mut e = poisoned(io, 2 << 20, limits);
            queue_paths(&mut e, &f);
            let got = records_of(&mut e, 1000);
            assert!(got == f.data[0], "{order:?}: {} bytes", got.len());
            let reads = mem::take(&mut log.lock().unwrap().reads);
            assert!(reads.iter().all(|c| c.len <= read_size), "{order:?}");
            let touched = touched(&reads);
            assert!(touched <= window, "{order:?}: {touched} bytes touched");
        }
    }
}

/// The current file's bytes, read as records of `len` bytes (the last one shorter).
fn records_of(e: &mut Engine<'_>, len: usize) -> Vec<u8> {
    let mut got = Vec::new();
    loop {
        let record = e.fill_buf_at_least(len).unwrap();
        let take = record.len().min(len);
        if take == 0 {
            return got;
        }
        got.extend_from_slice(&record[..take]);
        e.consume(take);
    }
}

/// The span of the pool that `reads` wrote into.
fn touched(reads: &[Call]) -> usize {
    let low = reads.iter().map(|c| c.at).min().unwrap();
    let high = reads.iter().map(|c| c.at + c.len).max().unwrap();
    high - low
}

#[test]
fn a_run_larger_than_the_pool_is_refused_and_the_engine_goes_on() {
    let f = files(&[50_000]);
    let mut e = engine(Scripted::new(|_| Act::Full), 4 * 4096, 4096);
    queue_paths(&mut e, &f);
    let err = e.fill_buf_at_least(4 * 4096 + 1).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
}

/// A parser's loop over a file that fails at `fail` (a read of `read_size` bytes there
/// gets `EIO`): records of `n` bytes with `fill_buf_at_least`, and, once it answers with the
/// error, the bytes before it with `fill_buf`. Returns every byte before the error and the
/// error's message; panics if a short answer came before the failure, like an end would.
fn records_until_the_error(e: &mut Engine<'_>, n: usize, len: usize) -> (Vec<u8>, String) {
    let mut got = Vec::new();
    while let Ok(run) = e.fill_buf_at_least(n) {
        assert!(
            run.len() >= n || got.len() + run.len() == len,
            "a short answer ({} bytes at {}) where the file does not end",
            run.len(),
            got.len()
        );
        assert!(
            !run.is_empty(),
            "an end at {} where the file fails",
            got.len()
        );
        let take = run.len().min(n);
        got.extend_from_slice(&run[..take]);
        e.consume(take);
    }
    let err = loop {
        match e.fill_buf() {
            Ok([]) => panic!("an end at {} where the file fails", got.len()),
            Ok(buf) => {
                let k = buf.len();
                got.extend_from_slice(buf);
                e.consume(k);
            }
            Err(err) => break err.to_string(),
        }
    };
    (got, err)
}

/// A read error inside a record comes out as the file's error, never as a short record
/// that looks like the end of the file: in every completion order, for records that fit
/// before the failure and records that straddle it, in place and copied.
#[test]
fn a_record_across_a_failure_is_the_error_never_a_short_answer() {
    let f = files(&[40_000, 3000]);
    for order in ORDERS {
        for n in [1, 136, 1000, 4096, 5000, 3 * 4096] {
            let io = fail_at(3 * 4096, 4096, libc::EIO).ordered(order);
            let mut e = engine(io, 5 * 4096, 4096);
            queue_paths(&mut e, &f);
            let (got, err) = records_until_the_error(&mut e, n, f.data[0].len());
            assert!(
                got == f.data[0][..3 * 4096],
                "{order:?} n={n}: {} bytes",
                got.len()
            );
            assert!(err.contains("offset 12288"), "{order:?} n={n}: {err}");
            assert!(e.fill_buf_at_least(1).is_err(), "the error sticks");
            assert!(e.fill_buf().is_err(), "the error sticks");
            assert!(e.move_to_next_file().unwrap());
            assert_exact(&read_all(&mut e), &f.data[1..]);
            assert_pool_empty(&e);
        }
    }
}

/// `skip` passes over bytes before a failure, but never the failure itself: a skip that
/// would is the file's error and moves nothing.
#[test]
fn a_skip_across_a_failure_is_the_error_and_moves_nothing() {
    let f = files(&[40_000, 100]);
    for order in ORDERS {
        let io = fail_at(2 * 4096, 4096, libc::EIO).ordered(order);
        let mut e = engine(io, 8 * 4096, 4096);
        queue_paths(&mut e, &f);
        // Reading the first bytes waits for the first read; the failing one comes back by
        // the time the record loop reaches it.
        assert_eq!(e.fill_buf_at_least(100).unwrap()[..100], f.data[0][..100]);
        e.consume(100);
        let before = e.file_offset();
        while e.fill_buf_at_least(4096).is_ok() {
            e.consume(1);
            assert!(
                e.file_offset() < 2 * 4096,
                "{order:?}: read past the failure"
            );
        }
        let at = e.file_offset();
        let left = 2 * 4096 - at;
        assert!(at > before);
        let err = e.skip(left + 1).unwrap_err();
        assert!(err.to_string().contains("offset 8192"), "{order:?}: {err}");
        assert_eq!(
            e.file_offset(),
            at,
            "{order:?}: a failed skip moves nothing"
        );
        assert_eq!(
            e.skip(left).unwrap(),
            left,
            "{order:?}: up to the failure is fine"
        );
        assert!(e.skip(1).is_err());
        assert!(e.fill_buf().is_err());
        assert!(e.move_to_next_file().unwrap());
        assert_exact(&read_all(&mut e), &f.data[1..]);
        assert_pool_empty(&e);
    }
}

/// A file that shrank after it was sized ends where its reads end (std's answer: an end),
/// and `fill_buf_at_least` says so with a short answer, not an error.
#[test]
fn a_file_that_ends_early_is_an_end_not_an_error() {
    let f = files(&[30_000, 100]);
    let io = Scripted::new(|c| {
        if c.offset >= 8192 {
            Act::Eof
        } else {
            Act::Full
        }
    });
    let mut e = engine(io, 64 << 10, 4096);
    queue_paths(&mut e, &f);
    let run = e.fill_buf_at_least(10_000).unwrap();
    assert_eq!(
        run,
        &f.data[0][..8192],
        "every byte before the end, then the end"
    );
    e.consume(8192);
    assert!(e.fill_buf().unwrap().is_empty());
    assert_eq!(e.skip(10).unwrap(), 0);
    assert!(e.move_to_next_file().unwrap());
    assert_exact(&read_all(&mut e), &f.data[1..]);
}

/// A skip that passed the end a read finds only later (the file was cut after it was
/// opened) is not an end at a place the file never reached: the next read says the file
/// ended before the skip's offset.
#[test]
fn a_skip_past_the_end_of_a_file_cut_after_it_was_opened_is_an_error() {
    let f = files(&[100_000, 100]);
    // Reads complete lazily, so the skip comes before a read finds the new end.
    let io = Scripted::new(|_| Act::Full).ordered((false, true));
    let mut e = engine(io, 32 << 10, 4096);
    queue_paths(&mut e, &f);
    assert_eq!(e.fill_buf_at_least(10).unwrap()[..10], f.data[0][..10]);
    std::fs::File::options()
        .write(true)
        .open(&f.paths[0])
        .unwrap()
        .set_len(8192)
        .unwrap();
    assert_eq!(e.skip(50_000).unwrap(), 50_000, "the end is not known yet");
    let err = e.fill_buf().unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{err}");
    assert!(err.to_string().contains("ended at offset 8192"), "{err}");
    assert!(e.fill_buf_at_least(1).is_err(), "it sticks");
    assert!(e.move_to_next_file().unwrap());
    assert_exact(&read_all(&mut e), &f.data[1..]);
}

#[test]
fn after_a_call_that_failed_consume_takes_nothing() {
    // A record copied out into the spill is handed out; then a longer one, or a skip, fails
    // at the file's error. That call handed out nothing, so `consume` may take nothing.
    let f = files(&[200_000, 3000]);
    let mut failed_skips = 0;
    for skip in [false, true] {
        for order in ORDERS {
            let io = fail_at(6 * 4096, 4096, libc::EIO).ordered(order);
            let mut e = engine(io, 5 * 4096, 4096);
            queue_paths(&mut e, &f);
            let len = loop {
                let spilled = e.stats().bytes_spilled;
                let len = e.fill_buf_at_least(1000).unwrap().len();
                if e.stats().bytes_spilled > spilled {
                    break len;
                }
                e.consume(len.min(501));
            };
            let at = e.file_offset();
            let failed = if skip {
                e.skip(190_000).is_err()
            } else {
                e.fill_buf_at_least(5 * 4096).is_err()
            };
            // A skip fails only where the read that failed came back before it.
            assert!(failed || skip, "{order:?}: the call passes the error");
            failed_skips += usize::from(failed && skip);
            e.consume(len);
            if failed {
                assert_eq!(e.file_offset(), at, "{order:?}, skip {skip}: consume moved");
            }
        }
    }
    assert!(failed_skips > 0, "no skip failed");
}

/// After `fill_buf_at_least` fails, `consume` takes nothing: not the bytes an earlier
/// `fill_buf` handed out (a run larger than the pool), nor those the failed call looked at
/// before it met the file's error (a run across a failure).
#[test]
fn after_a_failed_run_consume_takes_nothing() {
    let f = files(&[40_000]);
    let mut e = engine(Scripted::new(|_| Act::Full), 5 * 4096, 4096);
    queue_paths(&mut e, &f);
    assert!(!e.fill_buf().unwrap().is_empty());
    assert!(e.fill_buf_at_least(5 * 4096 + 1).is_err());
    e.consume(10);
    assert_eq!(e.file_offset(), 0, "a run larger than the pool");

    let mut e = engine(fail_at(3 * 4096, 4096, libc::EIO), 5 * 4096, 4096);
    queue_paths(&mut e, &f);
    while e.file_offset() < 3 * 4096 - 100 {
        let run = e.fill_buf_at_least(1).unwrap();
        let take = run.len().min(3 * 4096 - 100 - e.file_offset() as usize);
        e.consume(take);
    }
    assert!(e.fill_buf_at_least(200).is_err());
    e.consume(50);
    assert_eq!(e.file_offset(), 3 * 4096 - 100, "a run across a failure");
}
