//! Account storage files, laid out as a validator keeps them, for the `accounts` data sets.
//!
//! A file is a run of records, each a 136-byte header, the account's data, and zero padding up
//! to a multiple of 8 bytes. Bytes 8..16 of the header hold the data's length (`u64`,
//! little-endian); bytes 0..8 a write version (the record's index in its file here), the rest
//! stands for the account's key, balance, owner and hash (random bytes here).
//!
//! What is drawn, from the public figures on mainnet's storage (most files 15-115 KB, a long
//! tail from 136 B to tens of MB; most accounts 165 bytes of data, some up to tens of KB, a
//! few of a MiB or so):
//! - file sizes: 97% uniform in 15,000..=115,000 bytes, 3% log-uniform in 136 B..=`tail_max`;
//! - data lengths: 88% exactly 165 bytes, 11.5% log-uniform in 1 B..=20 KiB, 0.5% log-uniform
//!   in 20 KiB..=1 MiB, cut short where the file's size leaves less room.

use super::prng::Prng;

/// Bytes of a record's header.
pub const HEADER: usize = 136;
/// Records start at multiples of this.
pub const ALIGN: u64 = 8;
/// Where in the header the data length lies (`u64`, little-endian).
pub const DATA_LEN_AT: std::ops::Range<usize> = 8..16;

/// The data length of most accounts (a token account's).
const COMMON_DATA_LEN: u64 = 165;

/// The bytes a record with `data_len` bytes of data takes, padding included.
pub fn record_size(data_len: u64) -> u64 {
    (HEADER as u64 + data_len).next_multiple_of(ALIGN)
}

/// A file size drawn from the mix above: a multiple of 8, at least one header.
pub fn file_size(rng: &mut Prng, tail_max: u64) -> u64 {
    let size = if rng.next_u64() % 100 < 97 {
        15_000 + rng.next_u64() % 100_001
    } else {
        rng.log_uniform(HEADER as u64, tail_max)
    };
    size.next_multiple_of(ALIGN)
}

/// A data length drawn from the mix above.
fn data_len(rng: &mut Prng) -> u64 {
    match rng.next_u64() % 1000 {
        0..880 => COMMON_DATA_LEN,
        880..995 => rng.log_uniform(1, 20 << 10),
        _ => rng.log_uniform(20 << 10, 1 << 20),
    }
}

/// Fills `buf` with one file of exactly `size` bytes of records (`size` a multiple of 8 and at
/// least a header); returns how many records it holds. The last record takes whatever room is
/// left, so that the file ends where a record does.
pub fn fill_file(rng: &mut Prng, buf: &mut Vec<u8>, size: u64) -> u64 {
    debug_assert!(
        size.is_multiple_of(ALIGN) && size >= HEADER as u64,
        "size {size}"
    );
    buf.clear();
    // Zeros first: the padding is whatever the records leave untouched.
    buf.resize(size as usize, 0);
    let (mut at, mut records) = (0u64, 0u64);
    while size - at >= HEADER as u64 {
        let left = size - at;
        let room = left - HEADER as u64;
        let mut len = data_len(rng).min(room);
        if left - record_size(len) < HEADER as u64 {
            // What would be left could not hold a header: this record takes it all.
            len = room;
        }
        let start = at as usize;
        let data = start + HEADER;
        rng.fill(&mut buf[start..data]);
        buf[start..start + 8].copy_from_slice(&records.to_le_bytes());
        buf[start + DATA_LEN_AT.start..start + DATA_LEN_AT.end].copy_from_slice(&len.to_le_bytes());
        rng.fill(&mut buf[data..data + len as usize]);
        at += record_size(len);
        records += 1;
    }
    debug_assert_eq!(at, size, "records fill the file exactly");
    records
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The data lengths of the records in `file`, walking the headers.
    fn data_lens(file: &[u8]) -> Vec<u64> {
        let mut lens = Vec::new();
        let mut at = 0;
        while at < file.len() {
            let len_bytes = &file[at + DATA_LEN_AT.start..at + DATA_LEN_AT.end];
            let len = u64::from_le_bytes(len_bytes.try_into().unwrap());
            let end = at + HEADER + len as usize;
            assert!(file[end..at + record_size(len) as usize]
                .iter()
                .all(|&b| b == 0));
            lens.push(len);
            at += record_size(len) as usize;
        }
        assert_eq!(at, file.len());
        lens
    }

    #[test]
    fn files_are_whole_runs_of_padded_records() {
        let mut rng = Prng::new(7);
        let mut buf = Vec::new();
        for _ in 0..200 {
            let size = file_size(&mut rng, 4 << 20);
            let records = fill_file(&mut rng, &mut buf, size);
            assert_eq!(buf.len() as u64, size);
            assert_eq!(data_lens(&buf).len() as u64, records);
        }
        for size in [136, 144, 272, 280] {
            fill_file(&mut rng, &mut buf, size);
            assert!(!data_lens(&buf).is_empty(), "size {size}");
        }
    }

    #[test]
    fn most_records_hold_165_bytes() {
        let mut rng = Prng::new(9);
        let lens: Vec<u64> = (0..10_000).map(|_| data_len(&mut rng)).collect();
        let common = lens.iter().filter(|&&len| len == COMMON_DATA_LEN).count();
        assert!((8_500..9_100).contains(&common), "{common}");
        assert!(lens.iter().all(|&len| len <= 1 << 20));
    }
}
