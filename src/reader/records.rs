//! The record API: records that may straddle reads ([`fill_buf_at_least`]), and passing
//! over bytes without reading them ([`skip`]).
//!
//! [`fill_buf_at_least`]: SequentialFileReader::fill_buf_at_least
//! [`skip`]: SequentialFileReader::skip

use std::io;

use super::SequentialFileReader;

impl SequentialFileReader<'_> {
    /// At least `n` contiguous bytes of the current file, or every byte left in it when fewer
    /// remain: `len() < n` means the file ends first (a record torn by the end), `&[]` that
    /// it has ended. Never fewer than `n` because of a failure: where the file fails before
    /// `n` bytes, the answer is the file's error (the bytes before the failure still come out
    /// of [`fill_buf`](std::io::BufRead::fill_buf), then the error again).
    ///
    /// For parsers of records: ask for a header, read the record's length from it, then ask
    /// for the whole record and [`consume`](std::io::BufRead::consume) it. The bytes are returned in
    /// place, without copying, when they lie in adjacent regions of the pool (consecutive
    /// reads of one file do, but where the read-ahead's window wraps, and a record longer than
    /// the window stretches it); otherwise they are copied once into a
    /// buffer the reader keeps (counted in [`Stats::bytes_spilled`](crate::Stats::bytes_spilled)). It waits only for the
    /// reads it needs, and never crosses into the next file. `consume` accepts up to the
    /// length returned.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if `n` is more than the pool holds
    /// ([`capacity`](Self::capacity)): the reader goes on, and a smaller `n` works. The
    /// current file's error where it fails before `n` bytes, as
    /// [`fill_buf`](std::io::BufRead::fill_buf) returns it.
    ///
    /// # Examples
    ///
    /// Records of an 8-byte little-endian length and that many bytes. A parser meets three
    /// cases: a whole record; a record torn by the end of the file (fewer bytes than asked);
    /// and an error, which `?` passes on (it is never a short answer):
    ///
    /// ```
    /// use std::io::{self, BufRead};
    /// use readahead::SequentialFileReader;
    ///
    /// fn bodies(reader: &mut SequentialFileReader<'_>) -> io::Result<Vec<Vec<u8>>> {
    ///     let mut bodies = Vec::new();
    ///     loop {
    ///         let header = reader.fill_buf_at_least(8)?; // an error: the file's, named
    ///         if header.is_empty() {
    ///             return Ok(bodies); // the end of the file, between records
    ///         }
    ///         let len = match header.get(..8) {
    ///             Some(h) => u64::from_le_bytes(h.try_into().unwrap()) as usize,
    ///             None => return Err(torn(reader)), // the file ends inside a header
    ///         };
    ///         let record = reader.fill_buf_at_least(8 + len)?;
    ///         if record.len() < 8 + len {
    ///             return Err(torn(reader)); // the file ends inside a record
    ///         }
    ///         bodies.push(record[8..8 + len].to_vec()); // a whole record
    ///         reader.consume(8 + len);
    ///     }
    /// }
    ///
    /// fn torn(reader: &SequentialFileReader<'_>) -> io::Error {
    ///     let at = reader.file_offset();
    ///     io::Error::new(io::ErrorKind::UnexpectedEof, format!("a record torn at {at}"))
    /// }
    ///
    /// # fn main() -> io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("records");
    /// # let mut data = Vec::new();
    /// # for body in [&b"one"[..], b"three", b""] {
    /// #     data.extend_from_slice(&(body.len() as u64).to_le_bytes());
    /// #     data.extend_from_slice(body);
    /// # }
    /// # std::fs::write(&path, &data)?;
    /// # let torn_path = dir.path().join("torn");
    /// # std::fs::write(&torn_path, &data[..data.len() - 10])?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.push(&path)?;
    /// reader.push(&torn_path)?;
    /// assert_eq!(bodies(&mut reader)?, [&b"one"[..], b"three", b""]);
    /// reader.move_to_next_file()?;
    /// let err = bodies(&mut reader).unwrap_err();
    /// assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    /// # Ok(())
    /// # }
    /// ```
    #[inline]
    pub fn fill_buf_at_least(&mut self, n: usize) -> io::Result<&[u8]> {
        self.engine.fill_buf_at_least(n)
    }

    /// Skips `n` bytes of the current file from the next byte [`fill_buf`](std::io::BufRead::fill_buf)
    /// would return; returns how many were skipped: fewer only at the file's end or limit
    /// (`0` at its end). A skip never passes a failure for an end: where the file is known to
    /// fail inside the `n` bytes, the answer is its error, and nothing is skipped (skipping
    /// up to the failure works, and reading there gives the error).
    ///
    /// What is skipped is not read: regions wholly inside the range are freed unread, reads
    /// in flight for it are cancelled or their bytes dropped, and reads not yet issued for it
    /// never are (the file's next read starts past it, aligned down for `O_DIRECT`).
    /// [`file_offset`](Self::file_offset) moves on by the count returned.
    ///
    /// # Errors
    ///
    /// The current file's error (it cannot be opened, or it failed inside the `n` bytes),
    /// naming it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::Read;
    /// use readahead::SequentialFileReader;
    ///
    /// # fn main() -> std::io::Result<()> {
    /// # let dir = tempfile::tempdir()?;
    /// # let path = dir.path().join("f");
    /// # std::fs::write(&path, b"header:payload")?;
    /// let mut reader = SequentialFileReader::new()?;
    /// reader.push(&path)?;
    /// assert_eq!(reader.skip(7)?, 7);
    /// let mut rest = String::new();
    /// reader.read_to_string(&mut rest)?;
    /// assert_eq!(rest, "payload");
    /// assert_eq!(reader.skip(100)?, 0, "at the end");
    /// # Ok(())
    /// # }
    /// ```
    pub fn skip(&mut self, n: u64) -> io::Result<u64> {
        self.engine.skip(n)
    }
}
