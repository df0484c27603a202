//! Parses a directory of account storage files and hashes every record, as a validator's
//! startup scan does.
//!
//! ```sh
//! cargo run --release --example records -- DIR   # every file under DIR, recursively
//! cargo run --release --example records          # a small demo set, one file corrupt
//! ```
//!
//! Each file is a run of records: a 136-byte header whose bytes 8..16 hold the data length
//! (u64, little-endian), the data, zero padding to a multiple of 8. The files are read by a
//! `readahead::Scan`, one reader per core, each file on whichever thread is free. A record is
//! taken with `fill_buf_at_least`, in place in the reader's pool (copied only where it
//! straddles the pool's end), hashed with blake3, then consumed. A file that does not parse,
//! or cannot be read, is reported with its path, in path order, and the scan goes on.

use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use readahead::{Outcome, Scan, ScanFile};

/// Parses every account storage file under DIR and hashes every record, as a validator's
/// startup scan does; a file that does not parse is reported and the scan goes on.
///
/// Exit status: 0; 2 when a file failed; 1 when the scan could not run.
#[derive(Debug, Parser)]
#[command(name = "records", max_term_width = 100)]
struct Args {
    /// A directory of record files, walked recursively [default: a small demo set, one file
    /// corrupt]
    dir: Option<PathBuf>,
}

/// The header's size, and where its data length is.
const HEADER: usize = 136;
const DATA_LEN: std::ops::Range<usize> = 8..16;
/// The most data an account holds (10 MiB): a longer length means a corrupt file.
const MAX_DATA: u64 = 10 << 20;

fn main() -> ExitCode {
    let demo;
    let dir = match Args::parse().dir {
        Some(dir) => dir,
        None => {
            demo = tempfile::tempdir().expect("a temporary directory");
            write_demo(demo.path()).expect("write the demo files");
            demo.path().to_path_buf()
        }
    };
    match scan(&dir) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(2),
        Err(e) => {
            eprintln!("records: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Hashes every record of every file in `dir`; how many files failed.
fn scan(dir: &Path) -> io::Result<usize> {
    let mut paths = Vec::new();
    walk(dir, &mut paths)?;
    paths.sort();
    let ((records, failed, sum), summary) =
        Scan::new(&paths).map(hash_records).ordered(|files| {
            let (mut records, mut failed, mut sum) = (0, 0, 0u128);
            for (index, outcome) in files {
                match outcome {
                    Outcome::Done((n, file_sum)) => {
                        records += n;
                        sum = sum.wrapping_add(file_sum);
                    }
                    Outcome::Failed(e) => {
                        eprintln!("skipping {}: {e}", paths[index].display());
                        failed += 1;
                    }
                    // Not cancelled here: a reader that failed as a whole (its ring) left it.
                    Outcome::NotRun => {
                        eprintln!("not read: {}: the scan stopped", paths[index].display());
                        failed += 1;
                    }
                }
            }
            (records, failed, sum)
        })?;
    let stats = summary.stats;
    println!(
        "{} files ({failed} failed), {records} records, sum {sum:032x}; {} bytes read, {} copied to join records",
        paths.len(),
        stats.bytes_read,
        stats.bytes_spilled
    );
    Ok(failed)
}

/// Every file under `dir`.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, out)?;
        } else {
            out.push(path);
        }
    }
    Ok(())
}

/// Hashes the records of a file: how many, and the wrapping sum of each hash's first 16
/// bytes (so that the order of files does not matter).
fn hash_records(file: &mut ScanFile) -> io::Result<(u64, u128)> {
    let (mut records, mut sum) = (0, 0u128);
    loop {
        let header = file.fill_buf_at_least(HEADER)?;
        if header.is_empty() {
            return Ok((records, sum));
        }
        if header.len() < HEADER {
            return Err(corrupt(format!(
                "a header cut short at {}",
                file.file_offset()
            )));
        }
        let len = u64::from_le_bytes(header[DATA_LEN].try_into().expect("8 bytes"));
        if len > MAX_DATA {
            let at = file.file_offset();
            return Err(corrupt(format!("a data length of {len} at {at}")));
        }
        let size = (HEADER + len as usize).next_multiple_of(8);
        let at = file.file_offset();
        let record = file.fill_buf_at_least(size)?;
        if record.len() < size {
            return Err(corrupt(format!(
                "a record of {size} bytes at {at} runs past the end"
            )));
        }
        let hash = blake3::hash(&record[HEADER..size]);
        let first: [u8; 16] = hash.as_bytes()[..16].try_into().expect("16 bytes");
        sum = sum.wrapping_add(u128::from_le_bytes(first));
        file.consume(size);
        records += 1;
    }
}

fn corrupt(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

/// A few record files, the third with a length that runs past its end.
fn write_demo(dir: &Path) -> io::Result<()> {
    for (i, lens) in [
        &[165u64; 1000][..],
        &[20_000, 165, 1 << 20],
        &[165, 1 << 40],
    ]
    .iter()
    .enumerate()
    {
        let mut bytes = Vec::new();
        for (j, &len) in lens.iter().enumerate() {
            let mut header = [0u8; HEADER];
            header[DATA_LEN].copy_from_slice(&len.to_le_bytes());
            bytes.extend_from_slice(&header);
            let data = len.min(1 << 20) as usize;
            bytes.extend((0..data).map(|k| (k * 31 + j) as u8));
            bytes.resize(bytes.len().next_multiple_of(8), 0);
        }
        std::fs::write(dir.join(format!("storage-{i}")), bytes)?;
    }
    Ok(())
}
