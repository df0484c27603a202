//! The steps a case takes and its files, pool and reads: what they are and how proptest
//! draws them.

use proptest::prelude::*;

use crate::{FILES, KIB, PAGE};

/// A `read_limit`, relative to the file it applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limit {
    /// `u64::MAX`: all of it.
    All,
    Zero,
    /// Somewhere strictly inside the file (one of two places), where it has an inside.
    Inside(u8),
    /// Past its end.
    Beyond,
}

impl Limit {
    pub fn of(self, size: usize) -> u64 {
        let size = size as u64;
        match self {
            Limit::All => u64::MAX,
            Limit::Zero => 0,
            Limit::Inside(_) if size < 2 => size / 2,
            Limit::Inside(k) => 1 + (size - 2) * (u64::from(k) + 1) / 3,
            Limit::Beyond => size + 4097,
        }
    }
}

/// How many bytes a `read_exact` asks for, relative to what is left of the file.
#[derive(Debug, Clone, Copy)]
pub enum Want {
    Bytes(usize),
    /// Exactly what is left.
    Rest,
    /// What is left plus this many (at least 1): past the end.
    Past(usize),
}

/// How many bytes a `fill_buf_at_least` asks for.
#[derive(Debug, Clone, Copy)]
pub enum AtLeast {
    Bytes(usize),
    /// The pool's size exactly: the most allowed.
    Pool,
    /// More than the pool holds: an `InvalidInput` error.
    OverPool(usize),
}

/// How many bytes a `skip` passes over, relative to what is left of the file.
#[derive(Debug, Clone, Copy)]
pub enum SkipBy {
    Bytes(u64),
    /// What is left plus this many: past the end.
    Past(u64),
}

/// How many bytes to `consume` after a `fill_buf`, relative to what it returned.
#[derive(Debug, Clone, Copy)]
pub enum Consume {
    Bytes(usize),
    /// All it returned.
    All,
    /// All it returned plus this many (at least 1).
    Over(usize),
    /// `usize::MAX`.
    Max,
}

#[derive(Debug, Clone)]
pub enum Step {
    AddPath(usize),
    AddOwned(usize, Limit),
    AddBorrowed(usize, Limit),
    AddMissing,
    AddDirectory,
    /// Any file with any limit: often one not queued (always so for file `FILES`).
    Activate(usize, Limit),
    /// The n-th queued borrowed entry (modulo how many there are; the front among them).
    ActivateQueued(usize),
    Move,
    Read(usize),
    ReadExact(Want),
    FillConsume(Consume),
    FillAtLeast(AtLeast, Consume),
    Skip(SkipBy),
    ReadToEnd,
    /// `rebind`: the queue is emptied, positions count from 0 again.
    Rebind,
}

#[derive(Debug, Clone)]
pub struct Case {
    /// Sizes of files `0..=FILES`.
    pub sizes: Vec<usize>,
    pub buffer_size: usize,
    pub read_size: usize,
    pub queue_depth: u32,
    pub direct: bool,
    pub steps: Vec<Step>,
    /// Read everything left with the documented loop (else drop the reader where it is).
    pub finish: bool,
}

fn limit() -> impl Strategy<Value = Limit> {
    prop_oneof![
        Just(Limit::All),
        Just(Limit::Zero),
        (0..2u8).prop_map(Limit::Inside),
        Just(Limit::Beyond),
    ]
}

fn len() -> impl Strategy<Value = usize> {
    prop_oneof![0..=16usize, 1..=5000usize, 1..=70_000usize]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        2 => (0..FILES).prop_map(Step::AddPath),
        2 => (0..FILES, limit()).prop_map(|(f, l)| Step::AddOwned(f, l)),
        3 => (0..FILES, limit()).prop_map(|(f, l)| Step::AddBorrowed(f, l)),
        1 => Just(Step::AddMissing),
        1 => Just(Step::AddDirectory),
        1 => (0..=FILES, limit()).prop_map(|(f, l)| Step::Activate(f, l)),
        2 => (0..4usize).prop_map(Step::ActivateQueued),
        2 => Just(Step::Move),
        3 => len().prop_map(Step::Read),
        2 => prop_oneof![
            4 => len().prop_map(Want::Bytes),
            1 => Just(Want::Rest),
            1 => (1..=10_000usize).prop_map(Want::Past),
        ]
        .prop_map(Step::ReadExact),
        3 => consume().prop_map(Step::FillConsume),
        3 => (at_least(), consume()).prop_map(|(n, c)| Step::FillAtLeast(n, c)),
        2 => prop_oneof![
            Just(SkipBy::Bytes(0)),
            len().prop_map(|n| SkipBy::Bytes(n as u64)),
            (0..=5000u64).prop_map(SkipBy::Past),
        ]
        .prop_map(Step::Skip),
        1 => Just(Step::ReadToEnd),
        1 => Just(Step::Rebind),
    ]
}

fn at_least() -> impl Strategy<Value = AtLeast> {
    prop_oneof![
        4 => (1..=16usize).prop_map(AtLeast::Bytes),
        4 => (1..=200 * KIB).prop_map(AtLeast::Bytes),
        1 => Just(AtLeast::Pool),
        1 => (1..=PAGE).prop_map(AtLeast::OverPool),
    ]
}

fn consume() -> impl Strategy<Value = Consume> {
    prop_oneof![
        (0..=5000usize).prop_map(Consume::Bytes),
        Just(Consume::All),
        (1..=5000usize).prop_map(Consume::Over),
        Just(Consume::Max),
    ]
}

pub fn case() -> impl Strategy<Value = Case> {
    // From the smallest read allowed (1 byte) up; tiny reads are rare, as they are slow.
    let read_size = prop_oneof![
        1 => 1..=64usize,
        2 => Just(PAGE),
        2 => 1000..=20 * KIB,
        2 => 20 * KIB..=128 * KIB,
    ];
    // How many aligned reads the pool holds: often exactly 1 (the smallest pool allowed).
    let reads = prop_oneof![Just(1usize), 2..=8usize];
    let size = prop_oneof![0..=2usize, PAGE - 2..=PAGE + 2, 0..=20 * KIB, 0..=300 * KIB];
    (
        prop::collection::vec(size, FILES + 1),
        read_size,
        reads,
        0..PAGE,
        1..=64u32,
        prop::bool::weighted(0.3),
        prop::collection::vec(step(), 1..60),
        prop::bool::weighted(0.7),
    )
        .prop_map(
            |(sizes, read_size, reads, slack, queue_depth, direct, steps, finish)| {
                // Room for `reads` reads, rounded up to 4 KiB as direct I/O needs.
                let aligned = read_size.next_multiple_of(PAGE);
                let buffer_size = if reads == 1 {
                    aligned
                } else {
                    aligned * reads + slack
                };
                // Tiny reads over large files take too long: keep those files small.
                let cap = if read_size < PAGE {
                    read_size * 64 + PAGE
                } else {
                    usize::MAX
                };
                Case {
                    sizes: sizes.into_iter().map(|s| s.min(cap)).collect(),
                    buffer_size,
                    read_size,
                    queue_depth,
                    direct,
                    steps,
                    finish,
                }
            },
        )
}
