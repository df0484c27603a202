//! The scheduler against a scripted completion source: short reads, EOF mid-region, errors,
//! retries, reordering and reads dropped in flight, with no kernel ring involved.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use super::*;

/// What the script says one read returns.
#[derive(Clone, Copy, Debug)]
enum Act {
    /// Everything asked that the file has.
    Full,
    /// At most this many bytes.
    Short(usize),
    /// End of file: 0.
    Eof,
    /// `-errno`.
    Fail(i32),
}

/// One read the script is asked about.
#[derive(Debug)]
struct Call {
    offset: u64,
    len: usize,
    /// 0 for a chunk's first read, then 1, 2... for its continuations and retries.
    attempt: u32,
}

type Script = Box<dyn FnMut(&Call) -> Act + Send>;

/// A completion source that reads the real file but returns what the script says, in the
/// order it says.
struct Scripted<'a> {
    pending: Vec<ReadReq<'a>>,
    cancelled: HashSet<u64>,
    attempts: HashMap<u64, u32>,
    script: Script,
    /// Complete reads newest first.
    reverse: bool,
    /// Complete reads only when the scheduler waits (so reads pile up in flight).
    lazy: bool,
}

impl<'a> Scripted<'a> {
    fn new(script: impl FnMut(&Call) -> Act + Send + 'static) -> Self {
        Scripted {
            pending: Vec::new(),
            cancelled: HashSet::new(),
            attempts: HashMap::new(),
            script: Box::new(script),
            reverse: false,
            lazy: false,
        }
    }

    fn complete(&mut self, mut req: ReadReq<'a>) -> ReadDone<'a> {
        if self.cancelled.remove(&req.id()) {
            return req.done(-libc::ECANCELED);
        }
        let attempt = self.attempts.entry(req.id()).or_default();
        let call = Call {
            offset: req.offset(),
            len: req.len(),
            attempt: *attempt,
        };
        *attempt += 1;
        let act = (self.script)(&call);
        let (fd, offset) = (req.fd().clone(), req.offset());
        let buf = req.buf_mut();
        let result = match act {
            Act::Full => fd.file().read_at(buf, offset).unwrap() as i32,
            Act::Short(n) => {
                let n = n.min(buf.len());
                fd.file().read_at(&mut buf[..n], offset).unwrap() as i32
            }
            Act::Eof => 0,
            Act::Fail(errno) => -errno,
        };
        req.done(result)
    }
}

impl<'a> Io<'a> for Scripted<'a> {
    fn backend(&self) -> Backend {
        Backend::Sync
    }
    fn read(&mut self, req: ReadReq<'a>) {
        self.pending.push(req);
    }
    fn cancel(&mut self, id: u64) {
        self.cancelled.insert(id);
    }
    fn submit(&mut self) -> io::Result<()> {
        Ok(())
    }
    fn reap(&mut self, wait: bool, out: &mut Vec<ReadDone<'a>>) -> io::Result<()> {
        if self.lazy && !wait {
            return Ok(());
        }
        let mut batch = mem::take(&mut self.pending);
        if self.reverse {
            batch.reverse();
        }
        if self.lazy {
            // One at a time: the oldest, so the scheduler sees reads still in flight.
            let first = batch.remove(0);
            self.pending = batch;
            out.push(self.complete(first));
            return Ok(());
        }
        for req in batch {
            out.push(self.complete(req));
        }
        Ok(())
    }
    fn in_flight(&self) -> usize {
        self.pending.len()
    }
    fn shutdown(&mut self, out: &mut Vec<ReadDone<'a>>) -> io::Result<()> {
        out.extend(self.pending.drain(..).map(|r| r.done(-libc::ECANCELED)));
        Ok(())
    }
}

/// A source where each read's first `n` attempts get `act`, and later ones succeed.
fn first_attempts(n: u32, act: Act) -> Scripted<'static> {
    Scripted::new(move |c| if c.attempt < n { act } else { Act::Full })
}

/// A source where every read of `len` bytes at `offset` fails with `errno`, and others succeed.
fn fail_at(offset: u64, len: usize, errno: i32) -> Scripted<'static> {
    Scripted::new(move |c| {
        if c.offset == offset && c.len == len {
            Act::Fail(errno)
        } else {
            Act::Full
        }
    })
}

/// Bytes that tell files and offsets apart, all below 0x80 (so never [`POISON`]).
fn content(file: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i / 251 + i * 7 + file * 13) % 128) as u8)
        .collect()
}

/// What every region is filled with before it is read into.
const POISON: u8 = 0xA5;

