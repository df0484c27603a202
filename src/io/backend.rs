//! Which backend implements [`Io`](super::Io) for a reader (`Backend`): the choice a
//! builder asks for, and the answer a backend gives of itself.

/// Which I/O backend a reader uses.
///
/// # Examples
///
/// ```
/// use readahead::{Backend, SequentialFileReader};
///
/// # fn main() -> Result<(), readahead::Error> {
/// // Plain reads, as on a kernel that refuses io_uring:
/// let reader = SequentialFileReader::builder().backend(Backend::Pread).build()?;
/// assert_eq!(reader.backend(), Backend::Pread);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// io_uring where the kernel allows it, else [`Backend::Pread`]. The default.
    #[default]
    Auto,
    /// io_uring, or an error from [`ReaderBuilder::build`](crate::ReaderBuilder::build)
    /// saying why it is refused. Needs Linux 5.6 or later with `kernel.io_uring_disabled = 0`
    /// and no seccomp filter refusing `io_uring_setup` (as some container runtimes install);
    /// on any other platform `build()` fails saying io_uring exists only on Linux.
    IoUring,
    /// Plain `pread(2)` on helper threads, four reads at a time a reader, which reads ahead
    /// across files itself, with the ring's windows (no read-ahead hints); on Linux, reads
    /// the page cache holds are copied at once on the calling thread. Works everywhere; the
    /// only backend off Linux.
    Pread,
}
