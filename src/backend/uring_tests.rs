//! The io_uring backend against the kernel: more reads queued than the completion queue
//! holds, cancels, and shutdown with reads in flight (the bytes that come back:
//! `uring_bytes_tests.rs`, which shares the helpers here). Each test is skipped, saying why,
//! where io_uring is refused (and fails instead under `READAHEAD_REQUIRE_URING=1`: see
//! `crate::tests`).

use std::collections::HashSet;
use std::io::Write;
use std::panic::AssertUnwindSafe;
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use super::*;
use crate::backend::setup::CQ_PER_DEPTH;
use crate::consts::DEFAULT_DRAIN_TIMEOUT;
use crate::source::{Descriptor, FdRef};
use crate::tests::io_uring_here;

/// Reads of this size, each into its own region.
pub(super) const BLOCK: usize = 4096;

/// A ring of depth 2, so its completion queue holds 16.
pub(super) fn small_ring<'a>(pool: &Pool, register: bool) -> Ring<'a> {
    let config = RingConfig {
        depth: 2,
        register,
        io_workers: None,
        sq_poll: None,
        open_timeout: DEFAULT_DRAIN_TIMEOUT,
    };
    let mut ring = Ring::new(config, pool).unwrap();
    assert_eq!(
        ring.kernel.io_uring().params().cq_entries(),
        2 * CQ_PER_DEPTH
    );
    ring
}

/// Runs `f` on another thread and returns what it returns, or its panic; fails if it takes
/// longer than `secs` (a completion that never comes would otherwise hang the suite).
fn within<T: Send + 'static>(secs: u64, what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(out) => out,
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the worker sends before it ends"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what}: no answer within {secs} s"),
    }
}

/// A file of `blocks` blocks, each block's bytes telling it apart from the others.
fn blocks_file(blocks: usize) -> (Arc<File>, Vec<u8>) {
    let data: Vec<u8> = (0..blocks * BLOCK)
        .map(|i| ((i / BLOCK) * 31 + i % 251) as u8)
        .collect();
    let mut file = tempfile::tempfile().unwrap();
    file.write_all(&data).unwrap();
    (Arc::new(file), data)
}

/// A read of block `block` of `file` into a region of its own, as the engine's scheduler
/// builds it (`NextRead::lend`).
pub(super) fn read_block(
    pool: &mut Pool,
    id: u64,
    file: &Arc<File>,
    block: usize,
) -> ReadReq<'static> {
    let region = pool.alloc(BLOCK).expect("room for every block");
    let fd = FdRef::new(Arc::new(Descriptor::local(file.try_clone().unwrap())));
    ReadReq::new(
        id,
        (fd, false),
        (block * BLOCK) as u64,
        pool.lend(region),
        0,
        BLOCK,
    )
}

/// A pipe nothing is written to: a read of it stays in flight until cancelled. The writer
/// must be kept, or the read ends at once.
fn idle_pipe() -> (Arc<File>, std::io::PipeWriter) {
    let (reader, writer) = std::io::pipe().unwrap();
    (
        Arc::new(File::from(std::os::fd::OwnedFd::from(reader))),
        writer,
    )
}

/// A read of `pipe` into a region of its own.
fn read_pipe(pool: &mut Pool, id: u64, pipe: &Arc<File>) -> ReadReq<'static> {
    let region = pool.alloc(BLOCK).unwrap();
    let fd = FdRef::new(Arc::new(Descriptor::local(pipe.try_clone().unwrap())));
    ReadReq::new(id, (fd, false), 0, pool.lend(region), 0, BLOCK)
}

/// Takes every loan back and frees it; checks the pool is whole again.
fn give_back(pool: &mut Pool, done: Vec<ReadDone<'_>>) {
    for d in done {
        let region = pool.reclaim(d.loan);
        pool.free(region);
    }
    assert_eq!((pool.lent(), pool.used()), (0, 0));
}

