//! The async reader beside what a tokio user writes today, on a multi-thread runtime:
//! `tokio::fs::File` in a `BufReader`, one file after another, and std's `BufReader` loop in
//! `spawn_blocking`. Cold (each file's pages dropped first) and cached rounds, wall and CPU
//! seconds (the process's, io_uring's workers and the helper threads included), and, with
//! `--tasks N`, the files split among N tasks beside a ticker task on the same runtime: the
//! ticker's longest gap between two 1 ms ticks.
//!
//! ```text
//! cargo run --release --example tokio_read -- [--rounds N] [--tasks N] [--workers N] [--mib N] [DIR]
//! ```
//!
//! Without `DIR`, it reads a data set it writes once in `$TMPDIR/readahead-tokio-read`
//! (`--mib` MiB, 256 by default, in files of 4 KiB to 8 MiB). A benchmark harness, not a
//! program to copy: for that, see the README.

#[path = "../tests/common/runtimes.rs"]
#[allow(dead_code)] // The tests'; this uses the ticker.
mod runtimes;
#[path = "../benches/scan/system.rs"]
#[allow(dead_code)] // The harness's; this uses two of its functions.
mod system;

use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use readahead::{AsyncSequentialFileReader, SequentialFileReader};
use runtimes::ticker;
use tokio::io::AsyncBufReadExt;

/// One way to read the files.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Way {
    Readahead,
    TokioFs,
    SpawnBlocking,
    /// The blocking reader in `spawn_blocking`: what the async one is to keep up with.
    SyncReader,
}

const WAYS: [Way; 4] = [
    Way::Readahead,
    Way::TokioFs,
    Way::SpawnBlocking,
    Way::SyncReader,
];

/// What the command line asks.
struct Args {
    rounds: usize,
    tasks: usize,
    workers: usize,
    mib: u64,
    dir: Option<PathBuf>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        rounds: 3,
        tasks: 1,
        workers: 2,
        mib: 256,
        dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut number = |what: &str| -> Result<u64, String> {
            let v = it.next().ok_or(format!("{what} needs a number"))?;
            v.parse().map_err(|e| format!("{what} {v}: {e}"))
        };
        match arg.as_str() {
            "--rounds" => a.rounds = number("--rounds")? as usize,
            "--tasks" => a.tasks = number("--tasks")?.max(1) as usize,
            "--workers" => a.workers = number("--workers")?.max(1) as usize,
            "--mib" => a.mib = number("--mib")?,
            _ if arg.starts_with('-') => return Err(format!("unknown option {arg}")),
            _ => a.dir = Some(arg.into()),
        }
    }
    Ok(a)
}

