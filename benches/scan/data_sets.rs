//! The scan example's built-in data sets: generated once from a fixed seed into
//! `$TMPDIR/readahead-scan-NAME`, then reused.
//!
//! A marker file, `$TMPDIR/readahead-scan-NAME.complete`, is written last and holds the
//! parameters the files were made with; a directory without a matching marker (generation cut
//! short, or other parameters) is deleted and made again. The marker sits beside the directory,
//! not in it, so that every file in the directory is data (fio's `--opendir` reads them all).
//!
//! A new data set is made durable before its marker is written (`syncfs`, then `fsync` of
//! every file and directory), and a reused one is `syncfs`ed again: the first scan must not run
//! while the kernel is still writing the files back.

use std::fs;
use std::io;
use std::path::PathBuf;
use std::time::Instant;

use indicatif::ProgressBar;

use super::accounts;
use super::prng::Prng;
use super::{progress, system};

/// How a data set's file sizes are drawn.
#[derive(Clone, Copy, Debug)]
enum Sizes {
    /// Log-uniform in `min..=max` (as many files of 4-8 KiB as of 2-4 MiB), until `total`
    /// bytes are reached.
    LogUniform { min: u64, max: u64, total: u64 },
    /// `count` files of exactly `size` bytes.
    Fixed { size: u64, count: u64 },
    /// Account storage files (see `accounts.rs`), with sizes up to `tail_max`, until `total`
    /// bytes are reached.
    Accounts { tail_max: u64, total: u64 },
}

impl Sizes {
    /// The bytes the data set holds, about.
    fn total(self) -> u64 {
        match self {
            Sizes::LogUniform { total, .. } | Sizes::Accounts { total, .. } => total,
            Sizes::Fixed { size, count } => size * count,
        }
    }
}

/// One built-in data set.
#[derive(Clone, Copy, Debug)]
pub struct DataSet {
    /// The name given to `--data-set`.
    pub name: &'static str,
    /// What it holds, for the usage text and the messages.
    pub summary: &'static str,
    sizes: Sizes,
    /// Files per subdirectory.
    per_dir: u64,
    seed: u64,
}

/// The seed of the mixed data sets (the bytes of "readahea").
const MIXED_SEED: u64 = 0x7265_6164_6168_6561;
/// The seed of the tiny data sets (the bytes of "tinyfile").
const TINY_SEED: u64 = 0x7469_6e79_6669_6c65;
/// The seed of the account data sets (the bytes of "accounts").
const ACCOUNTS_SEED: u64 = 0x6163_636f_756e_7473;

/// Every built-in data set; the first is the default.
pub const DATA_SETS: [DataSet; 7] = [
    DataSet {
        name: "mixed",
        summary: "256 MiB of files of 4 KiB-4 MiB, log-uniform",
        sizes: Sizes::LogUniform {
            min: 4 << 10,
            max: 4 << 20,
            total: 256 << 20,
        },
        per_dir: 64,
        seed: MIXED_SEED,
    },
    DataSet {
        name: "mixed-1g",
        summary: "1 GiB of files of 4 KiB-4 MiB, log-uniform",
        sizes: Sizes::LogUniform {
            min: 4 << 10,
            max: 4 << 20,
            total: 1 << 30,
        },
        per_dir: 64,
        seed: MIXED_SEED,
    },
    DataSet {
        name: "tiny",
        summary: "20,000 files of 4 KiB",
        sizes: Sizes::Fixed {
            size: 4 << 10,
            count: 20_000,
        },
        per_dir: 250,
        seed: TINY_SEED,
    },
    DataSet {
        name: "tiny-100k",
        summary: "100,000 files of 4 KiB",
        sizes: Sizes::Fixed {
            size: 4 << 10,
            count: 100_000,
        },
        per_dir: 250,
        seed: TINY_SEED,
    },
    DataSet {
        name: "tiny-530k",
        summary: "530,000 files of 4 KiB",
        sizes: Sizes::Fixed {
            size: 4 << 10,
            count: 530_000,
        },
        per_dir: 250,
        seed: TINY_SEED,
    },
    DataSet {
        name: "accounts",
        summary: "1.5 GiB of account storage files (10,766): 97% of 15-115 KB, \
                  3% log-uniform 136 B-32 MiB; records of a 136-byte header, data \
                  (mostly 165 B, a few up to 1 MiB), padding to 8",
        sizes: Sizes::Accounts {
            tail_max: 32 << 20,
            total: 1536 << 20,
        },
        per_dir: 500,
        seed: ACCOUNTS_SEED,
    },
    DataSet {
        name: "accounts-small",
        summary: "64 MiB of account storage files (881), as accounts \
                  but with a tail up to 4 MiB",
        sizes: Sizes::Accounts {
            tail_max: 4 << 20,
            total: 64 << 20,
        },
        per_dir: 500,
        seed: ACCOUNTS_SEED,
    },
];

