//! What a scan has done so far (`ScanProgress`): the counters a
//! [`ScanHandle`](super::ScanHandle) reads while the scan runs, and its
//! [`ScanSummary`](super::ScanSummary) holds at the end.

/// What a scan has done so far: a snapshot of counters the threads keep as they go.
///
/// From [`ScanHandle::progress`](super::ScanHandle::progress) while the scan runs, and in its
/// [`ScanSummary`](super::ScanSummary) at the end.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ScanProgress {
    /// Files whose closure returned (or that failed before it could run), failed ones
    /// included.
    pub files: u64,
    /// Of those, the files that failed: their error is their result.
    pub failed: u64,
    /// Bytes the closures consumed or skipped, counted as they go (every MiB, and at the end
    /// of each file).
    pub bytes: u64,
    /// Files taken from the input but never started, because the scan stopped first.
    pub not_run: u64,
}
