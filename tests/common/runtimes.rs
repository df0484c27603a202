//! The tokio runtimes the async reader is tested on, and a ticker task that shows whether
//! anything held a runtime thread. The `tokio_read` example includes this file too.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Ticks every `period` until `stop`: the longest gap between two ticks.
pub async fn ticker(stop: Arc<AtomicBool>, period: Duration) -> Duration {
    let (mut last, mut longest) = (Instant::now(), Duration::ZERO);
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(period).await;
        longest = longest.max(last.elapsed());
        last = Instant::now();
    }
    longest
}
