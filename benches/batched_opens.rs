//! What one io_uring submission per batch of files could save on small cached files, beside
//! std's loop: each file opened and read by two linked entries (`OPENAT2` into a direct
//! descriptor, then a `READ` of it), its `CLOSE` sent with the next batch, a batch of files a
//! submission, against `BufReader::with_capacity(1 MiB, File)` a file, which makes four calls
//! (`openat`, a `read` of the bytes, a `read` that finds the end, `close`). Both sum every
//! file's bytes (one add per 8 bytes), and the sums must agree.
//!
//! A measurement for the design of the reader, not a part of it: the reader makes its opens
//! through the ring, a submission for many, but not its reads and closes (BENCHMARKS.md,
//! "Tiny files"). Files are opened relative to their directory with `RESOLVE_BENEATH |
//! RESOLVE_NO_XDEV | RESOLVE_NO_SYMLINKS | RESOLVE_CACHED`, so that no open waits on the
//! device: a file whose open would (`EAGAIN`) is read std's way. A file's read has room for
//! 128 KiB; the rest of a larger file is read through the ring a MiB a call before its
//! descriptor is closed. A read shorter than its room ends the file: without `RWF_NOWAIT`, a
//! read of a regular file stops short only there. Turns alternate std and the batches in one
//! process; the first is not counted; the figures are medians, with the process's CPU time
//! beside the wall time. It needs Linux 5.19 (a sparse table of direct descriptors), and a
//! directory of regular files (a link fails the run).
//!
//! ```text
//! cargo run --release --example scan -- --data-set tiny   # makes $TMPDIR/readahead-scan-tiny
//! cargo bench --bench batched_opens -- ${TMPDIR:-/tmp}/readahead-scan-tiny [BATCH] [TURNS]
//! ```
//!
//! Without a directory (as a plain `cargo bench` runs it) it says what it needs and ends.
//! Linux only; elsewhere it says so.

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    linux::main()
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("batched_opens: io_uring is Linux's; nothing to measure here");
}

// The scan example's: its list of files, its CPU clock and its light consumer.
#[cfg(target_os = "linux")]
#[allow(dead_code)] // Only `Partial` is light's.
#[path = "scan/checksum.rs"]
mod checksum;
#[cfg(target_os = "linux")]
#[path = "scan/files.rs"]
mod files;
// Benches build with `cfg(test)` but not their `#[test]`s: its tests' helper goes unused.
#[cfg(target_os = "linux")]
#[allow(dead_code)]
#[path = "scan/light.rs"]
mod light;
#[cfg(target_os = "linux")]
#[allow(dead_code)] // Only its CPU clock is used here.
#[path = "scan/system.rs"]
mod system;

