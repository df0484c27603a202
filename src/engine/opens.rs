//! Descriptors: opening queued paths ahead of the reads (through the backend where it can),
//! the cap on descriptors held, running out of them, and closing what is done.

use std::collections::HashMap;
use std::io;
use std::mem;

use super::Engine;
use crate::consts::{DIRECT_ALIGN, MAX_RETRIES};
use crate::error::Error;
use crate::io::{finish_open, OpenResult, Opened};
use crate::source::Source;

/// Opens under way, and the cap on descriptors: `Limits::max_open` as configured, lowered
/// where the process runs out of them, and raised back step by step as opens go through
/// again.
#[derive(Debug, Default)]
pub(super) struct Opens {
    /// Opens the backend has started and not yet returned.
    in_flight: usize,
    /// Opens returned by the backend, being handled (kept to reuse its allocation).
    opened: Vec<(u64, OpenResult)>,
    /// The cap once it was lowered (back at `Limits::max_open` once it recovered); `None`:
    /// never lowered, the cap is as configured.
    cap: Option<usize>,
    /// Files opened since the cap last changed: once as many as the cap went through, the
    /// cap goes up by one (descriptors freed up), until it is back as configured.
    opened_since: usize,
    /// Files whose opens failed with a passing error and were started again: how often.
    retries: HashMap<u64, u32>,
}

impl Opens {
    /// Whether the cap was ever lowered.
    #[cfg(test)]
    pub(super) fn lowered(&self) -> bool {
        self.cap.is_some()
    }

    /// Opens the backend has started and not yet returned.
    #[cfg(test)]
    pub(super) fn in_flight(&self) -> usize {
        self.in_flight
    }
}

impl<'a> Engine<'a> {
    /// Descriptors the reader holds or is opening. A file whose orphans are still in flight
    /// counts until they come back, even while it is also counted as open (the cap is a
    /// bound, and this keeps it one).
    pub(super) fn descriptors(&self) -> usize {
        self.queue.open_here() + self.opens.in_flight + self.chunks.orphan_files()
    }

    /// Descriptors the reader may hold or be opening now.
    pub(super) fn max_open(&self) -> usize {
        self.opens.cap.unwrap_or(self.limits.max_open)
    }

    /// Takes the opens the backend finished.
    pub(super) fn handle_opened(&mut self) {
        let mut opened = mem::take(&mut self.opens.opened);
        self.io.take_opened(&mut opened);
        for (id, result) in opened.drain(..) {
            self.opens.in_flight -= 1;
            // A file moved past while it was being opened is closed here (dropped).
            match self.queue.index_of(id) {
                Some(idx) if !self.retry_open(idx, &result) => self.finish_open(idx, result),
                Some(_) => {}
                None => _ = self.opens.retries.remove(&id),
            }
        }
        self.opens.opened = opened;
    }

    /// Starts opening the path at `idx` through the backend, if it can; whether it did.
    pub(super) fn start_open(&mut self, idx: usize) -> bool {
        let direct = self.limits.direct;
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let Source::Path(path) = &entry.source else {
            return false;
        };
        if !self.io.start_open(entry.id, path, direct) {
            return false;
        }
        entry.set_opening();
        self.opens.in_flight += 1;
        true
    }

    /// Starts opening the paths queued after the read-ahead, so that their opening overlaps,
    /// while the cap on descriptors allows; whether it started any.
    pub(super) fn open_ahead(&mut self) -> bool {
        let mut i = self.queue.open_from();
        let mut started = false;
        while self.descriptors() < self.max_open() {
            let Some(entry) = self.queue.get_mut(i) else {
                break;
            };
            if entry.wants_open() {
                if !self.start_open(i) {
                    break;
                }
                started = true;
            }
            i += 1;
        }
        self.queue.looked_at_until(i);
        started
    }

    /// Starts the open of the file at `idx` again where it failed with a passing error
    /// (`EINTR`, `EAGAIN`, or `ECANCELED`: the thread that submitted it exited while a
    /// kernel worker held it), at most `MAX_RETRIES` times; whether it did.
    fn retry_open(&mut self, idx: usize, result: &OpenResult) -> bool {
        let id = self.queue.get_mut(idx).expect("index from the queue").id;
        let passing = matches!(result, Err(libc::EINTR | libc::EAGAIN | libc::ECANCELED));
        let tries = self.opens.retries.entry(id).or_default();
        if !passing || *tries >= MAX_RETRIES {
            self.opens.retries.remove(&id);
            return false;
        }
        *tries += 1;
        self.stats.retries += 1;
        self.queue
            .get_mut(idx)
            .expect("index from the queue")
            .set_open_returned();
        if !self.start_open(idx) {
            // The backend cannot open it now: opened when it is needed, on this thread.
            self.queue.reopen_from(idx);
        }
        true
    }

