use std::collections::VecDeque;

use super::*;

#[test]
fn regions_are_page_aligned_and_fifo() {
    let mut p = Pool::with_capacity(4 * PAGE, false).unwrap();
    let a = p.alloc(100).unwrap();
    let b = p.alloc(PAGE + 1).unwrap();
    assert_eq!(a.len, PAGE);
    assert_eq!(b.len, 2 * PAGE);
    assert_eq!(p.used(), 3 * PAGE);
    assert!(p.alloc(2 * PAGE).is_none(), "only one page is left");
    let c = p.alloc(PAGE).unwrap();
    assert!(p.alloc(1).is_none());
    // Freeing out of order takes nothing back until the oldest is back.
    p.free(b);
    assert_eq!(p.used(), 4 * PAGE);
    p.free(a);
    assert_eq!(p.used(), PAGE);
    p.free(c);
    assert_eq!(p.used(), 0);
    assert_eq!(p.live_regions(), 0);
}

#[test]
fn a_region_never_wraps() {
    let mut p = Pool::with_capacity(4 * PAGE, false).unwrap();
    let a = p.alloc(2 * PAGE).unwrap();
    let b = p.alloc(PAGE).unwrap();
    p.free(a);
    // One page is free at the end and two at the start: a two-page region skips the end.
    let c = p.alloc(2 * PAGE).unwrap();
    assert_eq!(p.phys(&c), 0);
    assert_eq!(
        p.used(),
        4 * PAGE,
        "the skipped page counts until b is back"
    );
    p.free(b);
    assert_eq!(p.used(), 2 * PAGE);
    p.free(c);
    assert_eq!(p.used(), 0);
}

#[test]
fn an_empty_pool_fits_a_region_of_its_whole_size() {
    let mut p = Pool::with_capacity(4 * PAGE, false).unwrap();
    let a = p.alloc(PAGE).unwrap();
    p.free(a);
    // Three pages are free after the first, one before it: only a restart at 0 fits four.
    let b = p.alloc(4 * PAGE).unwrap();
    assert_eq!(p.phys(&b), 0);
    p.free(b);
    let c = p.alloc(3 * PAGE).unwrap();
    let d = p.alloc(PAGE).unwrap();
    assert!(p.alloc(1).is_none());
    p.free(c);
    p.free(d);
}

#[test]
fn a_limit_keeps_regions_in_the_first_pages() {
    let mut p = Pool::with_capacity(8 * PAGE, false).unwrap();
    let mut held = VecDeque::new();
    for _ in 0..20 {
        while held.len() >= 3 {
            p.free(held.pop_front().unwrap());
        }
        let r = p.alloc_below(PAGE, 3 * PAGE).unwrap();
        assert!(p.phys(&r) + PAGE <= 3 * PAGE, "stays below the limit");
        held.push_back(r);
    }
    assert_eq!(p.live_bytes(), 3 * PAGE);
    // Nothing fits below the limit while three pages are live there: none is taken.
    assert!(p.alloc_below(PAGE, 3 * PAGE).is_none());
    while let Some(r) = held.pop_front() {
        p.free(r);
    }
    assert_eq!((p.used(), p.live_bytes()), (0, 0));
    // A region larger than the limit goes past it.
    let a = p.alloc_below(2 * PAGE, 3 * PAGE).unwrap();
    let big = p.alloc_below(4 * PAGE, 3 * PAGE).unwrap();
    assert_eq!((p.phys(&a), p.phys(&big)), (0, 2 * PAGE));
    assert_eq!(p.live_bytes(), 6 * PAGE);
    p.free(a);
    p.free(big);
}

#[test]
fn lend_and_reclaim_keep_bytes() {
    let mut p = Pool::with_capacity(2 * PAGE, false).unwrap();
    let r = p.alloc(10).unwrap();
    let mut loan = p.lend(r);
    assert_eq!(p.lent(), 1);
    loan.as_mut_slice()[..3].copy_from_slice(b"abc");
    let r = p.reclaim(loan);
    assert_eq!(p.lent(), 0);
    assert_eq!(p.bytes(&r, 0..3), b"abc");
    p.free(r);
}

