//! Where chunk bytes live (the `ChunkMemory` seam): hugepages when the host has reserved
//! them, otherwise normal pages with transparent hugepages requested (`mem::pages`), and, when
//! a GPU is present, registered with the CUDA driver so copies to the GPU run at full PCIe
//! speed by DMA straight from the chunk (`mem::cuda`). Every step falls back cleanly: a host
//! without a hugepage pool, without a GPU, or whose registration fails (memlock limit) still
//! gets chunk memory, and [`ChunkMem::backing`] / [`ChunkMem::cuda_pinned`] say what it got.
//! With `--use-vkgdr` ([`vkgdr`]) chunks live in GPU memory mapped for the CPU instead,
//! falling back to the above per chunk when that allocation fails.

mod cuda;
mod host;
mod lent;
mod pages;
mod stream;
pub mod vkgdr;

pub use cuda::PinError;
pub use host::{Bytes, HostMemory, TooLarge};
pub use lent::{Lent, LentBytes};
pub use pages::HUGE_PAGE;
pub use stream::{copy_stream, stream_fence, STREAM_MIN};

use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

/// What backs a [`ChunkMem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Backing {
    /// Explicit hugepages from the host's pool (`MAP_HUGETLB`).
    HugePages,
    /// Normal anonymous pages, transparent hugepages requested (`MADV_HUGEPAGE`).
    Pages,
    /// Zero-length chunk: nothing mapped.
    Empty,
    /// GPU device memory mapped for the CPU (`--use-vkgdr`): write-combined, never read
    /// by the CPU.
    GpuMapped,
}

/// How to allocate chunk memory.
#[derive(Clone, Default)]
pub struct MemPolicy {
    /// Try the hugepage pool first.
    pub hugepages: bool,
    /// Register with this CUDA context (`cuMemHostRegister`, portable to all contexts).
    pub cuda: Option<Arc<cudarc::driver::CudaContext>>,
    /// Allocate in GPU memory mapped for the CPU first (`--use-vkgdr`).
    pub vkgdr: Option<Arc<vkgdr::Vkgdr>>,
}

impl std::fmt::Debug for MemPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemPolicy")
            .field("hugepages", &self.hugepages)
            .field("cuda", &self.cuda.is_some())
            .field("vkgdr", &self.vkgdr.is_some())
            .finish()
    }
}

impl MemPolicy {
    /// Hugepages if reserved; CUDA registration if a GPU is present (device 0), unless
    /// `GPUCBF_CHUNK_PIN=0`.
    pub fn auto() -> Self {
        let want_pin = std::env::var("GPUCBF_CHUNK_PIN").as_deref() != Ok("0");
        let cuda = if want_pin && crate::gpu::gpu_available() {
            std::panic::catch_unwind(|| cudarc::driver::CudaContext::new(0).ok())
                .ok()
                .flatten()
        } else {
            None
        };
        MemPolicy {
            hugepages: true,
            cuda,
            vkgdr: None,
        }
    }

    /// The process-wide policy (probed once, unless [`MemPolicy::set_shared`] came first):
    /// what engines' chunk rings use.
    pub fn shared() -> &'static MemPolicy {
        SHARED.get_or_init(MemPolicy::auto)
    }

    /// Fixes the process-wide policy (an engine's `--use-vkgdr`); false when it was already
    /// fixed (chunks were allocated before).
    pub fn set_shared(policy: MemPolicy) -> bool {
        SHARED.set(policy).is_ok()
    }
}

static SHARED: std::sync::OnceLock<MemPolicy> = std::sync::OnceLock::new();

/// Page-aligned, zero-initialised chunk memory.
pub struct ChunkMem {
    ptr: NonNull<u8>,
    len: usize,
    map_len: usize,
    backing: Backing,
    /// The context the memory is registered with, if it is.
    cuda: Option<Arc<cudarc::driver::CudaContext>>,
    /// Why CUDA registration was not done or failed (for the log).
    pub pin_note: Option<PinError>,
    /// The GPU-mapped allocation behind the bytes (`Backing::GpuMapped`).
    gpu: Option<vkgdr::GpuMapped>,
}

// SAFETY: ChunkMem owns its mapping exclusively, like a Vec<u8>.
unsafe impl Send for ChunkMem {}
// SAFETY: shared access is read-only through &[u8].
unsafe impl Sync for ChunkMem {}

