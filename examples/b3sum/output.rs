//! What the b3sum example prints, in one place, by b3sum's own rules (its `main.rs`, 1.8):
//! the line of a hashed file, the line of a checked file, the error forms. Nothing here reads
//! a file; everything here is what a user diffs against `b3sum`.
//!
//! - A line is `HASH  NAME`: `--length` bytes of the BLAKE3 output from byte `--seek`, in
//!   lowercase hex, two spaces, the name as given (lossy UTF-8). A name holding `\`, a newline
//!   or a carriage return is written with those escaped (`\\`, `\n`, `\r`) and the whole line
//!   starts with a `\`, as `md5sum` does. `--no-names`: the hash alone; `--tag`:
//!   `BLAKE3 (NAME) = HASH`; `--raw`: the output bytes themselves, nothing else.
//! - `--check` reads such lines back (`HASH  NAME` or the `--tag` form), and prints
//!   `NAME: OK` (not with `--quiet`), `NAME: FAILED` or `NAME: FAILED (ERROR)`, the name as
//!   the line spelled it. A line that does not parse is reported on stderr as
//!   `b3sum: WHY`. Any failure ends with `b3sum: WARNING: N computed checksum(s) did NOT match`
//!   on stderr.
//! - A file that cannot be hashed: `b3sum: NAME: ERROR` on stderr, the name unescaped, the
//!   error the system's (`No such file or directory (os error 2)`).
//! - With `-r` (the example's own), a fifo, socket or device is skipped with
//!   `b3sum: NAME: not a regular file (a KIND), skipped` on stderr.
//! - What stops the whole run (a checkfile that cannot be opened or read, a bad `--raw` or
//!   key): `Error: WHY` on stderr.

use std::fmt::Display;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The program's name, as b3sum writes it before its messages.
pub const NAME: &str = "b3sum";

/// How a hash is written (`--length`, `--seek`, `--raw`, `--no-names`, `--tag`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Format {
    pub length: u64,
    pub seek: u64,
    pub raw: bool,
    pub no_names: bool,
    pub tag: bool,
}

/// A name as b3sum writes it: lossy UTF-8, with `\`, newline and carriage return escaped;
/// and whether anything was, in which case the line starts with a `\`.
pub fn escape_name(path: &Path) -> (String, bool) {
    let name = path.to_string_lossy();
    if !name.contains(['\\', '\n', '\r']) {
        return (name.into_owned(), false);
    }
    let escaped = name
        .replace('\\', "\\\\")
        .replace('\n', "\\n")
        .replace('\r', "\\r");
    (escaped, true)
}

/// A file's output from byte `seek`, `length` bytes of it.
fn output_bytes(mut output: blake3::OutputReader, seek: u64, length: u64) -> impl io::Read {
    output.set_position(seek);
    io::Read::take(output, length)
}

/// Writes `bytes` as lowercase hex.
fn write_hex(out: &mut (impl Write + ?Sized), mut bytes: impl io::Read) -> io::Result<()> {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut block = [0u8; 64];
    let mut hex = [0u8; 128];
    loop {
        let n = bytes.read(&mut block)?;
        if n == 0 {
            return Ok(());
        }
        for (i, byte) in block[..n].iter().enumerate() {
            hex[2 * i] = DIGITS[usize::from(byte >> 4)];
            hex[2 * i + 1] = DIGITS[usize::from(byte & 15)];
        }
        out.write_all(&hex[..2 * n])?;
    }
}

/// The one function for a hashed file's output: its line (or, with `--raw`, its bytes).
pub fn write_hash(
    out: &mut (impl Write + ?Sized),
    format: &Format,
    name: &Path,
    hash: blake3::OutputReader,
) -> io::Result<()> {
    let bytes = output_bytes(hash, format.seek, format.length);
    if format.raw {
        io::copy(&mut { bytes }, out)?;
        return Ok(());
    }
    if format.no_names {
        write_hex(out, bytes)?;
        return out.write_all(b"\n");
    }
    let (name, escaped) = escape_name(name);
    if escaped {
        out.write_all(b"\\")?;
    }
    if format.tag {
        write!(out, "BLAKE3 ({name}) = ")?;
        write_hex(out, bytes)?;
        return out.write_all(b"\n");
    }
    write_hex(out, bytes)?;
    writeln!(out, "  {name}")
}

/// b3sum's line on stderr for a file that could not be hashed (the name as given, unescaped).
pub fn file_error(name: &Path, error: &dyn Display) -> String {
    format!("{NAME}: {}: {error}", name.to_string_lossy())
}

/// The line on stderr for what `-r` (ours, not b3sum's) skips: a fifo, socket or device.
pub fn skipped(name: &Path, kind: &str) -> String {
    file_error(name, &format!("not a regular file (a {kind}), skipped"))
}

