//! `std::io::Read` and `BufRead` for the reader: the current file's bytes, straight from the
//! pool, stopping at its end (see the type's "Ends and errors").

use std::io::{self, BufRead, Read};

use super::SequentialFileReader;

impl Read for SequentialFileReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let avail = self.fill_buf()?;
        let n = avail.len().min(buf.len());
        buf[..n].copy_from_slice(&avail[..n]);
        self.consume(n);
        Ok(n)
    }

    /// Copies straight from the pool, one chunk at a time. At the current file's end before
    /// `buf` is full: an [`UnexpectedEof`](io::ErrorKind::UnexpectedEof) error naming the
    /// file and the offset (as std's `read_exact`); at a failure, the file's error.
    fn read_exact(&mut self, mut buf: &mut [u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.read(buf)? {
                0 => return Err(self.engine.ended_early(buf.len())),
                n => buf = &mut buf[n..],
            }
        }
        Ok(())
    }

    /// Appends the rest of the current file, copied straight from the pool one chunk at a
    /// time (no intermediate buffer); `buf` grows as `extend_from_slice` grows it. Stops at
    /// the current file's end, or returns its error after appending the bytes before it.
    fn read_to_end(&mut self, buf: &mut Vec<u8>) -> io::Result<usize> {
        let start = buf.len();
        loop {
            let avail = self.fill_buf()?;
            if avail.is_empty() {
                return Ok(buf.len() - start);
            }
            buf.extend_from_slice(avail);
            let n = avail.len();
            self.consume(n);
        }
    }
}

impl BufRead for SequentialFileReader<'_> {
    /// The current file's next bytes: `&[]` at its end (until the reader moves on); at a
    /// failure, the bytes before it, then its error (again on every call until the reader
    /// moves on). Never bytes of another file.
    #[inline]
    fn fill_buf(&mut self) -> io::Result<&[u8]> {
        self.engine.fill_buf()
    }

    /// Marks bytes as read. Clamps `amt` to what the last `fill_buf` (or
    /// `fill_buf_at_least`) returned, as std's `BufReader` does.
    #[inline]
    fn consume(&mut self, amt: usize) {
        self.engine.consume(amt)
    }
}