struct Files {
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    data: Vec<Vec<u8>>,
}

fn files(sizes: &[usize]) -> Files {
    let dir = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    let mut data = Vec::new();
    for (i, &len) in sizes.iter().enumerate() {
        let p = dir.path().join(format!("f{i}"));
        let bytes = content(i, len);
        std::fs::File::create(&p)
            .unwrap()
            .write_all(&bytes)
            .unwrap();
        paths.push(p);
        data.push(bytes);
    }
    Files {
        _dir: dir,
        paths,
        data,
    }
}

fn engine<'a>(io: Scripted<'a>, pool: usize, read_size: usize) -> Engine<'a> {
    let limits = Limits {
        read_size,
        direct: false,
        depth: 16,
        max_open: 4,
        warm_window: pool,
        offload_depth: 2,
    };
    Engine::new(Box::new(io), Pool::with_capacity(pool).unwrap(), limits)
}

/// Every queued file, read through `fill_buf`/`consume`: its bytes or its error's message.
fn read_all(e: &mut Engine<'_>) -> Vec<Result<Vec<u8>, String>> {
    let mut out = Vec::new();
    loop {
        let mut bytes = Vec::new();
        let res = loop {
            match e.fill_buf() {
                Ok([]) => break Ok(bytes),
                Ok(buf) => {
                    assert!(!buf.contains(&POISON), "bytes no read wrote were exposed");
                    let n = buf.len().min(1000);
                    bytes.extend_from_slice(&buf[..n]);
                    e.consume(n);
                }
                Err(err) => break Err(err.to_string()),
            }
        };
        out.push(res);
        if !e.move_to_next_file().unwrap() {
            return out;
        }
    }
}

fn queue_paths(e: &mut Engine<'_>, f: &Files) {
    for p in &f.paths {
        e.push(Source::Path(p.as_path().into()), u64::MAX).unwrap();
    }
}

fn assert_exact(got: &[Result<Vec<u8>, String>], want: &[Vec<u8>]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.as_ref().unwrap_or_else(|e| panic!("file {i}: {e}"));
        assert!(g == w, "file {i}: {} bytes, want {}", g.len(), w.len());
    }
}

fn assert_pool_empty(e: &Engine<'_>) {
    assert_eq!(e.pool().used(), 0, "every region is back");
    assert_eq!(e.pool().lent(), 0);
}

#[test]
fn reads_in_order_across_files() {
    let f = files(&[0, 1, 4095, 4096, 4097, 20_000, 100_000]);
    let mut e = engine(Scripted::new(|_| Act::Full), 64 << 10, 8192);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
}

