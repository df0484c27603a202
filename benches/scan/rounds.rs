//! The default run: cold and warm rounds of ours and std, alternated, each run a child process
//! of its own, and both ratios ours ÷ std printed first.
//!
//! A round is: cold ours, cold std, warm ours, warm std (std first in every other round).
//! Before each cold run every file's
//! pages are dropped: with `--drop-caches`, the whole page cache (root); without it, each
//! file's own pages with `fsync` and `posix_fadvise(POSIX_FADV_DONTNEED)`, which needs no root
//! but drops only that file's clean, unmapped pages (its inode and directory entry stay
//! cached, so a cold run here opens files faster than after a reboot). Before the warm runs
//! this process reads every file once, untimed: the first read of pages just read from the
//! disk costs more than the next (the kernel moves them to its active list then), and
//! without it whichever warm run came first paid for it (ours, 0.79x std; then 1.0x).
//! The figures are the medians of the rounds; the range is that of the ratios within each
//! round.

use std::fmt::Write as _;
use std::path::Path;

use indicatif::ProgressBar;

use super::compare::{self, Role, Run};
use super::files::FileList;
use super::options::{child_args, Options, Runner, DEFAULT_RUN_ROUNDS};
use super::{progress, system};

/// Whether a run starts with the files' pages dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cache {
    Cold,
    Warm,
}

impl Cache {
    fn name(self) -> &'static str {
        match self {
            Cache::Cold => "cold",
            Cache::Warm => "warm",
        }
    }
}

/// The runs of one kind of round.
#[derive(Debug, Default)]
struct Runs {
    cold: Vec<Run>,
    warm: Vec<Run>,
}

/// Runs the rounds, prints the ratios and the runs; fails if the runs read different data.
pub fn run(opts: &Options, exe: &Path, files: &FileList) -> Result<(), String> {
    let rounds = opts.rounds.unwrap_or(DEFAULT_RUN_ROUNDS);
    super::emit(&header(opts, files, rounds));
    let bar = progress::steps(progress::shown(false), 4 * rounds as u64, "rounds");
    let mut runs = Runs::default();
    for round in 1..=rounds {
        for cache in [Cache::Cold, Cache::Warm] {
            if cache == Cache::Warm {
                warm_up(files);
            }
            // Which goes first alternates, so that neither always runs right after the other
            // kind of run (a cold one leaves the kernel busy freeing and writing back).
            let order = if round % 2 == 1 {
                [Role::Ours, Role::Std]
            } else {
                [Role::Std, Role::Ours]
            };
            for role in order {
                let run = one_run(opts, exe, files, (round, cache, role), bar.as_ref())?;
                let line = format!(
                    "round {round}/{rounds}: {} {} {:.3} GiB/s",
                    cache.name(),
                    role.name(),
                    run.gib_per_s()
                );
                match &bar {
                    Some(bar) => bar.println(line),
                    None => eprintln!("{line}"),
                }
                match cache {
                    Cache::Cold => runs.cold.push(run),
                    Cache::Warm => runs.warm.push(run),
                }
            }
        }
    }
    progress::finish(bar);
    super::emit(&ratios_text(opts, &runs));
    super::emit(&details(&runs, rounds));
    let mut all = runs.cold;
    all.extend(runs.warm);
    let agreement = compare::check_agreement(&all)?;
    super::emit(&compare::agreement_line(&agreement));
    Ok(())
}

/// Drops the files' pages if the run is cold, then runs one child.
fn one_run(
    opts: &Options,
    exe: &Path,
    files: &FileList,
    (round, cache, role): (usize, Cache, Role),
    bar: Option<&ProgressBar>,
) -> Result<Run, String> {
    if let Some(bar) = bar {
        bar.set_message(format!("{} {}", cache.name(), role.name()));
    }
    if cache == Cache::Cold {
        drop_pages(opts, files)?;
    }
    let runner = match role {
        Role::Std => Runner::Std,
        _ => opts.ours(),
    };
    // The child never drops caches itself: this process did, for the cold runs only.
    let child = Options {
        drop_caches: false,
        ..opts.clone()
    };
    let run = compare::run_child(exe, &child_args(&child, runner), round, role);
    if let Some(bar) = bar {
        bar.inc(1);
    }
    run
}

/// Reads every file once, so that both warm runs find them alike (see the module's docs).
/// Files that cannot be read are left to fail in the runs.
fn warm_up(files: &FileList) {
    for path in &files.paths {
        if let Ok(mut file) = std::fs::File::open(path) {
            let _ = std::io::copy(&mut file, &mut std::io::sink());
        }
    }
}

