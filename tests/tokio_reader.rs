//! The reader under tokio (`AsyncSequentialFileReader`), on both backends and both runtime
//! flavours: every byte of every file once, in order, as `std::fs::read` has them, through
//! `AsyncRead`, `AsyncBufRead` and the record methods; files queued by path, as `File`s and
//! borrowed; cold files, whose reads make the task wait; and cancel safety: a future dropped
//! after one poll, and reads cut short by a timeout, lose no byte.
#![cfg(all(feature = "tokio", unix))]

mod common;

use std::fs::File;
use std::future::Future;
use std::io;
use std::path::PathBuf;
use std::pin::pin;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use common::runtimes::runtimes;
use common::*;
use proptest::prelude::*;
use readahead::{AsyncSequentialFileReader, Entry, ReaderBuilder};
use tokio::io::{AsyncBufReadExt, AsyncReadExt};
use tokio::runtime::Builder;

/// Far beyond what any test here takes: a bound that shows it did not hang, not a timing.
const HANG: Duration = Duration::from_secs(60);

/// The reader must move between a runtime's threads.
#[test]
fn the_async_reader_is_send() {
    fn send<T: Send>() {}
    send::<AsyncSequentialFileReader<'static>>();
}

/// An async reader built by `b`, with `paths` queued.
fn async_reader(b: &ReaderBuilder, paths: &[PathBuf]) -> AsyncSequentialFileReader<'static> {
    let mut r = AsyncSequentialFileReader::new(b.clone().build().unwrap()).unwrap();
    for p in paths {
        r.push(p.clone()).unwrap();
    }
    r
}

/// Reads every queued file to its end, each through `read_to_end`: each file's bytes.
async fn read_all(r: &mut AsyncSequentialFileReader<'_>) -> io::Result<Vec<Vec<u8>>> {
    let mut files = Vec::new();
    if r.current_index().is_none() {
        return Ok(files);
    }
    loop {
        let mut bytes = Vec::new();
        r.read_to_end(&mut bytes).await?;
        files.push(bytes);
        if !r.move_to_next_file().await? {
            return Ok(files);
        }
    }
}

/// Runs `test` on every runtime flavour, with a builder per backend, within [`HANG`].
fn on_each(test: impl Fn(ReaderBuilder, String) -> std::pin::Pin<Box<dyn Future<Output = ()>>>) {
    for (flavour, rt) in runtimes() {
        for (name, b) in configs() {
            let what = format!("{name}, {flavour}");
            let run =
                rt.block_on(async { tokio::time::timeout(HANG, test(b, what.clone())).await });
            run.unwrap_or_else(|_| panic!("{what}: hung"));
        }
    }
}

#[test]
fn every_byte_of_every_file_once_in_order_queued_by_path() {
    let files = make_files(&[0, 1, 4095, 4096, 70_000, 300_000, 5, 1 << 20]);
    let want = oracle_all(&files.paths);
    for cold in [false, true] {
        let paths = files.paths.clone();
        let want = want.clone();
        on_each(move |b, what| {
            let (paths, want) = (paths.clone(), want.clone());
            Box::pin(async move {
                if cold {
                    paths.iter().for_each(|p| evict_from_page_cache(p));
                }
                let mut r = async_reader(&b, &paths);
                let got = read_all(&mut r).await.unwrap();
                assert_files_eq(&got, &want, &format!("{what}, cold {cold}"));
                r.close().await.unwrap();
            })
        });
    }
}

#[test]
fn files_handed_in_owned_or_borrowed_read_whole() {
    let files = make_files(&[10, 200_000, 0, 70_000]);
    let want = oracle_all(&files.paths);
    for (flavour, rt) in runtimes() {
        for (name, b) in configs() {
            let opened = files.open_all();
            let what = format!("{name}, {flavour}");
            rt.block_on(async {
                let mut r = AsyncSequentialFileReader::new(b.build().unwrap()).unwrap();
                for (i, f) in opened.iter().enumerate() {
                    match i % 2 {
                        0 => r.push(f).unwrap(),
                        _ => r.push(Entry::owned_file(f.try_clone().unwrap())).unwrap(),
                    }
                }
                let got = tokio::time::timeout(HANG, read_all(&mut r)).await;
                assert_files_eq(&got.expect("hung").unwrap(), &want, &what);
            });
        }
    }
}

