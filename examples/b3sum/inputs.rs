//! The b3sum example's inputs in order: its arguments as given (`-` for standard input), or
//! with `--recursive` the regular files under each directory argument, listed on a thread of
//! their own so that hashing starts while the tree is still being walked.
//!
//! A walk visits each directory's entries in byte order of their names, depth first (a
//! directory's files and subdirectories interleaved by name). It does not follow symbolic
//! links (a link is neither hashed nor reported, as `find -type f` leaves it out); a fifo,
//! socket or device is reported and skipped; a directory that cannot be listed is an error
//! of its own. An argument that is not a directory is taken as given, as b3sum takes it
//! (followed if a link, read if a pipe).

use std::ffi::OsString;
use std::fs::{self, FileType};
use std::io;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::Scope;

/// Inputs listed ahead of the hashing at most: the walk waits for it beyond them.
const AHEAD: usize = 4096;

/// One input, in output order.
#[derive(Debug)]
pub enum Found {
    /// A file to hash, named as it is to be printed, with its size if it is a regular file
    /// (looked up here, ahead of the scan, so that a large file can be cut in pieces).
    File(PathBuf, Option<u64>),
    /// `-`: standard input.
    Stdin,
    /// A directory that could not be listed.
    Unlisted(PathBuf, io::Error),
    /// Something that is not a regular file, skipped: its path and what it is.
    Skipped(PathBuf, &'static str),
}

/// Lists `args` in order on a thread of `scope`, walking directories if `recursive`.
pub fn spawn<'scope>(
    scope: &'scope Scope<'scope, '_>,
    args: Vec<PathBuf>,
    recursive: bool,
) -> Receiver<Found> {
    let (tx, found) = mpsc::sync_channel(AHEAD);
    scope.spawn(move || {
        let mut out = Out(tx);
        for arg in args {
            if arg.as_os_str() == "-" {
                if out.send(Found::Stdin).is_err() {
                    return; // no one is listening any more
                }
                continue;
            }
            let meta = fs::metadata(&arg).ok();
            let sent = if recursive && meta.as_ref().is_some_and(|m| m.is_dir()) {
                out.walk(&arg)
            } else {
                let size = meta.filter(|m| m.is_file()).map(|m| m.len());
                out.send(Found::File(arg, size))
            };
            if sent.is_err() {
                return; // no one is listening any more
            }
        }
    });
    found
}

/// Where the walk sends what it finds.
struct Out(SyncSender<Found>);

/// The receiver hung up: the run is over.
struct HungUp;

impl Out {
    fn send(&mut self, found: Found) -> Result<(), HungUp> {
        self.0.send(found).map_err(|_| HungUp)
    }

    /// Sends the regular files under `dir`, depth first, each directory's entries by name.
    fn walk(&mut self, dir: &Path) -> Result<(), HungUp> {
        let entries = match list(dir) {
            Ok(entries) => entries,
            Err(e) => return self.send(Found::Unlisted(dir.to_path_buf(), e)),
        };
        for (name, kind, size) in entries {
            let path = dir.join(name);
            match kind {
                Ok(t) if t.is_dir() => self.walk(&path)?,
                Ok(t) if t.is_file() => self.send(Found::File(path, size))?,
                Ok(t) if t.is_symlink() => {}
                Ok(t) => self.send(Found::Skipped(path, kind_name(t)))?,
                Err(e) => self.send(Found::Unlisted(path, e))?,
            }
        }
        Ok(())
    }
}
/// A directory entry: its name, its type, and its size if it is a regular file.
type Listed = (OsString, io::Result<FileType>, Option<u64>);

/// A directory's entries, sorted by name: their types from the directory itself where the
/// filesystem says, the sizes of regular files from a `stat` relative to the directory.
fn list(dir: &Path) -> io::Result<Vec<Listed>> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type();
        let size = match &kind {
            Ok(t) if t.is_file() => entry.metadata().ok().map(|m| m.len()),
            _ => None,
        };
        entries.push((entry.file_name(), kind, size));
    }
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries)
}

/// What a file that is not regular, a directory or a link is.
fn kind_name(t: FileType) -> &'static str {
    if t.is_fifo() {
        "fifo"
    } else if t.is_socket() {
        "socket"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_char_device() {
        "character device"
    } else {
        "special file"
    }
}
