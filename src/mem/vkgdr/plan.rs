//! Whether `--use-vkgdr` can be had here: [`decide`] picks where chunks live from a
//! [`Probe`] (filled by [`plan`] on this host, or by hand in tests), and [`plan`] logs the
//! one line saying what was chosen, or why not.

use std::sync::Arc;

use super::ffi::{MEMORY_DEVICE_LOCAL, MEMORY_HOST_COHERENT, MEMORY_HOST_VISIBLE};
use super::{OpenError, Vkgdr};
use crate::mem::{Bytes, MemPolicy};

/// A Vulkan memory type for chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryType {
    /// Index among the device's memory types.
    pub index: u32,
    /// HOST_COHERENT: CPU writes reach the device with no flush.
    pub coherent: bool,
    /// Size of the heap the type allocates from.
    pub heap_bytes: u64,
}

/// The `DEVICE_LOCAL | HOST_VISIBLE` memory type for chunks among `types` (property flags,
/// heap index) over `heaps` (sizes): HOST_COHERENT ones first, then the largest heap.
pub fn pick_memory_type(types: &[(u32, u32)], heaps: &[u64]) -> Option<MemoryType> {
    let want = MEMORY_DEVICE_LOCAL | MEMORY_HOST_VISIBLE;
    types
        .iter()
        .enumerate()
        .filter(|(_, &(f, _))| f & want == want)
        .filter_map(|(i, &(f, h))| {
            Some(MemoryType {
                index: i as u32,
                coherent: f & MEMORY_HOST_COHERENT != 0,
                heap_bytes: *heaps.get(h as usize)?,
            })
        })
        .max_by_key(|m| (m.coherent, m.heap_bytes, std::cmp::Reverse(m.index)))
}

/// What the host and the engine offer GPU-mapped chunks.
#[derive(Debug, Clone)]
pub struct Probe {
    /// The engine runs its GPU backend (the CPU backend reads chunks on the CPU).
    pub gpu_backend: bool,
    /// Why the engine would read chunk bytes on the CPU even so, if it would.
    pub cpu_reads: Option<String>,
    /// A CUDA GPU is present.
    pub gpu: bool,
    /// The Vulkan loader and an instance with the external-memory extensions.
    pub vulkan: Result<(), String>,
    /// The Vulkan device that is the CUDA device (its name), opened with
    /// VK_KHR_external_memory_fd.
    pub device: Result<String, String>,
    /// Its DEVICE_LOCAL | HOST_VISIBLE memory type ([`pick_memory_type`]).
    pub memory: Option<MemoryType>,
    /// Chunk bytes the engine holds at least.
    pub need_bytes: u64,
}

/// Where the receive chunks live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkPlace {
    /// GPU memory mapped for the CPU.
    GpuMapped,
    /// Pinned host memory, as without the option.
    PinnedHost {
        /// Why not GPU memory (logged).
        reason: String,
    },
}

/// Where chunks live for `--use-vkgdr` on a host and engine described by `p`.
pub fn decide(p: &Probe) -> ChunkPlace {
    let no = |reason: String| ChunkPlace::PinnedHost { reason };
    if !p.gpu {
        return no("no GPU present".into());
    }
    if !p.gpu_backend {
        return no("the CPU backend reads the chunks on the CPU".into());
    }
    if let Some(why) = &p.cpu_reads {
        return no(why.clone());
    }
    if let Err(e) = &p.vulkan {
        return no(format!("no Vulkan: {e}"));
    }
    if let Err(e) = &p.device {
        return no(e.clone());
    }
    let Some(m) = p.memory else {
        return no("the GPU has no DEVICE_LOCAL | HOST_VISIBLE memory type".into());
    };
    if !m.coherent {
        return no(format!(
            "memory type {} is not HOST_COHERENT (each chunk would need a flush)",
            m.index
        ));
    }
    if m.heap_bytes < p.need_bytes {
        return no(format!(
            "the GPU's host-visible heap holds {}, the chunks need at least {}",
            Bytes(m.heap_bytes as u128),
            Bytes(p.need_bytes as u128)
        ));
    }
    ChunkPlace::GpuMapped
}

/// The engine's start-up decision for `--use-vkgdr` (`requested`), logged in one line
/// either way: when chunks can live in GPU memory, the process-wide chunk memory policy
/// ([`MemPolicy::shared`]) allocates them there from now on. `need_bytes` is what the
/// chunks take at least; `cpu_reads` why the engine would read chunk bytes on the CPU.
pub fn plan(
    requested: bool,
    gpu_backend: bool,
    cpu_reads: Option<String>,
    need_bytes: u64,
) -> Option<ChunkPlace> {
    if !requested {
        return None;
    }
    let mut p = Probe {
        gpu_backend,
        cpu_reads,
        gpu: false,
        vulkan: Err("not probed".into()),
        device: Err("not probed".into()),
        memory: None,
        need_bytes,
    };
    let mut opened = None;
    p.gpu = crate::gpu::gpu_available();
    if p.gpu && p.gpu_backend && p.cpu_reads.is_none() {
        let ctx = p
            .gpu
            .then(|| std::panic::catch_unwind(|| cudarc::driver::CudaContext::new(0).ok()))
            .and_then(|r| r.ok().flatten());
        if let Some(ctx) = ctx {
            match Vkgdr::open(&ctx) {
                Ok(v) => {
                    p.vulkan = Ok(());
                    p.device = Ok(v.name.clone());
                    p.memory = Some(v.memory);
                    opened = Some(Arc::new(v));
                }
                Err(OpenError::Vulkan(e)) => p.vulkan = Err(e),
                Err(e @ OpenError::Device(_)) => {
                    (p.vulkan, p.device) = (Ok(()), Err(e.to_string()))
                }
                Err(OpenError::NoMemoryType) => (p.vulkan, p.device) = (Ok(()), Ok(String::new())),
            }
        } else {
            p.gpu = false;
        }
    }
    let mut place = decide(&p);
    if place == ChunkPlace::GpuMapped {
        place = match opened.map(install) {
            Some(Ok(())) => return Some(place),
            Some(Err(reason)) => ChunkPlace::PinnedHost { reason },
            None => ChunkPlace::PinnedHost {
                reason: "the Vulkan device is not open".into(),
            },
        };
    }
    if let ChunkPlace::PinnedHost { reason } = &place {
        tracing::warn!("--use-vkgdr: {reason}; using pinned host chunks");
    }
    Some(place)
}

/// The log line of a process whose receive chunks are in GPU memory (`gpucbf array`
/// looks for it in its engines' logs).
pub const GPU_MAPPED_LOG: &str = "--use-vkgdr: receive chunks in GPU memory mapped for the CPU";

/// Makes `v` the process's chunk memory (logged), or says why it cannot be.
fn install(v: Arc<Vkgdr>) -> Result<(), String> {
    let (m, name) = (v.memory, v.name.clone());
    let policy = MemPolicy {
        vkgdr: Some(v),
        ..MemPolicy::auto()
    };
    if !MemPolicy::set_shared(policy) {
        return Err("chunk memory was set up before the probe".into());
    }
    tracing::info!(
        device = %name,
        memory_type = m.index,
        heap = %Bytes(m.heap_bytes as u128),
        "{}",
        GPU_MAPPED_LOG
    );
    Ok(())
}
