//! The scan's outcomes for a tokio task (`ScanStream`, the `tokio` feature): the scan runs
//! on threads of its own, as `for_each` runs it, from a thread that hands each outcome to a
//! bounded channel the task awaits. No runtime thread reads a file or waits for one.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::thread::{self, JoinHandle};

use tokio::sync::{mpsc, oneshot};

use super::{Outcome, ScanFile, ScanHandle, ScanMap, ScanSummary};
use crate::entry::Entry;

/// Outcomes on their way to the task at most, before the scan's threads wait for it.
const BUFFERED: usize = 256;

impl<I, INIT, F> ScanMap<'static, I, INIT, F>
where
    I: Iterator + Send + 'static,
    I::Item: Into<Entry<'static>>,
{
    /// Starts the scan on a thread of its own and returns at once: each file's outcome, with
    /// its index in the input, comes through [`ScanStream::next`] as files finish (as
    /// [`for_each`](Self::for_each) hands them), for a tokio task to await. The scan's
    /// threads wait while 256 outcomes are not taken yet; dropping the stream cancels the
    /// scan.
    ///
    /// # Errors
    ///
    /// The scan's thread could not be started.
    ///
    /// # Examples
    ///
    /// ```
    /// use readahead::{Outcome, Scan};
    ///
    /// # async fn run(paths: Vec<std::path::PathBuf>) -> std::io::Result<()> {
    /// let mut outcomes = Scan::new(paths)
    ///     .map(|file| std::io::copy(file, &mut std::io::sink()))
    ///     .stream()?;
    /// while let Some((index, outcome)) = outcomes.next().await {
    ///     if let Outcome::Failed(e) = outcome {
    ///         eprintln!("file {index}: {e}");
    ///     }
    /// }
    /// let summary = outcomes.finish().await?;
    /// println!("{} files", summary.progress.files);
    /// # Ok(())
    /// # }
    /// ```
    pub fn stream<S, T, E>(self) -> io::Result<ScanStream<T, E>>
    where
        INIT: Fn() -> S + Sync + Send + 'static,
        F: Fn(&mut S, &mut ScanFile<'_, 'static>) -> Result<T, E> + Sync + Send + 'static,
        T: Send + 'static,
        E: From<io::Error> + Send + 'static,
    {
        let handle = self.handle();
        let (tx, outcomes) = mpsc::channel(BUFFERED);
        let (done, summary) = oneshot::channel();
        let cancel = handle.clone();
        let run = move || {
            let ran = self.for_each(|index, outcome| {
                // The stream was dropped: nobody wants the rest.
                if tx.blocking_send((index, outcome)).is_err() {
                    cancel.cancel();
                }
            });
            let _ = done.send(ran);
        };
        let thread = thread::Builder::new()
            .name("readahead-scan".into())
            .spawn(run)?;
        Ok(ScanStream {
            outcomes,
            summary,
            thread: Some(thread),
            handle,
        })
    }
}

/// A scan's outcomes, as files finish, for a tokio task: see [`ScanMap::stream`]. Dropped,
/// it cancels the scan (files not yet taken get no outcome) without waiting for it. It is a
/// [`futures_core::Stream`] of the same items as [`next`](Self::next).
pub struct ScanStream<T, E> {
    outcomes: mpsc::Receiver<(usize, Outcome<T, E>)>,
    summary: oneshot::Receiver<io::Result<ScanSummary>>,
    /// The thread the scan runs from: joined only to raise its panic again.
    thread: Option<JoinHandle<()>>,
    handle: ScanHandle,
}

/// How far the scan has come, and whether its thread is done.
impl<T, E> std::fmt::Debug for ScanStream<T, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScanStream")
            .field("progress", &self.handle.progress())
            .field(
                "finished",
                &self.thread.as_ref().is_none_or(|t| t.is_finished()),
            )
            .finish_non_exhaustive()
    }
}

impl<T, E> ScanStream<T, E> {
    /// The next outcome and its file's index in the input; `None` once every file has one
    /// (or the scan stopped: [`finish`](Self::finish) says why).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: an outcome is taken only by the call that returns it.
    pub async fn next(&mut self) -> Option<(usize, Outcome<T, E>)> {
        self.outcomes.recv().await
    }

    /// The scan's progress and its cancelling, from any thread or task.
    pub fn handle(&self) -> &ScanHandle {
        &self.handle
    }

    /// Waits for the scan to end: what it did. Outcomes not taken yet are dropped, and the
    /// scan cancelled if it had more.
    ///
    /// # Errors
    ///
    /// As [`for_each`](ScanMap::for_each): a reader could not be built, or failed as a whole.
    ///
    /// # Panics
    ///
    /// With the panic of a closure, once every thread of the scan has stopped.
    pub async fn finish(mut self) -> io::Result<ScanSummary> {
        self.outcomes.close();
        while self.outcomes.recv().await.is_some() {}
        match (&mut self.summary).await {
            Ok(summary) => {
                self.thread = None; // Ended: nothing left to cancel.
                summary
            }
            Err(_) => {
                // The scan's thread ended without a summary: it panicked, and has ended.
                let thread = self.thread.take().expect("joined once");
                match thread.join() {
                    Err(panic) => std::panic::resume_unwind(panic),
                    Ok(()) => unreachable!("the summary is sent before the thread ends"),
                }
            }
        }
    }
}

impl<T, E> futures_core::Stream for ScanStream<T, E> {
    type Item = (usize, Outcome<T, E>);

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.get_mut().outcomes.poll_recv(cx)
    }
}

impl<T, E> Drop for ScanStream<T, E> {
    fn drop(&mut self) {
        if self.thread.is_some() {
            self.handle.cancel();
        }
    }
}