#[test]
fn more_reads_than_the_completion_queue_holds_all_complete_once() {
    if !io_uring_here() {
        return;
    }
    const READS: usize = 200;
    let (file, data) = blocks_file(READS);
    for register in [false, true] {
        let (file, data) = (file.clone(), data.clone());
        within(20, "reading", move || {
            let mut pool = Pool::with_capacity(READS * BLOCK, false).unwrap();
            let mut ring = small_ring(&pool, register);
            // Blocks in a scattered order, none reaped until all are handed over.
            let order: Vec<usize> = (0..READS).map(|i| i * 73 % READS).collect();
            for (id, &block) in order.iter().enumerate() {
                ring.read(read_block(&mut pool, id as u64, &file, block));
            }
            ring.submit().unwrap();
            assert_eq!(ring.in_flight(), READS);
            let overflowed = ring.kernel.io_uring().submission().cq_overflow();
            let reaped_early = ring.flight.ready_len();
            let mut done = Vec::new();
            while ring.in_flight() > 0 {
                ring.reap(true, &mut done).unwrap();
            }
            assert_eq!(
                ring.kernel.io_uring().completion().overflow(),
                0,
                "no completion dropped"
            );
            eprintln!(
                "fixed {}: overflowed {overflowed}, {reaped_early} reaped while submitting",
                ring.kernel.fixed()
            );
            assert_eq!(done.len(), READS);
            let mut seen = HashSet::new();
            for d in &done {
                assert!(seen.insert(d.id), "read {} completed twice", d.id);
                assert_eq!(d.result, BLOCK as i32, "read {}", d.id);
            }
            for d in done {
                let block = order[d.id as usize];
                let region = pool.reclaim(d.loan);
                let want = &data[block * BLOCK..][..BLOCK];
                assert!(pool.bytes(&region, 0..BLOCK) == want, "block {block}");
                pool.free(region);
            }
            assert_eq!((pool.lent(), pool.used()), (0, 0));
            drop(ring);
        });
    }
}

#[test]
fn a_cancelled_read_comes_back_cancelled() {
    if !io_uring_here() {
        return;
    }
    within(10, "cancelling", || {
        let (pipe, _writer) = idle_pipe();
        let mut pool = Pool::with_capacity(BLOCK, false).unwrap();
        let mut ring = small_ring(&pool, false);
        ring.read(read_pipe(&mut pool, 7, &pipe));
        ring.submit().unwrap();
        let mut done = Vec::new();
        ring.reap(false, &mut done).unwrap();
        assert!(done.is_empty(), "nothing was written to the pipe");
        ring.cancel(7);
        while ring.in_flight() > 0 {
            ring.reap(true, &mut done).unwrap();
        }
        assert_eq!((done.len(), done[0].id), (1, 7));
        assert_eq!(done[0].result, -libc::ECANCELED);
        give_back(&mut pool, done);
    });
}

/// Hands a ring of depth 2 `reads` reads without a reap in between, every `pipe_every`-th
/// of an idle pipe (in flight until cancelled) and the others of a file's blocks (which may
/// or may not have completed), then shuts it down: every read comes back once, the pipe's
/// cancelled, the file's cancelled or with their block's bytes, and every loan returns.
fn shut_down_with_reads(reads: usize, pipe_every: usize) {
    let block_of =
        move |id: usize| (!id.is_multiple_of(pipe_every)).then(|| id - id / pipe_every - 1);
    let (file, data) = blocks_file(reads);
    within(20, "shutting down", move || {
        let (pipe, _writer) = idle_pipe();
        let mut pool = Pool::with_capacity(reads * BLOCK, false).unwrap();
        let mut ring = small_ring(&pool, false);
        for id in 0..reads {
            let req = match block_of(id) {
                Some(block) => read_block(&mut pool, id as u64, &file, block),
                None => read_pipe(&mut pool, id as u64, &pipe),
            };
            ring.read(req);
        }
        ring.submit().unwrap();
        let mut done = Vec::new();
        ring.shutdown(&mut done, DEFAULT_DRAIN_TIMEOUT).unwrap();
        assert_eq!(ring.in_flight(), 0);
        assert_eq!(done.len(), reads);
        let mut seen = HashSet::new();
        for d in &done {
            assert!(seen.insert(d.id), "read {} came back twice", d.id);
        }
        for d in done {
            let result = d.result;
            let region = pool.reclaim(d.loan);
            match block_of(d.id as usize) {
                None => assert_eq!(result, -libc::ECANCELED, "pipe read {}", d.id),
                Some(_) if result == -libc::ECANCELED => {}
                Some(block) => {
                    assert_eq!(result, BLOCK as i32, "read {}", d.id);
                    let want = &data[block * BLOCK..][..BLOCK];
                    assert!(pool.bytes(&region, 0..BLOCK) == want, "block {block}");
                }
            }
            pool.free(region);
        }
        assert_eq!((pool.lent(), pool.used()), (0, 0));
        drop(ring);
    });
}

