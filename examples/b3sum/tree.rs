//! A large file hashed as BLAKE3 subtrees, each a byte range of the file that the scan hands
//! to whichever thread is free, so that one file is read and hashed on every core, each
//! thread with its own reader, while `b3sum` maps it and hashes it on every core.
//!
//! BLAKE3 is a tree: a file of `len` bytes is a left subtree of the largest power of two
//! below `len` bytes and a right subtree of the rest, down to 1 KiB chunks
//! (`blake3::hazmat::left_subtree_len`). A [`Cut`] splits a file along that tree into
//! subtrees of at most its piece's size; each is hashed to its chaining value on its own
//! (from its offset in the file, `HasherExt::set_input_offset`), and the values are merged
//! back up the same tree to the root, whose output is the file's hash. `pieces` and `merge`
//! walk the same tree, and the compat test checks the result against `b3sum` on a file cut
//! in three.

use blake3::hazmat::{
    left_subtree_len, merge_subtrees_non_root, merge_subtrees_root_xof, ChainingValue, Mode,
};

/// The smallest piece, and the largest file hashed whole: a power of two, so that pieces are
/// the tree's complete subtrees, small enough that a file of a few keeps every thread busy.
const PIECE: u64 = 1 << 20;
/// Pieces a file is cut into at most: past `PIECE * MAX_PIECES` bytes the pieces grow
/// instead (by powers of two), so that a huge file is not a million entries.
const MAX_PIECES: u64 = 1024;

/// How a file of `len` bytes (more than [`PIECE`]) is cut.
#[derive(Clone, Copy, Debug)]
pub struct Cut {
    len: u64,
    piece: u64,
}

impl Cut {
    /// The cut of a file of `len` bytes, if it is large enough to be cut.
    pub fn of(len: u64) -> Option<Cut> {
        let piece = len.div_ceil(MAX_PIECES).next_power_of_two().max(PIECE);
        (len > PIECE).then_some(Cut { len, piece })
    }

    /// The byte ranges (start, length) of the pieces, in file order.
    pub fn pieces(&self) -> Vec<(u64, u64)> {
        let mut pieces = Vec::new();
        self.cut_subtree(0, self.len, &mut pieces);
        pieces
    }

    fn cut_subtree(&self, start: u64, len: u64, pieces: &mut Vec<(u64, u64)>) {
        if len <= self.piece {
            pieces.push((start, len));
            return;
        }
        let left = left_subtree_len(len);
        self.cut_subtree(start, left, pieces);
        self.cut_subtree(start + left, len - left, pieces);
    }

    /// The file's output from the chaining values of its pieces, in the order of
    /// [`pieces`](Self::pieces).
    pub fn merge(&self, pieces: &[ChainingValue], mode: Mode) -> blake3::OutputReader {
        let left = left_subtree_len(self.len);
        let (left_cv, used) = self.merge_subtree(left, pieces, mode);
        let (right_cv, rest) = self.merge_subtree(self.len - left, &pieces[used..], mode);
        debug_assert_eq!(used + rest, pieces.len(), "every piece merged once");
        merge_subtrees_root_xof(&left_cv, &right_cv, mode)
    }

    /// The chaining value of the subtree of `len` bytes whose pieces start `pieces`, and how
    /// many of them it took.
    fn merge_subtree(
        &self,
        len: u64,
        pieces: &[ChainingValue],
        mode: Mode,
    ) -> (ChainingValue, usize) {
        if len <= self.piece {
            return (pieces[0], 1);
        }
        let left = left_subtree_len(len);
        let (left_cv, used) = self.merge_subtree(left, pieces, mode);
        let (right_cv, rest) = self.merge_subtree(len - left, &pieces[used..], mode);
        (
            merge_subtrees_non_root(&left_cv, &right_cv, mode),
            used + rest,
        )
    }
}
