//! What one run of the scan does with the bytes, and what it reports: the consumer of each
//! file, the totals, the clock, the outcome and its JSON line and summary.

use std::io::{self, BufRead};
use std::path::Path;
use std::time::Instant;

use indicatif::ProgressBar;
use readahead::Stats;

use crate::checksum::Checksum;
use crate::system;

/// The consumer of one file: every byte goes through it.
pub enum FileDigest {
    Sum(Checksum),
    Hash(Box<blake3::Hasher>),
}

impl FileDigest {
    pub fn new(hash: bool) -> Self {
        if hash {
            FileDigest::Hash(Box::default())
        } else {
            FileDigest::Sum(Checksum::default())
        }
    }

    fn update(&mut self, bytes: &[u8]) {
        match self {
            FileDigest::Sum(sum) => sum.update(bytes),
            FileDigest::Hash(hasher) => {
                hasher.update(bytes);
            }
        }
    }

    /// Appends this file's digest to the digest of the whole scan.
    fn finish_into(self, all: &mut blake3::Hasher) {
        match self {
            FileDigest::Sum(sum) => all.update(&sum.finish().to_le_bytes()),
            FileDigest::Hash(hasher) => all.update(hasher.finalize().as_bytes()),
        };
    }
}

/// Feeds the rest of the current file to `digest` straight from the reader's buffer;
/// returns the bytes consumed, and the error that stopped it early if any.
pub fn consume_file(
    reader: &mut impl BufRead,
    digest: &mut FileDigest,
    bar: Option<&ProgressBar>,
) -> (u64, io::Result<()>) {
    let mut bytes = 0;
    loop {
        let chunk = match reader.fill_buf() {
            Ok([]) => return (bytes, Ok(())),
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

/// Totals of one scan.
pub struct Tally {
    files: u64,
    failed: u64,
    bytes: u64,
    digest: blake3::Hasher,
}

impl Tally {
    pub fn new() -> Self {
        Tally {
            files: 0,
            failed: 0,
            bytes: 0,
            digest: blake3::Hasher::new(),
        }
    }

    /// Counts one file; a failed one is reported and left out of the checksum.
    pub fn record(&mut self, bytes: u64, result: io::Result<()>, digest: FileDigest, path: &Path) {
        self.files += 1;
        self.bytes += bytes;
        match result {
            Ok(()) => digest.finish_into(&mut self.digest),
            Err(e) => {
                self.failed += 1;
                warn_failed(&e, path);
            }
        }
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
    pub stats: Option<Stats>,
}

impl Outcome {
    pub fn new(backend: &'static str, tally: Tally, clock: &Clock, stats: Option<Stats>) -> Self {
        let (seconds, cpu_seconds) = clock.stop();
        Outcome {
            backend,
            files: tally.files,
            failed: tally.failed,
            bytes: tally.bytes,
            seconds,
            cpu_seconds,
            peak_rss_kib: system::peak_rss_kib(),
            checksum: tally.digest.finalize().to_hex().to_string(),
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
    if let Some(s) = &out.stats {
        line += &format!(
            ",\"reads\":{},\"waits\":{},\"wait_seconds\":{:.6},\"peak_in_flight\":{},\"files_opened\":{}",
            s.reads,
            s.waits,
            s.wait_time.as_secs_f64(),
            s.peak_in_flight,
            s.files_opened
        );
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
    text += &format!("\n  checksum     {}", out.checksum);
    if let Some(s) = &out.stats {
        text += &format!(
            "\n  reader       {} reads, {} waits ({:.4} s waiting), peak {} in flight",
            s.reads,
            s.waits,
            s.wait_time.as_secs_f64(),
            s.peak_in_flight,
        );
    }
    text
}
