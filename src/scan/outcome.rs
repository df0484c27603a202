//! What became of one file of a scan (`Outcome`).

/// What became of one file of a scan: what [`ScanMap::for_each`](crate::ScanMap::for_each)
/// and [`ScanMap::ordered`](crate::ScanMap::ordered) hand the caller for each file (see
/// [`Scan`'s examples](crate::Scan#examples)).
#[derive(Debug)]
pub enum Outcome<T, E> {
    /// The closure returned this value.
    Done(T),
    /// The file failed: the closure's error (a read or open error it passed on, naming the
    /// file, or one of its own), or the reader's refusal to queue the entry.
    Failed(E),
    /// The file was never started: the scan was cancelled (or stopped by a panic or an
    /// error) first. Not an error of the file.
    NotRun,
}

impl<T, E> Outcome<T, E> {
    /// The closure's result, or `None` for a file that did not run.
    pub fn into_result(self) -> Option<Result<T, E>> {
        match self {
            Outcome::Done(value) => Some(Ok(value)),
            Outcome::Failed(e) => Some(Err(e)),
            Outcome::NotRun => None,
        }
    }

    /// Whether the file was never started.
    pub fn is_not_run(&self) -> bool {
        matches!(self, Outcome::NotRun)
    }
}

impl<T, E> From<Result<T, E>> for Outcome<T, E> {
    fn from(result: Result<T, E>) -> Self {
        match result {
            Ok(value) => Outcome::Done(value),
            Err(e) => Outcome::Failed(e),
        }
    }
}