    /// Takes the result of an open the backend did for the file at `idx`.
    fn finish_open(&mut self, idx: usize, result: OpenResult) {
        let direct = self.limits.direct;
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        entry.set_open_returned();
        let Source::Path(path) = &entry.source else {
            unreachable!("only paths are opened by the backend")
        };
        let opened = match result {
            Ok((file, flags)) => finish_open(file, flags, direct, path),
            Err(libc::EMFILE | libc::ENFILE) => {
                self.out_of_descriptors(idx);
                return;
            }
            // Refused O_NOATIME (not the owner) or O_DIRECT (the filesystem): opened here,
            // which goes on without them (and without O_NOATIME from then on: the backend
            // remembers).
            Err(libc::EPERM | libc::EINVAL) => self.io.open(&entry.source, direct),
            Err(errno) => Err(Error::Open {
                path: entry.name(),
                source: io::Error::from_raw_os_error(errno),
            }),
        };
        self.set_opened(idx, opened);
    }

    /// The process ran out of descriptors opening the file at `idx`: the reader keeps fewer
    /// open from now on, and opens the file again later. The current file is opened again
    /// at once, after closing files opened ahead that nothing was read from yet; it fails
    /// only if the process has no descriptor left for it.
    fn out_of_descriptors(&mut self, idx: usize) {
        self.queue.reopen_from(idx);
        if idx > 0 {
            self.lower_cap(self.descriptors());
            return;
        }
        // What the process let the reader hold: the cap from now on.
        let held = self.descriptors();
        for i in 1..self.queue.len() {
            let e = self.queue.get_mut(i).expect("in range");
            if e.opened_here()
                && e.progress().next_read() <= e.status().start()
                && e.progress().in_flight() == 0
            {
                self.queue.release_fd(i);
            }
        }
        self.queue.looked_at_until(1);
        self.lower_cap(held);
        let entry = self.queue.get_mut(0).expect("the current file");
        let opened = self.io.open(&entry.source, self.limits.direct);
        self.set_opened(0, opened);
    }

    /// Opens and sizes the file at `idx` here, or records why it cannot be read.
    ///
    /// Returns `false` where the process is out of descriptors (`EMFILE`/`ENFILE`) while the
    /// reader holds some: the file stays queued, and the reader keeps fewer open from then on.
    pub(super) fn open_entry(&mut self, idx: usize) -> bool {
        let held = self.descriptors();
        let entry = self.queue.get_mut(idx).expect("index from the queue");
        let opened = self.io.open(&entry.source, self.limits.direct);
        match opened {
            Err(e) if idx > 0 && held > 0 && is_out_of_descriptors(&e) => {
                self.lower_cap(held);
                false
            }
            opened => {
                self.set_opened(idx, opened);
                true
            }
        }
    }

    /// Keeps at most `held` descriptors (at least 1) from now on: what the process let the
    /// reader hold when it ran out.
    fn lower_cap(&mut self, held: usize) {
        self.opens.cap = Some(held.max(1));
        self.opens.opened_since = 0;
    }

    /// A file was opened: after as many opens as the cap allows went through, the cap,
    /// if lowered, goes up by one, so that it recovers once descriptors free up (a cap
    /// that is still too high costs one open failing with `EMFILE`, which lowers it again).
    fn raise_cap(&mut self) {
        let Some(cap) = self.opens.cap else {
            return;
        };
        self.opens.opened_since += 1;
        if self.opens.opened_since >= cap {
            self.opens.cap = Some((cap + 1).min(self.limits.max_open));
            self.opens.opened_since = 0;
        }
    }

    /// Records the outcome of opening the file at `idx`.
    fn set_opened(&mut self, idx: usize, opened: Result<Opened<'a>, Error>) {
        match opened {
            Ok(opened) => {
                let opened_here = opened.opened_here;
                self.queue
                    .set_descriptor(idx, opened.fd, opened.direct, opened_here);
                let entry = self.queue.get_mut(idx).expect("index from the queue");
                let align = if opened.direct { DIRECT_ALIGN } else { 1 };
                if entry.set_size(opened.size, align as u64) {
                    self.stats.files_failed += 1;
                }
                let finished = entry.reads_finished();
                if opened_here {
                    self.stats.files_opened += 1;
                    self.raise_cap();
                }
                if finished {
                    self.queue.release_fd(idx);
                }
            }
            Err(e) => {
                let entry = self.queue.get_mut(idx).expect("index from the queue");
                let at = entry.progress().consumed();
                if entry.fail(e, at) {
                    self.stats.files_failed += 1;
                }
            }
        }
    }

    /// Closes the descriptor of file `file` if the reader opened it and is done with it.
    pub(super) fn release_if_finished(&mut self, file: u64) {
        let Some(idx) = self.queue.index_of(file) else {
            return;
        };
        if self
            .queue
            .get_mut(idx)
            .is_some_and(|e| e.opened_here() && e.reads_finished())
        {
            self.queue.release_fd(idx);
        }
    }
}

fn is_out_of_descriptors(e: &Error) -> bool {
    matches!(e, Error::Open { source, .. }
        if matches!(source.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE)))
}