#[test]
fn shutdown_with_reads_in_flight_returns_every_loan() {
    if io_uring_here() {
        shut_down_with_reads(44, 10);
    }
}

#[test]
fn shutdown_after_the_completion_queue_overflowed_returns_every_loan() {
    // A cancel for each of 100 reads in flight: where the kernel answers a submission with
    // EBUSY, completions reaped while the cancels go in must come back too.
    if io_uring_here() {
        shut_down_with_reads(200, 2);
    }
}

/// The message of a panic caught by `catch_unwind`.
fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    match panic.downcast::<String>() {
        Ok(msg) => *msg,
        Err(panic) => panic
            .downcast_ref::<&str>()
            .map_or_else(String::new, |s| s.to_string()),
    }
}

/// A read whose id is already in flight, or among the tags of opens and cancels, panics
/// in every build before its entry is queued: the kernel never gets its region, and the read
/// in flight under that id completes alone, its region intact.
#[test]
fn a_read_id_in_flight_or_among_the_tags_panics_before_it_is_queued() {
    if !io_uring_here() {
        return;
    }
    let (file, data) = blocks_file(4);
    within(10, "checking read ids", move || {
        // One region for each read, taken in order: the refused ones follow the first.
        let mut pool = Pool::with_capacity(4 * BLOCK, false).unwrap();
        let (base, _) = pool.as_raw_parts();
        let mut ring = small_ring(&pool, false);
        ring.read(read_block(&mut pool, 7, &file, 0));
        ring.submit().unwrap();
        for (id, block, why) in [
            (7, 1, "already in flight"),
            (CANCEL, 2, "among the tags of opens and cancels"),
            (OPEN, 3, "among the tags of opens and cancels"),
        ] {
            let req = read_block(&mut pool, id, &file, block);
            let again = &mut ring;
            let panic = std::panic::catch_unwind(AssertUnwindSafe(move || again.read(req)))
                .expect_err("a read under a bad id is refused");
            let msg = panic_message(panic);
            assert!(msg.contains(why), "{id:#x}: {msg}");
            assert!(!ring.kernel.queued(), "{id:#x}: nothing queued");
            assert_eq!(ring.in_flight(), 1, "{id:#x}: only the first read");
        }
        let mut done = Vec::new();
        while ring.in_flight() > 0 {
            ring.reap(true, &mut done).unwrap();
        }
        assert_eq!(
            (done.len(), done[0].id, done[0].result),
            (1, 7, BLOCK as i32)
        );
        let region = pool.reclaim(done.pop().unwrap().loan);
        assert!(pool.bytes(&region, 0..BLOCK) == &data[..BLOCK]);
        // SAFETY: the pool (and its mapping) lives, and no read of the refused regions (the
        // three after the first; their loans leaked with the panics) reached the kernel
        // (checked above), so nothing writes these bytes.
        let refused = unsafe { std::slice::from_raw_parts(base.add(BLOCK), 3 * BLOCK) };
        assert!(
            refused.iter().all(|&b| b == 0),
            "the kernel wrote a refused region"
        );
        drop(ring);
    });
}
