//! The README's parser of records, run over a directory: the files of a validator's account
//! storage, each a run of records (a 136-byte header whose bytes 8..16 hold the data's length,
//! u64 little-endian, the data, zero padding to a multiple of 8).
//!
//! ```sh
//! cargo run --release --example records -- DIR   # every file under DIR, recursively
//! cargo run --release --example records          # a small demo set, one file torn
//! ```
//!
//! One reader reads the files in path order, each read ahead while the one before is parsed.
//! A record is taken with `fill_buf_at_least`, in place in the reader's pool; a file that
//! ends inside a record, or cannot be read, is reported with its path, and the parser goes
//! on with the next. The count is every whole record, those of a file before its tear
//! included. `scan`, `parse_file` and `torn` are the README's, word for word (a test holds
//! them to it).

use std::io::{self, BufRead};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use readahead::SequentialFileReader;

/// Counts the records of every account storage file under DIR, with the README's parser; a
/// file that does not parse is reported, and the count goes on.
///
/// Exit status: 0; 1 when the files could not be listed or the reader could not run.
#[derive(Debug, Parser)]
#[command(name = "records", max_term_width = 100)]
struct Args {
    /// A directory of record files, walked recursively [default: a small demo set, one file
    /// torn]
    dir: Option<PathBuf>,
}

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
    let mut paths = Vec::new();
    let counted = walk(&dir, &mut paths).and_then(|()| {
        paths.sort();
        scan(&paths)
    });
    match counted {
        Ok(records) => {
            println!("{} files, {records} records", paths.len());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("records: {e}");
            ExitCode::FAILURE
        }
    }
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

// The README's parser, from here to `write_demo`.

fn scan(paths: &[std::path::PathBuf]) -> io::Result<u64> {
    let mut reader = SequentialFileReader::new()?;
    for path in paths {
        reader.push(path)?;
    }
    let mut records = 0;
    while reader.current_index().is_some() {
        if let Err(e) = parse_file(&mut reader, &mut records) {
            let path = reader.current_path().map(|p| p.display().to_string());
            eprintln!("skipping {}: {e}", path.unwrap_or_default());
        }
        reader.move_to_next_file()?;
    }
    Ok(records)
}

fn parse_file(reader: &mut SequentialFileReader<'_>, records: &mut u64) -> io::Result<()> {
    loop {
        let header = reader.fill_buf_at_least(136)?; // an error: the file's, naming it
        if header.is_empty() {
            return Ok(()); // the end of the file, between records
        }
        if header.len() < 136 {
            return Err(torn(reader)); // the file ends inside a header
        }
        let len = u64::from_le_bytes(header[8..16].try_into().unwrap()) as usize;
        let size = (136 + len).next_multiple_of(8);
        let record = reader.fill_buf_at_least(size)?;
        if record.len() < size {
            return Err(torn(reader)); // the file ends inside a record
        }
        let _data = &record[136..136 + len]; // a whole record: hash it, index it...
        reader.consume(size);
        *records += 1;
    }
}

fn torn(reader: &SequentialFileReader<'_>) -> io::Error {
    let what = format!("a record torn at offset {}", reader.file_offset());
    io::Error::new(io::ErrorKind::UnexpectedEof, what)
}

/// A few record files, of records whose data is `lens` bytes long, the last one torn: it
/// ends inside its third record.
fn write_demo(dir: &Path) -> io::Result<()> {
    let files: [&[usize]; 3] = [&[165; 1000], &[20_000, 165, 1 << 20], &[165, 165, 4096]];
    for (i, lens) in files.iter().enumerate() {
        let mut bytes = Vec::new();
        for (j, &len) in lens.iter().enumerate() {
            let mut header = [0u8; 136];
            header[8..16].copy_from_slice(&(len as u64).to_le_bytes());
            bytes.extend_from_slice(&header);
            bytes.extend((0..len).map(|k| (k * 31 + j) as u8));
            bytes.resize(bytes.len().next_multiple_of(8), 0);
        }
        if i == files.len() - 1 {
            bytes.truncate(bytes.len() - 100);
        }
        std::fs::write(dir.join(format!("storage-{i}")), bytes)?;
    }
    Ok(())
}
