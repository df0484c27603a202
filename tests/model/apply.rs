//! One step on the reader and on the model, the reader's answer checked against the
//! model's; and at the end, the rest read with the documented loop, checked the same way.

use std::fs::File;
use std::io::{BufRead, ErrorKind, Read};
use std::path::Path;

use readahead::SequentialFileReader;

use crate::common::*;
use crate::steps::{AtLeast, Consume, SkipBy, Step, Want};
use crate::{Expect, Fixture, Model};

/// Checks an error against the bad file the model expects.
#[track_caller]
fn assert_fails_as(e: &std::io::Error, path: &Path, missing: bool, what: &str) {
    assert_names(e, &path.display().to_string());
    if missing {
        assert_eq!(e.kind(), ErrorKind::NotFound, "{what}: {e}");
    }
}

/// One step on the reader and the model, checking the reader's answer against the model's.
pub fn apply<'a>(
    r: &mut SequentialFileReader<'a>,
    m: &mut Model,
    (fx, pool): (&'a Fixture, usize),
    opened: &'a [File],
    step: &Step,
    what: &str,
) {
    match *step {
        Step::AddPath(f) => {
            r.push(&fx.dir.paths[f]).unwrap();
            let expect = Expect::Bytes(fx.bytes[f].clone());
            m.push(None, expect, Some(&fx.dir.paths[f]));
        }
        Step::AddOwned(f, l) => {
            let limit = l.of(fx.bytes[f].len());
            let file = File::open(&fx.dir.paths[f]).unwrap();
            r.push(readahead::Entry::owned_file(file).range(..limit))
                .unwrap();
            m.push(None, Expect::Bytes(fx.cut(f, limit)), None);
        }
        Step::AddBorrowed(f, l) => {
            let limit = l.of(fx.bytes[f].len());
            r.add_file_to_prefetch(&opened[f], limit).unwrap();
            m.push(Some((f, limit)), Expect::Bytes(fx.cut(f, limit)), None);
        }
        Step::AddMissing | Step::AddDirectory => {
            let missing = matches!(step, Step::AddMissing);
            let path = if missing { &fx.missing } else { &fx.directory };
            match r.push(path) {
                Ok(()) => {
                    let expect = Expect::Fails {
                        path: path.clone(),
                        missing,
                    };
                    m.push(None, expect, Some(path));
                }
                // Failing at queuing is allowed: then the path is not queued.
                Err(e) => assert_fails_as(&e, path, missing, what),
            }
        }
        Step::Activate(f, l) => activate(r, m, fx, opened, (f, l.of(fx.bytes[f].len())), what),
        Step::ActivateQueued(n) => {
            let queued: Vec<(usize, u64)> = m.queue.iter().filter_map(|e| e.identity).collect();
            if let Some(&identity) = queued.get(n % queued.len().max(1)) {
                activate(r, m, fx, opened, identity, what);
            }
        }
        Step::Move => {
            m.queue.pop_front();
            m.at = 0;
            let moved = r
                .move_to_next_file()
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(moved, !m.queue.is_empty(), "{what}");
        }
        Step::Read(len) => {
            let mut buf = vec![0xA5; len];
            let res = r.read(&mut buf);
            match (m.rest(), m.front()) {
                (Some(rest), _) => {
                    let n = res.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert!(n <= len, "{what}: {n} bytes into {len}");
                    assert_eq!(n == 0, len == 0 || rest.is_empty(), "{what}: {n} bytes");
                    assert_bytes_eq(&buf[..n], &rest[..n], what);
                    m.at += n;
                }
                (None, Some(Expect::Fails { path, missing })) => match res {
                    Err(e) => assert_fails_as(&e, path, *missing, what),
                    // An empty buffer may be filled with nothing rather than fail.
                    Ok(0) if len == 0 => {}
                    Ok(n) => panic!("{what}: {n} bytes from a bad file"),
                },
                (None, _) => unreachable!(),
            }
        }
        Step::ReadExact(want) => {
            let left = m.rest().map_or(0, <[u8]>::len);
            let len = match want {
                Want::Bytes(n) => n,
                Want::Rest => left,
                Want::Past(extra) => left + extra,
            };
            let mut buf = vec![0xA5; len];
            let res = r.read_exact(&mut buf);
            match (m.rest(), m.front()) {
                (Some(rest), _) if len <= rest.len() => {
                    res.unwrap_or_else(|e| panic!("{what}: read_exact({len}): {e}"));
                    assert_bytes_eq(&buf, &rest[..len], what);
                    m.at += len;
                }
                (Some(rest), _) => {
                    let e = res.expect_err("read_exact past the end succeeded");
                    assert_eq!(e.kind(), ErrorKind::UnexpectedEof, "{what}: {e}");
                    // As std says, how much was read is unspecified; never more than the file.
                    let at = r.file_offset() as usize;
                    assert!(
                        at >= m.at && at - m.at <= rest.len(),
                        "{what}: offset {at}, was {}",
                        m.at
                    );
                    m.at = at;
                }
                (None, Some(Expect::Fails { path, missing })) => match res {
                    Err(e) => assert_fails_as(&e, path, *missing, what),
                    Ok(()) if len == 0 => {}
                    Ok(()) => panic!("{what}: {len} bytes from a bad file"),
                },
                (None, _) => unreachable!(),
            }
        }
        Step::FillConsume(c) => {
            let res = r.fill_buf();
            let avail = check_filled(res, m, 1, what);
            consume_filled(r, m, avail, c);
        }
        Step::FillAtLeast(n, c) => {
            let n = match n {
                AtLeast::Bytes(n) => n,
                AtLeast::Pool => pool,
                AtLeast::OverPool(extra) => pool + extra,
            };
            let res = r.fill_buf_at_least(n);
            if n > pool {
                let e = res.expect_err("more than the pool holds");
                assert_eq!(e.kind(), ErrorKind::InvalidInput, "{what}: {e}");
                return;
            }
            let avail = check_filled(res, m, n, what);
            consume_filled(r, m, avail, c);
        }
        Step::Skip(by) => {
            let left = m.rest().map_or(0, <[u8]>::len) as u64;
            let n = match by {
                SkipBy::Bytes(n) => n,
                SkipBy::Past(extra) => left + extra,
            };
            let res = r.skip(n);
            match (m.rest(), m.front()) {
                (Some(_), _) => {
                    let skipped = res.unwrap_or_else(|e| panic!("{what}: skip({n}): {e}"));
                    assert_eq!(skipped, n.min(left), "{what}");
                    m.at += skipped as usize;
                }
                (None, Some(Expect::Fails { path, missing })) => match res {
                    Err(e) => assert_fails_as(&e, path, *missing, what),
                    // Skipping nothing may succeed rather than fail, as reading nothing may.
                    Ok(0) if n == 0 => {}
                    Ok(k) => panic!("{what}: skipped {k} bytes of a bad file"),
                },
                (None, _) => unreachable!(),
            }
        }
        Step::Rebind => unreachable!("run rebinds"),
        Step::ReadToEnd => {
            let mut v = b"before".to_vec();
            let res = r.read_to_end(&mut v);
            match (m.rest(), m.front()) {
                (Some(rest), _) => {
                    let n = res.unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(n, rest.len(), "{what}");
                    assert_eq!(&v[..6], b"before", "{what}: appends");
                    assert_bytes_eq(&v[6..], rest, what);
                    m.at += n;
                }
                (None, Some(Expect::Fails { path, missing })) => {
                    assert_fails_as(&res.unwrap_err(), path, *missing, what);
                    assert_eq!(v, b"before", "{what}: nothing appended");
                }
                (None, _) => unreachable!(),
            }
        }
    }
}

