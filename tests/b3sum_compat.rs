//! The b3sum example (`examples/b3sum/`) against the real `b3sum`: the same arguments, in
//! the same directory, with the same standard input, give the same stdout, the same stderr
//! and the same exit status, on a tree of odd names (a backslash, a newline, a carriage
//! return, two spaces, non-ASCII), empty files, a 1-byte file, a file of exactly 1 MiB (hashed
//! whole) and one of 3 MiB (cut in pieces of the BLAKE3 tree), for every mode; and sums made
//! by either are checked by the other.
//!
//! The two programs:
//! - ours is built by the test itself, `cargo build --example b3sum` (the profile of the test),
//!   whose JSON messages name the executable: `cargo test` builds examples, but
//!   `cargo test --test b3sum_compat` does not, and an older binary would test older code.
//! - `b3sum` is the one on `PATH`; where there is none, `cargo install b3sum --locked` puts one
//!   under the target directory. Where that fails too (no network), the tests say why and skip.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// The two programs compared.
struct Tools {
    ours: PathBuf,
    theirs: PathBuf,
}

/// Both programs, found or built once per test binary; `None` (said on stderr) where `b3sum`
/// cannot be had.
fn tools() -> Option<&'static Tools> {
    static TOOLS: OnceLock<Option<Tools>> = OnceLock::new();
    let tools = TOOLS.get_or_init(|| {
        let theirs = match real_b3sum() {
            Ok(path) => path,
            Err(why) => {
                eprintln!("skipping the comparison with b3sum: {why}");
                return None;
            }
        };
        Some(Tools {
            ours: build_ours(),
            theirs,
        })
    });
    tools.as_ref()
}

fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
    cmd
}

/// Builds the example with the test's profile; its path, from cargo's JSON messages.
fn build_ours() -> PathBuf {
    let mut cmd = cargo();
    cmd.args(["build", "--example", "b3sum", "--message-format=json"]);
    if !cfg!(debug_assertions) {
        cmd.arg("--release");
    }
    let out = cmd
        .stderr(Stdio::inherit())
        .output()
        .expect("run cargo build");
    assert!(out.status.success(), "cargo build --example b3sum failed");
    let messages = String::from_utf8(out.stdout).expect("cargo's messages are UTF-8");
    messages
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "b3sum")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .expect("cargo names the example's executable")
}

/// `b3sum` on `PATH`, or installed under the target directory.
fn real_b3sum() -> Result<PathBuf, String> {
    let on_path = std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("b3sum"))
        .find(|path| path.is_file());
    if let Some(path) = on_path {
        return Ok(path);
    }
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("b3sum-install");
    let installed = root.join("bin").join("b3sum");
    if installed.is_file() {
        return Ok(installed);
    }
    eprintln!("no b3sum on PATH: cargo install b3sum --locked --root {root:?}");
    let out = cargo()
        .args(["install", "b3sum", "--locked", "--root"])
        .arg(&root)
        .output()
        .map_err(|e| format!("cannot run cargo install: {e}"))?;
    if !out.status.success() {
        let why = String::from_utf8_lossy(&out.stderr);
        let last = why
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        return Err(format!(
            "cargo install b3sum --locked failed ({}): {last}",
            out.status
        ));
    }
    Ok(installed)
}

/// What a run gave.
#[derive(Debug, PartialEq, Eq)]
struct Ran {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
    code: Option<i32>,
}

impl Ran {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Runs `program` in `dir` with `args` and `stdin`. Without `RUST_BACKTRACE`: b3sum's
/// errors (anyhow's) would carry a backtrace.
fn run(program: &Path, dir: &Path, args: &[&OsStr], stdin: &[u8]) -> Ran {
    let mut child = Command::new(program)
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .env_remove("RUST_LIB_BACKTRACE")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {program:?}: {e}"));
    let mut input = child.stdin.take().expect("a pipe");
    // A program that does not read its input closes the pipe: not an error here.
    let _ = input.write_all(stdin);
    drop(input);
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("wait for the program");
    Ran {
        stdout,
        stderr,
        code: status.code(),
    }
}

/// Runs both programs the same way and checks they agree on every byte and the status;
/// what they gave.
#[track_caller]
fn same(t: &Tools, dir: &Path, args: &[&OsStr], stdin: &[u8]) -> Ran {
    let theirs = run(&t.theirs, dir, args, stdin);
    let ours = run(&t.ours, dir, args, stdin);
    assert_eq!(ours.stdout(), theirs.stdout(), "stdout of b3sum {args:?}");
    assert_eq!(ours.stderr(), theirs.stderr(), "stderr of b3sum {args:?}");
    assert_eq!(ours.code, theirs.code, "exit status of b3sum {args:?}");
    ours
}

fn os(args: &[&str]) -> Vec<OsString> {
    args.iter().map(OsString::from).collect()
}

fn refs(args: &[OsString]) -> Vec<&OsStr> {
    args.iter().map(OsString::as_os_str).collect()
}

/// Bytes that differ with `seed` and position.
fn bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// The files of the tree, by name, with their sizes.
const FILES: &[(&str, usize)] = &[
    ("plain", 5000),
    ("empty", 0),
    ("one", 1),
    ("mib", 1 << 20),
    ("three-mib", 3 << 20),
    ("back\\slash", 70),
    ("new\nline", 71),
    ("carriage\rreturn", 72),
    ("with  two spaces", 73),
    ("unicodé ✓", 2048),
    ("sub dir/empty too", 0),
    ("sub dir/deeper/file", 4097),
    ("sub dir/deeper/back\\and\nnew", 1025),
];

/// A fresh tree of [`FILES`] on the disk, with a link to `plain` and a fifo beside them.
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("a directory");
    for (i, (name, len)) in FILES.iter().enumerate() {
        let path = dir.path().join(name);
        fs::create_dir_all(path.parent().expect("a parent")).expect("directories");
        fs::write(&path, bytes(*len, i as u64)).expect("a file");
    }
    std::os::unix::fs::symlink("plain", dir.path().join("link")).expect("a link");
    let mkfifo = Command::new("mkfifo")
        .arg(dir.path().join("fifo"))
        .status()
        .expect("run mkfifo");
    assert!(mkfifo.success(), "mkfifo");
    dir
}

