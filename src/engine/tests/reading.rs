//! Reading every queued file through `fill_buf` and `consume`, checking that no byte a
//! read did not write is handed out, and comparing what came with what the files hold.

use super::{Engine, POISON};

/// Every queued file, read through `fill_buf`/`consume`: its bytes or its error's message.
pub(super) fn read_all(e: &mut Engine<'_>) -> Vec<Result<Vec<u8>, String>> {
    read_all_checking(e, |_| {})
}

/// Like [`read_all`], calling `check` after every `fill_buf`.
pub(super) fn read_all_checking(
    e: &mut Engine<'_>,
    mut check: impl FnMut(&Engine<'_>),
) -> Vec<Result<Vec<u8>, String>> {
    let mut out = Vec::new();
    loop {
        let mut bytes = Vec::new();
        let res = loop {
            match e.fill_buf() {
                Ok([]) => break Ok(bytes),
                Ok(buf) => {
                    // Every byte shown is consumed in turn, so checking those is enough.
                    let n = buf.len().min(1000);
                    assert!(
                        !buf[..n].contains(&POISON),
                        "bytes no read wrote were exposed"
                    );
                    bytes.extend_from_slice(&buf[..n]);
                    e.consume(n);
                    check(e);
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

pub(super) fn assert_exact(got: &[Result<Vec<u8>, String>], want: &[Vec<u8>]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let g = g.as_ref().unwrap_or_else(|e| panic!("file {i}: {e}"));
        assert!(g == w, "file {i}: {} bytes, want {}", g.len(), w.len());
    }
}