/// Checks what `fill_buf` or `fill_buf_at_least(at_least)` returned against the model: at
/// least `at_least` bytes of the file's rest, or all of it; its length (0 for a bad file).
fn check_filled(res: std::io::Result<&[u8]>, m: &Model, at_least: usize, what: &str) -> usize {
    match (m.rest(), m.front()) {
        (Some(rest), _) => {
            let avail = res.unwrap_or_else(|e| panic!("{what}: {e}"));
            assert!(avail.len() <= rest.len(), "{what}: past the end");
            assert!(
                avail.len() >= at_least.min(rest.len()),
                "{what}: {} bytes of {} left",
                avail.len(),
                rest.len()
            );
            assert_bytes_eq(avail, &rest[..avail.len()], what);
            avail.len()
        }
        (None, Some(Expect::Fails { path, missing })) => {
            assert_fails_as(&res.unwrap_err(), path, *missing, what);
            0
        }
        (None, _) => unreachable!(),
    }
}

/// Consumes, as `c` says, after a fill that returned `avail` bytes.
fn consume_filled(r: &mut SequentialFileReader<'_>, m: &mut Model, avail: usize, c: Consume) {
    let amt = match c {
        Consume::Bytes(n) => n,
        Consume::All => avail,
        Consume::Over(extra) => avail + extra,
        Consume::Max => usize::MAX,
    };
    // Documented: `consume` clamps to what the fill returned.
    r.consume(amt);
    if m.rest().is_some() {
        m.at += amt.min(avail);
    }
}

/// `activate_file` on the reader and the model: the first entry matching `(file, limit)`
/// becomes current (what is ahead of it is dropped), else the queue holds it alone; it starts
/// at byte 0 either way.
fn activate<'a>(
    r: &mut SequentialFileReader<'a>,
    m: &mut Model,
    fx: &Fixture,
    opened: &'a [File],
    (f, limit): (usize, u64),
    what: &str,
) {
    r.activate_file(&opened[f], limit)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    match m.queue.iter().position(|e| e.identity == Some((f, limit))) {
        Some(i) => {
            m.queue.drain(..i);
        }
        None => {
            m.queue.clear();
            m.push(Some((f, limit)), Expect::Bytes(fx.cut(f, limit)), None);
        }
    }
    m.at = 0;
}

/// Reads everything left with the documented loop and checks it against the model.
pub fn check_rest(r: &mut SequentialFileReader<'_>, m: &Model, name: &str) {
    let got = read_all_files(r);
    let expected = m.queue.len().max(1); // The loop's one empty file on an empty reader.
    assert_eq!(got.len(), expected, "{name}: files left");
    for (i, g) in got.iter().enumerate() {
        let what = format!("{name}: the rest, file #{i}");
        match (g, m.queue.get(i).map(|e| &e.expect)) {
            (Ok(g), None) => assert!(g.is_empty(), "{what}"),
            (Ok(g), Some(Expect::Bytes(b))) => {
                let from = if i == 0 { m.at } else { 0 };
                assert_bytes_eq(g, &b[from..], &what);
            }
            (Err(e), Some(Expect::Fails { path, missing })) => {
                assert_fails_as(e, path, *missing, &what)
            }
            (Ok(g), Some(Expect::Fails { .. })) => {
                panic!("{what}: {} bytes from a bad file", g.len())
            }
            (Err(e), _) => panic!("{what}: {e}"),
        }
    }
}
