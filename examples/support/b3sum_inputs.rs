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
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::thread::Scope;

/// Paths listed ahead of the scan at most: the walk waits for the scan beyond them.
const AHEAD: usize = 4096;

/// One input, in output order.
#[derive(Debug)]
pub enum Found {
    /// A file to hash, named as it is to be printed.
    File(PathBuf),
    /// `-`: standard input.
    Stdin,
    /// A directory that could not be listed.
    Unlisted(PathBuf, io::Error),
    /// Something that is not a regular file, skipped: its path and what it is.
    Skipped(PathBuf, &'static str),
}

/// Lists `args` on a thread of `scope`: every input in order, and (the second receiver) the
/// paths of the [`Found::File`]s alone, in the same order, for the scan.
pub fn spawn<'scope>(
    scope: &'scope Scope<'scope, '_>,
    args: Vec<PathBuf>,
    recursive: bool,
) -> (Receiver<Found>, Receiver<PathBuf>) {
    let (found_tx, found) = mpsc::channel();
    let (files_tx, files) = mpsc::sync_channel(AHEAD);
    scope.spawn(move || {
        let mut out = Out {
            found: found_tx,
            files: files_tx,
        };
        for arg in args {
            let walk = recursive && fs::metadata(&arg).is_ok_and(|m| m.is_dir());
            let sent = if arg.as_os_str() == "-" {
                out.send(Found::Stdin)
            } else if walk {
                out.walk(&arg)
            } else {
                out.send(Found::File(arg))
            };
            if sent.is_err() {
                return; // no one is listening any more
            }
        }
    });
    (found, files)
}

/// Where the walk sends what it finds.
struct Out {
    found: Sender<Found>,
    files: SyncSender<PathBuf>,
}

/// The receivers hung up: the run is over.
struct HungUp;

impl Out {
    /// Sends one input; a file's path also to the scan, after the input itself, so that the
    /// order's side never waits for a path the scan has not been given.
    fn send(&mut self, found: Found) -> Result<(), HungUp> {
        let path = match &found {
            Found::File(path) => Some(path.clone()),
            _ => None,
        };
        self.found.send(found).map_err(|_| HungUp)?;
        match path {
            Some(path) => self.files.send(path).map_err(|_| HungUp),
            None => Ok(()),
        }
    }

    /// Sends the regular files under `dir`, depth first, each directory's entries by name.
    fn walk(&mut self, dir: &Path) -> Result<(), HungUp> {
        let entries = match list(dir) {
            Ok(entries) => entries,
            Err(e) => return self.send(Found::Unlisted(dir.to_path_buf(), e)),
        };
        for (name, kind) in entries {
            let path = dir.join(name);
            match kind {
                Ok(t) if t.is_dir() => self.walk(&path)?,
                Ok(t) if t.is_file() => self.send(Found::File(path))?,
                Ok(t) if t.is_symlink() => {}
                Ok(t) => self.send(Found::Skipped(path, kind_name(t)))?,
                Err(e) => self.send(Found::Unlisted(path, e))?,
            }
        }
        Ok(())
    }
}

/// A directory's entries with their types (from the directory itself where the filesystem
/// says, so without a `stat` each), sorted by name.
fn list(dir: &Path) -> io::Result<Vec<(OsString, io::Result<FileType>)>> {
    let mut entries = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        entries.push((entry.file_name(), entry.file_type()));
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
