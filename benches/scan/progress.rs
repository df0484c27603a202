//! Progress bars on stderr: while a data set is generated, while a scan runs, and over the
//! rounds of the default run. Shown only where stderr is a terminal and JSON is off, so that
//! logs and the JSON on stdout carry no bar.

use std::io::{self, IsTerminal};

use indicatif::{ProgressBar, ProgressStyle};

/// Whether bars are shown: stderr is a terminal and the output is not JSON.
pub fn shown(json: bool) -> bool {
    !json && io::stderr().is_terminal()
}

/// A bar counting `total` bytes, labelled `label`, if `show`.
pub fn bytes(show: bool, total: u64, label: &str) -> Option<ProgressBar> {
    bar(
        show,
        total,
        label,
        "{prefix:>9} [{bar:40}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
    )
}

/// A bar counting `total` steps (runs, rounds), labelled `label`, with a message, if `show`.
pub fn steps(show: bool, total: u64, label: &str) -> Option<ProgressBar> {
    bar(
        show,
        total,
        label,
        "{prefix:>9} [{bar:40}] {pos}/{len} {msg}",
    )
}

fn bar(show: bool, total: u64, label: &str, template: &str) -> Option<ProgressBar> {
    if !show {
        return None;
    }
    let style = ProgressStyle::with_template(template)
        .expect("a valid template")
        .progress_chars("=> ");
    Some(
        ProgressBar::new(total)
            .with_style(style)
            .with_prefix(label.to_owned()),
    )
}

/// Clears a bar when done with it.
pub fn finish(bar: Option<ProgressBar>) {
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
}
