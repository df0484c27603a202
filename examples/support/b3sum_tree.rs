//! A large file hashed as BLAKE3 subtrees, each a byte range of the file that the scan hands
//! to whichever thread is free, so that one file is read and hashed on every core, each
//! thread with its own reader, while `b3sum` maps it and hashes it on every core.
//!
//! BLAKE3 is a tree: a file of `len` bytes is a left subtree of the largest power of two
//! below `len` bytes and a right subtree of the rest, down to 1 KiB chunks
//! (`blake3::hazmat::left_subtree_len`). The file is cut along that tree into subtrees of at
//! most [`PIECE`] bytes; each is hashed to its chaining value on its own (from its offset in
//! the file, `HasherExt::set_input_offset`), and the values are merged back up the same tree
//! to the root, whose output is the file's hash. `cut` and `merge` walk the same tree, and the
//! compat test checks the result against `b3sum` on files cut in several pieces.

use blake3::hazmat::{
    left_subtree_len, merge_subtrees_non_root, merge_subtrees_root_xof, ChainingValue, Mode,
};

/// The largest subtree hashed as one piece: a power of two, so that the pieces of a large
/// file are its tree's complete subtrees, and small enough that a file of a few of them
/// keeps every thread busy.
pub const PIECE: u64 = 1 << 20;

/// The byte ranges (start, length) of the pieces a file of `len` bytes is hashed as, in file
/// order; a file of at most [`PIECE`] bytes is one piece (hashed whole, not as a subtree).
pub fn cut(len: u64) -> Vec<(u64, u64)> {
    let mut pieces = Vec::new();
    if len <= PIECE {
        pieces.push((0, len));
    } else {
        cut_subtree(0, len, &mut pieces);
    }
    pieces
}

fn cut_subtree(start: u64, len: u64, pieces: &mut Vec<(u64, u64)>) {
    if len <= PIECE {
        pieces.push((start, len));
        return;
    }
    let left = left_subtree_len(len);
    cut_subtree(start, left, pieces);
    cut_subtree(start + left, len - left, pieces);
}

/// The output of a file of `len` bytes (more than [`PIECE`]) from the chaining values of its
/// pieces, in the order of [`cut`].
pub fn merge(len: u64, pieces: &[ChainingValue], mode: Mode) -> blake3::OutputReader {
    debug_assert!(len > PIECE, "a file of one piece is hashed whole");
    let left = left_subtree_len(len);
    let (left_cv, used) = merge_subtree(left, pieces, mode);
    let (right_cv, rest) = merge_subtree(len - left, &pieces[used..], mode);
    debug_assert_eq!(used + rest, pieces.len(), "every piece merged once");
    merge_subtrees_root_xof(&left_cv, &right_cv, mode)
}

/// The chaining value of the subtree of `len` bytes whose pieces start `pieces`, and how many
/// of them it took.
fn merge_subtree(len: u64, pieces: &[ChainingValue], mode: Mode) -> (ChainingValue, usize) {
    if len <= PIECE {
        return (pieces[0], 1);
    }
    let left = left_subtree_len(len);
    let (left_cv, used) = merge_subtree(left, pieces, mode);
    let (right_cv, rest) = merge_subtree(len - left, &pieces[used..], mode);
    (
        merge_subtrees_non_root(&left_cv, &right_cv, mode),
        used + rest,
    )
}
