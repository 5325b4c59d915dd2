//! Page mappings for chunk memory: hugepages from the host's pool (`mmap(MAP_HUGETLB)`),
//! else normal anonymous pages with `madvise(MADV_HUGEPAGE)` (transparent hugepages);
//! pre-faulted so the first packets take no page faults.
//!
//! (libc's mmap/madvise directly rather than memmap2: the same two system calls, and no new
//! dependency.)

use std::io;
use std::ptr::NonNull;

use super::Backing;

/// Size of the hugepages that `MAP_HUGETLB` gives by default on x86-64 and aarch64 (4K granule).
pub const HUGE_PAGE: usize = 2 << 20;

/// The host's base page size.
pub(super) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

fn round_up(n: usize, to: usize) -> Option<usize> {
    n.checked_add(to - 1).map(|m| m / to * to)
}

/// `mmap` anonymous private memory; `None` if the kernel refuses.
fn map(len: usize, huge: bool) -> Option<NonNull<u8>> {
    let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
    if huge {
        flags |= libc::MAP_HUGETLB;
    }
    // SAFETY: a fresh anonymous mapping; no existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        None
    } else {
        NonNull::new(p as *mut u8)
    }
}

/// Maps at least `len` (> 0) zeroed bytes: hugepages first if `hugepages`, else (or when
/// the pool is empty) normal pages with transparent hugepages requested. Returns the
/// mapping, its length (whole pages) and what backs it; fails only if not even normal pages
/// can be mapped (out of memory).
pub(super) fn map_zeroed(len: usize, hugepages: bool) -> io::Result<(NonNull<u8>, usize, Backing)> {
    let too_big = || io::Error::new(io::ErrorKind::InvalidInput, "chunk size overflows");
    if hugepages {
        let map_len = round_up(len, HUGE_PAGE).ok_or_else(too_big)?;
        if let Some(p) = map(map_len, true) {
            return Ok((p, map_len, Backing::HugePages));
        }
    }
    let map_len = round_up(len, page_size()).ok_or_else(too_big)?;
    let p = map(map_len, false).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "cannot map {map_len} bytes of chunk memory: {}",
                io::Error::last_os_error()
            ),
        )
    })?;
    // SAFETY: advice on our own mapping; failure (THP disabled) is harmless.
    unsafe {
        libc::madvise(p.as_ptr() as *mut _, map_len, libc::MADV_HUGEPAGE);
    }
    Ok((p, map_len, Backing::Pages))
}

/// Touches every page of a mapping from [`map_zeroed`] so that the first packets do not
/// take page faults.
pub(super) fn prefault(base: NonNull<u8>, map_len: usize, backing: Backing) {
    let step = if backing == Backing::HugePages {
        HUGE_PAGE
    } else {
        page_size()
    };
    for off in (0..map_len).step_by(step) {
        // SAFETY: off < map_len, inside the mapping; the memory is already zero.
        unsafe { std::ptr::write_volatile(base.as_ptr().add(off), 0) };
    }
}

/// Unmaps a mapping from [`map_zeroed`].
///
/// # Safety
/// `base`/`map_len` must be exactly one live mapping from [`map_zeroed`], not used after.
pub(super) unsafe fn unmap(base: NonNull<u8>, map_len: usize) {
    libc::munmap(base.as_ptr() as *mut _, map_len);
}
