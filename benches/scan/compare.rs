//! `--compare`: the scan's runs gathered from child processes (and fio), checked against each
//! other, and summed up in a table of runs and one of medians.

mod summary;

use std::ffi::OsString;
use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::fio::{self, FioRun};

pub use summary::{agreement_line, report, summary_json};

const GIB: f64 = (1u64 << 30) as f64;

/// What a run stands for in the comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// The reader, with the backend asked for.
    Ours,
    /// std's `BufReader`, the baseline.
    Std,
    /// fio over the same files in one of its configurations, the device's limit.
    Fio(&'static fio::Config),
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Ours => "ours",
            Role::Std => "std",
            Role::Fio(config) => config.name,
        }
    }

    /// The name as a JSON key: no spaces.
    fn key(self) -> String {
        self.name().replace(' ', "_")
    }

    /// fio's runs read a little less than the scans and compute no checksum.
    pub fn is_fio(self) -> bool {
        matches!(self, Role::Fio(_))
    }
}

/// Every role in the order of the tables: ours, std, then each fio configuration.
pub fn roles() -> impl Iterator<Item = Role> {
    [Role::Ours, Role::Std]
        .into_iter()
        .chain(fio::CONFIGS.iter().map(Role::Fio))
}

/// The reader's counters from one run.
#[derive(Debug)]
pub struct ReaderStats {
    reads: u64,
    waits: u64,
    wait_seconds: f64,
    peak_in_flight: u64,
    files_opened: u64,
}

/// One run of one backend.
#[derive(Debug)]
pub struct Run {
    round: usize,
    role: Role,
    /// `uring`, `sync`, `std` or the fio configuration's name.
    backend: String,
    /// Not known for fio.
    files: Option<u64>,
    failed: u64,
    bytes: u64,
    seconds: f64,
    cpu_seconds: f64,
    peak_rss_kib: u64,
    /// Not computed by fio.
    checksum: Option<String>,
    reader: Option<ReaderStats>,
}

impl Run {
    pub fn gib_per_s(&self) -> f64 {
        self.bytes as f64 / GIB / self.seconds
    }

    /// Files scanned (0 for fio, which does not say).
    pub fn files(&self) -> u64 {
        self.files.unwrap_or(0)
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn role(&self) -> Role {
        self.role
    }

    pub fn round(&self) -> usize {
        self.round
    }

    /// A run of `role` in `round` that read 1 GiB at `gib_per_s`.
    #[cfg(test)]
    pub fn for_test(round: usize, role: Role, gib_per_s: f64) -> Run {
        Run {
            round,
            role,
            backend: role.name().into(),
            files: Some(1),
            failed: 0,
            bytes: 1 << 30,
            seconds: 1.0 / gib_per_s,
            cpu_seconds: 1.0,
            peak_rss_kib: 0,
            checksum: None,
            reader: None,
        }
    }

    /// A run from the JSON line a child printed.
    fn from_json(round: usize, role: Role, line: &str) -> Result<Run, String> {
        let value: Value = serde_json::from_str(line).map_err(|e| format!("{e} in {line:?}"))?;
        let field = |name: &str| {
            value
                .get(name)
                .filter(|v| !v.is_null())
                .ok_or_else(|| format!("no \"{name}\" in {line:?}"))
        };
        let u64_field = |name: &str| {
            field(name)?
                .as_u64()
                .ok_or_else(|| format!("\"{name}\" is not a count in {line:?}"))
        };
        let f64_field = |name: &str| {
            field(name)?
                .as_f64()
                .ok_or_else(|| format!("\"{name}\" is not a number in {line:?}"))
        };
        let str_field = |name: &str| {
            field(name)?
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("\"{name}\" is not a string in {line:?}"))
        };
        let reader = match role {
            Role::Ours => Some(ReaderStats {
                reads: u64_field("reads")?,
                waits: u64_field("waits")?,
                wait_seconds: f64_field("wait_seconds")?,
                peak_in_flight: u64_field("peak_in_flight")?,
                files_opened: u64_field("files_opened")?,
            }),
            _ => None,
        };
        Ok(Run {
            round,
            role,
            backend: str_field("backend")?,
            files: Some(u64_field("files")?),
            failed: u64_field("failed")?,
            bytes: u64_field("bytes")?,
            seconds: f64_field("seconds")?,
            cpu_seconds: f64_field("cpu_seconds")?,
            peak_rss_kib: u64_field("peak_rss_kib")?,
            checksum: Some(str_field("checksum")?),
            reader,
        })
    }

    /// A run from fio's report in `config`.
    pub fn from_fio(round: usize, config: &'static fio::Config, fio: FioRun) -> Run {
        Run {
            round,
            role: Role::Fio(config),
            backend: config.name.into(),
            files: None,
            failed: 0,
            bytes: fio.bytes,
            seconds: fio.seconds,
            cpu_seconds: fio.cpu_seconds,
            peak_rss_kib: fio.peak_rss_kib,
            checksum: None,
            reader: None,
        }
    }