/// The data set served over FUSE with a delay on every read (see `fuse_latency.rs`): not
/// generated on disk, so not in [`DATA_SETS`].
pub const FUSE_LATENCY: &str = "fuse-latency";

/// The data set named `name`, if there is one.
pub fn find(name: &str) -> Option<&'static DataSet> {
    DATA_SETS.iter().find(|set| set.name == name)
}

/// The names of all data sets, for messages: `mixed, mixed-1g, ...`.
pub fn names() -> String {
    let mut names: Vec<&str> = DATA_SETS.iter().map(|set| set.name).collect();
    names.push(FUSE_LATENCY);
    names.join(", ")
}

impl DataSet {
    /// Where its files live.
    fn dir(&self) -> PathBuf {
        std::env::temp_dir().join(format!("readahead-scan-{}", self.name))
    }

    /// Written last, beside the directory.
    fn marker(&self) -> PathBuf {
        std::env::temp_dir().join(format!("readahead-scan-{}.complete", self.name))
    }

    /// What the marker says: everything the files depend on.
    fn params(&self) -> String {
        format!(
            "name={} seed={:#x} sizes={:?} per_dir={}\n",
            self.name, self.seed, self.sizes, self.per_dir
        )
    }

    /// The data set's directory, generated first if it is missing or incomplete; a bar
    /// shows the generation's progress if `show_progress`.
    pub fn ensure(&self, show_progress: bool) -> io::Result<PathBuf> {
        let dir = self.dir();
        let marker = self.marker();
        let params = self.params();
        if fs::read_to_string(&marker).is_ok_and(|text| text == params) && dir.is_dir() {
            // Cheap when the files are long written; waits for them when they are not.
            system::syncfs(&dir)?;
            return Ok(dir);
        }
        eprintln!(
            "generating data set {} ({}) in {}",
            self.name,
            self.summary,
            dir.display()
        );
        match fs::remove_file(&marker) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        let start = Instant::now();
        let bar = progress::bytes(show_progress, self.sizes.total(), "generate");
        let (files, bytes) = self.generate(bar.as_ref())?;
        progress::finish(bar);
        eprintln!(
            "generated {files} files, {:.1} MiB, in {:.1} s; writing them to disk",
            bytes as f64 / (1 << 20) as f64,
            start.elapsed().as_secs_f64()
        );
        system::sync_tree(&dir)?;
        fs::write(&marker, params)?;
        system::sync_tree(&marker)?;
        Ok(dir)
    }

    /// Writes the files, each with one `write`; returns how many and their total size.
    fn generate(&self, bar: Option<&ProgressBar>) -> io::Result<(u64, u64)> {
        let dir = self.dir();
        let mut rng = Prng::new(self.seed);
        let mut buf = Vec::new();
        let (mut files, mut bytes) = (0, 0);
        while let Some(size) = self.next_size(&mut rng, files, bytes) {
            let sub = dir.join(format!("{:04}", files / self.per_dir));
            if files % self.per_dir == 0 {
                fs::create_dir_all(&sub)?;
            }
            if let Sizes::Accounts { .. } = self.sizes {
                accounts::fill_file(&mut rng, &mut buf, size);
            } else {
                buf.resize(size as usize, 0);
                rng.fill(&mut buf);
            }
            fs::write(sub.join(format!("{files:06}.bin")), &buf)?;
            files += 1;
            bytes += size;
            if let Some(bar) = bar {
                bar.inc(size);
            }
        }
        Ok((files, bytes))
    }

    /// The size of the next file, after `files` files of `bytes` bytes; `None` when done.
    fn next_size(&self, rng: &mut Prng, files: u64, bytes: u64) -> Option<u64> {
        match self.sizes {
            Sizes::LogUniform { min, max, total } if bytes < total => {
                Some(rng.log_uniform(min, max))
            }
            Sizes::Fixed { size, count } if files < count => Some(size),
            Sizes::Accounts { tail_max, total } if bytes < total => {
                Some(accounts::file_size(rng, tail_max))
            }
            _ => None,
        }
    }
}