#[test]
fn agave_methods_prefetch_and_activate() {
    let files = make_files(&[50_000, 120_000, 3]);
    let want = oracle_all(&files.paths);
    let opened = files.open_all();
    for (flavour, rt) in runtimes() {
        for (name, b) in builders() {
            let what = format!("{name:?}, {flavour}");
            rt.block_on(async {
                let mut r = AsyncSequentialFileReader::new(b.build().unwrap()).unwrap();
                for f in &opened {
                    r.add_file_to_prefetch(f, u64::MAX).unwrap();
                }
                for (i, f) in opened.iter().enumerate() {
                    r.activate_file(f, u64::MAX).unwrap();
                    let mut bytes = Vec::new();
                    r.read_to_end(&mut bytes).await.unwrap();
                    assert_bytes_eq(&bytes, &want[i], &format!("{what}, file {i}"));
                }
            });
        }
    }
}

#[test]
fn records_and_skips_match_the_oracle() {
    let files = make_files(&[100_000, 7, 250_000]);
    let want = oracle_all(&files.paths);
    for (flavour, rt) in runtimes() {
        for (name, b) in configs() {
            let what = format!("{name}, {flavour}");
            rt.block_on(async {
                let mut r = async_reader(&b, &files.paths);
                for (i, want) in want.iter().enumerate() {
                    assert_eq!(r.current_index(), Some(i));
                    assert_eq!(r.current_path(), Some(files.paths[i].as_path()));
                    let got = records_of(&mut r).await.unwrap();
                    assert_bytes_eq(&got, &skipped_every_fourth(want), &format!("{what}, {i}"));
                    r.move_to_next_file().await.unwrap();
                }
            });
        }
    }
}

/// The record of 1,000 bytes (or what is left) at each step, every fourth one skipped.
async fn records_of(r: &mut AsyncSequentialFileReader<'_>) -> io::Result<Vec<u8>> {
    let mut got = Vec::new();
    for step in 0.. {
        if step % 4 == 3 {
            if r.skip(1000).await? == 0 {
                break;
            }
            continue;
        }
        let record = r.fill_buf_at_least(1000).await?;
        if record.is_empty() {
            break;
        }
        let n = record.len().min(1000);
        got.extend_from_slice(&record[..n]);
        std::pin::Pin::new(&mut *r).consume(n);
    }
    Ok(got)
}

/// What [`records_of`] keeps of `bytes`.
fn skipped_every_fourth(bytes: &[u8]) -> Vec<u8> {
    let chunks = bytes.chunks(1000).enumerate();
    chunks
        .filter(|(i, _)| i % 4 != 3)
        .flat_map(|(_, c)| c.to_vec())
        .collect()
}

/// Polls `future` once, with a waker that does nothing: whether it completed.
fn poll_once<F: Future>(future: F) -> bool {
    let mut future = pin!(future);
    let mut cx = Context::from_waker(Waker::noop());
    matches!(future.as_mut().poll(&mut cx), Poll::Ready(_))
}

/// A reading of every queued file: each file's bytes.
type Reading<'r> = std::pin::Pin<Box<dyn Future<Output = Vec<Vec<u8>>> + 'r>>;

/// Reads files of `sizes`, each dropped from the page cache first (so that the reader waits
/// for the disk), with `read`, on every runtime flavour and configuration: checked against
/// the oracle.
fn check_cold_reads(
    sizes: &[usize],
    read: impl for<'r> Fn(&'r mut AsyncSequentialFileReader<'static>) -> Reading<'r>,
) {
    let files = make_files(sizes);
    let want = oracle_all(&files.paths);
    for (flavour, rt) in runtimes() {
        for (name, b) in configs() {
            files.paths.iter().for_each(|p| evict_from_page_cache(p));
            let got = rt.block_on(async {
                let mut r = async_reader(&b, &files.paths);
                tokio::time::timeout(HANG, read(&mut r)).await
            });
            let what = format!("{name}, {flavour}");
            assert_files_eq(&got.expect("hung"), &want, &what);
        }
    }
}

/// Reads the current file in pieces, polling each kind of future once and dropping it
/// before each piece.
async fn read_dropping_futures(r: &mut AsyncSequentialFileReader<'_>) -> Vec<u8> {
    let (mut bytes, mut buf) = (Vec::new(), [0; 3000]);
    loop {
        poll_once(r.fill_buf_at_least(5000));
        poll_once(r.skip(0));
        poll_once(r.fill_buf());
        let n = r.read(&mut buf).await.unwrap();
        if n == 0 {
            return bytes;
        }
        bytes.extend_from_slice(&buf[..n]);
    }
}

