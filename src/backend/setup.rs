//! Setting up a ring: its flags, and the checks that the kernel lets it do what the io_uring
//! backend needs. No `unsafe` here: the one request a check sends goes through `uring`.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::time::Duration;

use io_uring::{opcode, register::Probe, IoUring};

/// Completion queue entries per submission queue entry: reads and cancels are each bounded
/// by the depth, so they always fit.
pub(crate) const CQ_PER_DEPTH: u32 = 8;

/// Checks the ring can read and cancel. `round_trip` takes one request through the ring and
/// back (it needs the `unsafe` the ring's module keeps).
pub(super) fn check_features(
    ring: &mut IoUring,
    round_trip: fn(&mut IoUring) -> io::Result<()>,
) -> io::Result<()> {
    if !ring.params().is_feature_nodrop() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the kernel's io_uring lacks IORING_FEAT_NODROP (needs Linux 5.6 or later)",
        ));
    }
    // Setting up a ring may be allowed while submitting to it is not (a seccomp filter that
    // refuses io_uring_enter): one request through it tells. Its error is kept as the OS gave
    // it, so callers can match on `raw_os_error()`.
    round_trip(ring)?;
    let mut probe = Probe::new();
    match ring.submitter().register_probe(&mut probe) {
        Ok(()) => {
            if !(probe.is_supported(opcode::Read::CODE)
                && probe.is_supported(opcode::AsyncCancel::CODE))
            {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    "the kernel's io_uring lacks IORING_OP_READ (needs Linux 5.6 or later)",
                ));
            }
            Ok(())
        }
        // Registering refused (a seccomp filter on io_uring_register): a kernel with
        // IORING_FEAT_RW_CUR_POS is 5.6 or later, which has every opcode used here.
        Err(_) if ring.params().is_feature_rw_cur_pos() => Ok(()),
        Err(e) => Err(e),
    }
}

/// A ring of `depth` entries (and a completion queue of `CQ_PER_DEPTH` times that): with a
/// submission thread where `sq_poll` asks for one (polling for its duration when idle;
/// shared with the ring of its `File` where given), else with `COOP_TASKRUN`; where the
/// kernel refuses those, a plain one.
pub(super) fn set_up(
    depth: u32,
    sq_poll: Option<(Duration, Option<&File>)>,
) -> io::Result<IoUring> {
    let cq = depth * CQ_PER_DEPTH;
    let mut builder = IoUring::builder();
    builder.setup_cqsize(cq);
    match sq_poll {
        // The kernel refuses COOP_TASKRUN with a submission thread (which runs the task work).
        Some((idle, shared)) => {
            builder.setup_sqpoll(u32::try_from(idle.as_millis()).unwrap_or(u32::MAX));
            if let Some(ring) = shared {
                builder.setup_attach_wq(ring.as_raw_fd());
            }
        }
        None => {
            // COOP_TASKRUN (5.19): the task work that posts a completion waits for the
            // submitting thread's next system call instead of interrupting it. A thread that
            // sleeps interruptibly (on a channel, a lock, a ring) is still woken for it, so a
            // reader moved to another thread still gets its completions as the device answers
            // (tests/cold_handoff.rs); a submitter that exited leaves EFAULT, retried.
            builder.setup_coop_taskrun();
        }
    }
    builder
        .build(depth)
        .or_else(|_| IoUring::builder().setup_cqsize(cq).build(depth))
}
