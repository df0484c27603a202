//! The rule for a test whose needs the kernel or the disk refuses here (io_uring, `O_DIRECT`,
//! a cold read): it is printed and the case skipped, unless `READAHEAD_REQUIRE_URING=1`, where
//! it fails instead (CI sets it, so that a green run ran every case). The library's unit
//! tests, a crate of their own, follow the same rule (`src/tests.rs`).

/// The variable that turns skipping into failing. Unset, empty or `0`: a refusal is printed
/// and the case skipped; `1`: it fails.
pub const REQUIRE_URING: &str = "READAHEAD_REQUIRE_URING";

/// Whether [`REQUIRE_URING`] is on. Any value but `0`, `1` or empty is a mistake, and fails.
pub fn uring_required() -> bool {
    match std::env::var(REQUIRE_URING) {
        Err(std::env::VarError::NotPresent) => false,
        Ok(v) if v.is_empty() || v == "0" => false,
        Ok(v) if v == "1" => true,
        other => panic!("{REQUIRE_URING} must be 0 or 1, not {other:?}"),
    }
}

/// Where `what` a test needs is refused here, for `why`: says so on stderr, for the caller to
/// skip that case; under [`REQUIRE_URING`]`=1` fails instead. Every probe of the tests goes
/// through here.
#[track_caller]
pub fn skip_refused(what: &str, why: impl std::fmt::Display) {
    assert!(
        !uring_required(),
        "{REQUIRE_URING}=1, yet {what} is refused here: {why}"
    );
    eprintln!("skipping {what}: {why}");
}
