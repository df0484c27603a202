//! The files a scan reads: the PATHs given, directories walked, in sorted order.

use std::fs;
use std::path::{Path, PathBuf};

/// The files to scan, in order, and the sum of their sizes.
#[derive(Debug, Default)]
pub struct FileList {
    pub paths: Vec<PathBuf>,
    pub total_bytes: u64,
}

/// Lists the files under `roots`: files as given, directories walked and sorted. A path that
/// cannot be examined is kept, so that each backend reports it and counts it as failed.
pub fn collect_files(roots: &[PathBuf]) -> FileList {
    let mut list = FileList::default();
    for root in roots {
        match fs::metadata(root) {
            Ok(meta) if meta.is_dir() => {
                let mut found = Vec::new();
                walk(root, &mut found);
                found.sort();
                for (path, size) in found {
                    list.paths.push(path);
                    list.total_bytes += size;
                }
            }
            Ok(meta) => {
                list.paths.push(root.clone());
                list.total_bytes += meta.len();
            }
            Err(_) => list.paths.push(root.clone()),
        }
    }
    list
}

/// Adds the regular files under `dir` to `out` with their sizes, recursively. Follows
/// symlinks to files, not to directories (no cycles).
fn walk(dir: &Path, out: &mut Vec<(PathBuf, u64)>) {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) => return eprintln!("warning: cannot list {}: {e}", dir.display()),
    };
    for entry in entries {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                eprintln!("warning: cannot list {}: {e}", dir.display());
                continue;
            }
        };
        let path = entry.path();
        match entry.file_type() {
            Ok(t) if t.is_dir() => walk(&path, out),
            Ok(t) if t.is_symlink() => match fs::metadata(&path) {
                Ok(meta) if meta.is_file() => out.push((path, meta.len())),
                _ => {}
            },
            Ok(t) if t.is_file() => match entry.metadata() {
                Ok(meta) => out.push((path, meta.len())),
                Err(_) => out.push((path, 0)),
            },
            Ok(_) => {}
            Err(e) => eprintln!("warning: cannot examine {}: {e}", path.display()),
        }
    }
}