#[test]
fn short_reads_of_every_length_are_continued() {
    let f = files(&[3 * 4096 + 123, 5000]);
    for short in (1..=300).chain([511, 4095, 4096, 4097, 8191]) {
        let mut e = engine(first_attempts(1, Act::Short(short)), 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        assert!(e.stats().short_reads > 0, "short {short}");
        assert_pool_empty(&e);
    }
}

#[test]
fn one_byte_at_a_time() {
    let f = files(&[9000, 3]);
    let mut e = engine(Scripted::new(|_| Act::Short(1)), 16 << 10, 4096);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
}

#[test]
fn eof_in_the_middle_of_a_region_ends_the_file_there() {
    let f = files(&[30_000, 5000]);
    // The file "shrinks": the read at 8192 returns 100 bytes, then end of file.
    let mut e = engine(
        Scripted::new(|c| match (c.offset, c.attempt) {
            (8192, 0) => Act::Short(100),
            (8292, _) => Act::Eof,
            (o, _) if o > 8192 && o < 30_000 => Act::Eof,
            _ => Act::Full,
        }),
        64 << 10,
        8192,
    );
    queue_paths(&mut e, &f);
    let got = read_all(&mut e);
    assert_eq!(got[0].as_ref().unwrap(), &f.data[0][..8292]);
    assert_eq!(got[1].as_ref().unwrap(), &f.data[1]);
    assert_pool_empty(&e);
}

#[test]
fn an_error_fails_its_file_alone_naming_path_and_offset() {
    let f = files(&[10_000, 20_000, 3000]);
    let mut e = engine(fail_at(8192, 8192, libc::EIO), 64 << 10, 8192);
    queue_paths(&mut e, &f);
    // File 1's second region fails; its first region is delivered, then the error.
    let mut first = Vec::new();
    assert_eq!(e.fill_buf().unwrap(), &f.data[0][..8192]);
    e.consume(8192);
    first.extend(e.fill_buf().unwrap().to_vec());
    let n = first.len();
    e.consume(n);
    assert!(e.fill_buf().unwrap().is_empty());
    assert!(e.move_to_next_file().unwrap());
    let mut second = Vec::new();
    let err = loop {
        match e.fill_buf() {
            Ok(b) => {
                assert!(!b.is_empty(), "the error comes before the end");
                second.extend_from_slice(b);
                let n = b.len();
                e.consume(n);
            }
            Err(err) => break err,
        }
    };
    assert_eq!(second, &f.data[1][..8192]);
    let msg = err.to_string();
    assert!(
        msg.contains(&*f.paths[1].to_string_lossy()) && msg.contains("offset 8192"),
        "{msg}"
    );
    assert_eq!(err.raw_os_error(), None);
    assert!(err.get_ref().unwrap().is::<Error>());
    // It keeps failing until the reader moves on.
    assert!(e.fill_buf().is_err());
    assert!(e.move_to_next_file().unwrap());
    let rest = read_all(&mut e);
    assert_exact(&rest, &f.data[2..]);
    assert_eq!(e.stats().files_failed, 1);
    assert_pool_empty(&e);
}

#[test]
fn passing_errors_are_retried() {
    for errno in [libc::EINTR, libc::EAGAIN, libc::ECANCELED] {
        let f = files(&[20_000, 100]);
        let mut e = engine(first_attempts(2, Act::Fail(errno)), 64 << 10, 8192);
        queue_paths(&mut e, &f);
        assert_exact(&read_all(&mut e), &f.data);
        assert!(e.stats().retries >= 2, "errno {errno}");
    }
}

#[test]
fn retries_are_bounded() {
    let f = files(&[5000, 100]);
    let mut e = engine(fail_at(0, 5000, libc::EAGAIN), 64 << 10, 8192);
    queue_paths(&mut e, &f);
    let got = read_all(&mut e);
    assert!(got[0].as_ref().unwrap_err().contains("offset 0"));
    assert_eq!(got[1].as_ref().unwrap(), &f.data[1]);
    assert_eq!(e.stats().retries, u64::from(MAX_RETRIES));
}

#[test]
fn completions_out_of_order() {
    let f = files(&[50_000, 7, 12_345, 0, 70_000]);
    let mut io = first_attempts(1, Act::Short(1000));
    io.reverse = true;
    let mut e = engine(io, 32 << 10, 4096);
    queue_paths(&mut e, &f);
    assert_exact(&read_all(&mut e), &f.data);
    assert_pool_empty(&e);
}

#[test]
fn moving_on_leaves_reads_in_flight_as_orphans() {
    let f = files(&[200_000, 5000]);
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 128 << 10, 8192);
    queue_paths(&mut e, &f);
    assert_eq!(e.fill_buf().unwrap(), &f.data[0][..8192]);
    assert!(
        e.io.in_flight() > 1,
        "read-ahead of the current file is in flight"
    );
    assert!(e.move_to_next_file().unwrap());
    assert!(!e.orphans.is_empty());
    let rest = read_all(&mut e);
    assert_exact(&rest, &f.data[1..]);
    drop(rest);
    // Whatever was still in flight comes back through the drain in `Drop`.
    assert!(e.stats().reads_discarded > 0 || e.io.in_flight() > 0);
}

#[test]
fn activating_a_partly_read_file_restarts_it() {
    let f = files(&[50_000, 3000]);
    let file = std::fs::File::open(&f.paths[0]).unwrap();
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 32 << 10, 4096);
    e.push(Source::Borrowed(&file), u64::MAX).unwrap();
    e.push(Source::Path(f.paths[1].as_path().into()), u64::MAX)
        .unwrap();
    let n = e.fill_buf().unwrap().len();
    e.consume(n - 10);
    assert_eq!(e.file_offset(), (n - 10) as u64);
    e.activate(&file, u64::MAX).unwrap();
    assert_eq!(e.file_offset(), 0);
    // It reads again from byte 0, and the file queued behind it still follows.
    assert_exact(&read_all(&mut e), &f.data);
}

#[test]
fn drop_with_reads_in_flight_gets_every_loan_back() {
    let f = files(&[300_000]);
    let mut io = Scripted::new(|_| Act::Full);
    io.lazy = true;
    let mut e = engine(io, 256 << 10, 8192);
    queue_paths(&mut e, &f);
    e.fill_buf().unwrap();
    assert!(e.pool().lent() > 1);
    drop(e); // `Drop for Engine` debug-asserts that every loan came back.
}
