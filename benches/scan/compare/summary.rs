//! What `--compare` prints of its runs: the table of runs, the table of medians and the
//! ratios, the line on what every run read, and the whole as one line of JSON.

use std::fmt::Write as _;

use serde_json::{json, Value};

use super::{medians, ratios, roles, Agreement, Medians, Run};

/// Mebibytes from kibibytes, one decimal.
fn mib(kib: f64) -> String {
    format!("{:.1}", kib / 1024.0)
}

/// The table of runs, then the table of medians and the ratios.
pub fn report(runs: &[Run], rounds: usize) -> String {
    // Wide enough for the longest backend: fio's configurations have long names.
    let width = runs.iter().map(|run| run.backend.len()).fold(7, usize::max);
    let medians = medians(runs);
    let mut text = runs_table(runs, width) + &medians_table(&medians, rounds, width);
    if let Some(note) = fio_bytes_note(runs) {
        text += &note;
    }
    for (other, speed, cpu) in ratios(&medians) {
        let _ = write!(
            text,
            "\nours ÷ {}: {speed:.2}x GiB/s, {cpu:.2}x CPU s (ratios of the medians)",
            other.name()
        );
    }
    text
}

/// A row per run, the backend column `width` wide.
fn runs_table(runs: &[Run], width: usize) -> String {
    let mut text = format!(
        "{:>5}  {:<width$}  {:>7}  {:>8}  {:>7}  {:>12}  {:>8}  {:>7}  {:>8}  {:>9}  {:>7}\n",
        "round",
        "backend",
        "GiB/s",
        "seconds",
        "CPU s",
        "peak RSS MiB",
        "reads",
        "waits",
        "wait s",
        "in flight",
        "opened"
    );
    for run in runs {
        let _ = write!(
            text,
            "{:>5}  {:<width$}  {:>7.3}  {:>8.4}  {:>7.4}  {:>12}",
            run.round,
            run.backend,
            run.gib_per_s(),
            run.seconds,
            run.cpu_seconds,
            mib(run.peak_rss_kib as f64),
        );
        match &run.reader {
            Some(r) => writeln!(
                text,
                "  {:>8}  {:>7}  {:>8.4}  {:>9}  {:>7}",
                r.reads, r.waits, r.wait_seconds, r.peak_in_flight, r.files_opened
            ),
            None => writeln!(
                text,
                "  {:>8}  {:>7}  {:>8}  {:>9}  {:>7}",
                "-", "-", "-", "-", "-"
            ),
        }
        .expect("writing to a String");
    }
    text
}

/// A row per role's medians, the backend column `width` wide.
fn medians_table(medians: &[Medians], rounds: usize, width: usize) -> String {
    let mut text = format!(
        "\nmedians of {rounds} round{}\n{:<width$}  {:>7}  {:>7}  {:>9}  {:>12}\n",
        if rounds == 1 { "" } else { "s" },
        "backend",
        "GiB/s",
        "CPU s",
        "CPU s/GiB",
        "peak RSS MiB"
    );
    for m in medians {
        let _ = writeln!(
            text,
            "{:<width$}  {:>7.3}  {:>7.4}  {:>9.4}  {:>12}",
            m.backend,
            m.gib_per_s,
            m.cpu_seconds,
            m.cpu_seconds_per_gib,
            mib(m.peak_rss_kib)
        );
    }
    text
}

/// Why fio's bytes are not the scans': one count if its configurations agree, else each.
pub(super) fn fio_bytes_note(runs: &[Run]) -> Option<String> {
    let scan = runs.iter().find(|run| !run.role.is_fio())?;
    let fio: Vec<&Run> = roles()
        .filter(|role| role.is_fio())
        .filter_map(|role| runs.iter().find(|run| run.role == role))
        .collect();
    let first = fio.first()?;
    let bytes = if fio.iter().all(|run| run.bytes == first.bytes) {
        format!("{} bytes", first.bytes)
    } else {
        let each: Vec<String> = fio
            .iter()
            .map(|run| format!("{} bytes ({})", run.bytes, run.backend))
            .collect();
        each.join(", ")
    };
    Some(format!(
        "\nfio read {bytes}, the scans {}: fio skips each file's last partial 4 KiB block,\n\
         and its GiB/s are of its own bytes",
        scan.bytes
    ))
}

/// One line on what every run read.
pub fn agreement_line(agreement: &Agreement) -> String {
    format!(
        "checksums agree: {} files ({} failed), {} bytes, checksum {}",
        agreement.files, agreement.failed, agreement.bytes, agreement.checksum
    )
}

/// The whole comparison as one line of JSON.
pub fn summary_json(runs: &[Run], agreement: Result<&Agreement, &String>) -> String {
    let medians: Vec<Value> = medians(runs)
        .iter()
        .map(|m| {
            json!({
                "role": m.role.name(),
                "backend": m.backend,
                "gib_per_s": m.gib_per_s,
                "cpu_seconds": m.cpu_seconds,
                "cpu_seconds_per_gib": m.cpu_seconds_per_gib,
                "peak_rss_kib": m.peak_rss_kib,
            })
        })
        .collect();
    let ratios: serde_json::Map<String, Value> = ratios(&self::medians(runs))
        .into_iter()
        .map(|(other, speed, cpu)| {
            (
                format!("ours_{}", other.key()),
                json!({"gib_per_s": speed, "cpu_seconds": cpu}),
            )
        })
        .collect();
    let mut value = json!({
        "runs": runs.iter().map(Run::to_json).collect::<Vec<_>>(),
        "medians": medians,
        "ratios": ratios,
    });
    match agreement {
        Ok(a) => {
            value["agree"] = true.into();
            value["files"] = a.files.into();
            value["failed"] = a.failed.into();
            value["bytes"] = a.bytes.into();
            value["checksum"] = a.checksum.clone().into();
        }
        Err(e) => {
            value["agree"] = false.into();
            value["error"] = e.clone().into();
        }
    }
    value.to_string()
}
