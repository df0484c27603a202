//! What one run of the scan does with the bytes, and what it reports: the consumer of each
//! file, the totals, the clock, the outcome and its JSON line and summary.

use std::io::{self, BufRead};
use std::path::Path;
use std::time::Instant;

use indicatif::ProgressBar;
use readahead::Stats;

use super::checksum::Checksum;
use super::light::Light;
use super::records::RecordSum;
use super::system;

/// What every byte of a scan goes through (`--consumer`, or `--records`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consumer {
    /// The sum of each file's words: as little work a byte as reads every byte.
    Light,
    /// The cheap checksum of each file.
    Checksum,
    /// blake3 of each file.
    Blake3,
    /// Every record parsed, its data hashed with blake3.
    Records,
}

impl Consumer {
    /// What `--consumer` takes: every consumer of whole files (records have `--records`).
    pub const CHOICES: [Consumer; 3] = [Consumer::Light, Consumer::Checksum, Consumer::Blake3];

    /// The name in the output; for the consumers of [`Consumer::CHOICES`], also the value of
    /// `--consumer`.
    pub fn name(self) -> &'static str {
        match self {
            Consumer::Light => "light",
            Consumer::Checksum => "checksum",
            Consumer::Blake3 => "blake3",
            Consumer::Records => "records (blake3 of each)",
        }
    }
}

/// What one file came to.
#[derive(Debug)]
pub enum FileResult {
    Sum(u64),
    Hash(blake3::Hash),
    Records(RecordSum),
}

/// The consumer of one file's bytes as they come.
enum FileDigest {
    Light(Light),
    Sum(Checksum),
    Hash(Box<blake3::Hasher>),
}

impl FileDigest {
    fn new(consumer: Consumer) -> Self {
        match consumer {
            Consumer::Light => FileDigest::Light(Light::default()),
            Consumer::Blake3 => FileDigest::Hash(Box::default()),
            _ => FileDigest::Sum(Checksum::default()),
        }
    }

    /// Never inlined: one copy of each hot loop serves every reader, std's and ours, so that
    /// no comparison turns on where the compiler happened to place each copy's loop (a copy
    /// aligned differently ran 5% slower on the same bytes).
    #[inline(never)]
    fn update(&mut self, bytes: &[u8]) {
        match self {
            FileDigest::Light(sum) => sum.update(bytes),
            FileDigest::Sum(sum) => sum.update(bytes),
            FileDigest::Hash(hasher) => {
                hasher.update(bytes);
            }
        }
    }

    fn finish(self) -> FileResult {
        match self {
            FileDigest::Light(sum) => FileResult::Sum(sum.finish()),
            FileDigest::Sum(sum) => FileResult::Sum(sum.finish()),
            FileDigest::Hash(hasher) => FileResult::Hash(hasher.finalize()),
        }
    }
}

/// Feeds the rest of the current file to the sum, checksum or blake3 of `consumer`, straight from
/// the reader's buffer; returns the bytes consumed, and the file's digest or the error that
/// stopped it early.
pub fn consume_file(
    consumer: Consumer,
    reader: &mut impl BufRead,
    bar: Option<&ProgressBar>,
) -> (u64, io::Result<FileResult>) {
    let mut digest = FileDigest::new(consumer);
    let mut bytes = 0;
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) => return (bytes, Ok(digest.finish())),
            Ok(chunk) => chunk,
            Err(e) => return (bytes, Err(e)),
        };
        digest.update(chunk);
        let n = chunk.len();
        reader.consume(n);
        bytes += n as u64;
        if let Some(bar) = bar {
            bar.inc(n as u64);
        }
    }
}

/// Totals of one scan, or of one thread's part of it.
#[derive(Debug)]
pub struct Tally {
    consumer: Consumer,
    files: u64,
    failed: u64,
    bytes: u64,
    /// Each file's digest with its index in the scan, hashed in that order at the end.
    digests: Vec<(usize, FileResult)>,
    records: RecordSum,
}

impl Tally {
    pub fn new(consumer: Consumer) -> Self {
        Tally {
            consumer,
            files: 0,
            failed: 0,
            bytes: 0,
            digests: Vec::new(),
            records: RecordSum::default(),
        }
    }

    /// Counts file `index`; a failed one is reported and left out of the checksum.
    pub fn record(
        &mut self,
        index: usize,
        bytes: u64,
        result: io::Result<FileResult>,
        path: &Path,
    ) {
        self.files += 1;
        self.bytes += bytes;
        match result {
            Ok(FileResult::Records(records)) => self.records.merge(records),
            Ok(digest) => self.digests.push((index, digest)),
            Err(e) => {
                self.failed += 1;
                warn_failed(&e, path);
            }
        }
    }

    /// Adds another thread's part.
    pub fn merge(&mut self, other: Tally) {
        self.files += other.files;
        self.failed += other.failed;
        self.bytes += other.bytes;
        self.digests.extend(other.digests);
        self.records.merge(other.records);
    }

    /// The checksum of the scan: the record sum in hex, or blake3 of the files' digests in
    /// file order (whichever thread read them).
    fn checksum(mut self) -> String {
        if self.consumer == Consumer::Records {
            return format!("{:032x}", self.records.sum);
        }
        self.digests.sort_unstable_by_key(|(index, _)| *index);
        let mut all = blake3::Hasher::new();
        for (_, digest) in &self.digests {
            match digest {
                FileResult::Sum(sum) => all.update(&sum.to_le_bytes()),
                FileResult::Hash(hash) => all.update(hash.as_bytes()),
                FileResult::Records(_) => unreachable!("records are summed, not listed"),
            };
        }
        all.finalize().to_hex().to_string()
    }
}

