//! The scan's outcomes awaited by a tokio task (`ScanMap::stream`): one outcome a file, each
//! as `std::fs::read` has it or failed naming its path, on both runtime flavours; a dropped
//! stream cancels the scan; a closure's panic comes out of `finish`.
#![cfg(feature = "tokio")]

mod common;

use std::io::Read;
use std::panic::{self, AssertUnwindSafe};

use common::runtimes::runtimes;
use common::*;
use readahead::{Outcome, Scan};

/// Reads a scan's file whole.
fn read_whole(file: &mut readahead::ScanFile<'_, 'static>) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map(|_| bytes)
}

#[test]
fn every_file_has_one_outcome_awaited_by_a_task() {
    let files = make_files(&[0, 5000, 300_000, 70_000, 1 << 20]);
    let want = oracle_all(&files.paths);
    let mut paths = files.paths.clone();
    let missing = files.dir.path().join("missing");
    paths.insert(2, missing.clone());
    for (flavour, rt) in runtimes() {
        let scan = Scan::new(paths.clone()).threads(2).map(read_whole);
        let (got, summary) = rt.block_on(async {
            let mut outcomes = scan.stream().unwrap();
            let mut got: Vec<_> = paths.iter().map(|_| None).collect();
            while let Some((index, outcome)) = outcomes.next().await {
                assert!(got[index].is_none(), "{flavour}: file {index} twice");
                got[index] = Some(outcome);
            }
            (got, outcomes.finish().await.unwrap())
        });
        assert_eq!(summary.progress.files, paths.len() as u64, "{flavour}");
        for (index, outcome) in got.into_iter().enumerate() {
            match (index, outcome) {
                (2, Some(Outcome::Failed(e))) => assert_names(&e, "missing"),
                (i, Some(Outcome::Done(bytes))) if i != 2 => {
                    let want = &want[if i < 2 { i } else { i - 1 }];
                    assert_bytes_eq(&bytes, want, &format!("{flavour}: file {i}"));
                }
                other => panic!("{flavour}: {other:?}"),
            }
        }
    }
}

#[test]
fn the_outcomes_are_a_futures_stream() {
    use futures_core::Stream;
    let files = make_files(&[100, 200_000, 3]);
    let rt = &runtimes()[0].1;
    let scan = Scan::new(files.paths.clone()).map(read_whole);
    let mut got = rt.block_on(async {
        let mut outcomes = scan.stream().unwrap();
        let mut got = Vec::new();
        let mut outcomes = std::pin::Pin::new(&mut outcomes);
        while let Some((index, outcome)) =
            std::future::poll_fn(|cx| outcomes.as_mut().poll_next(cx)).await
        {
            got.push((index, outcome.into_result().unwrap().unwrap()));
        }
        got
    });
    got.sort_by_key(|(index, _)| *index);
    let bytes: Vec<Vec<u8>> = got.into_iter().map(|(_, bytes)| bytes).collect();
    assert_files_eq(&bytes, &oracle_all(&files.paths), "as a stream");
}

#[test]
fn a_dropped_stream_cancels_the_scan() {
    let files = make_files(&[4096; 64]);
    let rt = &runtimes()[0].1;
    // A window of one: the threads wait for the task after every few outcomes.
    let scan = Scan::new(files.paths.clone()).threads(1).map(read_whole);
    let handle = rt.block_on(async {
        let mut outcomes = scan.stream().unwrap();
        outcomes.next().await.expect("a first outcome");
        outcomes.handle().clone()
    });
    assert!(handle.is_cancelled(), "{handle:?}");
}

#[test]
fn a_closures_panic_comes_out_of_finish() {
    let files = make_files(&[100, 200, 300]);
    let rt = &runtimes()[0].1;
    let scan = Scan::new(files.paths.clone()).threads(1).map(|file| {
        if file.index() == 1 {
            panic!("the closure's own panic");
        }
        read_whole(file)
    });
    let caught = panic::catch_unwind(AssertUnwindSafe(|| {
        rt.block_on(async {
            let mut outcomes = scan.stream().unwrap();
            while outcomes.next().await.is_some() {}
            outcomes.finish().await
        })
    }));
    let panic = caught.expect_err("the panic is raised again");
    let message = panic.downcast_ref::<&str>().copied().unwrap_or_default();
    assert_eq!(message, "the closure's own panic");
}