impl ChunkMem {
    /// Allocates `len` zeroed bytes by `policy`. Fails only if not even normal pages can be
    /// mapped (out of memory).
    pub fn alloc(len: usize, policy: &MemPolicy) -> io::Result<Self> {
        if len == 0 {
            return Ok(ChunkMem {
                ptr: NonNull::dangling(),
                len: 0,
                map_len: 0,
                backing: Backing::Empty,
                cuda: None,
                pin_note: None,
                gpu: None,
            });
        }
        if let Some(v) = &policy.vkgdr {
            match v.alloc(len) {
                Ok(g) => {
                    return Ok(ChunkMem {
                        ptr: NonNull::new(g.host()).ok_or_else(|| io::Error::other("null map"))?,
                        len,
                        map_len: 0,
                        backing: Backing::GpuMapped,
                        cuda: None,
                        pin_note: None,
                        gpu: Some(g),
                    })
                }
                Err(e) => note_gpu_mapped_failure(len, &e),
            }
        }
        let (ptr, map_len, backing) = pages::map_zeroed(len, policy.hugepages)?;
        let mut m = ChunkMem {
            ptr,
            len,
            map_len,
            backing,
            cuda: None,
            pin_note: None,
            gpu: None,
        };
        pages::prefault(m.ptr, m.map_len, m.backing);
        match &policy.cuda {
            // SAFETY: our own live mapping; unregistered in Drop before the unmap.
            Some(ctx) => match unsafe { cuda::register(m.ptr, m.map_len, ctx) } {
                Ok(()) => m.cuda = Some(ctx.clone()),
                Err(e) => m.pin_note = Some(e),
            },
            None => m.pin_note = Some(PinError::NoGpu),
        }
        Ok(m)
    }

    /// What backs the memory.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// True if the memory is registered with CUDA (page-locked, DMA-able by the GPU).
    pub fn cuda_pinned(&self) -> bool {
        self.cuda.is_some()
    }

    /// The first byte (page aligned; dangling when empty).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// CUDA's address of the first byte when the memory is GPU memory mapped for the CPU.
    pub fn device_ptr(&self) -> Option<u64> {
        self.gpu.as_ref().map(|g| g.device())
    }
}

/// Logs (once per process) that a GPU-mapped chunk could not be had and this chunk, like
/// any later one that fails too, lives in host memory.
fn note_gpu_mapped_failure(len: usize, e: &str) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        tracing::warn!("--use-vkgdr: a chunk of {len} bytes: {e}; using pinned host chunks where GPU memory runs out");
    }
}