/// Every file of the tree as an argument, in [`FILES`]' order.
fn all_files() -> Vec<OsString> {
    FILES.iter().map(|(name, _)| OsString::from(name)).collect()
}

#[test]
fn hashes_every_file_and_name_as_b3sum_does() {
    let Some(t) = tools() else { return };
    let dir = tree();
    let mut args = all_files();
    // A repeated argument, a link, a missing file and a directory: errors among good files.
    args.extend(os(&["plain", "link", "missing", "sub dir", "one"]));
    for flags in [
        &[][..],
        &["--no-names"],
        &["--tag"],
        &["--length", "7"],
        &["--length", "100"],
        &["--length", "0"],
        &["--seek", "5", "--length", "40"],
        &["--derive-key", "readahead b3sum compat test"],
        &["--no-mmap"],
        &["--num-threads", "1"],
    ] {
        let mut full = os(flags);
        full.extend(args.iter().cloned());
        let ran = same(t, dir.path(), &refs(&full), b"");
        assert_eq!(ran.code, Some(1), "a missing file and a directory fail");
        assert!(ran.stderr().contains("missing: No such file or directory"));
    }
    let good = same(t, dir.path(), &refs(&all_files()), b"");
    assert_eq!(good.code, Some(0));
    let escaped = FILES
        .iter()
        .filter(|(name, _)| name.contains(['\\', '\n', '\r']));
    let lines = good.stdout();
    let marked = lines.lines().filter(|line| line.starts_with('\\'));
    assert_eq!(marked.count(), escaped.count(), "a line per name to escape");
}

#[test]
fn reads_standard_input_and_raw_output_as_b3sum_does() {
    let Some(t) = tools() else { return };
    let dir = tree();
    let input = bytes(100_000, 7);
    for args in [
        &[][..],
        &["-"],
        &["-", "one", "-"],
        &["--raw", "three-mib"],
        &["--raw", "--length", "200", "one"],
        &["--raw"],
        &["--raw", "one", "plain"],
        &["--keyed", "one", "three-mib"],
        &["--keyed", "-"],
    ] {
        let ran = same(
            t,
            dir.path(),
            &refs(&os(args)),
            &input[..32.min(input.len())],
        );
        assert!(ran.code.is_some());
    }
    for args in [&[][..], &["-", "plain"]] {
        same(t, dir.path(), &refs(&os(args)), &input);
    }
    // Keys of the wrong length stop the run before any file.
    for key in [&input[..31], &input[..33]] {
        let ran = same(t, dir.path(), &refs(&os(&["--keyed", "one"])), key);
        assert_eq!(ran.code, Some(1));
    }
}

#[test]
fn checks_sums_as_b3sum_does() {
    let Some(t) = tools() else { return };
    let dir = tree();
    let sums = run(&t.theirs, dir.path(), &refs(&all_files()), b"");
    let tagged = {
        let mut args = os(&["--tag"]);
        args.extend(all_files());
        run(&t.theirs, dir.path(), &refs(&args), b"")
    };
    fs::write(dir.path().join("sums"), &sums.stdout).unwrap();
    fs::write(dir.path().join("tagged"), &tagged.stdout).unwrap();
    for args in [
        &["-c", "sums"][..],
        &["--check", "--quiet", "sums"],
        &["-c", "tagged"],
        &["-c", "sums", "tagged"],
        &["-c", "sums", "no-such-checkfile", "tagged"],
    ] {
        same(t, dir.path(), &refs(&os(args)), b"");
    }
    let ran = same(t, dir.path(), &refs(&os(&["-c"])), &sums.stdout);
    assert_eq!(ran.code, Some(0));
    assert_eq!(ran.stdout().matches(": OK\n").count(), FILES.len());
    // Lines that do not parse are reported and counted, the good ones checked.
    let bad = [
        String::new(),
        "not a line".into(),
        format!("{}  short", "ab".repeat(31)),
        format!("{}  bad hex", "zz".repeat(32)),
        format!("\\{}  bad\\escape", "00".repeat(32)),
        "BLAKE3 (tagged) = 00".into(),
    ];
    let mut odd = sums.stdout.clone();
    for line in &bad {
        odd.extend_from_slice(line.as_bytes());
        odd.push(b'\n');
    }
    let ran = same(t, dir.path(), &refs(&os(&["-c", "-"])), &odd);
    assert_eq!(ran.code, Some(1));
    let warning = format!("WARNING: {} computed checksums did NOT match", bad.len());
    assert!(ran.stderr().contains(&warning), "{}", ran.stderr());
}

