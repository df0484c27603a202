//! fio over the same files, for the device's limit, in the two configurations the goal names,
//! both io_uring: 256 KiB reads at queue depth 64 (`--bs=256k --iodepth=64`), and 1 MiB reads
//! at queue depth 32 (`--bs=1m --iodepth=32`). Each round runs both, after ours and std.
//!
//! One fio process per configuration, one job per scanned path (a directory through
//! `--opendir`, which takes in every file below it, subdirectories included; a file through
//! `--filename`), the jobs one after another (`--stonewall`), each job's files one after
//! another (`--file_service_type=sequential`: each file read through before the next, as a
//! scan reads them; fio's default, round-robin over the open files, spreads its depth over
//! 64 files at once, which under-states the device against a scan). `--openfiles=64` keeps
//! 64 files open at once, as the goals' fio baseline does (the reader holds up to 128 while
//! its reads go to the device, 64 while they find the page cache warm); without it fio opens every file
//! before its first read, and fails with `EMFILE` where there are more files than the
//! descriptor limit (20,000 of them, say).
//!
//! fio issues only whole blocks and stops a file where the next block would not fit, so plain
//! `--bs=256k` would skip every file's last partial block, and files under 256 KiB entirely
//! (about 15% of the mixed data set's bytes; `--bs=1m` about 40%). `--bssplit` therefore gives
//! it the smaller power-of-two blocks too, 4 KiB to half the configuration's block (4 KiB-128
//! KiB beside 256 KiB, 4 KiB-512 KiB beside 1 MiB), each for 1% of the blocks, and the
//! configuration's block for the rest; where that does not fit, fio picks among the smaller
//! blocks that do. Every file is read front to back once, but for its last partial
//! 4 KiB block: O_DIRECT cannot read one, and fio does not try without it either. fio's byte
//! count is therefore a little under the scan's (about 2 KiB a file), the same in both
//! configurations, and its throughput is of its own bytes.
//!
//! The time is fio's own (`read.runtime` in its JSON): its start-up is left out, and so are
//! walking the directories and taking every file's size, which fio does before its clock
//! starts. The CPU time is fio's `usr_cpu` and `sys_cpu` (percentages
//! of the job's run time, over the same span) applied to the job's run time.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::system;

/// One configuration fio runs in: the size of its reads and how many are in flight.
#[derive(Debug, PartialEq, Eq)]
pub struct Config {
    /// How the tables name its runs.
    pub name: &'static str,
    pub iodepth: u32,
    /// Block sizes and the percentage of blocks of each size: the configuration's block for
    /// most, the smaller ones for the ends of files.
    pub bssplit: &'static str,
}

/// The configurations of every round, in the order they run.
pub static CONFIGS: [Config; 2] = [
    Config {
        name: "fio 256k qd64",
        iodepth: 64,
        bssplit: "4k/1:8k/1:16k/1:32k/1:64k/1:128k/1:256k/94",
    },
    Config {
        name: "fio 1m qd32",
        iodepth: 32,
        bssplit: "4k/1:8k/1:16k/1:32k/1:64k/1:128k/1:256k/1:512k/1:1m/92",
    },
];

/// What one fio run measured.
#[derive(Debug)]
pub struct FioRun {
    pub bytes: u64,
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub peak_rss_kib: u64,
}

/// fio's path, or the error to show.
pub fn find() -> Result<PathBuf, String> {
    system::find_on_path("fio")
        .ok_or_else(|| "--fio needs fio on PATH (apt-get install fio)".into())
}

/// The fio command line for `paths` in `config`; O_DIRECT as the scan's own reads.
pub fn command(fio: &Path, config: &Config, paths: &[PathBuf], direct: bool) -> Command {
    let mut cmd = Command::new(fio);
    cmd.args([
        "--ioengine=io_uring",
        &format!("--direct={}", u8::from(direct)),
        &format!("--iodepth={}", config.iodepth),
        &format!("--bssplit={}", config.bssplit),
        "--rw=read",
        "--file_service_type=sequential",
        "--openfiles=64",
        "--stonewall",
        "--output-format=json",
    ]);
    for (i, path) in paths.iter().enumerate() {
        cmd.arg(format!("--name=scan{i}"));
        let mut arg = if path.is_dir() {
            "--opendir=".to_owned()
        } else {
            "--filename=".to_owned()
        };
        // fio splits --filename at ':'; a backslash keeps one.
        arg += &path.to_string_lossy().replace(':', "\\:");
        cmd.arg(arg);
    }
    cmd
}

/// A command line as a shell would take it (for showing; paths with spaces are quoted).
pub fn display(cmd: &Command) -> String {
    let mut words = vec![cmd.get_program().to_string_lossy().into_owned()];
    for arg in cmd.get_args() {
        let arg = arg.to_string_lossy();
        if arg.contains([' ', '\'', '"']) {
            words.push(format!("'{}'", arg.replace('\'', "'\\''")));
        } else {
            words.push(arg.into_owned());
        }
    }
    words.join(" ")
}

