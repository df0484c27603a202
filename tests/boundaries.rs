//! The edges of a file: the end stays the end until the caller moves on, nothing of the next
//! file bleeds over, moving past the last file says so, and `consume` clamps.

mod common;

use std::io::{BufRead, ErrorKind, Read};

use common::*;

#[test]
fn at_the_end_fill_buf_is_empty_and_read_is_zero_until_moving_on() {
    let files = make_files(&[10_000, 5_000]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[0], &name);
        for _ in 0..5 {
            assert!(r.fill_buf().unwrap().is_empty(), "{name}: fill_buf at end");
            assert_eq!(r.read(&mut [0; 100]).unwrap(), 0, "{name}: read at end");
            assert_eq!(r.read_to_end(&mut Vec::new()).unwrap(), 0, "{name}");
            r.consume(10);
            assert_eq!(r.file_offset(), want[0].len() as u64, "{name}");
        }
        assert!(r.move_to_next_file().unwrap(), "{name}");
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[1], &name);
    }
}

#[test]
fn a_read_larger_than_the_file_stops_at_its_end() {
    let files = make_files(&[3, 4096, 70_000, 1]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        let mut buf = vec![0; 1 << 20];
        for (i, w) in want.iter().enumerate() {
            let mut got = Vec::new();
            loop {
                let n = r.read(&mut buf).unwrap();
                if n == 0 {
                    break;
                }
                assert!(
                    got.len() + n <= w.len(),
                    "{name}: file #{i} read past its end"
                );
                got.extend_from_slice(&buf[..n]);
            }
            assert_bytes_eq(&got, w, &format!("{name}: file #{i}"));
            assert_eq!(r.move_to_next_file().unwrap(), i + 1 < want.len());
        }
    }
}

#[test]
fn fill_buf_never_offers_more_than_the_rest_of_the_file() {
    let files = make_files(&[5000, 100, 0, 9000]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        for (i, w) in want.iter().enumerate() {
            let mut got = Vec::new();
            loop {
                let avail = r.fill_buf().unwrap();
                assert!(
                    got.len() + avail.len() <= w.len(),
                    "{name}: file #{i}: fill_buf offered bytes past its end"
                );
                if avail.is_empty() {
                    break;
                }
                got.extend_from_slice(avail);
                let n = avail.len();
                r.consume(n);
            }
            assert_bytes_eq(&got, w, &format!("{name}: file #{i}"));
            r.move_to_next_file().unwrap();
        }
    }
}

#[test]
fn read_exact_past_the_end_is_unexpected_eof_and_the_next_file_is_intact() {
    let files = make_files(&[1000, 2000]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        let mut buf = vec![0; 1001];
        let err = r.read_exact(&mut buf).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::UnexpectedEof, "{name}: {err}");
        assert_eq!(r.read(&mut buf).unwrap(), 0, "{name}: still at the end");
        assert!(r.move_to_next_file().unwrap());
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[1], &name);
    }
}

#[test]
fn an_empty_read_buffer_reads_nothing_and_loses_nothing() {
    let files = make_files(&[3000]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        assert_eq!(r.read(&mut []).unwrap(), 0, "{name}");
        r.read_exact(&mut []).unwrap();
        assert_eq!(r.file_offset(), 0, "{name}");
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[0], &name);
    }
}

#[test]
fn an_empty_reader_has_no_file() {
    for (name, b) in configs() {
        let mut r = b.build().unwrap();
        for _ in 0..3 {
            assert!(r.fill_buf().unwrap().is_empty(), "{name}");
            assert_eq!(r.read(&mut [0; 10]).unwrap(), 0, "{name}");
            r.consume(5);
            assert_eq!(r.file_offset(), 0, "{name}");
            assert!(!r.move_to_next_file().unwrap(), "{name}");
        }
    }
}

#[test]
fn the_last_move_returns_false_and_the_reader_can_be_used_again() {
    let files = make_files(&[10, 20, 30]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths[..2]);
        assert_eq!(rest_of_file(&mut r).unwrap(), want[0], "{name}");
        assert!(r.move_to_next_file().unwrap(), "{name}");
        assert_eq!(rest_of_file(&mut r).unwrap(), want[1], "{name}");
        assert!(!r.move_to_next_file().unwrap(), "{name}: last");
        assert!(!r.move_to_next_file().unwrap(), "{name}: still none");
        assert!(r.fill_buf().unwrap().is_empty(), "{name}");
        // Adding to the emptied reader makes that file current.
        r.push(&files.paths[2]).unwrap();
        assert_eq!(rest_of_file(&mut r).unwrap(), want[2], "{name}");
        assert!(!r.move_to_next_file().unwrap(), "{name}");
    }
}

#[test]
fn moving_on_mid_file_drops_the_rest_and_the_next_file_starts_at_zero() {
    let files = make_files(&[300_000, 100_000, 0, 50_000]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        let mut head = vec![0; 12_345];
        r.read_exact(&mut head).unwrap();
        assert_bytes_eq(&head, &want[0][..12_345], &name);
        assert!(r.move_to_next_file().unwrap());
        // Move on without reading anything of the second file.
        assert!(r.move_to_next_file().unwrap());
        assert_eq!(rest_of_file(&mut r).unwrap(), want[2], "{name}");
        assert!(r.move_to_next_file().unwrap());
        assert_eq!(r.file_offset(), 0, "{name}");
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[3], &name);
    }
}

