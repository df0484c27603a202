//! `--turns N`: ours and std in turn in this one process, N rounds, the files warm; the
//! medians of the pairs' ratios, speed and CPU.
//!
//! `--compare` runs each in a process of its own, which meets its own moment of the host and
//! its own allocations (where std's buffer lies in its page changes the kernel's copy into
//! it tenfold on an AMD EPYC: BENCHMARKS.md). Pairs taken in one process vary less, so a
//! change of a few percent shows in fewer runs. The CPU seconds are the process's: ours
//! counts its helper threads and std nothing else.

use std::process::ExitCode;

use super::compare::median;
use super::consume::Outcome;
use super::files::{collect_files, FileList};
use super::options::{Options, Runner};
use super::{emit, files_line, threads};

/// Runs `rounds` pairs, std first in every other, and prints each pair and their medians.
pub fn run(opts: &Options, rounds: usize) -> Result<ExitCode, String> {
    let files = collect_files(&opts.paths);
    emit(&format!(
        "{}; {}; {rounds} turns in this process, std first in every other",
        files_line(files.paths.len() as u64, files.total_bytes),
        opts.settings()
    ));
    eprintln!("warming the page cache (one untimed std pass)");
    threads::run(opts, Runner::Std, &files)?;
    let mut pairs = Vec::with_capacity(rounds);
    for round in 1..=rounds {
        let (ours, std) = pair(opts, &files, round % 2 == 0)?;
        if ours.checksum != std.checksum {
            return Err(format!(
                "turn {round}: ours and std read different bytes (checksums {} and {})",
                ours.checksum, std.checksum
            ));
        }
        eprintln!(
            "turn {round}/{rounds}: ours {:.4} s at {:.4} CPU s, std {:.4} s at {:.4}",
            ours.seconds, ours.cpu_seconds, std.seconds, std.cpu_seconds
        );
        pairs.push((ours, std));
    }
    emit(&report(&pairs));
    Ok(ExitCode::SUCCESS)
}

/// One run of ours and one of std, std first where `std_first`.
fn pair(opts: &Options, files: &FileList, std_first: bool) -> Result<(Outcome, Outcome), String> {
    let ours = || threads::run(opts, opts.ours(), files);
    let std = || threads::run(opts, Runner::Std, files);
    if std_first {
        let std = std()?;
        Ok((ours()?, std))
    } else {
        let ours = ours()?;
        Ok((ours, std()?))
    }
}

/// The medians of the pairs' ratios (ours ÷ std: speed, CPU), with their quartiles, and the
/// medians of each side's own seconds.
fn report(pairs: &[(Outcome, Outcome)]) -> String {
    let speed: Vec<f64> = pairs.iter().map(|(o, s)| s.seconds / o.seconds).collect();
    let cpu: Vec<f64> = pairs
        .iter()
        .map(|(o, s)| o.cpu_seconds / s.cpu_seconds)
        .collect();
    let ((speed_lo, speed_hi), (cpu_lo, cpu_hi)) = (quartiles(&speed), quartiles(&cpu));
    let ours = median(pairs.iter().map(|(o, _)| o.seconds).collect());
    let std = median(pairs.iter().map(|(_, s)| s.seconds).collect());
    format!(
        "ours ÷ std, {} pairs in one process: speed {:.3}x (quartiles {speed_lo:.3}-{speed_hi:.3}), \
         CPU {:.3}x (quartiles {cpu_lo:.3}-{cpu_hi:.3}); medians ours {ours:.4} s, std {std:.4} s",
        pairs.len(),
        median(speed),
        median(cpu),
    )
}

/// The lower and the upper quartile of `values` (the median is `compare::median`).
fn quartiles(values: &[f64]) -> (f64, f64) {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let at = |q: usize| v[(v.len() - 1) * q / 4];
    (at(1), at(3))
}

#[cfg(test)]
mod tests {
    use super::quartiles;

    #[test]
    fn quartiles_of_odd_and_single_counts() {
        assert_eq!(quartiles(&[3.0, 1.0, 2.0, 5.0, 4.0]), (2.0, 4.0));
        assert_eq!(quartiles(&[7.0]), (7.0, 7.0));
    }
}
