//! The tokio runtimes the async reader is tested on.

use tokio::runtime::{Builder, Runtime};

/// Both runtime flavours, each with I/O and time: one thread, and two workers.
pub fn runtimes() -> Vec<(&'static str, Runtime)> {
    let current = Builder::new_current_thread().enable_all().build().unwrap();
    let multi = Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    vec![
        ("current_thread", current),
        ("multi_thread", multi.unwrap()),
    ]
}