fn main() -> io::Result<()> {
    let a = args().map_err(io::Error::other)?;
    let paths = match &a.dir {
        Some(dir) => files_under(dir)?,
        None => data_set(a.mib)?,
    };
    let bytes: u64 = paths
        .iter()
        .map(|p| p.metadata().map_or(0, |m| m.len()))
        .sum();
    println!(
        "{} files, {} MiB, {} tasks on {} workers",
        paths.len(),
        bytes >> 20,
        a.tasks,
        a.workers
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(a.workers)
        .enable_all()
        .build()?;
    for cold in [true, false] {
        let mut best = [f64::MAX; 4];
        for _ in 0..a.rounds {
            for (i, way) in WAYS.into_iter().enumerate() {
                prepare(&paths, cold)?;
                let run = measure(&rt, way, &paths, a.tasks)?;
                println!(
                    "{:<6} {way:<14?} {:>7.1} MiB/s  {:>6.2} s wall  {:>6.2} s CPU  ticker gap {:>8.3?}",
                    if cold { "cold" } else { "cached" },
                    bytes as f64 / (1 << 20) as f64 / run.wall,
                    run.wall,
                    run.cpu,
                    run.gap,
                );
                best[i] = best[i].min(run.wall);
            }
        }
        let baseline = best[1].min(best[2]);
        println!(
            "{}: readahead {:.2}x the better baseline, {:.2}x the blocking reader",
            if cold { "cold" } else { "cached" },
            baseline / best[0],
            best[3] / best[0],
        );
    }
    Ok(())
}

/// Drops every file's pages for a cold round; reads them all once before a cached one.
fn prepare(paths: &[PathBuf], cold: bool) -> io::Result<()> {
    for p in paths {
        if cold {
            system::evict(p)?;
        } else {
            io::copy(&mut std::fs::File::open(p)?, &mut io::sink())?;
        }
    }
    Ok(())
}

/// One run's figures.
struct Run {
    wall: f64,
    cpu: f64,
    gap: Duration,
}

/// Reads every file `way`, split among `tasks` tasks, beside a ticker.
fn measure(
    rt: &tokio::runtime::Runtime,
    way: Way,
    paths: &[PathBuf],
    tasks: usize,
) -> io::Result<Run> {
    let (start, cpu) = (Instant::now(), system::cpu_seconds());
    let gap = rt.block_on(async {
        let stop = Arc::new(AtomicBool::new(false));
        let ticks = tokio::spawn(ticker(stop.clone(), Duration::from_millis(1)));
        let share = paths.len().div_ceil(tasks).max(1);
        let mut running = Vec::new();
        for part in paths.chunks(share) {
            running.push(tokio::spawn(read(way, part.to_vec())));
        }
        let mut total = 0;
        for task in running {
            total += task.await.map_err(io::Error::other)??;
        }
        stop.store(true, Ordering::Relaxed);
        let gap = ticks.await.map_err(io::Error::other)?;
        let want: u64 = paths
            .iter()
            .map(|p| p.metadata().map_or(0, |m| m.len()))
            .sum();
        assert_eq!(total, want, "{way:?} read every byte");
        io::Result::Ok(gap)
    })?;
    let (wall, cpu) = (start.elapsed().as_secs_f64(), system::cpu_seconds() - cpu);
    Ok(Run { wall, cpu, gap })
}

/// Reads `paths` front to back `way`: the bytes read.
async fn read(way: Way, paths: Vec<PathBuf>) -> io::Result<u64> {
    match way {
        Way::Readahead => {
            let mut r = AsyncSequentialFileReader::new(SequentialFileReader::new()?)?;
            paths.iter().try_for_each(|p| r.push(p.as_path()))?;
            let mut total = 0;
            loop {
                total += drain(&mut r).await?;
                if !r.move_to_next_file().await? {
                    r.close().await?;
                    return Ok(total);
                }
            }
        }
        Way::TokioFs => {
            let mut total = 0;
            for p in &paths {
                let file = tokio::fs::File::open(p).await?;
                total += drain(&mut tokio::io::BufReader::with_capacity(1 << 20, file)).await?;
            }
            Ok(total)
        }
        Way::SpawnBlocking => tokio::task::spawn_blocking(move || {
            let mut total = 0;
            for p in &paths {
                let file = std::fs::File::open(p)?;
                total += drain_std(&mut io::BufReader::with_capacity(1 << 20, file))?;
            }
            io::Result::Ok(total)
        })
        .await
        .map_err(io::Error::other)?,
        Way::SyncReader => tokio::task::spawn_blocking(move || {
            let mut r = SequentialFileReader::new()?;
            paths.iter().try_for_each(|p| r.push(p.as_path()))?;
            let mut total = 0;
            loop {
                total += drain_std(&mut r)?;
                if !r.move_to_next_file()? {
                    return Ok(total);
                }
            }
        })
        .await
        .map_err(io::Error::other)?,
    }
}

/// Consumes everything `r` has, blocking: the bytes.
fn drain_std(r: &mut impl BufRead) -> io::Result<u64> {
    let mut total = 0;
    loop {
        let n = r.fill_buf()?.len();
        if n == 0 {
            return Ok(total);
        }
        r.consume(n);
        total += n as u64;
    }
}

/// Consumes everything `r` has: the bytes.
async fn drain(r: &mut (impl tokio::io::AsyncBufRead + Unpin)) -> io::Result<u64> {
    let mut total = 0;
    loop {
        let n = r.fill_buf().await?.len();
        if n == 0 {
            return Ok(total);
        }
        r.consume(n);
        total += n as u64;
    }
}

/// Every file under `dir`, sorted.
fn files_under(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(d)? {
            let entry = entry?;
            match entry.file_type()? {
                t if t.is_dir() => dirs.push(entry.path()),
                t if t.is_file() => out.push(entry.path()),
                _ => {}
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The data set of `mib` MiB in `$TMPDIR/readahead-tokio-read`, written once: files of 4 KiB
/// to 8 MiB, sizes cycling through powers of four.
fn data_set(mib: u64) -> io::Result<Vec<PathBuf>> {
    let dir = std::env::temp_dir().join(format!("readahead-tokio-read-{mib}"));
    let done = dir.join(".complete");
    if !done.exists() {
        std::fs::create_dir_all(&dir)?;
        let (mut left, mut i) = (mib << 20, 0u64);
        while left > 0 {
            let len = (4096u64 << (2 * (i % 6))).min(left);
            let byte = (i % 251) as u8;
            std::fs::write(dir.join(format!("{i:06}")), vec![byte; len as usize])?;
            (left, i) = (left - len, i + 1);
        }
        std::fs::write(&done, b"")?;
    }
    let mut paths = files_under(&dir)?;
    paths.retain(|p| p != &done);
    Ok(paths)
}