#[cfg(target_os = "linux")]
mod linux {
    use std::collections::HashMap;
    use std::ffi::CString;
    use std::fs::File;
    use std::io::{self, BufRead, BufReader};
    use std::ops::Range;
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};
    use std::process::ExitCode;
    use std::time::Instant;

    use io_uring::{opcode, squeue, types, IoUring};

    use super::files::collect_files;
    use super::light::Light;
    use super::system::cpu_seconds;

    /// Bytes each file's first read has room for: a file that fills it is read on a MiB a call.
    const ROOM: usize = 128 << 10;
    /// std's buffer, as the scan example's baseline.
    const STD_BUFFER: usize = 1 << 20;

    pub(super) fn main() -> ExitCode {
        let mut args = std::env::args().skip(1).filter(|a| a != "--bench");
        let Some(dir) = args.next() else {
            println!("batched_opens: give it a directory: batched_opens DIR [BATCH] [TURNS]");
            return ExitCode::SUCCESS;
        };
        let batch = args.next().map_or(Ok(32), |a| a.parse::<usize>());
        let turns = args.next().map_or(Ok(13), |a| a.parse::<usize>());
        let (Ok(batch @ 1..=1024), Ok(turns @ 2..)) = (batch, turns) else {
            eprintln!("BATCH is 1 to 1024 files, TURNS 2 or more");
            return ExitCode::FAILURE;
        };
        match run(Path::new(&dir), batch, turns) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("batched_opens: {e}");
                ExitCode::FAILURE
            }
        }
    }

    fn run(dir: &Path, batch: usize, turns: usize) -> io::Result<()> {
        let files = Files::walk(dir)?;
        let mut chains = Chains::new(batch)?;
        let (mut std_s, mut ring_s, mut speed, mut cpu) = (vec![], vec![], vec![], vec![]);
        for turn in 0..turns {
            let (std_sum, std_wall, std_cpu) = timed(|| std_loop(&files.paths))?;
            let (ring_sum, ring_wall, ring_cpu) = timed(|| chains.read_all(&files))?;
            if std_sum != ring_sum {
                return Err(io::Error::other("the sums differ: a byte was read wrong"));
            }
            if turn > 0 {
                std_s.push(std_wall);
                ring_s.push(ring_wall);
                speed.push(std_wall / ring_wall);
                cpu.push(ring_cpu / std_cpu);
            }
        }
        let n = speed.len();
        println!(
            "{} files in {dir:?}, batches of {batch}, {n} turns: std {:.4} s, batches {:.4} s",
            files.paths.len(),
            median(&mut std_s),
            median(&mut ring_s),
        );
        let (lo, mid, hi) = (min(&speed), median(&mut speed), max(&speed));
        println!(
            "batches ÷ std: speed {mid:.3}x ({lo:.3}-{hi:.3}), CPU {:.3}x",
            median(&mut cpu)
        );
        println!(
            "files read std's way (their open would wait): {}; larger than {} KiB: {}",
            chains.fell_back,
            ROOM >> 10,
            chains.larger
        );
        Ok(())
    }

    /// The paths under a directory, sorted, each also as its directory's descriptor and its
    /// name there.
    struct Files {
        paths: Vec<PathBuf>,
        at: Vec<(usize, CString)>,
        dirs: Vec<OwnedFd>,
    }

    impl Files {
        fn walk(dir: &Path) -> io::Result<Files> {
            let paths = collect_files(&[dir.to_path_buf()]).paths;
            let (mut index, mut dirs, mut at) = (HashMap::new(), Vec::new(), Vec::new());
            for path in &paths {
                let parent = path.parent().unwrap_or(Path::new("."));
                let d = match index.get(parent) {
                    Some(&d) => d,
                    None => {
                        dirs.push(OwnedFd::from(File::open(parent)?));
                        index.insert(parent.to_path_buf(), dirs.len() - 1);
                        dirs.len() - 1
                    }
                };
                let name = path.file_name().unwrap_or_default().as_bytes();
                at.push((d, CString::new(name).map_err(io::Error::other)?));
            }
            Ok(Files { paths, at, dirs })
        }
    }

    /// A ring that reads files a batch a submission, with a direct descriptor and `ROOM`
    /// bytes of buffer for each file of a batch. Two sets of descriptors take turns, so that
    /// one batch's closes go in the next one's submission.
    struct Chains {
        ring: IoUring,
        batch: usize,
        bufs: PageBuf,
        /// Each file's read length, or the error of its open or read.
        lens: Vec<i32>,
        /// Whether each file's open worked (its descriptor is to be closed).
        opened: Vec<bool>,
        /// Descriptors to close with the next submission.
        closes: Vec<u32>,
        /// The bytes of a file past `ROOM`, read through the ring a MiB at a time.
        rest: PageBuf,
        /// Files whose open would have waited, read std's way (over every turn).
        fell_back: u64,
        /// Files larger than `ROOM`, their rest read a MiB a call (over every turn).
        larger: u64,
    }

    impl Chains {
        fn new(batch: usize) -> io::Result<Chains> {
            let ring = IoUring::builder()
                .setup_single_issuer()
                .setup_coop_taskrun()
                .build(8 * batch as u32)?;
            ring.submitter().register_files_sparse(2 * batch as u32)?;
            Ok(Chains {
                ring,
                batch,
                bufs: PageBuf::new(batch * ROOM),
                lens: vec![0; batch],
                opened: vec![false; batch],
                closes: Vec::new(),
                rest: PageBuf::new(STD_BUFFER),
                fell_back: 0,
                larger: 0,
            })
        }

        fn read_all(&mut self, files: &Files) -> io::Result<u64> {
            let mut sum = 0u64;
            for (turn, first) in (0..files.paths.len()).step_by(self.batch).enumerate() {
                let last = (first + self.batch).min(files.paths.len());
                let base = (turn % 2 * self.batch) as u32;
                self.submit(files, first..last, base)?;
                for (at, i) in (first..last).enumerate() {
                    sum = sum.wrapping_add(self.take(at, base + at as u32, &files.paths[i])?);
                }
            }
            self.submit(files, 0..0, 0)?;
            Ok(sum)
        }

        /// Closes the descriptors waiting to be, and opens and reads files `range` into
        /// descriptors from `base` on, in one submission; reaps every completion.
        fn submit(&mut self, files: &Files, range: Range<usize>, base: u32) -> io::Result<()> {
            let how = types::OpenHow::new().flags(libc::O_RDONLY as u64).resolve(
                libc::RESOLVE_BENEATH
                    | libc::RESOLVE_NO_XDEV
                    | libc::RESOLVE_NO_SYMLINKS
                    | libc::RESOLVE_CACHED,
            );
            let expected = self.closes.len() + 2 * range.len();
            for slot in self.closes.drain(..) {
                let close = opcode::Close::new(types::Fixed(slot)).build().user_data(2);
                // SAFETY: a close refers to no memory of ours.
                unsafe { self.ring.submission().push(&close) }
                    .map_err(|_| io::Error::other("the submission queue is full"))?;
            }
            for (at, i) in range.enumerate() {
                let (dir, name) = &files.at[i];
                let dir = types::Fd(files.dirs[*dir].as_raw_fd());
                let slot = base + at as u32;
                let target = types::DestinationSlot::try_from_slot_target(slot)
                    .map_err(|_| io::Error::other("descriptor slot out of range"))?;
                let buf = self.bufs.get()[at * ROOM..].as_mut_ptr();
                let user = (at as u64) << 2;
                // The read runs only if the open worked.
                let entries = [
                    opcode::OpenAt2::new(dir, name.as_ptr(), &how)
                        .file_index(Some(target))
                        .build()
                        .flags(squeue::Flags::IO_LINK)
                        .user_data(user),
                    opcode::Read::new(types::Fixed(slot), buf, ROOM as u32)
                        .offset(0)
                        .build()
                        .user_data(user | 1),
                ];
                // SAFETY: the name, `how` and the buffer outlive the entries: every
                // completion is reaped below, before this function returns.
                unsafe { self.ring.submission().push_multiple(&entries) }
                    .map_err(|_| io::Error::other("the submission queue is full"))?;
            }
            self.reap(expected)
        }

        /// Waits for `expected` completions, noting each file's open and read.
        fn reap(&mut self, expected: usize) -> io::Result<()> {
            let mut reaped = 0;
            while reaped < expected {
                self.ring.submit_and_wait(1)?;
                for cqe in self.ring.completion() {
                    reaped += 1;
                    let (at, op) = ((cqe.user_data() >> 2) as usize, cqe.user_data() & 3);
                    match op {
                        0 => {
                            self.opened[at] = cqe.result() >= 0;
                            if cqe.result() < 0 {
                                self.lens[at] = cqe.result();
                            }
                        }
                        1 if self.opened[at] => self.lens[at] = cqe.result(),
                        _ => {}
                    }
                }
            }
            Ok(())
        }

        /// The sum of file `at`'s bytes (descriptor `slot`), from its read, and the ring's
        /// reads of the rest where it filled its room, or std's way where its open would
        /// have waited.
        fn take(&mut self, at: usize, slot: u32, path: &Path) -> io::Result<u64> {
            let len = std::mem::replace(&mut self.lens[at], 0);
            if std::mem::take(&mut self.opened[at]) {
                self.closes.push(slot);
            }
            if len == -libc::EAGAIN {
                self.fell_back += 1;
                return std_file(path);
            }
            let len = usize::try_from(len).map_err(|_| io::Error::from_raw_os_error(-len))?;
            let mut sum = Light::default();
            sum.update(&self.bufs.get()[at * ROOM..at * ROOM + len]);
            if len == ROOM {
                self.larger += 1;
                self.read_rest(slot, ROOM as u64, &mut sum)?;
            }
            Ok(sum.finish())
        }

        /// Adds the bytes of descriptor `slot` from `offset` to its end to `sum`.
        fn read_rest(&mut self, slot: u32, mut offset: u64, sum: &mut Light) -> io::Result<()> {
            loop {
                let read = opcode::Read::new(
                    types::Fixed(slot),
                    self.rest.get().as_mut_ptr(),
                    STD_BUFFER as u32,
                )
                .offset(offset)
                .build()
                .user_data(3);
                // SAFETY: `rest` outlives the read: its completion is reaped right below.
                unsafe { self.ring.submission().push(&read) }
                    .map_err(|_| io::Error::other("the submission queue is full"))?;
                self.ring.submit_and_wait(1)?;
                let cqe = self
                    .ring
                    .completion()
                    .next()
                    .ok_or_else(|| io::Error::other("no completion"))?;
                let n = usize::try_from(cqe.result())
                    .map_err(|_| io::Error::from_raw_os_error(-cqe.result()))?;
                if n == 0 {
                    return Ok(());
                }
                sum.update(&self.rest.get()[..n]);
                offset += n as u64;
            }
        }
    }

    /// A buffer that starts on a page, as the reader's pool does: the kernel's copy out of
    /// the page cache into memory at another offset within its page than the file's bytes
    /// runs several times slower on some CPUs (AMD's `rep movsb`).
    struct PageBuf {
        buf: Vec<u8>,
        start: usize,
    }

    impl PageBuf {
        fn new(len: usize) -> PageBuf {
            let buf = vec![0; len + 4096];
            let start = (buf.as_ptr() as usize).wrapping_neg() % 4096;
            PageBuf { buf, start }
        }

        fn get(&mut self) -> &mut [u8] {
            let len = self.buf.len() - 4096;
            &mut self.buf[self.start..self.start + len]
        }
    }

    fn std_loop(paths: &[PathBuf]) -> io::Result<u64> {
        let mut sum = 0u64;
        for path in paths {
            sum = sum.wrapping_add(std_file(path)?);
        }
        Ok(sum)
    }

    /// The sum of `path`'s bytes, read through std's `BufReader`.
    fn std_file(path: &Path) -> io::Result<u64> {
        let mut reader = BufReader::with_capacity(STD_BUFFER, File::open(path)?);
        let mut sum = Light::default();
        loop {
            let bytes = reader.fill_buf()?;
            if bytes.is_empty() {
                return Ok(sum.finish());
            }
            sum.update(bytes);
            let n = bytes.len();
            reader.consume(n);
        }
    }

    /// What `f` returned, with its wall and CPU seconds (the process's, every thread's).
    fn timed(f: impl FnOnce() -> io::Result<u64>) -> io::Result<(u64, f64, f64)> {
        let (cpu0, start) = (cpu_seconds(), Instant::now());
        let out = f()?;
        Ok((out, start.elapsed().as_secs_f64(), cpu_seconds() - cpu0))
    }

    fn median(v: &mut [f64]) -> f64 {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    fn min(v: &[f64]) -> f64 {
        v.iter().copied().fold(f64::INFINITY, f64::min)
    }

    fn max(v: &[f64]) -> f64 {
        v.iter().copied().fold(0.0, f64::max)
    }
}