#[test]
fn a_span_is_read_until_the_next_loan_and_only_in_its_pool() {
    let mut p = Pool::with_capacity(4 * PAGE, false).unwrap();
    let (a, b) = (p.alloc(PAGE).unwrap(), p.alloc(PAGE).unwrap());
    let mut loan = p.lend(a);
    loan.as_mut_slice()[PAGE - 2..].copy_from_slice(b"xy");
    let a = p.reclaim(loan);
    let mut loan = p.lend(b);
    loan.as_mut_slice()[..2].copy_from_slice(b"zw");
    let b = p.reclaim(loan);
    // Across two adjacent regions, from two bytes before their border.
    let span = p.span(&a, PAGE - 2, 4);
    assert!(p.holds(&span));
    assert_eq!(p.span_bytes(&span, 0), b"xyzw");
    assert_eq!(p.span_bytes(&span.after(1), 2), b"w");
    let other = Pool::with_capacity(4 * PAGE, false).unwrap();
    assert!(!other.holds(&span), "a span of another pool");
    assert!(!other.holds(&Span::default()) && !p.holds(&Span::default()));
    // A loan may write any region taken again: spans checked before it are read no more.
    p.free(a);
    let c = p.alloc(PAGE).unwrap();
    let loan = p.lend(c);
    assert!(!p.holds(&span), "checked before a loan");
    let c = p.reclaim(loan);
    p.free(c);
    p.free(b);
}

#[test]
#[should_panic(expected = "a span checked before a loan")]
fn a_span_read_after_a_loan_panics() {
    let mut p = Pool::with_capacity(4 * PAGE, false).unwrap();
    let a = p.alloc(PAGE).unwrap();
    let span = p.span(&a, 0, 10);
    let b = p.alloc(PAGE).unwrap();
    let _loan = p.lend(b);
    let _ = p.span_bytes(&span, 0);
}

#[test]
fn dropping_with_a_loan_out_leaks_instead_of_freeing() {
    let mut p = Pool::with_capacity(PAGE, false).unwrap();
    let r = p.alloc(1).unwrap();
    let loan = p.lend(r);
    drop(p);
    // The loan's memory is still mapped: writing through it must not fault.
    let mut loan = loan;
    loan.as_mut_slice()[0] = 1;
}

#[test]
#[should_panic(expected = "a token of another pool")]
fn a_region_of_another_pool_is_refused() {
    let mut a = Pool::with_capacity(PAGE, false).unwrap();
    let mut b = Pool::with_capacity(PAGE, false).unwrap();
    let r = a.alloc(1).unwrap();
    // `b` has a live region at the same position, so only the identity tells them apart.
    let _same_place = b.alloc(1).unwrap();
    let _ = b.bytes(&r, 0..1);
}

#[test]
#[should_panic(expected = "a token of another pool")]
fn a_loan_of_another_pool_is_not_taken_back() {
    let mut a = Pool::with_capacity(PAGE, false).unwrap();
    let mut b = Pool::with_capacity(PAGE, false).unwrap();
    let loan = {
        let r = a.alloc(1).unwrap();
        a.lend(r)
    };
    let _ = {
        let r = b.alloc(1).unwrap();
        b.lend(r)
    };
    b.reclaim(loan);
}

#[test]
fn a_kernel_loan_comes_back_with_what_was_written() {
    let mut p = Pool::with_capacity(PAGE, false).unwrap();
    let (kernel, ptr) = {
        let r = p.alloc(3).unwrap();
        p.lend(r)
    }
    .into_kernel();
    // Stands in for the kernel writing through the address it was given.
    // SAFETY: `ptr` points at a live region of at least 3 bytes no token can reach now.
    unsafe { ptr.copy_from_nonoverlapping(b"xyz".as_ptr(), 3) };
    // SAFETY: no kernel operation was ever handed this region.
    let loan = unsafe { kernel.reaped() };
    let r = p.reclaim(loan);
    assert_eq!(p.bytes(&r, 0..3), b"xyz");
    p.free(r);
}