/// b3sum's line on stderr for what stops the whole run (anyhow's form for `main`'s error).
pub fn fatal_error(error: &dyn Display) -> String {
    format!("Error: {error}")
}

/// One line of a checkfile, parsed.
#[derive(Debug)]
pub struct CheckLine {
    /// The name as the line spells it (escapes kept, and the leading `\` where escaped).
    pub shown: String,
    /// The file to hash (unescaped).
    pub path: PathBuf,
    pub expected: [u8; blake3::OUT_LEN],
}

/// Parses one line of a checkfile (with or without its line end): `HASH  NAME` (split at the
/// first two spaces) or `BLAKE3 (NAME) = HASH` (split at the last `) = `); a leading `\` says
/// the name is escaped. The error is b3sum's message for the line.
pub fn parse_check_line(line: &str) -> Result<CheckLine, String> {
    let line = line.trim_end_matches(['\r', '\n']);
    if line.is_empty() {
        return Err("Empty line".into());
    }
    let (escaped, rest) = match line.strip_prefix('\\') {
        Some(rest) => (true, rest),
        None => (false, line),
    };
    let tagged = || rest.strip_prefix("BLAKE3 (")?.rsplit_once(") = ");
    let (hex, name) = match (rest.split_once("  "), tagged()) {
        (Some((hex, name)), _) => (hex, name),
        (None, Some((name, hex))) => (hex, name),
        (None, None) => return Err("Invalid check line format".into()),
    };
    let expected = parse_hex(hex)?;
    let path = if escaped {
        unescape(name)?
    } else {
        name.to_owned()
    };
    if path.is_empty() {
        return Err("empty file path".into());
    }
    if path.contains('\0') {
        return Err("Null character in path".into());
    }
    if path.contains('\u{FFFD}') {
        return Err("Unicode replacement character in path".into());
    }
    let shown = if escaped {
        format!("\\{name}")
    } else {
        name.to_owned()
    };
    Ok(CheckLine {
        shown,
        path: path.into(),
        expected,
    })
}

/// A hash in lowercase hex, exactly `OUT_LEN` bytes of it.
fn parse_hex(hex: &str) -> Result<[u8; blake3::OUT_LEN], String> {
    if hex.len() != 2 * blake3::OUT_LEN {
        return Err("Invalid hash length".into());
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Ok(c - b'0'),
        b'a'..=b'f' => Ok(c - b'a' + 10),
        _ => Err("Invalid hex".to_owned()),
    };
    let mut bytes = [0u8; blake3::OUT_LEN];
    for (byte, pair) in bytes.iter_mut().zip(hex.as_bytes().chunks(2)) {
        *byte = 16 * digit(pair[0])? + digit(pair[1])?;
    }
    Ok(bytes)
}

/// Undoes `escape_name`: `\\`, `\n` and `\r`; any other `\` is an error.
fn unescape(name: &str) -> Result<String, String> {
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some('\\') => out.push('\\'),
            _ => return Err("Invalid backslash escape".into()),
        }
    }
    Ok(out)
}

/// The one function for `--check`'s output: the line for a checked file, given its hash or
/// the error that kept it from being hashed; whether it passed. As b3sum, the first 32 bytes
/// of the output from `--seek` are compared.
pub fn write_check(
    out: &mut (impl Write + ?Sized),
    line: &CheckLine,
    found: Result<blake3::OutputReader, Box<dyn Display>>,
    seek: u64,
    quiet: bool,
) -> io::Result<bool> {
    let hash = match found {
        Ok(hash) => hash,
        Err(e) => {
            writeln!(out, "{}: FAILED ({e})", line.shown)?;
            return Ok(false);
        }
    };
    let mut got = [0u8; blake3::OUT_LEN];
    io::Read::read_exact(&mut output_bytes(hash, seek, got.len() as u64), &mut got)?;
    // In constant time, as b3sum compares `blake3::Hash`es.
    if blake3::Hash::from(got) == blake3::Hash::from(line.expected) {
        if !quiet {
            writeln!(out, "{}: OK", line.shown)?;
        }
        return Ok(true);
    }
    writeln!(out, "{}: FAILED", line.shown)?;
    Ok(false)
}

/// b3sum's line on stderr for a checkfile line that does not parse.
pub fn invalid_line(why: &str) -> String {
    format!("{NAME}: {why}")
}

/// b3sum's last line on stderr after a check with failures, if there were any.
pub fn check_warning(failed: u64) -> Option<String> {
    let plural = if failed == 1 { "" } else { "s" };
    (failed > 0)
        .then(|| format!("{NAME}: WARNING: {failed} computed checksum{plural} did NOT match"))
}