    fn to_json(&self) -> Value {
        let mut value = json!({
            "round": self.round,
            "role": self.role.name(),
            "backend": self.backend,
            "files": self.files,
            "failed": self.failed,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "gib_per_s": self.gib_per_s(),
            "cpu_seconds": self.cpu_seconds,
            "peak_rss_kib": self.peak_rss_kib,
            "checksum": self.checksum,
        });
        if let Some(r) = &self.reader {
            value["reads"] = r.reads.into();
            value["waits"] = r.waits.into();
            value["wait_seconds"] = r.wait_seconds.into();
            value["peak_in_flight"] = r.peak_in_flight.into();
            value["files_opened"] = r.files_opened.into();
        }
        value
    }
}

/// Runs `exe args` (this program, one backend, `--json`), its stderr shown as it comes, and
/// reads the JSON line it prints last.
pub fn run_child(exe: &Path, args: &[OsString], round: usize, role: Role) -> Result<Run, String> {
    let what = format!("the {} run of round {round}", role.name());
    let output = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start {what} ({}): {e}", exe.display()))?;
    if !output.status.success() {
        return Err(format!("{what} failed ({})", output.status));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .rfind(|line| !line.trim().is_empty())
        .ok_or_else(|| format!("{what} printed nothing"))?;
    Run::from_json(round, role, line).map_err(|e| format!("{what}: {e}"))
}

/// The middle value (the mean of the two middle ones for an even count).
pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => f64::NAN,
        _ if n % 2 == 1 => values[n / 2],
        _ => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// The medians of one role's runs.
#[derive(Debug)]
pub struct Medians {
    role: Role,
    backend: String,
    gib_per_s: f64,
    cpu_seconds: f64,
    cpu_seconds_per_gib: f64,
    peak_rss_kib: f64,
}

/// Medians per role, in the order of `roles`; roles without runs are left out.
pub fn medians(runs: &[Run]) -> Vec<Medians> {
    roles()
        .filter_map(|role| {
            let mine: Vec<&Run> = runs.iter().filter(|run| run.role == role).collect();
            let first = mine.first()?;
            let of = |f: fn(&Run) -> f64| median(mine.iter().map(|run| f(run)).collect());
            let cpu_seconds = of(|run| run.cpu_seconds);
            Some(Medians {
                role,
                backend: first.backend.clone(),
                gib_per_s: of(Run::gib_per_s),
                cpu_seconds,
                cpu_seconds_per_gib: of(|run| run.cpu_seconds / (run.bytes as f64 / GIB)),
                peak_rss_kib: of(|run| run.peak_rss_kib as f64),
            })
        })
        .collect()
}

/// `ours ÷ std` and `ours ÷` each fio configuration: (the other role, ratio of median GiB/s,
/// ratio of median CPU s).
pub fn ratios(medians: &[Medians]) -> Vec<(Role, f64, f64)> {
    let Some(ours) = medians.iter().find(|m| m.role == Role::Ours) else {
        return Vec::new();
    };
    medians
        .iter()
        .filter(|m| m.role != Role::Ours)
        .map(|other| {
            (
                other.role,
                ours.gib_per_s / other.gib_per_s,
                ours.cpu_seconds / other.cpu_seconds,
            )
        })
        .collect()
}

/// What all of ours and std's runs read: files, bytes and checksum.
#[derive(Debug)]
pub struct Agreement {
    files: u64,
    failed: u64,
    bytes: u64,
    checksum: String,
}

/// Checks that every run but fio's read the same files, bytes and checksum.
pub fn check_agreement(runs: &[Run]) -> Result<Agreement, String> {
    let key = |run: &Run| (run.files, run.failed, run.bytes, run.checksum.clone());
    let mut checked = runs.iter().filter(|run| !run.role.is_fio());
    let first = checked.next().ok_or("no runs to compare")?;
    if checked.all(|run| key(run) == key(first)) {
        return Ok(Agreement {
            files: first.files.unwrap_or(0),
            failed: first.failed,
            bytes: first.bytes,
            checksum: first.checksum.clone().unwrap_or_default(),
        });
    }
    let mut text = "the runs read different data:".to_owned();
    for run in runs.iter().filter(|run| !run.role.is_fio()) {
        let _ = write!(
            text,
            "\n  round {} {:<5}  {} files ({} failed), {} bytes, checksum {}",
            run.round,
            run.backend,
            run.files.unwrap_or(0),
            run.failed,
            run.bytes,
            run.checksum.as_deref().unwrap_or("-")
        );
    }
    Err(text)
}

#[cfg(test)]
mod tests {
    use super::summary::fio_bytes_note;
    use super::*;

    fn line(backend: &str, bytes: u64, seconds: f64, checksum: &str) -> String {
        let mut line = format!(
            "{{\"backend\":\"{backend}\",\"files\":3,\"failed\":0,\"bytes\":{bytes},\"seconds\":{seconds},\"gib_per_s\":1.0,\"cpu_seconds\":0.5,\"peak_rss_kib\":2048,\"checksum\":\"{checksum}\""
        );
        if backend != "std" {
            line += ",\"reads\":7,\"waits\":1,\"wait_seconds\":0.001,\"peak_in_flight\":4,\"files_opened\":3";
        }
        line + "}"
    }

    fn run(round: usize, role: Role, bytes: u64, seconds: f64, checksum: &str) -> Run {
        let backend = if role == Role::Std { "std" } else { "uring" };
        Run::from_json(round, role, &line(backend, bytes, seconds, checksum)).expect("parses")
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
        assert_eq!(median(vec![5.0]), 5.0);
    }

    #[test]
    fn a_child_line_parses_and_a_broken_one_is_named() {
        let ours = run(1, Role::Ours, 1 << 30, 0.5, "ab");
        assert_eq!(ours.gib_per_s(), 2.0);
        assert_eq!(ours.reader.as_ref().map(|r| r.reads), Some(7));
        let err = Run::from_json(1, Role::Ours, &line("std", 1, 1.0, "ab")).unwrap_err();
        assert!(err.contains("\"reads\""), "{err}");
        assert!(Run::from_json(1, Role::Std, "not json").is_err());
    }

    #[test]
    fn runs_that_read_different_data_are_an_error_naming_each_run() {
        let same = [
            run(1, Role::Ours, 100, 1.0, "ab"),
            run(1, Role::Std, 100, 2.0, "ab"),
        ];
        assert_eq!(check_agreement(&same).expect("agree").checksum, "ab");
        let differ = [
            run(1, Role::Ours, 100, 1.0, "ab"),
            run(1, Role::Std, 100, 2.0, "cd"),
        ];
        let err = check_agreement(&differ).unwrap_err();
        assert!(
            err.contains("checksum ab") && err.contains("checksum cd"),
            "{err}"
        );
        let short = [
            run(1, Role::Ours, 100, 1.0, "ab"),
            run(1, Role::Std, 99, 2.0, "ab"),
        ];
        assert!(check_agreement(&short).is_err());
    }

    fn fio_run(round: usize, config: &'static fio::Config, bytes: u64, seconds: f64) -> Run {
        let fio = FioRun {
            bytes,
            seconds,
            cpu_seconds: 0.1,
            peak_rss_kib: 1024,
        };
        Run::from_fio(round, config, fio)
    }

    /// One round: ours, std at half its speed, and each fio configuration.
    fn round_with_fio() -> [Run; 4] {
        let [k256, m1] = &fio::CONFIGS;
        [
            run(1, Role::Ours, 100, 1.0, "ab"),
            run(1, Role::Std, 100, 2.0, "ab"),
            fio_run(1, k256, 90, 0.5),
            fio_run(1, m1, 90, 0.25),
        ]
    }

    #[test]
    fn fio_is_left_out_of_the_agreement_and_in_the_ratios_once_per_configuration() {
        let [k256, m1] = &fio::CONFIGS;
        let runs = round_with_fio();
        assert!(check_agreement(&runs).is_ok());
        let ratios = ratios(&medians(&runs));
        let roles: Vec<Role> = ratios.iter().map(|&(role, _, _)| role).collect();
        assert_eq!(roles, [Role::Std, Role::Fio(k256), Role::Fio(m1)]);
        assert!((ratios[0].1 - 2.0).abs() < 1e-9);
        assert!((ratios[1].1 - 100.0 / 1.0 / (90.0 / 0.5)).abs() < 1e-9);
        assert!((ratios[2].1 - 100.0 / 1.0 / (90.0 / 0.25)).abs() < 1e-9);
    }

    #[test]
    fn each_fio_configuration_has_its_rows_and_its_ratio() {
        let [k256, m1] = &fio::CONFIGS;
        let runs = round_with_fio();
        let text = report(&runs, 1);
        for config in [k256, m1] {
            let rows = text.lines().filter(|l| l.contains(config.name)).count();
            assert_eq!(
                rows, 3,
                "a run, a median and a ratio of {}:\n{text}",
                config.name
            );
            assert!(
                text.contains(&format!("ours ÷ {}: ", config.name)),
                "{text}"
            );
        }
        assert!(text.contains("fio read 90 bytes, the scans 100"), "{text}");
        // The backend column is wide enough for fio's names: every row of runs lines up.
        let widths: Vec<usize> = text.lines().take(5).map(str::len).collect();
        assert_eq!(widths, [widths[0]; 5], "{text}");
        let json = summary_json(&runs, Err(&"differ".into()));
        let summary: Value = serde_json::from_str(&json).expect("parses");
        assert!(summary["ratios"]["ours_fio_256k_qd64"]["gib_per_s"].is_f64());
        assert!(summary["ratios"]["ours_fio_1m_qd32"]["gib_per_s"].is_f64());
    }

    #[test]
    fn fio_configurations_that_read_different_bytes_are_named() {
        let [k256, m1] = &fio::CONFIGS;
        let runs = [
            run(1, Role::Ours, 100, 1.0, "ab"),
            fio_run(1, k256, 90, 0.5),
            fio_run(1, m1, 80, 0.5),
        ];
        let note = fio_bytes_note(&runs).expect("a note");
        assert!(
            note.contains("90 bytes (fio 256k qd64), 80 bytes (fio 1m qd32)"),
            "{note}"
        );
    }
}
