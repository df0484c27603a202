//! A seccomp filter that refuses chosen system calls, for tests of what the reader does
//! where a call is refused (io_uring under a container's profile) or must never be made.
//!
//! A filter cannot be taken off again: install it only in a child process that runs one
//! test (see `run_in_child`), as the test binary runs other tests on parallel threads.

use std::mem::offset_of;

/// `AUDIT_ARCH_X86_64` of `<linux/audit.h>`: `EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE`.
const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;

/// Installs a seccomp filter on this thread (and whatever it starts later) that answers the
/// system calls `refused` with `EPERM` and allows every other. Calls of another architecture
/// (32-bit calls from this 64-bit process) are refused too, so that they are no way around
/// the filter.
pub fn refuse(refused: &[libc::c_long]) {
    let refuse = libc::SECCOMP_RET_ERRNO | (libc::EPERM as u32 & libc::SECCOMP_RET_DATA);
    let allow = libc::SECCOMP_RET_ALLOW;
    let load = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    let ret = (libc::BPF_RET | libc::BPF_K) as u16;
    let stmt = |code, k| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    // If the loaded word equals `k`, skip `jt` instructions, else `jf`.
    let jeq = |k, jt, jf| libc::sock_filter {
        code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
        jt,
        jf,
        k,
    };
    let mut filter = vec![
        stmt(load, offset_of!(libc::seccomp_data, arch) as u32),
        jeq(AUDIT_ARCH_X86_64, 1, 0),
        stmt(ret, refuse),
        stmt(load, offset_of!(libc::seccomp_data, nr) as u32),
    ];
    // Each refused number jumps over the rest of them and the `allow` after them.
    for (i, &nr) in refused.iter().enumerate() {
        filter.push(jeq(nr as u32, (refused.len() - i) as u8, 0));
    }
    filter.push(stmt(ret, allow));
    filter.push(stmt(ret, refuse));
    let prog = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: prctl with integer arguments only; it changes this thread's privileges, in a
    // child process that runs this one test.
    let rc = unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) };
    assert_eq!(
        rc,
        0,
        "PR_SET_NO_NEW_PRIVS: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: `prog` and the filter it points to live across the call; the kernel copies them.
    let rc = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &prog as *const libc::sock_fprog,
        )
    };
    assert_eq!(rc, 0, "PR_SET_SECCOMP: {}", std::io::Error::last_os_error());
}