/// Drops the pages of the files: all of the page cache with `--drop-caches`, else each
/// file's own (files that cannot be opened are left to fail in the scan).
fn drop_pages(opts: &Options, files: &FileList) -> Result<(), String> {
    if opts.drop_caches {
        return system::drop_caches();
    }
    for path in &files.paths {
        let _ = system::evict(path);
    }
    Ok(())
}

/// What is compared with what, and how cold is made cold.
fn header(opts: &Options, files: &FileList, rounds: usize) -> String {
    let threads = match opts.threads {
        1 => String::new(),
        n => format!(", on {n} threads (file i on thread i mod {n})"),
    };
    let cold = if opts.drop_caches {
        "the whole page cache dropped before each (sync; 3 > /proc/sys/vm/drop_caches)"
    } else if cfg!(target_vendor = "apple") {
        "NOT cold: macOS cannot drop one file's pages (no posix_fadvise), so they read warm"
    } else {
        "each file's pages dropped before each: fsync, then posix_fadvise(POSIX_FADV_DONTNEED), \
         which drops only that file's clean pages (its inode and directory stay cached)"
    };
    let plural = if rounds == 1 { "" } else { "s" };
    format!(
        "readahead vs std BufReader::with_capacity({} KiB, File) per file{threads}\n{}; {}\n\
         {rounds} round{plural} of: cold ours, cold std, warm ours, warm std (std first in every \
         other round); each run a process of its own\ncold runs: {cold}\nwarm runs: every file read once before them, \
         untimed, so that neither pays for the first read of pages the disk just delivered\n",
        opts.std_buffer >> 10,
        super::files_line(files.paths.len() as u64, files.total_bytes),
        opts.settings(),
    )
}

/// The two ratios, each with both medians and the range of the rounds' own ratios.
fn ratios_text(opts: &Options, runs: &Runs) -> String {
    let baseline = format!("std BufReader {} KiB", opts.std_buffer >> 10);
    let mut text = String::new();
    for (cache, runs) in [(Cache::Cold, &runs.cold), (Cache::Warm, &runs.warm)] {
        let speed = |role| median_gib_per_s(runs, role);
        let (ours, std) = (speed(Role::Ours), speed(Role::Std));
        let (low, high) = round_ratio_range(runs);
        let _ = writeln!(
            text,
            "{}: ours ÷ {baseline} = {:.2}x  ({ours:.3} vs {std:.3} GiB/s, medians; \
             rounds {low:.2}x-{high:.2}x)",
            cache.name().to_uppercase(),
            ours / std,
        );
    }
    text
}

/// The median GiB/s of `role`'s runs.
fn median_gib_per_s(runs: &[Run], role: Role) -> f64 {
    let mine = runs.iter().filter(|run| run.role() == role);
    compare::median(mine.map(Run::gib_per_s).collect())
}

/// The lowest and highest ratio ours ÷ std within one round.
fn round_ratio_range(runs: &[Run]) -> (f64, f64) {
    let speed = |round, role| {
        runs.iter()
            .find(|run| run.round() == round && run.role() == role)
            .map(Run::gib_per_s)
    };
    let ratios = runs
        .iter()
        .filter(|run| run.role() == Role::Ours)
        .filter_map(|ours| {
            let std = speed(ours.round(), Role::Std)?;
            Some(ours.gib_per_s() / std)
        });
    ratios.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
        (lo.min(r), hi.max(r))
    })
}

/// The runs and medians of each kind of round, as `--compare` prints them.
fn details(runs: &Runs, rounds: usize) -> String {
    format!(
        "\ncold runs\n{}\n\nwarm runs\n{}",
        compare::report(&runs.cold, rounds),
        compare::report(&runs.warm, rounds)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_range_pairs_runs_of_the_same_round() {
        let runs: Vec<Run> = [
            (1, Role::Ours, 2.0),
            (1, Role::Std, 1.0),
            (2, Role::Std, 2.0),
        ]
        .into_iter()
        .chain([(2, Role::Ours, 3.0)])
        .map(|(round, role, gib)| Run::for_test(round, role, gib))
        .collect();
        assert_eq!(round_ratio_range(&runs), (1.5, 2.0));
        assert_eq!(median_gib_per_s(&runs, Role::Ours), 2.5);
    }
}