#[test]
fn empty_files_are_files() {
    let files = make_files(&[0, 0, 7, 0, 4096, 0]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        assert!(r.fill_buf().unwrap().is_empty(), "{name}: first is empty");
        assert_files_eq(&read_all_ok(&mut r), &want, &name);
    }
}

#[test]
fn only_empty_files() {
    let files = make_files(&[0; 50]);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        assert_files_eq(&read_all_ok(&mut r), &vec![vec![]; 50], &name);
    }
}

#[test]
fn consume_past_what_fill_buf_returned_clamps() {
    let files = make_files(&[20_000, 3000]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        let mut got = Vec::new();
        let mut over = [1usize, 4096, usize::MAX].into_iter().cycle();
        loop {
            let avail = r.fill_buf().unwrap();
            if avail.is_empty() {
                break;
            }
            let n = avail.len();
            got.extend_from_slice(avail);
            r.consume(n.saturating_add(over.next().unwrap()));
            assert_eq!(r.file_offset(), got.len() as u64, "{name}: clamped");
        }
        assert_bytes_eq(&got, &want[0], &name);
        r.consume(usize::MAX);
        assert_eq!(r.file_offset(), want[0].len() as u64, "{name}");
        assert!(r.move_to_next_file().unwrap());
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[1], &name);
    }
}

/// `consume` clamps to what the last `fill_buf` returned: after moving on (or activating)
/// no `fill_buf` has returned anything of the new current file, so a `consume` then must
/// skip none of it, on every backend alike.
#[test]
fn consume_after_moving_on_without_fill_buf_skips_nothing() {
    let files = make_files(&[1000, 10_000]);
    let want = oracle_all(&files.paths);
    let opened = files.open_all();
    for (name, b) in configs() {
        let mut r = reader_over(b.clone(), &files.paths);
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[0], &name);
        assert!(r.fill_buf().unwrap().is_empty(), "{name}");
        assert!(r.move_to_next_file().unwrap());
        // Give the next file's first read time to complete, as it may on io_uring.
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.consume(100);
        assert_eq!(r.file_offset(), 0, "{name}: after moving on");
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[1], &name);

        let mut r = reader_over_files(b, &opened);
        r.read_exact(&mut [0; 10]).unwrap();
        r.activate_file(&opened[1], u64::MAX).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        r.consume(100);
        assert_eq!(r.file_offset(), 0, "{name}: after activating");
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[1], &name);
    }
}

/// Queuing a file between `fill_buf` and `consume` changes nothing of what `consume` may
/// take, as std's `BufReader` keeps its buffer across calls that read nothing; the file
/// queued is read whole after.
#[test]
fn consume_after_queuing_another_file_takes_what_fill_buf_returned() {
    let files = make_files(&[300_000, 7000]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths[..1]);
        let mut got = Vec::new();
        for step in 0.. {
            let avail = if step % 2 == 0 {
                r.fill_buf().unwrap()
            } else {
                r.fill_buf_at_least(100).unwrap()
            };
            if avail.is_empty() {
                break;
            }
            let n = avail.len().min(1000 + step);
            got.extend_from_slice(&avail[..n]);
            if step == 3 {
                r.push(&files.paths[1]).unwrap();
            }
            r.consume(n);
            assert_eq!(r.file_offset(), got.len() as u64, "{name}: step {step}");
        }
        assert_bytes_eq(&got, &want[0], &name);
        assert!(r.move_to_next_file().unwrap());
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[1], &name);
    }
}

#[test]
fn consume_zero_changes_nothing() {
    let files = make_files(&[5000]);
    let want = oracle_all(&files.paths);
    for (name, b) in configs() {
        let mut r = reader_over(b, &files.paths);
        let first = r.fill_buf().unwrap().to_vec();
        r.consume(0);
        assert_eq!(
            r.fill_buf().unwrap(),
            &first[..],
            "{name}: same bytes again"
        );
        assert_eq!(r.file_offset(), 0, "{name}");
        assert_bytes_eq(&rest_of_file(&mut r).unwrap(), &want[0], &name);
    }
}

#[test]
fn lines_stop_at_the_end_of_each_file() {
    let dir = tempdir();
    let texts = [
        "first\nsecond\nno newline at the end",
        "",
        "\n\nthird file\n",
        "x",
    ];
    let paths: Vec<_> = texts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let p = dir.path().join(format!("{i}.txt"));
            std::fs::write(&p, t).unwrap();
            p
        })
        .collect();
    for (name, b) in configs() {
        let mut r = reader_over(b, &paths);
        for (i, t) in texts.iter().enumerate() {
            let got: Vec<String> = (&mut r).lines().map(Result::unwrap).collect();
            let want: Vec<&str> = t.lines().collect();
            assert_eq!(got, want, "{name}: file #{i}");
            assert_eq!(r.move_to_next_file().unwrap(), i + 1 < texts.len());
        }
        // read_until and read_to_string stop there too.
        for p in &paths {
            r.push(p).unwrap();
        }
        let mut line = Vec::new();
        r.read_until(b'\n', &mut line).unwrap();
        assert_eq!(line, b"first\n", "{name}");
        let mut rest = String::new();
        r.read_to_string(&mut rest).unwrap();
        assert_eq!(rest, "second\nno newline at the end", "{name}");
        line.clear();
        assert_eq!(r.read_until(b'\n', &mut line).unwrap(), 0, "{name}");
    }
}