impl std::ops::Deref for ChunkMem {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is valid for len bytes (dangling only when len is 0).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for ChunkMem {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref; &mut self gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl PartialEq for ChunkMem {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl std::fmt::Debug for ChunkMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkMem")
            .field("len", &self.len)
            .field("backing", &self.backing)
            .field("cuda_pinned", &self.cuda_pinned())
            .field("gpu_mapped", &self.gpu.is_some())
            .finish()
    }
}

impl Drop for ChunkMem {
    fn drop(&mut self) {
        if let Some(ctx) = self.cuda.take() {
            // SAFETY: registered in `alloc` with this base address, still mapped.
            unsafe { cuda::unregister(self.ptr, &ctx) };
        }
        if self.map_len > 0 {
            // SAFETY: unmapping exactly the mapping made in `alloc`.
            unsafe { pages::unmap(self.ptr, self.map_len) };
        }
    }
}

/// Keeps the engine's heap steady (glibc): freed memory is kept for reuse rather than
/// returned to the kernel, buffers up to 32 MiB come from the heap rather than from a
/// fresh mapping each time, and with `one_arena` every thread allocates from the one main
/// arena. A real-time engine then stops faulting pages in the data path once it has
/// reached its working set, and its RSS stays at that high-water mark (a leak still shows
/// as growth). Without the arena limit, a thread that starts while the others hold their
/// arenas (a metrics connection's) gets a new arena and its first pages: the CPU soak's
/// F-engines grew by 128 KiB steps at odd times (+1.43 % / +0.71 % over 5 min), and by
/// 0.26 % / 0.14 % with one arena. One arena suits an engine whose hot threads do not
/// allocate (fgpu, xbgpu); the dsim's send threads allocate per send batch, so they keep
/// their own arenas (its RSS did not grow). Called once at an engine's start; a no-op
/// elsewhere.
pub fn steady_heap(one_arena: bool) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tunables; it is called before the engine's
    // threads start.
    unsafe {
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        if one_arena {
            libc::mallopt(libc::M_ARENA_MAX, 1);
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = one_arena;
}

#[cfg(test)]
mod tests {
    use crate::mem::*;

    #[test]
    fn pages_fallback_is_zeroed_writable_and_unpinned() {
        let policy = MemPolicy {
            hugepages: false,
            ..Default::default()
        };
        let mut m = ChunkMem::alloc(3 * 4096 + 17, &policy).unwrap();
        assert_eq!(m.backing(), Backing::Pages);
        assert_eq!(m.len(), 3 * 4096 + 17);
        assert!(m.iter().all(|&b| b == 0));
        m[4096 * 3 + 16] = 7;
        assert_eq!(m[m.len() - 1], 7);
        assert!(!m.cuda_pinned());
        assert!(matches!(m.pin_note, Some(PinError::NoGpu)));
        assert_eq!(
            m.pin_note.as_ref().unwrap().to_string(),
            "no GPU: chunk memory not registered with CUDA"
        );
        assert_eq!(m.as_ptr() as usize % pages::page_size(), 0);
        let z = ChunkMem::alloc(0, &policy).unwrap();
        assert_eq!((z.backing(), z.len()), (Backing::Empty, 0));
        assert!(ChunkMem::alloc(usize::MAX, &policy).is_err());
    }

    #[test]
    fn hugepages_when_reserved_else_clean_fallback() {
        let policy = MemPolicy {
            hugepages: true,
            ..Default::default()
        };
        let mut m = ChunkMem::alloc(HUGE_PAGE + 5, &policy).unwrap();
        let reserved = std::fs::read_to_string("/proc/sys/vm/nr_hugepages")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(0);
        if reserved == 0 {
            // No pool: MAP_HUGETLB fails and normal pages take over.
            assert_eq!(m.backing(), Backing::Pages);
        } else {
            eprintln!("hugepage pool of {reserved}: got {:?}", m.backing());
        }
        m[HUGE_PAGE + 4] = 1;
        assert_eq!(m.iter().map(|&b| b as u32).sum::<u32>(), 1);
        let a = ChunkMem::alloc(10, &policy).unwrap();
        let mut b = ChunkMem::alloc(10, &policy).unwrap();
        assert_eq!(a, b);
        b[3] = 1;
        assert_ne!(a, b);
    }

    #[test]
    fn gpu_registration_and_copy() {
        if !crate::gpu::gpu_test_guard("chunk::memory::gpu_registration_and_copy") {
            return;
        }
        use cudarc::driver::sys;
        let policy = MemPolicy::auto();
        assert!(
            policy.cuda.is_some(),
            "a GPU is present: auto() must pick it"
        );
        let len = 3 * HUGE_PAGE + 1234;
        let mut m = ChunkMem::alloc(len, &policy).unwrap();
        assert!(m.cuda_pinned(), "{:?}", m.pin_note);
        eprintln!("chunk memory: {:?}", m);
        for (i, b) in m.iter_mut().enumerate() {
            *b = (i * 31 + 7) as u8;
        }
        let ctx = policy.cuda.clone().unwrap();
        ctx.bind_to_thread().unwrap();
        // SAFETY: plain driver calls on our registered range and a fresh device buffer.
        unsafe {
            let mut flags = 0u32;
            assert_eq!(
                sys::cuMemHostGetFlags(&mut flags, m.as_ptr() as *mut _),
                sys::CUresult::CUDA_SUCCESS,
                "the driver must know the range as page-locked"
            );
            let mut dptr: sys::CUdeviceptr = 0;
            assert_eq!(
                sys::cuMemAlloc_v2(&mut dptr, len),
                sys::CUresult::CUDA_SUCCESS
            );
            assert_eq!(
                sys::cuMemcpyHtoD_v2(dptr, m.as_ptr() as *const _, len),
                sys::CUresult::CUDA_SUCCESS
            );
            let mut back = vec![0u8; len];
            assert_eq!(
                sys::cuMemcpyDtoH_v2(back.as_mut_ptr() as *mut _, dptr, len),
                sys::CUresult::CUDA_SUCCESS
            );
            sys::cuMemFree_v2(dptr);
            assert!(back[..] == m[..]);
        }
        let p = m.as_ptr() as *mut std::ffi::c_void;
        drop(m);
        // After drop the range is unregistered (and unmapped): the driver no longer knows it.
        let mut flags = 0u32;
        // SAFETY: querying flags of an address is harmless even when it is not registered.
        let r = unsafe { sys::cuMemHostGetFlags(&mut flags, p) };
        assert_ne!(r, sys::CUresult::CUDA_SUCCESS);
    }
}
