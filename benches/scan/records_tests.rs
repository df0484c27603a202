//! The record loop against a source that is one slice (the oracle), and std's `BufReader`
//! through [`Spilling`] with buffers smaller and larger than the records.

use std::io::{BufReader, Cursor};

use super::super::accounts::{fill_file, ALIGN};
use super::super::prng::Prng;
use super::*;

/// A whole file in memory: every `fill_at_least` is zero-copy.
struct Slice<'b> {
    bytes: &'b [u8],
}

impl RecordSource for Slice<'_> {
    fn fill_at_least(&mut self, _n: usize) -> io::Result<&[u8]> {
        Ok(self.bytes)
    }

    fn consume(&mut self, n: usize) {
        self.bytes = &self.bytes[n..];
    }
}

/// A file of one record with `data` in it, padded.
fn one_record(data: &[u8]) -> Vec<u8> {
    let mut file = vec![0; HEADER];
    file[DATA_LEN_AT].copy_from_slice(&(data.len() as u64).to_le_bytes());
    file.extend_from_slice(data);
    file.resize(file.len().next_multiple_of(ALIGN as usize), 0);
    file
}

fn through_bufreader(file: &[u8], capacity: usize) -> (u64, io::Result<RecordSum>) {
    let mut spill = Vec::new();
    let reader = BufReader::with_capacity(capacity, Cursor::new(file));
    scan_file(&mut Spilling::new(reader, &mut spill), None)
}

#[test]
fn every_buffer_size_gives_the_oracle_sum() {
    let mut rng = Prng::new(3);
    let mut file = Vec::new();
    for size in [136, 1000, 65_536, 300_000] {
        fill_file(&mut rng, &mut file, size);
        let (bytes, want) = scan_file(&mut Slice { bytes: &file }, None);
        let want = want.expect("the oracle parses");
        assert_eq!(bytes, size);
        for capacity in [1, 7, 136, 200, 4096, 1 << 20] {
            let (bytes, got) = through_bufreader(&file, capacity);
            assert_eq!(bytes, size, "capacity {capacity}");
            assert_eq!(
                got.expect("parses"),
                want,
                "size {size}, capacity {capacity}"
            );
        }
    }
}

#[test]
fn the_sum_is_of_each_records_hash_in_any_order() {
    let (a, b) = (one_record(b"first"), one_record(&[9; 300]));
    let ab = [a.clone(), b.clone()].concat();
    let ba = [b, a].concat();
    let sum = |file: &[u8]| through_bufreader(file, 64).1.expect("parses");
    assert_eq!(sum(&ab), sum(&ba));
    assert_eq!(sum(&ab).records, 2);
    let first = blake3::hash(b"first");
    let want = u128::from_le_bytes(first.as_bytes()[..16].try_into().unwrap());
    assert_eq!(sum(&one_record(b"first")).sum, want);
}

#[test]
fn a_record_longer_than_the_whole_limit_streams_to_the_same_hash() {
    let data: Vec<u8> = (0..WHOLE_MAX as u32 + 12_345).map(|i| i as u8).collect();
    let file = one_record(&data);
    let (bytes, sum) = through_bufreader(&file, 32 << 10);
    assert_eq!(bytes, file.len() as u64);
    let hash = blake3::hash(&data);
    let want = u128::from_le_bytes(hash.as_bytes()[..16].try_into().unwrap());
    assert_eq!(sum.expect("parses").sum, want);
}

#[test]
fn a_length_past_the_end_or_a_cut_header_fails_the_file() {
    let mut file = [one_record(b"ok"), one_record(&[1; 500])].concat();
    file.truncate(file.len() - 100);
    let (bytes, result) = through_bufreader(&file, 64);
    assert_eq!(bytes, one_record(b"ok").len() as u64);
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("offset 144") && err.contains("500 bytes"),
        "{err}"
    );

    let mut huge = one_record(b"x");
    huge[DATA_LEN_AT].copy_from_slice(&u64::MAX.to_le_bytes());
    let err = through_bufreader(&huge, 64).1.unwrap_err().to_string();
    assert!(err.contains("runs past") || err.contains("only"), "{err}");

    let cut = [one_record(b"ok"), vec![0; 40]].concat();
    let err = through_bufreader(&cut, 64).1.unwrap_err().to_string();
    assert!(err.contains("40 bytes left"), "{err}");
}