#[test]
fn reports_a_changed_and_a_missing_file_as_b3sum_does() {
    let Some(t) = tools() else { return };
    let dir = tree();
    let sums = run(&t.theirs, dir.path(), &refs(&all_files()), b"");
    fs::write(dir.path().join("sums"), &sums.stdout).unwrap();
    let mut changed = fs::read(dir.path().join("three-mib")).unwrap();
    changed[2 << 20] ^= 1;
    fs::write(dir.path().join("three-mib"), changed).unwrap();
    fs::remove_file(dir.path().join("new\nline")).unwrap();
    for args in [&["-c", "sums"][..], &["-c", "--quiet", "sums"]] {
        let ran = same(t, dir.path(), &refs(&os(args)), b"");
        assert_eq!(ran.code, Some(1));
        assert!(ran.stdout().contains("three-mib: FAILED\n"));
        assert!(ran
            .stdout()
            .contains("\\new\\nline: FAILED (No such file or directory"));
        assert!(ran
            .stderr()
            .contains("WARNING: 2 computed checksums did NOT match"));
    }
}

/// The regular files under `dir` as the example's `-r` lists them: depth first, each
/// directory's entries by name, links and fifos left out.
fn walk(dir: &Path, under: &Path, out: &mut Vec<OsString>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    entries.sort();
    for name in entries {
        let meta = fs::symlink_metadata(dir.join(&name)).unwrap();
        if meta.is_dir() {
            walk(&dir.join(&name), &under.join(&name), out);
        } else if meta.is_file() {
            out.push(under.join(&name).into_os_string());
        }
    }
}

#[test]
fn recursive_sums_round_trip_through_b3sum_check() {
    let Some(t) = tools() else { return };
    let dir = tree();
    let mut files = Vec::new();
    walk(dir.path(), Path::new("."), &mut files);
    assert_eq!(files.len(), FILES.len());
    // Ours over the tree prints what b3sum prints for its files, in the walk's order.
    let ours = run(&t.ours, dir.path(), &refs(&os(&["-r", "."])), b"");
    let theirs = run(&t.theirs, dir.path(), &refs(&files), b"");
    assert_eq!(ours.stdout(), theirs.stdout());
    assert_eq!(
        ours.code,
        Some(0),
        "a fifo and a link are skipped, not failed"
    );
    assert_eq!(
        ours.stderr(),
        "b3sum: ./fifo: not a regular file (a fifo), skipped\n"
    );
    // Its sums check clean with b3sum, and b3sum's with ours.
    fs::write(dir.path().join("ours.sums"), &ours.stdout).unwrap();
    fs::write(dir.path().join("theirs.sums"), &theirs.stdout).unwrap();
    for sums in ["ours.sums", "theirs.sums"] {
        let ran = same(t, dir.path(), &refs(&os(&["-c", sums])), b"");
        assert_eq!(ran.code, Some(0), "{sums}: {}", ran.stdout());
        assert_eq!(ran.stdout().matches(": OK\n").count(), FILES.len());
    }
    // Directories mixed with files and standard input, each in its place.
    let args = os(&["-r", "sub dir", "one", "-", "missing"]);
    let ours = run(&t.ours, dir.path(), &refs(&args), b"stdin");
    let mut files = Vec::new();
    walk(
        &dir.path().join("sub dir"),
        Path::new("sub dir"),
        &mut files,
    );
    files.extend(os(&["one", "-", "missing"]));
    let theirs = run(&t.theirs, dir.path(), &refs(&files), b"stdin");
    assert_eq!(ours, theirs);
    assert_eq!(ours.code, Some(1));
}

#[test]
fn usage_errors_exit_2_as_b3sum_does() {
    let Some(t) = tools() else { return };
    let dir = tree();
    for args in [
        &["--check", "--length", "3", "sums"][..],
        &["--quiet", "one"],
        &["--keyed", "--derive-key", "x", "one"],
        &["--length", "x", "one"],
        &["--no-such-flag"],
    ] {
        let theirs = run(&t.theirs, dir.path(), &refs(&os(args)), b"");
        let ours = run(&t.ours, dir.path(), &refs(&os(args)), b"");
        assert_eq!((ours.code, theirs.code), (Some(2), Some(2)), "{args:?}");
        assert!(ours.stderr().starts_with("error: "), "{}", ours.stderr());
    }
}
