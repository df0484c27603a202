//! fio over the same files, for the device's limit: io_uring, queue depth 64, 256 KiB reads.
//!
//! One fio process, one job per scanned path (a directory through `--opendir`, which takes in
//! every file below it, subdirectories included; a file through `--filename`), the jobs one
//! after another (`--stonewall`). `--openfiles=64` keeps 64 files open at once, as the reader
//! does by default; without it fio opens every file before its first read, and fails with
//! `EMFILE` where there are more files than the descriptor limit (20,000 of them, say).
//!
//! fio issues only whole blocks and stops a file where the next block would not fit, so plain
//! `--bs=256k` would skip every file's last partial block, and files under 256 KiB entirely
//! (about 15% of the mixed data set's bytes). `--bssplit` therefore gives it smaller
//! power-of-two blocks too: it picks one of 4 KiB-128 KiB for 1% of the blocks each, and
//! 256 KiB for the rest, and where 256 KiB does not fit it picks among the smaller blocks that
//! do. Every file is read front to back once, but for its last partial 4 KiB block: O_DIRECT
//! cannot read one, and fio does not try without it either. fio's byte count is therefore a
//! little under the scan's (about 2 KiB a file), and its throughput is of its own bytes.
//!
//! The time is fio's own (`read.runtime` in its JSON): its start-up is left out, and so are
//! walking the directories and taking every file's size, which fio does before its clock
//! starts. The CPU time is fio's `usr_cpu` and `sys_cpu` (percentages
//! of the job's run time, over the same span) applied to the job's run time.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::system;

/// Block sizes and the percentage of blocks of each size.
pub const BSSPLIT: &str = "4k/1:8k/1:16k/1:32k/1:64k/1:128k/1:256k/94";

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

/// The fio command line for `paths`; O_DIRECT as the scan's own reads.
pub fn command(fio: &Path, paths: &[PathBuf], direct: bool) -> Command {
    let mut cmd = Command::new(fio);
    cmd.args([
        "--ioengine=io_uring",
        &format!("--direct={}", u8::from(direct)),
        "--iodepth=64",
        &format!("--bssplit={BSSPLIT}"),
        "--rw=read",
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

/// Runs fio over `paths` and reads its report.
pub fn run(fio: &Path, paths: &[PathBuf], direct: bool) -> Result<FioRun, String> {
    let mut child = command(fio, paths, direct)
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