/// Runs fio over `paths` in `config` and reads its report.
pub fn run(fio: &Path, config: &Config, paths: &[PathBuf], direct: bool) -> Result<FioRun, String> {
    let mut child = command(fio, config, paths, direct)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", fio.display()))?;
    let mut out = String::new();
    let read = child
        .stdout
        .take()
        .expect("stdout is piped")
        .read_to_string(&mut out);
    let (status, peak_rss_kib) =
        system::wait_with_peak_rss(child).map_err(|e| format!("waiting for fio: {e}"))?;
    read.map_err(|e| format!("reading fio's output: {e}"))?;
    if !status.success() {
        return Err(format!("fio failed ({status})"));
    }
    let mut run = parse(&out)?;
    run.peak_rss_kib = peak_rss_kib;
    Ok(run)
}

/// Reads fio's JSON report; fio may print lines of its own before it (`opendir added N files`).
fn parse(out: &str) -> Result<FioRun, String> {
    let start = out
        .find('{')
        .ok_or_else(|| format!("no JSON in fio's output: {out:?}"))?;
    let report: Value =
        serde_json::from_str(&out[start..]).map_err(|e| format!("fio's JSON report: {e}"))?;
    let jobs = report["jobs"]
        .as_array()
        .filter(|jobs| !jobs.is_empty())
        .ok_or("fio's report has no jobs")?;
    let mut run = FioRun {
        bytes: 0,
        seconds: 0.0,
        cpu_seconds: 0.0,
        peak_rss_kib: 0,
    };
    for job in jobs {
        let number = |value: &Value, what: &str| {
            value
                .as_f64()
                .ok_or_else(|| format!("fio's report: no number for {what}"))
        };
        let error = number(&job["error"], "error")?;
        if error != 0.0 {
            return Err(format!(
                "fio's job {} failed: error {error}",
                job["jobname"]
            ));
        }
        let seconds = number(&job["read"]["runtime"], "read.runtime")? / 1000.0;
        let job_seconds = number(&job["job_runtime"], "job_runtime")? / 1000.0;
        let cpu_percent = number(&job["usr_cpu"], "usr_cpu")? + number(&job["sys_cpu"], "sys_cpu")?;
        run.bytes += number(&job["read"]["io_bytes"], "read.io_bytes")? as u64;
        run.seconds += seconds;
        run.cpu_seconds += cpu_percent / 100.0 * job_seconds;
    }
    if run.seconds <= 0.0 {
        return Err("fio's report: a run time of 0 ms".into());
    }
    Ok(run)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `4k`, `1m` in bytes.
    fn bytes(size: &str) -> u64 {
        let (digits, unit) = size.split_at(size.len() - 1);
        let shift = match unit {
            "k" => 10,
            "m" => 20,
            _ => panic!("no unit in {size:?}"),
        };
        digits.parse::<u64>().expect("a number") << shift
    }

    #[test]
    fn each_bssplit_doubles_from_4k_to_the_block_its_name_gives_and_adds_up_to_100() {
        for config in &CONFIGS {
            let split: Vec<(u64, u32)> = config
                .bssplit
                .split(':')
                .map(|entry| {
                    let (size, percent) = entry.split_once('/').expect("size/percent");
                    (bytes(size), percent.parse().expect("a percentage"))
                })
                .collect();
            let sizes: Vec<u64> = split.iter().map(|&(size, _)| size).collect();
            let doubling: Vec<u64> = (0..sizes.len()).map(|i| 4096 << i).collect();
            assert_eq!(sizes, doubling, "{}", config.name);
            let block = config.name.split(' ').nth(1).expect("a block size");
            assert_eq!(sizes.last(), Some(&bytes(block)), "{}", config.name);
            let percents: u32 = split.iter().map(|&(_, percent)| percent).sum();
            assert_eq!(percents, 100, "{}", config.name);
            assert!(split[..split.len() - 1].iter().all(|&(_, p)| p == 1));
            assert!(config.name.ends_with(&format!(" qd{}", config.iodepth)));
        }
    }

    #[test]
    fn the_command_line_has_the_configuration_and_escapes_colons() {
        let paths = [PathBuf::from("/data/a:b"), PathBuf::from("/")];
        let cmd = command(Path::new("fio"), &CONFIGS[1], &paths, true);
        let line = display(&cmd);
        for arg in [
            "--ioengine=io_uring",
            "--direct=1",
            "--iodepth=32",
            "--file_service_type=sequential",
            "--bssplit=4k/1:",
            ":1m/92",
            "--filename=/data/a\\:b",
            "--opendir=/",
        ] {
            assert!(line.contains(arg), "{arg} not in {line}");
        }
    }
}