#[test]
fn a_kernel_loan_dropped_leaks_the_pool_rather_than_free_it() {
    let mut p = Pool::with_capacity(PAGE, false).unwrap();
    let r = p.alloc(1).unwrap();
    // The kernel loan is dropped at once, never reaped.
    let (_, ptr) = p.lend(r).into_kernel();
    assert_eq!(
        p.lent(),
        1,
        "the region stays lent, so the pool's drop leaks it"
    );
    drop(p);
    // Stands in for the kernel finishing the read late: the memory must still be mapped.
    // SAFETY: the pool was dropped with a loan out, so it leaked its mapping: `ptr` points
    // at a live byte of it that no token can reach any more.
    unsafe { ptr.write(1) };
}

#[test]
#[should_panic(expected = "outside a region")]
fn bytes_past_a_region_panic() {
    let mut p = Pool::with_capacity(PAGE, false).unwrap();
    let r = p.alloc(1).unwrap();
    let _ = p.bytes(&r, 0..PAGE + 1);
}

#[test]
fn churn_keeps_accounting() {
    let mut p = Pool::with_capacity(8 * PAGE, false).unwrap();
    let mut held = VecDeque::new();
    for i in 0..1000usize {
        let len = 1 + (i * 7919) % (3 * PAGE);
        while p.alloc(len).map(|r| held.push_back(r)).is_none() {
            p.free(held.pop_front().unwrap());
        }
        assert!(p.used() <= p.capacity());
    }
    while let Some(r) = held.pop_front() {
        p.free(r);
    }
    assert_eq!(p.used(), 0);
}

/// Which of the `pages` pages from `at` are in memory (`mincore(2)`).
#[cfg(target_os = "linux")]
fn resident(at: *mut u8, pages: usize) -> Vec<bool> {
    let mut vec = vec![0u8; pages];
    // SAFETY: `at` is page-aligned and the `pages` pages from it are mapped (the pool's);
    // `vec` has a byte for each.
    let rc = unsafe { libc::mincore(at.cast(), pages * PAGE, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "{}", std::io::Error::last_os_error());
    vec.iter().map(|b| b & 1 == 1).collect()
}

#[test]
#[cfg(target_os = "linux")]
fn lending_a_region_faults_its_new_pages_in_first() {
    let mut p = Pool::with_capacity(64 * PAGE, false).unwrap();
    let base = p.as_raw_parts().0;
    // Small pages, whatever the system's default for transparent huge pages: one huge page
    // would bring every page of the pool in at the first write.
    // SAFETY: advice on the pool's own mapping, which changes neither its addresses nor its
    // contents.
    unsafe { libc::madvise(base.cast(), 64 * PAGE, libc::MADV_NOHUGEPAGE) };
    assert!(
        resident(base, 8).iter().all(|r| !r),
        "a new pool is not in memory"
    );
    let a = p.alloc(3 * PAGE).unwrap();
    assert!(
        resident(base, 3).iter().all(|r| !r),
        "taking a region touches nothing"
    );
    let loan = p.lend(a);
    assert_eq!(resident(base, 4), [true, true, true, false]);
    let a = p.reclaim(loan);
    let b = p.alloc(2 * PAGE).unwrap();
    let loan = p.lend(b);
    assert_eq!(resident(base, 6), [true, true, true, true, true, false]);
    let b = p.reclaim(loan);
    p.free(a);
    p.free(b);
}

#[test]
fn lending_again_leaves_the_bytes_of_pages_written_before() {
    let mut p = Pool::with_capacity(4 * PAGE, false).unwrap();
    let a = p.alloc(2 * PAGE).unwrap();
    let mut loan = p.lend(a);
    loan.as_mut_slice()[2 * PAGE - 1] = 7;
    loan.as_mut_slice()[0] = 9;
    let a = p.reclaim(loan);
    let b = p.alloc(PAGE).unwrap();
    let loan = p.lend(b);
    let b = p.reclaim(loan);
    assert_eq!(p.bytes(&a, 0..1), [9]);
    p.free(a);
    p.free(b);
    // Taken from the start again (the pool is empty), the region's page keeps its byte.
    let c = p.alloc(2 * PAGE).unwrap();
    assert_eq!(p.phys(&c), 0);
    let mut loan = p.lend(c);
    assert_eq!(loan.as_mut_slice()[0], 9);
    assert_eq!(loan.as_mut_slice()[2 * PAGE - 1], 7);
    let c = p.reclaim(loan);
    p.free(c);
}
