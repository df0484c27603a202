//! The engine that never blocks (`Core::nonblocking`, the async reader's): a wait it cannot
//! make is `WouldBlock`, having changed nothing the caller sees, and one that lasts
//! `drain_timeout` fails the file waited for, as a blocking wait does.

use super::*;

/// An engine over `f` whose source completes reads only when waited for (so never, where
/// the engine must not wait), with `timeout` as its drain timeout.
fn stalled(f: &Files, timeout: Duration) -> Engine<'_> {
    let io = Scripted::new(|_| Act::Full).ordered((false, true));
    let mut e = engine_with(io, (64 << 10, 4 << 10), |l| l.drain_timeout = timeout);
    e.stream.ahead.core.nonblocking = true;
    queue_paths(&mut e, f);
    e
}

/// `fill_buf` until it is not `WouldBlock`, pausing between calls.
fn fill_until_not_blocked(e: &mut Engine<'_>) -> io::Result<usize> {
    loop {
        match e.fill_buf() {
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => {}
            other => return other.map(<[u8]>::len),
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[test]
fn a_wait_it_cannot_make_is_would_block_and_changes_nothing() {
    let f = files(&[10_000, 5000]);
    let mut e = stalled(&f, Duration::from_secs(60));
    for _ in 0..3 {
        let err = e.fill_buf().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "{err}");
        assert_eq!(e.file_offset(), 0);
        assert_eq!(e.current_index(), Some(0));
        assert_eq!(e.stats().bytes_consumed, 0);
        assert!(!e.hung());
        let err = e.fill_buf_at_least(8000).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock, "{err}");
    }
    #[cfg(feature = "tokio")]
    {
        let at = e.wake_at().expect("a read is waited for");
        assert!(
            at > std::time::Instant::now(),
            "the deadline is a minute away"
        );
    }
}

#[test]
fn a_wait_that_lasts_drain_timeout_fails_the_file_and_the_next_goes_on() {
    let f = files(&[10_000, 5000]);
    let mut e = stalled(&f, Duration::from_millis(20));
    let err = fill_until_not_blocked(&mut e).unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
    assert!(
        err.to_string().contains(&*f.paths[0].to_string_lossy()),
        "{err}"
    );
    assert!(e.hung(), "a read is left in flight");
    // The file keeps its error; the next one stalls in turn, and fails alone too.
    assert_eq!(e.fill_buf().unwrap_err().kind(), io::ErrorKind::TimedOut);
    assert!(e.move_to_next_file().unwrap());
    let err = fill_until_not_blocked(&mut e).unwrap_err();
    assert!(
        err.to_string().contains(&*f.paths[1].to_string_lossy()),
        "{err}"
    );
}