/// Reports a failed file; names the path unless the error already does.
fn warn_failed(e: &io::Error, path: &Path) {
    if e.to_string().contains(&*path.to_string_lossy()) {
        eprintln!("warning: {e}; skipped");
    } else {
        eprintln!("warning: {}: {e}; skipped", path.display());
    }
}

/// Wall and CPU time since it was started.
pub struct Clock {
    wall: Instant,
    cpu: f64,
}

impl Clock {
    pub fn start() -> Self {
        Clock {
            wall: Instant::now(),
            cpu: system::cpu_seconds(),
        }
    }

    /// `(wall seconds, CPU seconds)` since the start.
    fn stop(&self) -> (f64, f64) {
        (
            self.wall.elapsed().as_secs_f64(),
            system::cpu_seconds() - self.cpu,
        )
    }
}

/// The result of one run.
pub struct Outcome {
    pub backend: &'static str,
    pub files: u64,
    pub failed: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub cpu_seconds: f64,
    /// The process's peak so far, this run's and any before it in the same process.
    pub peak_rss_kib: u64,
    pub checksum: String,
    /// Records hashed, with `--records`.
    pub records: Option<u64>,
    /// The reader's counters, summed over its threads (the peaks: the largest).
    pub stats: Option<Stats>,
}

impl Outcome {
    pub fn new(backend: &'static str, tally: Tally, clock: &Clock, stats: Option<Stats>) -> Self {
        let (seconds, cpu_seconds) = clock.stop();
        let records = (tally.consumer == Consumer::Records).then_some(tally.records.records);
        Outcome {
            backend,
            files: tally.files,
            failed: tally.failed,
            bytes: tally.bytes,
            seconds,
            cpu_seconds,
            peak_rss_kib: system::peak_rss_kib(),
            checksum: tally.checksum(),
            records,
            stats,
        }
    }

    pub fn gib_per_s(&self) -> f64 {
        self.bytes as f64 / (1u64 << 30) as f64 / self.seconds
    }
}

/// The JSON line of one run (see the module docs).
pub fn json_line(out: &Outcome) -> String {
    let mut line = format!(
        "{{\"backend\":\"{}\",\"files\":{},\"failed\":{},\"bytes\":{},\"seconds\":{:.6},\"gib_per_s\":{:.6},\"cpu_seconds\":{:.6},\"peak_rss_kib\":{},\"checksum\":\"{}\"",
        out.backend,
        out.files,
        out.failed,
        out.bytes,
        out.seconds,
        out.gib_per_s(),
        out.cpu_seconds,
        out.peak_rss_kib,
        out.checksum
    );
    if let Some(records) = out.records {
        line += &format!(",\"records\":{records}");
    }
    if let Some(s) = &out.stats {
        line += &format!(
            ",\"reads\":{},\"reads_cached\":{},\"reads_offloaded\":{},\"waits\":{},\"wait_seconds\":{:.6},\"peak_in_flight\":{},\"files_opened\":{},\"bytes_spilled\":{}",
            s.reads,
            s.reads_cached,
            s.reads_offloaded,
            s.waits,
            s.wait_time.as_secs_f64(),
            s.peak_in_flight,
            s.files_opened,
            s.bytes_spilled
        );
        if s.files_direct + s.files_uncached + s.files_dropped_behind > 0 {
            line += &format!(
                ",\"files_direct\":{},\"files_uncached\":{},\"files_dropped_behind\":{},\"bytes_dropped_behind\":{}",
                s.files_direct, s.files_uncached, s.files_dropped_behind, s.bytes_dropped_behind
            );
        }
    }
    line + "}"
}

/// The readable summary of one run.
pub fn summary(out: &Outcome) -> String {
    let mut text = match out.backend {
        "std" => "std BufReader".to_owned(),
        backend => format!("readahead ({backend})"),
    };
    let mib = out.bytes as f64 / (1 << 20) as f64;
    text += &format!("\n  files        {} ({} failed)", out.files, out.failed);
    text += &format!("\n  bytes        {} ({mib:.1} MiB)", out.bytes);
    text += &format!("\n  seconds      {:.4}", out.seconds);
    text += &format!("\n  GiB/s        {:.3}", out.gib_per_s());
    text += &format!("\n  cpu seconds  {:.4}", out.cpu_seconds);
    text += &format!(
        "\n  peak RSS     {:.1} MiB (of the process so far)",
        out.peak_rss_kib as f64 / 1024.0
    );
    if let Some(records) = out.records {
        text += &format!("\n  records      {records}");
    }
    text += &format!("\n  checksum     {}", out.checksum);
    if let Some(s) = &out.stats {
        text += &format!(
            "\n  reader       {} reads ({} copied at once from the page cache, {} by kernel workers), {} waits ({:.4} s waiting), peak {} in flight, {} bytes spilled",
            s.reads,
            s.reads_cached,
            s.reads_offloaded,
            s.waits,
            s.wait_time.as_secs_f64(),
            s.peak_in_flight,
            s.bytes_spilled,
        );
    }
    text
}