#[test]
fn a_future_dropped_after_one_poll_loses_no_byte() {
    check_cold_reads(&[300_000, 64 << 10, 1 << 20], |r| {
        Box::pin(async move {
            let mut got = Vec::new();
            loop {
                got.push(read_dropping_futures(r).await);
                if !r.move_to_next_file().await.unwrap() {
                    return got;
                }
            }
        })
    });
}

#[test]
fn reads_cut_short_by_a_timeout_lose_no_byte() {
    check_cold_reads(&[2 << 20, 500_000], |r| {
        Box::pin(async move {
            let (mut got, mut bytes, mut cut) = (Vec::new(), Vec::new(), 0);
            loop {
                // Most of these fire while the reader waits for the disk.
                let wait = Duration::from_micros(50);
                match tokio::time::timeout(wait, r.read_to_end(&mut bytes)).await {
                    Err(_) => cut += 1,
                    Ok(read) => {
                        read.unwrap();
                        got.push(std::mem::take(&mut bytes));
                        if !r.move_to_next_file().await.unwrap() {
                            eprintln!("{cut} reads cut short");
                            return got;
                        }
                    }
                }
            }
        })
    });
}

/// Descriptors this process has open on files under `dir`.
#[cfg(target_os = "linux")]
fn fds_under(dir: &std::path::Path) -> usize {
    let fds = std::fs::read_dir("/proc/self/fd").unwrap();
    let targets = fds.filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok());
    targets.filter(|target| target.starts_with(dir)).count()
}

/// A reader dropped while its futures waited for opens (on helper threads, in the ring)
/// leaves no descriptor behind: each open's answer is closed when it comes.
#[cfg(target_os = "linux")]
#[test]
fn a_reader_dropped_with_opens_under_way_leaves_no_descriptor() {
    let files = make_files(&[5000; 40]);
    for (flavour, rt) in runtimes() {
        for (name, b) in builders() {
            rt.block_on(async {
                let mut r = async_reader(&b, &files.paths);
                poll_once(r.fill_buf());
                poll_once(r.fill_buf_at_least(4000));
                drop(r);
            });
            let left = settled(0, || fds_under(files.dir.path()));
            assert_eq!(left, 0, "{name:?}, {flavour}: descriptors left open");
        }
    }
}

/// The files of a case: up to 6, up to 200 KiB each.
fn sizes() -> impl Strategy<Value = Vec<usize>> {
    proptest::collection::vec(0usize..200_000, 0..6)
}

proptest! {
    #![proptest_config(proptest_config(8))]

    #[test]
    fn any_files_read_whole_in_order(sizes in sizes(), chunk in 1usize..20_000) {
        let files = make_files(&sizes);
        let want = oracle_all(&files.paths);
        let rt = Builder::new_current_thread().enable_all().build().unwrap();
        for (name, b) in configs() {
            let got = rt.block_on(async {
                let mut r = async_reader(&b, &files.paths);
                let mut got = Vec::new();
                let mut buf = vec![0; chunk];
                for _ in &files.paths {
                    let mut bytes = Vec::new();
                    loop {
                        let n = r.read(&mut buf).await.unwrap();
                        if n == 0 {
                            break;
                        }
                        bytes.extend_from_slice(&buf[..n]);
                    }
                    got.push(bytes);
                    r.move_to_next_file().await.unwrap();
                }
                got
            });
            assert_files_eq(&got, &want, &name);
        }
    }
}

#[test]
fn a_borrowed_file_outlives_the_reader() {
    // The reader borrows `f` for its life, as the blocking one does.
    let files = make_files(&[1000]);
    let f = File::open(&files.paths[0]).unwrap();
    let rt = Builder::new_current_thread().enable_all().build().unwrap();
    let got = rt.block_on(async {
        let mut r = AsyncSequentialFileReader::new(ReaderBuilder::new().build().unwrap()).unwrap();
        r.push(&f).unwrap();
        read_all(&mut r).await.unwrap()
    });
    assert_files_eq(&got, &oracle_all(&files.paths), "borrowed");
}
